#include "scenarios/training.hpp"

#include "topologies/enum_names.hpp"

namespace hexi {

std::string_view to_string(Recompute r) {
  return kRecomputeNames.name(r);
}

std::string_view to_string(PipelineSchedule s) {
  return kPipelineScheduleNames.name(s);
}

std::string_view to_string(AttentionKernel k) {
  return kAttentionKernelNames.name(k);
}

Recompute read_recompute(const JsonNode& node) {
  auto r = kRecomputeNames.parse(node.str());
  if (!r) node.fail(kRecomputeNames.list("\"", " or "));
  return *r;
}

TrainingConfig read_training(const JsonNode& node) {
  node.allow_only({"global_batch", "micro_batch", "seq_len", "precision", "zero_stage", "recompute",
                   "schedule", "attention", "sequence_parallel", "reserve_gib"});
  TrainingConfig t;
  t.global_batch = static_cast<int>(node.integer_or("global_batch", 1, 1 << 24, t.global_batch));
  t.micro_batch = static_cast<int>(node.integer_or("micro_batch", 1, 1 << 16, t.micro_batch));
  t.seq_len = static_cast<int>(node.integer_or("seq_len", 1, 1 << 24, t.seq_len));
  if (t.global_batch % t.micro_batch != 0) {
    node.at("global_batch")
        .fail("a multiple of micro_batch (" + std::to_string(t.micro_batch) + ")");
  }
  t.precision = node.str_or("precision", t.precision);
  if (t.precision != "bf16" && t.precision != "fp16" && t.precision != "fp32") {
    node.at("precision").fail("\"bf16\", \"fp16\" or \"fp32\"");
  }
  t.zero_stage = static_cast<int>(node.integer_or("zero_stage", 0, 3, t.zero_stage));
  if (auto r = node.find("recompute")) t.recompute = read_recompute(*r);
  if (auto s = node.find("schedule")) {
    auto v = kPipelineScheduleNames.parse(s->str());
    if (!v) s->fail(kPipelineScheduleNames.list("\"", " or "));
    t.schedule = *v;
  }
  if (auto a = node.find("attention")) {
    auto v = kAttentionKernelNames.parse(a->str());
    if (!v) a->fail(kAttentionKernelNames.list("\"", " or "));
    t.attention = *v;
  }
  t.sequence_parallel = node.boolean_or("sequence_parallel", t.sequence_parallel);
  if (auto r = node.find("reserve_gib")) t.reserve_gib = r->number_in(0, 1024);
  return t;
}

Json to_json(const TrainingConfig& t) {
  return {{"global_batch", t.global_batch},
          {"micro_batch", t.micro_batch},
          {"seq_len", t.seq_len},
          {"precision", t.precision},
          {"zero_stage", t.zero_stage},
          {"recompute", to_string(t.recompute)},
          {"schedule", to_string(t.schedule)},
          {"attention", to_string(t.attention)},
          {"sequence_parallel", t.sequence_parallel},
          {"reserve_gib", t.reserve_gib}};
}

Status check_zero_stage(const TrainingConfig& t, const std::string& origin) {
  if (t.zero_stage <= kMaxPlanZeroStage) return {};
  return bad_input(origin + ": training.zero_stage " + std::to_string(t.zero_stage) +
                   ": pipeline plans (HexiScale and its baselines) model ZeRO 0 and 1; stages "
                   "2 and 3 are for sequence layouts (`hexisim seq`)");
}

}  // namespace hexi
