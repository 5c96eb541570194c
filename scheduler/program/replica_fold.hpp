#pragma once
// Replica folding (program.hpp, ReplicaFold): how many of a plan's pipelines a simulation
// must run for the rest to follow by symmetry.
//
// A shift by u pipelines (pipeline p -> p + u mod P, each device to the device at the same
// stage and TP rank) is a symmetry of the simulation when
//   - every pipeline is the same (stages' TP degrees, layers, head splits, recompute, batch,
//     micro-batch; devices at the same local GPU index of machines of the same kind);
//   - it maps machines to machines one to one (each used machine's devices in pipelines of
//     one block of u), of the same kind (GPU type, GPUs, intra-machine links, PCIe, sockets,
//     NICs), and leaves to leaves one to one with the same uplink;
//   - it maps every gradient-sync group onto itself, its ring (cost::machine_order) turned
//     by a constant number of members.
// Then every flow's image under the shift is a flow of the same size at the same time on
// the image links, so the first u pipelines see exactly the traffic they see in the whole
// simulation. find_replica_fold returns the smallest such u dividing P. Mesh stages map
// device by device in mesh order, and match when their layouts do but for their devices. Not
// folded (the reason in why_not): one pipeline, pair overrides, devices under a CPU quota,
// pipelines that differ, or no shift but the whole.

#include "scenarios/model.hpp"
#include "scenarios/training.hpp"
#include "scheduler/plan/plan.hpp"
#include "scheduler/program/program.hpp"
#include "topologies/cluster.hpp"

namespace hexi {
inline namespace program {

// The plan is checked by lower_plan; this only reads it.
ReplicaFold find_replica_fold(const Plan& plan, const Cluster& cluster, const Model& model,
                              const TrainingConfig& training);

}  // namespace program
}  // namespace hexi
