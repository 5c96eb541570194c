#pragma once
// Pipelines of sequence meshes (HexiScale's pipelines with HexiSeq meshes as stages, a
// combination no peer searches). A whole-cluster mesh pays its ring steps, all-to-alls and
// ZeRO gathers over every link of the cluster, slow NICs included; a pipeline of meshes keeps
// each mesh inside its machines and sends only the activations across a stage boundary, at
// the price of the pipeline's fill and drain. The search:
//   1. for p = 1 .. max stages, the machines (cluster order) cut into p contiguous runs of
//      about equal dense FLOP/s (each stage at least one machine);
//   2. the layers split across the stages in proportion to their FLOP/s (proportional_split:
//      the rule HexiScale splits layers by), each stage at least one;
//   3. each stage's mesh laid out by HexiSeq (run_hexiseq over its devices, the model cut to
//      its layers: it may leave a slow type of the stage idle);
//   4. the plan (one pipeline, the training config's batch, one sequence per micro-batch)
//      scored by the estimate (estimate.hpp: mesh stages, boundaries, 1F1B), then one layer
//      moved between neighbouring stages, the best move first, while the iteration improves
//      (from a split that does not fit: until one does).
// The best plan that fits is kept; p = 1 is the whole cluster as one mesh stage.

#include <string>
#include <vector>

#include "scenarios/model.hpp"
#include "scenarios/training.hpp"
#include "scheduler/estimate/estimate.hpp"
#include "scheduler/hexiseq/hexiseq.hpp"
#include "scheduler/plan/plan.hpp"
#include "topologies/cluster.hpp"
#include "topologies/profile.hpp"
#include "topologies/status.hpp"

namespace hexi {
inline namespace hexiseq {

struct MeshPipelineOptions {
  HexiSeqOptions sequence;  // each stage's HexiSeq search
  int max_stages = 0;       // 0: as many as machines (and layers)
};

// One number of stages tried.
struct MeshPipelineCandidate {
  int stages = 0;
  Plan plan;
  Estimate estimate;  // of `plan` (none when a stage has no layout)
  bool fits = false;
  std::string problem;  // why it was not kept (does not fit, a stage has no layout)
};

struct MeshPipelineResult {
  Plan plan;                                 // the best that fits
  Estimate estimate;                         // the best candidate's
  std::vector<MeshPipelineCandidate> tried;  // p = 1, 2, ...
  double search_time_s = 0;

  // stages, zero_stage (the plan's, as given), iteration_time_s, tokens_per_s, search_time_s,
  // tried (per number of stages: fits, and its times, layers and GPUs per stage or its
  // problem) and the plan: what `hexisim seq --pipeline --json` and Python's seq() print.
  Json to_json(int zero_stage) const;
};

// "a,b,...": per stage of the plan's (one) pipeline, its layers or its GPUs.
std::string stage_layers_text(const Plan& plan);
std::string stage_gpus_text(const Plan& plan);

// Bad input under ZeRO 2 or 3 (pipeline plans run ZeRO 0 or 1), where the sequence is not a
// multiple of the meshes' token blocks, or where no number of stages gives a plan that fits
// (the message lists why each did not).
Result<MeshPipelineResult> search_mesh_pipeline(const Cluster& cluster, const Model& model,
                                                const TrainingConfig& training,
                                                const Profile& profile,
                                                const MeshPipelineOptions& options = {});

// The machines (ids, cluster order) cut into `p` contiguous runs of about equal summed dense
// FLOP/s: run k ends where the running sum first reaches (k + 1) / p of the total, leaving
// each later run at least one machine. Empty when p exceeds the machines.
std::vector<std::vector<int>> machine_runs(const Cluster& cluster, int p);

}  // namespace hexiseq
}  // namespace hexi
