#include "scenarios/training.hpp"

namespace hexi {

std::string_view to_string(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}

std::string_view to_string(PipelineSchedule s) {
  return s == PipelineSchedule::k1F1B ? "1f1b" : "gpipe";
}

std::string_view to_string(AttentionKernel k) {
  return k == AttentionKernel::kFlash ? "flash" : "dense";
}

Recompute read_recompute(const JsonNode& node) {
  const std::string s = node.str();
  if (s == "none") return Recompute::kNone;
  if (s == "selective") return Recompute::kSelective;
  if (s != "full") node.fail("\"none\", \"selective\" or \"full\"");
  return Recompute::kFull;
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
  t.zero_stage = static_cast<int>(node.integer_or("zero_stage", 0, 1, t.zero_stage));
  if (auto r = node.find("recompute")) t.recompute = read_recompute(*r);
  if (auto s = node.find("schedule")) {
    std::string v = s->str();
    if (v == "1f1b") {
      t.schedule = PipelineSchedule::k1F1B;
    } else if (v == "gpipe") {
      t.schedule = PipelineSchedule::kGPipe;
    } else {
      s->fail("\"1f1b\" or \"gpipe\"");
    }
  }
  if (auto a = node.find("attention")) {
    std::string v = a->str();
    if (v == "flash") {
      t.attention = AttentionKernel::kFlash;
    } else if (v == "dense") {
      t.attention = AttentionKernel::kDense;
    } else {
      a->fail("\"flash\" or \"dense\"");
    }
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

}  // namespace hexi
