#include "sim/collective_algos.hpp"

#include <map>

#include "topologies/enum_names.hpp"

namespace hexi::sim {

namespace {

constexpr auto kAlgorithms = enum_names<Algorithm>({{Algorithm::kAuto, "auto"},
                                                    {Algorithm::kRing, "ring"},
                                                    {Algorithm::kHierarchical, "hierarchical"}});

}  // namespace

std::string_view to_string(Algorithm a) {
  return kAlgorithms.name(a);
}

namespace {

Phase ring(Collective c, const std::vector<int>& devices, double bytes) {
  const int n = static_cast<int>(devices.size());
  Phase p;
  p.latency_steps = latency_steps(c, n);
  const double per_flow = bus_factor(c, n) * bytes;
  for (int i = 0; i < n; ++i)
    p.flows.push_back({devices[i], devices[(i + 1) % n], per_flow, bytes / n});
  return p;
}

Phase chain(const std::vector<int>& devices, double bytes) {
  const int n = static_cast<int>(devices.size());
  Phase p;
  p.latency_steps = n - 1;
  for (int i = 0; i + 1 < n; ++i) p.flows.push_back({devices[i], devices[i + 1], bytes, bytes / n});
  return p;
}

Phase pairwise(const std::vector<int>& devices, double bytes) {
  const int n = static_cast<int>(devices.size());
  Phase p;
  p.latency_steps = n - 1;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i != j) p.flows.push_back({devices[i], devices[j], bytes / n, bytes / n});
    }
  }
  return p;
}

// One phase: NCCL pipelines the parts chunk by chunk, so the intra-machine
// reduce-scatter, the across-machine all-reduces and the intra-machine all-gather move
// their bytes at once; the latency is every step's, each at its own links' hop.
Phase hierarchical(const std::vector<std::vector<int>>& blocks, double bytes) {
  const int g = static_cast<int>(blocks.front().size());
  const int machines = static_cast<int>(blocks.size());
  Phase all;
  auto add = [&all](const Phase& ring_part, int part) {
    for (FlowSpec f : ring_part.flows) {
      f.part = part;
      all.flows.push_back(f);
    }
  };
  for (const auto& b : blocks) {
    add(ring(Collective::kReduceScatter, b, bytes), 0);
    add(ring(Collective::kAllGather, b, bytes), 0);
  }
  for (int k = 0; k < g; ++k) {
    std::vector<int> column;
    for (int m = 0; m < machines; ++m) column.push_back(blocks[m][k]);
    add(ring(Collective::kAllReduce, column, bytes / g), 1);
  }
  all.part_steps = {2 * latency_steps(Collective::kReduceScatter, g),
                    latency_steps(Collective::kAllReduce, machines)};
  all.latency_steps = all.part_steps[0] + all.part_steps[1];
  return all;
}

}  // namespace

std::vector<Phase> expand_collective(Collective c, const std::vector<int>& devices, double bytes,
                                     Algorithm algorithm, const Cluster& cluster) {
  if (devices.size() < 2) return {};
  if (c == Collective::kAllReduce && algorithm != Algorithm::kRing) {
    auto blocks = machine_blocks(devices, cluster);
    if (!blocks.empty()) return {hierarchical(blocks, bytes)};
  }
  switch (c) {
    case Collective::kBroadcast:
      return {chain(machine_order(devices, cluster), bytes)};
    case Collective::kAllToAll:
      return {pairwise(devices, bytes)};
    default:
      return {ring(c, machine_order(devices, cluster), bytes)};
  }
}

}  // namespace hexi::sim
