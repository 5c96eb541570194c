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
  for (int i = 0; i < n; ++i) p.flows.push_back({devices[i], devices[(i + 1) % n], per_flow});
  return p;
}

Phase chain(const std::vector<int>& devices, double bytes) {
  const int n = static_cast<int>(devices.size());
  Phase p;
  p.latency_steps = n - 1;
  for (int i = 0; i + 1 < n; ++i) p.flows.push_back({devices[i], devices[i + 1], bytes});
  return p;
}

Phase pairwise(const std::vector<int>& devices, double bytes) {
  const int n = static_cast<int>(devices.size());
  Phase p;
  p.latency_steps = n - 1;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i != j) p.flows.push_back({devices[i], devices[j], bytes / n});
    }
  }
  return p;
}

std::vector<Phase> hierarchical(const std::vector<std::vector<int>>& blocks, double bytes) {
  const int g = static_cast<int>(blocks.front().size());
  const int machines = static_cast<int>(blocks.size());
  Phase scatter, across, gather;
  for (const auto& b : blocks) {
    Phase rs = ring(Collective::kReduceScatter, b, bytes);
    Phase ag = ring(Collective::kAllGather, b, bytes);
    scatter.flows.insert(scatter.flows.end(), rs.flows.begin(), rs.flows.end());
    gather.flows.insert(gather.flows.end(), ag.flows.begin(), ag.flows.end());
    scatter.latency_steps = rs.latency_steps;
    gather.latency_steps = ag.latency_steps;
  }
  for (int k = 0; k < g; ++k) {
    std::vector<int> column;
    for (int m = 0; m < machines; ++m) column.push_back(blocks[m][k]);
    Phase ar = ring(Collective::kAllReduce, column, bytes / g);
    across.flows.insert(across.flows.end(), ar.flows.begin(), ar.flows.end());
    across.latency_steps = ar.latency_steps;
  }
  return {scatter, across, gather};
}

}  // namespace

std::vector<std::vector<int>> machine_blocks(const std::vector<int>& devices,
                                             const Cluster& cluster) {
  std::map<int, std::vector<int>> by_machine;
  std::vector<int> order;
  for (int d : devices) {
    int m = cluster.devices()[d].machine;
    if (by_machine[m].empty()) order.push_back(m);
    by_machine[m].push_back(d);
  }
  if (order.size() < 2) return {};
  const std::size_t g = by_machine[order.front()].size();
  if (g < 2) return {};
  std::vector<std::vector<int>> blocks;
  for (int m : order) {
    if (by_machine[m].size() != g) return {};
    blocks.push_back(by_machine[m]);
  }
  return blocks;
}

std::vector<Phase> expand_collective(Collective c, const std::vector<int>& devices, double bytes,
                                     Algorithm algorithm, const Cluster& cluster) {
  if (devices.size() < 2) return {};
  if (c == Collective::kAllReduce && algorithm != Algorithm::kRing) {
    auto blocks = machine_blocks(devices, cluster);
    if (!blocks.empty()) return hierarchical(blocks, bytes);
  }
  switch (c) {
    case Collective::kBroadcast:
      return {chain(devices, bytes)};
    case Collective::kAllToAll:
      return {pairwise(devices, bytes)};
    default:
      return {ring(c, devices, bytes)};
  }
}

}  // namespace hexi::sim
