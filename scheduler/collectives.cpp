#include "scheduler/collectives.hpp"

namespace hexi {

std::string_view to_string(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "all-reduce";
    case Collective::kAllGather:
      return "all-gather";
    case Collective::kReduceScatter:
      return "reduce-scatter";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kAllToAll:
      return "all-to-all";
  }
  return "?";
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

}  // namespace hexi
