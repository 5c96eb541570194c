// libFuzzer target: cluster files (Cluster::from_json against the shipped GPU catalog).
// A loaded cluster answers pair queries with finite, non-negative numbers; the queries
// sample device pairs (a cluster may hold 131 072 GPUs, far too many for all pairs).

#include <algorithm>
#include <cmath>
#include <string>

#include "tests/fuzz/fuzz.hpp"
#include "topologies/cluster.hpp"
#include "topologies/cluster_matrices.hpp"

namespace {

void check_pair(const hexi::Cluster& cluster, int a, int b) {
  if (a == b) return;
  const hexi::PairLink link = cluster.link(a, b);
  const std::string pair = std::to_string(a) + " -> " + std::to_string(b);
  hexi::fuzz::check(std::isfinite(link.bandwidth_Bps) && link.bandwidth_Bps >= 0,
                    "pair bandwidth is negative or not finite", pair);
  hexi::fuzz::check(std::isfinite(link.latency_s) && link.latency_s >= 0,
                    "pair latency is negative or not finite", pair);
  (void)cluster.link_class(a, b);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hexi;
  auto json = fuzz::parse(data, size);
  if (!json) return 0;
  auto cluster = Cluster::from_json(*json, fuzz::kOrigin, fuzz::shipped_gpus());
  if (!cluster) return 0;
  const int n = cluster->num_devices();
  fuzz::check(n >= 1, "a loaded cluster has no devices");
  fuzz::check(std::isfinite(cluster->peak_flops()) && std::isfinite(cluster->memory_bytes()),
              "cluster totals are not finite");
  (void)cluster->connected_parts();
  // The first and last few devices: same machine, neighbours, the farthest pair.
  const int k = std::min(n, 8);
  for (int a = 0; a < k; ++a) {
    for (int b = 0; b < k; ++b) {
      check_pair(*cluster, a, b);
      check_pair(*cluster, n - 1 - a, b);
    }
  }
  if (n <= 64) {
    (void)bandwidth_matrix(*cluster);
    (void)latency_matrix(*cluster);
  }
  return 0;
}
