#include "scheduler/cost/collectives.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>

#include "topologies/enum_names.hpp"

namespace hexi {
inline namespace cost {

std::string_view to_string(Collective c) {
  return kCollectiveNames.name(c);
}

double bus_factor(Collective c, int n) {
  if (n <= 1) return 0.0;
  const double frac = static_cast<double>(n - 1) / n;
  switch (c) {
    case Collective::kAllReduce:
      return 2 * frac;
    case Collective::kBroadcast:
      return 1.0;
    default:
      return frac;
  }
}

int latency_steps(Collective c, int n) {
  if (n <= 1) return 0;
  return c == Collective::kAllReduce ? 2 * (n - 1) : n - 1;
}

double collective_time(Collective c, double bytes, int n, double bandwidth_Bps, double latency_s) {
  if (n <= 1 || bytes <= 0) return 0.0;
  return bus_factor(c, n) * bytes / bandwidth_Bps + latency_steps(c, n) * latency_s;
}

double p2p_time(double bytes, double bandwidth_Bps, double latency_s) {
  if (bytes <= 0) return 0.0;
  return latency_s + bytes / bandwidth_Bps;
}

namespace {

// `devices` grouped by machine: machines in the order `devices` first names them, each
// group's members in `devices` order.
std::vector<std::vector<int>> by_machine(const std::vector<int>& devices, const Cluster& cluster) {
  std::vector<std::vector<int>> groups;
  std::map<int, std::size_t> group_of;
  for (const int d : devices) {
    const auto [it, added] = group_of.emplace(cluster.devices()[d].machine, groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(d);
  }
  return groups;
}

// Whether machine_order(devices) is `devices` itself: each machine's devices follow each other.
// Checked pair by pair up to kQuickOrderCheck devices (a stage's, a machine's); beyond, the
// regrouping answers.
constexpr std::size_t kQuickOrderCheck = 16;
bool in_machine_order(const std::vector<int>& devices, const Cluster& cluster) {
  if (devices.size() > kQuickOrderCheck) return false;
  const auto machine = [&](std::size_t i) { return cluster.devices()[devices[i]].machine; };
  for (std::size_t i = 1; i < devices.size(); ++i) {
    if (machine(i) == machine(i - 1)) continue;
    for (std::size_t j = 0; j + 1 < i; ++j) {
      if (machine(j) == machine(i)) return false;
    }
  }
  return true;
}

}  // namespace

std::vector<int> machine_order(const std::vector<int>& devices, const Cluster& cluster) {
  std::vector<int> out;
  out.reserve(devices.size());
  for (const auto& g : by_machine(devices, cluster)) out.insert(out.end(), g.begin(), g.end());
  return out;
}

std::pair<double, double> ring_link(const Cluster& cluster, const std::vector<int>& devices,
                                    double bytes) {
  const int n = static_cast<int>(devices.size());
  double bw = std::numeric_limits<double>::infinity(), lat = 0;
  if (n <= 1) return {bw, 0.0};
  // Machine by machine, each ring edge that leaves a machine has its NICs to itself in
  // its direction. Devices already in that order (a stage's, a machine's) are ringed as they
  // are, without the regrouping's copies.
  std::vector<int> regrouped;
  if (!in_machine_order(devices, cluster)) regrouped = machine_order(devices, cluster);
  const std::vector<int>& group = regrouped.empty() ? devices : regrouped;
  const double message = bytes / n;
  for (int i = 0; i < n; ++i) {
    const int a = group[i], b = group[(i + 1) % n];
    PairLink l = cluster.link(a, b);
    bw = std::min(bw, l.bandwidth_Bps * cluster.efficiency(a, b, message));
    lat = std::max(lat, cluster.collective_step_latency(a, b));
  }
  return {bw, lat};
}

std::vector<std::vector<int>> machine_blocks(const std::vector<int>& devices,
                                             const Cluster& cluster) {
  std::vector<std::vector<int>> blocks = by_machine(devices, cluster);
  if (blocks.size() < 2 || blocks.front().size() < 2) return {};
  for (const auto& b : blocks) {
    if (b.size() != blocks.front().size()) return {};
  }
  return blocks;
}

double hierarchical_all_reduce_time(const Cluster& cluster,
                                    const std::vector<std::vector<int>>& blocks, double bytes) {
  const int g = static_cast<int>(blocks.front().size());
  const int machines = static_cast<int>(blocks.size());
  double intra_bw = std::numeric_limits<double>::infinity(), intra_lat = 0;
  for (const auto& b : blocks) {
    const auto [bw, lat] = ring_link(cluster, b, bytes);
    intra_bw = std::min(intra_bw, bw);
    intra_lat = std::max(intra_lat, lat);
  }
  double inter_bw = std::numeric_limits<double>::infinity(), inter_lat = 0;
  const double column_bytes = bytes / g;
  for (int k = 0; k < g; ++k) {
    for (int m = 0; m < machines; ++m) {
      const int a = blocks[m][k], b = blocks[(m + 1) % machines][k];
      const double nic =
          std::min(cluster.machine_of(a).nic_each_Bps(), cluster.machine_of(b).nic_each_Bps());
      const double link = std::min(cluster.link(a, b).bandwidth_Bps, nic);
      inter_bw = std::min(inter_bw, link * cluster.efficiency(a, b, column_bytes / machines));
      inter_lat = std::max(inter_lat, cluster.collective_step_latency(a, b));
    }
  }
  const double intra_s = 2 * bus_factor(Collective::kReduceScatter, g) * bytes / intra_bw;
  const double inter_s = bus_factor(Collective::kAllReduce, machines) * column_bytes / inter_bw;
  return std::max(intra_s, inter_s) + 2 * latency_steps(Collective::kReduceScatter, g) * intra_lat +
         latency_steps(Collective::kAllReduce, machines) * inter_lat;
}

std::vector<Piece> boundary_pieces(int ts, int td, int rows, bool sequence_parallel) {
  auto edge = [rows](std::int64_t i, int t) { return static_cast<int>(i * rows / t); };
  std::vector<Piece> pieces;
  for (int j = 0; j < td; ++j) {
    if (!sequence_parallel) {
      Piece p{static_cast<int>(static_cast<std::int64_t>(j) * ts / td), j, edge(j, td),
              edge(j + 1, td)};
      if (p.rows_end > p.rows_begin) pieces.push_back(p);
      continue;
    }
    for (int i = 0; i < ts; ++i) {
      Piece p{i, j, std::max(edge(i, ts), edge(j, td)), std::min(edge(i + 1, ts), edge(j + 1, td))};
      if (p.rows_end > p.rows_begin) pieces.push_back(p);
    }
  }
  return pieces;
}

}  // namespace cost
}  // namespace hexi
