#pragma once
// Lowering a plan into a program (program.hpp): per device, the micro-batches of
// its pipeline in 1F1B or GPipe order, each stage's forward and backward as
// compute ops with their TP collectives, the stage-boundary transfers (pieces +
// all-gather), then DP gradient synchronisation, the optimizer step and the
// ZeRO-1 / replicated-parameter all-gathers. Deterministic: same inputs, same
// program.

#include <string>
#include <utility>
#include <vector>

#include "scenarios/model.hpp"
#include "scenarios/training.hpp"
#include "scheduler/cost/schedule.hpp"
#include "scheduler/plan/plan.hpp"
#include "scheduler/program/program.hpp"
#include "topologies/cluster.hpp"

namespace hexi {
inline namespace program {

struct LowerOptions {
  Granularity granularity = Granularity::kLayer;
  std::string scenario;  // recorded in the program
  // Fold identical pipelines (replica_fold.hpp): lower only the first of them the shift
  // needs, their collectives across pipelines keeping the whole group (program.hpp,
  // ReplicaFold; Program::replicas says how many and why not fewer). false: every pipeline,
  // and Program::replicas left empty.
  bool fold_replicas = false;
};

// The most compute ops a program may hold (a program costs ~150 bytes an op with its
// dependencies): about 2.5 GB. A plan whose program would need more is refused before
// anything is allocated; at stage granularity the same plan needs far fewer ops.
inline constexpr double kMaxProgramComputeOps = double{1 << 24};

// A lower bound on the program's compute ops: every device runs a forward and a
// backward per micro-batch, per layer at layer granularity, per stage at stage
// granularity. Counted in doubles (a global batch of 2^24 must not overflow).
double min_compute_ops(const Plan& plan, Granularity granularity);

// The fewest compute ops of any plan's program for this training config: every micro-batch
// runs a forward and a backward on at least one device (per layer at layer granularity).
double least_compute_ops(const Model& model, const TrainingConfig& training,
                         Granularity granularity);

// Bad input when every plan's program would exceed kMaxProgramComputeOps, naming
// training.global_batch, training.micro_batch, the ops and the limit: what needs a program
// (`what`: "--verify 8", "simulate") checks it before any search.
Status check_program_size(const Model& model, const TrainingConfig& training,
                          Granularity granularity, const std::string& what);

// Validates the plan against the cluster, model and training config (bad input
// naming `plan_origin` when they do not match), refuses a program over
// kMaxProgramComputeOps, then lowers it.
Result<Program> lower_plan(const Plan& plan, const Cluster& cluster, const Model& model,
                           const TrainingConfig& training, const LowerOptions& options,
                           const std::string& plan_origin);

}  // namespace program
}  // namespace hexi
