#pragma once
// Collectives, each described once by its byte count and its bus-bandwidth factor
// (nccl-tests doc/PERFORMANCE.md): for a ring of n ranks and a buffer of S bytes,
//   all-reduce       time = 2(n-1)/n * S / bw + 2(n-1) * latency
//   all-gather       time =  (n-1)/n * S / bw +  (n-1) * latency   (S = gathered size)
//   reduce-scatter   time =  (n-1)/n * S / bw +  (n-1) * latency   (S = input size)
//   broadcast (pipelined chain) time = S / bw + (n-1) * latency
//   all-to-all (pairwise)       time = (n-1)/n * S / bw + (n-1) * latency (S = per-rank buffer)
// bw is the bottleneck link bandwidth of the ring (bytes/s): achieved, not nominal, when it
// comes from ring_link (each edge's nominal rate times its transport's efficiency at the
// message the ring sends per step, S/n; topologies/transport.hpp). The cost model, the
// simulator's analytic folds and the engine's reports all use these functions.

#include <string_view>
#include <utility>
#include <vector>

#include "topologies/cluster.hpp"
#include "topologies/enum_names.hpp"

namespace hexi {
inline namespace cost {

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kAllToAll };
inline constexpr auto kCollectiveNames =
    enum_names<Collective>({{Collective::kAllReduce, "all-reduce"},
                            {Collective::kAllGather, "all-gather"},
                            {Collective::kReduceScatter, "reduce-scatter"},
                            {Collective::kBroadcast, "broadcast"},
                            {Collective::kAllToAll, "all-to-all"}});

std::string_view to_string(Collective c);

// Bytes each rank sends per byte of S: 2(n-1)/n for all-reduce, (n-1)/n for
// all-gather / reduce-scatter / all-to-all, 1 for broadcast. 0 when n <= 1.
double bus_factor(Collective c, int n);

// Number of sequential latency-bound steps of the ring algorithm.
int latency_steps(Collective c, int n);

// Time of the ring algorithm (s); 0 when n <= 1 or bytes <= 0.
double collective_time(Collective c, double bytes, int n, double bandwidth_Bps, double latency_s);

// Point-to-point: latency + bytes / bandwidth.
double p2p_time(double bytes, double bandwidth_Bps, double latency_s);

// NCCL builds its rings and chains from the topology, not the rank order: a group's
// members machine by machine (machines in the order the group first names them, members in
// group order within each), so each machine's NICs carry one edge per direction. The first
// member stays first (a broadcast's root). The simulator rings in this order too.
std::vector<int> machine_order(const std::vector<int>& devices, const Cluster& cluster);

// The link of a ring over `group` (ringed in machine_order) for a collective of `bytes`: the
// smallest achieved bandwidth (bytes/s: nominal x efficiency at bytes / n per step) and the
// largest step latency (s: path + transport) of its edges; {infinity, 0} for one device.
std::pair<double, double> ring_link(const Cluster& cluster, const std::vector<int>& group,
                                    double bytes);

// Members grouped by machine (each block in `devices` order, blocks in order of first
// appearance) when every machine holds the same number (>= 2) of them and there are >= 2
// machines; empty otherwise. Such an all-reduce runs hierarchically (NCCL's tree/ring over
// machines): a reduce-scatter and an all-gather inside each machine and, pipelined with
// them, an all-reduce of S/g across machines per position k in the blocks (g columns).
std::vector<std::vector<int>> machine_blocks(const std::vector<int>& devices,
                                             const Cluster& cluster);

// Time of that hierarchical all-reduce of `bytes` over `blocks` (machine_blocks), its parts
// pipelined: the slower part's bytes at its slowest link (the column edges across machines
// at most one NIC's rate each), plus every step's latency at its own hop.
double hierarchical_all_reduce_time(const Cluster& cluster,
                                    const std::vector<std::vector<int>>& blocks, double bytes);

// The pieces of a stage-boundary transfer of `rows` token rows from a TP group of `ts` ranks
// to one of `td` ranks (program.hpp), in row order; empty pieces are left out.
// Without sequence parallelism every source rank holds all rows: piece j = rows
// [j*rows/td, (j+1)*rows/td) from source rank floor(j*ts/td) to destination rank j, and the
// receiving group all-gathers its pieces. Under sequence parallelism rank i of a group of t
// holds only rows [i*rows/t, (i+1)*rows/t), in the sender's group and in the receiver's:
// a piece per overlap of a source rank's rows with a destination rank's, and no all-gather.
struct Piece {
  int src_rank = 0;
  int dst_rank = 0;
  int rows_begin = 0;
  int rows_end = 0;
};
std::vector<Piece> boundary_pieces(int ts, int td, int rows, bool sequence_parallel = false);

}  // namespace cost
}  // namespace hexi
