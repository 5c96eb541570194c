#pragma once
// The linear model the HexiSeq search optimises (its LP and integer programs and the exact
// MILP all encode it), and its value for a given layout. It follows estimate/sequence_time.hpp term
// by term, with what an integer program cannot say replaced by bounds:
//
//   device i of group g:  t_i = a_i + tau_i s_i + A_g + (1 + replay) Rf_g + Rb_g
//   token-wise  a_i + tau_i s_i: the closed form's kernels fitted at two shard lengths
//               (exact for shards in the compute-bound range, where every kernel is GEMM- or
//               HBM-linear; a_i is the launch overheads)
//   all-to-all  A_g = (2 + replay) (A1_g + A2_g + 2 latency), A1 >= every device's send and
//               receive port time of the Q, K, V all-to-all (bytes s_j (h_i + 2 kv_i) d B
//               over the pair's bandwidth) and, for a group spanning machines, every
//               machine's NIC time of its off-machine bytes; A2 the same for O (s_j h_i d B)
//   ring        Rf_g >= each device's forward attention compute kf_i T_g h_i (kf_i =
//               (S + 1)/2 4 d / F_i: the mirrored layout's pairs, linear in T_g) and its
//               forward K, V receive (S - T_g) kv_i 2 d B / bw_i from the previous group
//               (bw_i the slowest path from it) and each machine's NIC share; Rb_g the same
//               backward (2.5 x compute; K, V, dK, dV per step; dK, dV of T_g home). The
//               dataflow ring of estimate/sequence_time.hpp is at least this (the model is its
//               lower bound when compute and transfers overlap perfectly)
//   memory      m0_i + m_s s_i + m_u T_g (2 h_i + 2 kv_i) + m_r T_max kv_i <= 95 % of it:
//               plan/sequence_layout.hpp's memory exactly (activations, logits, all-to-all and ring
//               buffers are linear in these products under flash attention)
// with kv_i >= h_i / (n_q / n_kv) (a range splitting a GQA group costs a replicated kv head;
// the layout's order decides the real count, which value() uses). Times here in seconds.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "scheduler/estimate/sequence_time.hpp"
#include "scheduler/plan/sequence_layout.hpp"

namespace hexi {
inline namespace hexiseq {

// What the model knows of one device.
struct DeviceTerms {
  int device = 0;
  int machine = 0;
  double token_fixed_s = 0;         // a_i
  double token_s = 0;               // tau_i, s per token of its shard
  double attention_s = 0;           // kf_i: forward s per (group token x query head)
  double attention_backward_s = 0;  // kb_i: backward s per (group token x query head)
  double memory_fixed = 0;          // m0: model states + reserve, bytes
  double memory_token = 0;          // m_s: activations + logits per own token, bytes
  double memory_limit = 0;          // kMemoryCap x capacity, bytes
};

// The model's coefficients for one group of a layout with given ring neighbours.
struct GroupTerms {
  std::vector<DeviceTerms> devices;         // rank order
  std::vector<std::vector<double>> pair_s;  // [i][j]: s per (token x head) from i to j (d B /
                                            // bw); 0 on the diagonal
  std::vector<double> ring_s;  // [i]: s per (token x kv head) of K, V from the previous
                               // group (2 d B / bw_i); 0 for one group
  std::vector<int> machines;   // the machines of the group's devices (index into
                               // Cluster::machines), one entry each
  std::vector<double> nic_s;   // [machine entry]: s per (token x head) through its NICs
  std::vector<char> ring_nic;  // [machine entry]: its ring K/V come over its NICs
  double a2a_latency_s = 0;    // the group's largest path latency (0 for one device)
};

// Classes of interchangeable ranks of a group (same machine, terms, ring hop and bandwidths
// to every other rank): one id per rank, the id being the class's first rank. Programs
// order a class's ranks (symmetry) and give its ranks one guess.
std::vector<int> interchangeable(const GroupTerms& terms);

class LinearModel {
 public:
  // The model for meshes of `mesh` devices (ZeRO shards the model states over them).
  LinearModel(const SequenceCost& cost, int mesh);

  const SequenceCost& cost() const { return cost_; }
  std::int64_t sequence() const { return cost_.training().seq_len; }  // S
  int replay() const;                                                 // 1 under full recompute
  double grad_ratio() const;                                          // B_g / B
  int heads_per_kv() const;                                           // n_q / n_kv
  double memory_ulysses() const { return memory_ulysses_; }           // m_u, bytes
  double memory_ring() const { return memory_ring_; }                 // m_r, bytes

  DeviceTerms device(int d) const;
  // Group `devices` preceded on the ring by `previous` (empty: no ring).
  GroupTerms group(const std::vector<int>& devices, const std::vector<int>& previous) const;

  // The model's layer time of a layout (s) and the largest memory excess over the limit
  // (bytes; <= 0 when every device fits), with the layout's real kv heads.
  double value(const SequenceLayout& layout) const;
  double memory_excess(const SequenceLayout& layout) const;
  // One group's time in the model (its slowest device, s).
  double group_value(const GroupTerms& terms, const SequenceGroup& g) const;

 private:
  DeviceTerms compute_device(int d) const;

  const SequenceCost& cost_;
  int mesh_ = 1;
  mutable std::map<std::string, DeviceTerms> by_gpu_;  // device() by GPU name
  double memory_ulysses_ = 0;
  double memory_ring_ = 0;
};

}  // namespace hexiseq
}  // namespace hexi
