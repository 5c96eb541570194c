#pragma once
// A plan as Megatron-LM runs it: the arguments of `pretrain_gpt.py` and a torchrun launch per
// machine, for the plans Megatron-LM can express (every pipeline alike: one TP degree, one
// layer split, any, as --pipeline-model-parallel-layout; one batch share, even heads, one
// recompute; no sequence meshes), or what it cannot express and hexisim's own launch instead
// (mpirun with an OpenMPI rank file from the cluster).
//
// Pinned to Megatron-LM core_v0.15.0 (megatron/training/arguments.py), the last release that
// spells every flag out (later ones derive most from dataclasses, with the same names);
// studies/megatron_flags.txt lists its flags, and every flag written here is
// checked against it.
//
// Megatron-LM's rank order is TP fastest, then DP, then PP (its default "tp-cp-ep-dp-pp"),
// torchrun's node n holds ranks [n G, (n + 1) G): the plan's placement is kept when its
// machines can be ordered as nodes that hold exactly those ranks (each machine's GPUs listed
// in CUDA_VISIBLE_DEVICES in rank order); otherwise the degrees are the plan's and the
// placement Megatron-LM's, and the export says so.

#include <string>
#include <utility>
#include <vector>

#include "scenarios/scenario.hpp"
#include "scheduler/plan/plan.hpp"
#include "topologies/json_input.hpp"

namespace hexi {
inline namespace studies {

inline constexpr const char* kMegatronVersion = "Megatron-LM core_v0.15.0";

struct MegatronNode {
  std::string machine;  // the cluster's machine name
  std::string gpus;     // CUDA_VISIBLE_DEVICES: its GPUs in local rank order
};

struct MegatronExport {
  // Whether Megatron-LM can run the plan's parallelism (else `reasons` says what it cannot
  // express, and `launch` is hexisim's own).
  bool runs = false;
  std::vector<std::string> reasons;
  int tp = 1, pp = 1, dp = 1, virtual_stages = 1;
  // pretrain_gpt.py's arguments, in order: flag and value ("" for a switch).
  std::vector<std::pair<std::string, std::string>> args;
  // Whether the plan's placement is kept (the nodes below), or Megatron-LM's own.
  bool placement_kept = false;
  std::string placement_note;
  std::vector<MegatronNode> nodes;  // in node-rank order, when kept
  std::vector<std::string> notes;   // what the arguments mean beside the plan
  std::string launch;               // the command line(s)
  std::string rankfile;             // hexisim's launch: OpenMPI rank file (when not `runs`)

  std::string arguments_text() const;  // "--flag value \\\n  --switch ..."
  Json to_json() const;
};

// `scenario_ref` and `plan_ref`: how the launch line names them (hexisim's launch reads both).
MegatronExport export_megatron(const Scenario& scenario, const Plan& plan,
                               const std::string& scenario_ref, const std::string& plan_ref);

}  // namespace studies
}  // namespace hexi
