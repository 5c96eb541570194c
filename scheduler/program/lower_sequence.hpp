#pragma once
// Lowering a sequence mesh (scheduler/plan/sequence_layout.hpp) into a program (program.hpp,
// "Sequence meshes"): per sequence and layer each device's token-wise ops on its shard, the
// ragged Ulysses all-to-alls as pairwise sends, the ring's steps with their K/V (backward
// also dK/dV) messages over the sub-rings of the groups' head ranges, ZeRO-3's per-layer
// weight gathers and gradient scatters; then the mesh's gradient synchronisation and the
// optimizer. Always at layer granularity. Deterministic: same inputs, same program.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "scenarios/model.hpp"
#include "scenarios/training.hpp"
#include "scheduler/plan/plan.hpp"
#include "scheduler/plan/plan_file.hpp"
#include "scheduler/plan/sequence_layout.hpp"
#include "scheduler/program/lower.hpp"
#include "scheduler/program/program.hpp"
#include "topologies/cluster.hpp"

namespace hexi {
inline namespace program {

class ProgramBuilder;
class SequenceLowerer;

// The ops of a mesh stage of a pipeline plan (plan.hpp; lower.cpp emits the rest): per
// micro-batch (one sequence) the mesh's forward or backward of the stage's layers, with the
// embedding where `first` and the head where `last`, exactly as lower_sequence emits a
// layer (ZeRO 0-1: no per-layer gathers), into the plan's program.
class MeshStageLowerer {
 public:
  MeshStageLowerer(const Stage& stage, bool first, bool last, const Cluster& cluster,
                   const Model& model, const TrainingConfig& training, Program& program,
                   ProgramBuilder& ops);
  ~MeshStageLowerer();
  int device(int i) const;  // of mesh device i (flat index, group by group)
  // Micro-batch j's forward (backward) on every mesh device, device i's first op after
  // ready[i] (local op indices: the boundary's recvs).
  void forward(int j, const std::vector<std::vector<int>>& ready);
  void backward(int j, const std::vector<std::vector<int>>& ready);
  // Device i's layout: its group, rank and query heads, the stage's layers; the caller
  // fills in the pipeline's fields (stage, micro-batches, parameters).
  DeviceLayout layout(int i) const;

 private:
  std::unique_ptr<SequenceLowerer> impl_;
};

// The kernels of device `rank` of group `g` in one pass of a mesh stage of `layers` layers
// (the embedding where `first`, the head where `last`; forward, or backward with the
// training config's recompute and its replay): its token-wise kernels on its work
// (member_work) and one attention kernel per layer for its heads against every key. What a
// mesh stage's op at stage granularity computes (Fold::mesh folds in the rest of the pass).
std::vector<Kernel> mesh_pass_kernels(const SequenceLayout& layout, int g, int rank,
                                      const Model& model, const TrainingConfig& training,
                                      int layers, bool first, bool last, bool forward);

// Compute ops the program of `layout` holds (counted in doubles: large meshes overflow int).
double sequence_compute_ops(const SequenceLayout& layout, const Model& model,
                            const TrainingConfig& training);

// Validates the layout against the cluster, model and training config (bad input naming
// `origin`), refuses a program over kMaxProgramComputeOps (lower.hpp), then lowers it.
Result<Program> lower_sequence(const SequenceLayout& layout, const Cluster& cluster,
                               const Model& model, const TrainingConfig& training,
                               const std::string& scenario, const std::string& origin);

// Its program: lower_plan (with `options`) or lower_sequence (always layer granularity),
// errors naming `origin`.
Result<Program> lower_plan_file(const PlanFile& file, const Cluster& cluster, const Model& model,
                                const TrainingConfig& training, const LowerOptions& options,
                                const std::string& origin);

}  // namespace program
}  // namespace hexi
