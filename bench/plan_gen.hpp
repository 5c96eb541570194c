#pragma once
// A simple plan generator for the simulator benchmarks (not a scheduler): every
// GPU type forms its own pipelines of k whole machines, with TP groups of t GPUs
// inside a machine; per type the (t, k) with the best estimated throughput per GPU
// that fits in memory is kept. Layers are split evenly, the global batch in
// proportion to each pipeline's throughput, in whole micro-batches.

#include "scenarios/model.hpp"
#include "scenarios/training.hpp"
#include "scheduler/plan/plan.hpp"
#include "topologies/cluster.hpp"
#include "topologies/profile.hpp"
#include "topologies/status.hpp"

namespace hexi::bench {

Result<Plan> generate_plan(const Cluster& cluster, const Model& model,
                           const TrainingConfig& training, const Profile& profile);

}  // namespace hexi::bench
