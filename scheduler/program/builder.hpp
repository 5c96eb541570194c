#pragma once
// scheduler/program internal: the ops of each device while a program is being lowered
// (lower.cpp, lower_sequence.cpp). Dependencies are local indices into the same device's
// list until finish() numbers every op; cross-device order comes from rendezvous and
// collectives, never from deps.

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "scenarios/model.hpp"
#include "scenarios/training.hpp"
#include "scheduler/program/program.hpp"
#include "topologies/cluster.hpp"

namespace hexi {
inline namespace program {

// An empty program's header: what it runs on and was lowered from (digests included).
Program program_header(const std::string& scenario, const Cluster& cluster, const Model& model,
                       const TrainingConfig& training, Granularity granularity);

class ProgramBuilder {
 public:
  explicit ProgramBuilder(int num_devices) : drafts_(num_devices) {}

  // The index of the group of `kind` over `devices` in `program`, added on first use.
  int group(Program& program, GroupKind kind, const std::vector<int>& devices);

  // Appends `op` to `device`'s list after `deps` (local indices; negative ones ignored) and
  // returns its local index.
  int add(int device, Op op, std::initializer_list<int> deps) {
    return add(device, op, deps.begin(), deps.end());
  }
  int add(int device, Op op, const std::vector<int>& deps) {
    return add(device, op, deps.data(), deps.data() + deps.size());
  }
  // The last op `device` put on its compute stream (-1: none yet).
  int last_compute(int device) const { return drafts_[device].last_compute; }
  // The next instance number of `group`'s collectives on `device` (0, 1, ...).
  int next_instance(int device, int group) {
    return instances_[(static_cast<std::int64_t>(device) << 32) |
                      static_cast<std::uint32_t>(group)]++;
  }
  // Numbers the ops of `layouts`' devices (in that order) into `program`, turning local
  // deps into op ids and setting each layout's op range; appends the layouts.
  void finish(Program& program, std::vector<DeviceLayout> layouts);

 private:
  struct Draft {
    std::vector<Op> ops;
    std::vector<int> deps;
    int last_compute = -1;
  };
  int add(int device, Op op, const int* deps_begin, const int* deps_end);

  std::vector<Draft> drafts_;
  std::unordered_map<std::int64_t, int> instances_;
  std::map<std::pair<GroupKind, std::vector<int>>, int> groups_;
};

}  // namespace program
}  // namespace hexi
