#pragma once
// A cluster's pairwise links as dense N x N Eigen matrices (diagonal 0; 8 N^2 bytes each),
// apart from cluster.hpp so that only their users parse Eigen.

#include "topologies/cluster.hpp"
#include "topologies/eigen.hpp"

namespace hexi {

Eigen::MatrixXd bandwidth_matrix(const Cluster& cluster);
Eigen::MatrixXd latency_matrix(const Cluster& cluster);

}  // namespace hexi
