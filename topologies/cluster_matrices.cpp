#include "topologies/cluster_matrices.hpp"

namespace hexi {
namespace {

template <typename Link>
Eigen::MatrixXd pairwise(const Cluster& cluster, Link link) {
  const int n = cluster.num_devices();
  Eigen::MatrixXd m = Eigen::MatrixXd::Zero(n, n);
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) m(i, j) = m(j, i) = link(i, j);
  }
  return m;
}

}  // namespace

Eigen::MatrixXd bandwidth_matrix(const Cluster& cluster) {
  return pairwise(cluster, [&](int a, int b) { return cluster.bandwidth(a, b); });
}

Eigen::MatrixXd latency_matrix(const Cluster& cluster) {
  return pairwise(cluster, [&](int a, int b) { return cluster.latency(a, b); });
}

}  // namespace hexi
