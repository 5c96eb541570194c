#pragma once
// HexiScale phase 1: partition the device graph into D pipelines with METIS
// (multilevel k-way: heavy-edge coarsening, initial partition, projection, FM
// refinement). Vertices carry two balance constraints, TFLOP/s and memory, so each
// pipeline gets a similar share of compute and of room for a model replica; edges
// carry the pairwise bandwidth. Debian's METIS uses 32-bit idx_t, so every weight
// is scaled into 1..kWeightScale.
//
// Two ways to weigh edges, tried in turn by the search ("decide per round whether
// DP traffic should cut fast or slow links"):
//   kDpOnSlowLinks  weight ~ bandwidth: the cut (between pipelines, i.e. the DP
//                   traffic) falls on slow links; pipelines stay on fast links
//   kDpOnFastLinks  weight ~ 1 / bandwidth: the cut falls on fast links; pipelines
//                   stretch across slow links (PP sends are small) and gradient
//                   all-reduces run on the fast ones
//
// Large clusters are coarsened: a vertex is a whole machine (weights summed, edge
// = machine-to-machine bandwidth), so 4 096 GPUs are a graph of 512 vertices.

#include <cstdint>
#include <vector>

#include "topologies/cluster.hpp"

namespace hexi {
inline namespace hexiscale {

enum class CutMode { kDpOnSlowLinks, kDpOnFastLinks };

// A vertex of the partitioned graph: some devices of one machine.
struct Unit {
  int machine = 0;
  int count = 0;  // devices
};

// Units of the graph: one per device, or one per machine when `per_machine`.
std::vector<Unit> make_units(const Cluster& cluster, bool per_machine);

// METIS k-way partition of the units into `parts` parts (part index per unit).
// Parts may come back empty on tiny graphs; callers drop them. parts <= 1 or a
// METIS failure gives every unit part 0. `jitter` > 0 perturbs the edge weights
// by up to that fraction (seeded), so that restarts explore different cuts.
std::vector<int> metis_partition(const Cluster& cluster, const std::vector<Unit>& units, int parts,
                                 CutMode mode, std::uint64_t seed, double jitter = 0);

// Structured partitions that the sweep tries next to METIS's:
//   spread  every machine's devices dealt round-robin over the parts (the extreme
//           of "DP on fast links": each pipeline spans every machine)
//   packed  whole machines to parts, largest TFLOP/s first to the part with the
//           least so far (the extreme of "DP on slow links")
std::vector<int> spread_partition(const std::vector<Unit>& units, int parts);
std::vector<int> packed_partition(const Cluster& cluster, const std::vector<Unit>& units,
                                  int parts);
//   mixed   (device units) machines of a GPU type with at least `parts` machines go whole,
//           the k-th of its type to part k mod parts; every other machine's devices
//           are dealt round-robin (one pipeline per slow machine, each with a slice of
//           the scarce fast machines, whose DP traffic stays on their fast links), in
//           blocks of `block` consecutive devices (2: TP pairs inside a machine)
std::vector<int> mixed_partition(const Cluster& cluster, const std::vector<Unit>& units, int parts,
                                 int block = 1);

constexpr int kWeightScale = 10000;

}  // namespace hexiscale
}  // namespace hexi
