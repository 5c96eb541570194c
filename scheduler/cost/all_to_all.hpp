#pragma once
// The ragged Ulysses all-to-all of sequence.hpp as dense device x device matrices: its bytes
// per pair and its time over a group's links (Eigen; apart from sequence.hpp so that only
// their users parse Eigen).

#include <vector>

#include "scheduler/cost/sequence.hpp"
#include "topologies/eigen.hpp"

namespace hexi {
inline namespace cost {

// bytes(src, dst) of one layer's forward (diagonal 0):
//   before attention (Q, K, V)   bytes[j -> i] = s_j (h_i + 2 kv(h_i)) d B
//   after attention  (O)         bytes[i -> j] = s_j h_i d B   (j's tokens, i's heads)
// The backward moves the same bytes the other way: dO like O reversed, dQ, dK, dV like
// Q, K, V reversed (replicated kv heads' partial dK, dV are summed by the token owner).
Eigen::MatrixXd ulysses_qkv_bytes(const AttentionShape& a, const UlyssesGroup& g);
Eigen::MatrixXd ulysses_output_bytes(const AttentionShape& a, const UlyssesGroup& g);

// Time (s) of one all-to-all with bytes(src, dst) over per-pair bandwidths bw(src, dst)
// (bytes/s, the cluster's single-flow path bottleneck) and latencies. Model: a device's
// flows share its port, so its sends take sum_j bytes(i, j) / bw(i, j) back to back and its
// receives sum_j bytes(j, i) / bw(j, i); the all-to-all ends with the slowest device,
// plus the largest latency. Exact where each pair's bottleneck is the devices' own port
// (NVLink/NVSwitch); optimistic where several devices share one NIC.
double all_to_all_time(const Eigen::MatrixXd& bytes, const Eigen::MatrixXd& bandwidth_Bps,
                       const Eigen::MatrixXd& latency_s);
// The bandwidth and latency matrices of `devices` (rows / columns in group order).
Eigen::MatrixXd group_bandwidths(const Cluster& cluster, const std::vector<int>& devices);
Eigen::MatrixXd group_latencies(const Cluster& cluster, const std::vector<int>& devices);

}  // namespace cost
}  // namespace hexi
