#include "scheduler/cost/collectives.hpp"

#include <algorithm>
#include <limits>

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

std::pair<double, double> ring_link(const Cluster& cluster, const std::vector<int>& group,
                                    double bytes) {
  const int n = static_cast<int>(group.size());
  double bw = std::numeric_limits<double>::infinity(), lat = 0;
  if (n <= 1) return {bw, 0.0};
  // Ring edges that leave a machine share that machine's NICs with the other edge
  // leaving it (at most one per direction per machine for a contiguous ring).
  const double message = bytes / n;
  for (int i = 0; i < n; ++i) {
    const int a = group[i], b = group[(i + 1) % n];
    PairLink l = cluster.link(a, b);
    bw = std::min(bw, l.bandwidth_Bps * cluster.efficiency(a, b, message));
    lat = std::max(lat, cluster.step_latency(a, b));
  }
  return {bw, lat};
}

}  // namespace cost
}  // namespace hexi
