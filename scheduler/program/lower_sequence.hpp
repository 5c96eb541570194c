#pragma once
// Lowering a sequence mesh (scheduler/hexiseq/layout.hpp) into a program (program.hpp,
// "Sequence meshes"): per sequence and layer each device's token-wise ops on its shard, the
// ragged Ulysses all-to-alls as pairwise sends, the ring's steps with their K/V (backward
// also dK/dV) messages over the sub-rings of the groups' head ranges, ZeRO-3's per-layer
// weight gathers and gradient scatters; then the mesh's gradient synchronisation and the
// optimizer. Always at layer granularity. Deterministic: same inputs, same program.

#include <string>

#include "scenarios/model.hpp"
#include "scenarios/training.hpp"
#include "scheduler/hexiseq/layout.hpp"
#include "scheduler/program/program.hpp"
#include "topologies/cluster.hpp"

namespace hexi {
inline namespace program {

// Compute ops the program of `layout` holds (counted in doubles: large meshes overflow int).
double sequence_compute_ops(const SequenceLayout& layout, const Model& model,
                            const TrainingConfig& training);

// Validates the layout against the cluster, model and training config (bad input naming
// `origin`), refuses a program over kMaxProgramComputeOps (lower.hpp), then lowers it.
Result<Program> lower_sequence(const SequenceLayout& layout, const Cluster& cluster,
                               const Model& model, const TrainingConfig& training,
                               const std::string& scenario, const std::string& origin);

}  // namespace program
}  // namespace hexi
