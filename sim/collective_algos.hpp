#pragma once
// Collectives lowered to the point-to-point flows of their real algorithms, in
// phases (each phase starts when the previous one has finished). Pure functions,
// no SimGrid: the simulator starts every flow of a phase as one SimGrid comm and
// charges each flow `latency_steps` times the phase's largest hop latency, so
// that an uncontended collective takes exactly the time of scheduler/cost/collectives.hpp.
//
// Ring (NCCL's ring in steady state, chunks pipelined): n concurrent flows
// i -> i+1 (group order machine by machine, as NCCL's topology-built rings: each machine's
// NICs carry one edge per direction), each carrying bus_factor(c, n) * S bytes:
//   all-reduce 2(n-1)/n S, 2(n-1) steps | all-gather, reduce-scatter (n-1)/n S, n-1 steps
// Broadcast (pipelined chain from the group's first device, machine by machine): n-1 flows
// of S bytes.
// All-to-all (pairwise): every ordered pair exchanges S/n bytes, n-1 steps.
// Hierarchical all-reduce (machines M >= 2 holding g >= 2 members each): intra-machine
//   reduce-scatter, M-member all-reduces of S/g per local rank across machines and
//   intra-machine all-gather, in one phase (NCCL pipelines them chunk by chunk: the
//   time is every step's latency plus the slower of NVLink and the NICs).
// Each flow carries the message its transport sends per step (topologies/transport.hpp):
//   S/n for ring, chain and pairwise flows; S/g inside machines and S/(g M) across them
//   for the hierarchical all-reduce.

#include <string_view>
#include <vector>

#include "scheduler/cost/collectives.hpp"
#include "topologies/cluster.hpp"

namespace hexi::sim {

enum class Algorithm { kAuto, kRing, kHierarchical };
std::string_view to_string(Algorithm a);

struct FlowSpec {
  int src = 0;
  int dst = 0;
  double bytes = 0;
  double message = 0;  // bytes per step (its transport's efficiency)
  int part = 0;        // index into Phase::part_steps
};

struct Phase {
  std::vector<FlowSpec> flows;
  int latency_steps = 0;
  // Pipelined parts over different links (hierarchical): part p's flows pay part_steps[p]
  // steps of their own largest hop, the parts' latencies add up. Empty: latency_steps of
  // the phase's largest hop.
  std::vector<int> part_steps;
};

// The phases of collective `c` of S bytes over `devices` (ring order).
// kAuto picks hierarchical for all-reduces whose members form machine blocks
// (cost::machine_blocks, collectives.hpp).
std::vector<Phase> expand_collective(Collective c, const std::vector<int>& devices, double bytes,
                                     Algorithm algorithm, const Cluster& cluster);

}  // namespace hexi::sim
