#include "scheduler/program/builder.hpp"

namespace hexi {
inline namespace program {

Program program_header(const std::string& scenario, const Cluster& cluster, const Model& model,
                       const TrainingConfig& training, Granularity granularity) {
  Program p;
  p.scenario = scenario;
  p.cluster = cluster.name();
  p.model = model.name;
  p.granularity = granularity;
  p.schedule = training.schedule;
  p.num_devices = cluster.num_devices();
  p.bytes_per_element = training.bytes_per_element();
  p.global_batch = training.global_batch;
  p.seq_len = training.seq_len;
  p.zero_stage = training.zero_stage;
  p.model_digest = input_digest(to_json(model));
  p.training_digest = input_digest(to_json(training));
  return p;
}

int ProgramBuilder::group(Program& program, GroupKind kind, const std::vector<int>& devices) {
  auto [it, fresh] =
      groups_.emplace(std::make_pair(kind, devices), static_cast<int>(program.groups.size()));
  if (fresh) program.groups.push_back({kind, devices, {}});
  return it->second;
}

int ProgramBuilder::add(int device, Op op, const int* deps_begin, const int* deps_end) {
  Draft& d = drafts_[device];
  op.device = device;
  op.deps_begin = static_cast<std::uint32_t>(d.deps.size());
  for (const int* x = deps_begin; x != deps_end; ++x) {
    if (*x >= 0) d.deps.push_back(*x);
  }
  op.deps_count = static_cast<std::uint32_t>(d.deps.size() - op.deps_begin);
  d.ops.push_back(op);
  const int index = static_cast<int>(d.ops.size()) - 1;
  if (op.stream == Stream::kCompute) d.last_compute = index;
  return index;
}

void ProgramBuilder::finish(Program& program, std::vector<DeviceLayout> layouts) {
  std::size_t total_ops = program.ops.size(), total_deps = program.dep_ids.size();
  for (const DeviceLayout& l : layouts) {
    total_ops += drafts_[l.device].ops.size();
    total_deps += drafts_[l.device].deps.size();
  }
  program.ops.reserve(total_ops);
  program.dep_ids.reserve(total_deps);
  for (DeviceLayout& l : layouts) {
    Draft& draft = drafts_[l.device];
    l.op_begin = static_cast<int>(program.ops.size());
    const auto dep_base = static_cast<std::uint32_t>(program.dep_ids.size());
    for (int x : draft.deps) program.dep_ids.push_back(x + l.op_begin);
    for (Op op : draft.ops) {
      op.deps_begin += dep_base;
      program.ops.push_back(op);
    }
    l.op_end = static_cast<int>(program.ops.size());
    program.devices.push_back(l);
    draft = Draft{};
  }
}

}  // namespace program
}  // namespace hexi
