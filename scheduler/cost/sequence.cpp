#include "scheduler/cost/sequence.hpp"

#include <algorithm>
#include <string>

#include "scheduler/cost/all_to_all.hpp"
#include "scheduler/cost/collectives.hpp"

namespace hexi {
inline namespace cost {
namespace {

int ring_size(const std::vector<RingRank>& ranks) {
  return static_cast<int>(ranks.size());
}

// The rank whose block rank i holds at ring step k: i - k, modulo P.
int visiting_rank(int i, int k, int p) {
  return ((i - k) % p + p) % p;
}

std::vector<std::int64_t> ring_lengths(const std::vector<RingRank>& ranks) {
  std::vector<std::int64_t> lengths;
  for (const auto& r : ranks) lengths.push_back(r.tokens);
  return lengths;
}

// Bytes of `tokens` tokens of K and V (or dK and dV) at `bytes` per element.
double kv_bytes(const AttentionShape& a, std::int64_t tokens, int bytes) {
  return 2.0 * static_cast<double>(tokens) * a.kv_heads * a.head_dim * bytes;
}

}  // namespace

std::vector<Kernel> token_wise_kernels(const Model& m, const TrainingConfig& t, double phi,
                                       double share, Recompute r, bool forward, bool backward) {
  std::vector<Kernel> out;
  const auto keep = [&out](const std::vector<Kernel>& ks) {
    for (const Kernel& k : ks) {
      if (k.cls != KernelClass::kAttention) out.push_back(k);
    }
  };
  for (Block b : {Block::kAttention, Block::kMlp}) {
    if (forward) keep(block_forward(m, t, b, 1, phi, share));
    if (backward) keep(block_backward(m, t, b, 1, phi, r, share));
  }
  return out;
}

Kernel attention_kernel(const AttentionShape& a, std::int64_t pairs, int heads, int kv,
                        std::int64_t queries, std::int64_t keys, int sequence, bool backward) {
  const double e = a.bytes_per_element, d = a.head_dim;
  Kernel k{backward ? "ring.attention.bwd" : "ring.attention", KernelClass::kAttention};
  k.flops = backward ? attention_backward_flops(pairs, heads, a.head_dim)
                     : attention_forward_flops(pairs, heads, a.head_dim);
  const double q_bytes = static_cast<double>(queries) * heads * d * e;
  const double kv_read = 2.0 * static_cast<double>(keys) * kv * d * e;
  k.bytes = backward ? 4 * q_bytes + 2 * kv_read : 2 * q_bytes + kv_read;
  k.m = heads;
  k.n = sequence;
  k.k = a.head_dim;
  k.backward = backward;
  return k;
}

namespace {

// Token-wise FLOPs of kernels: everything but the attention core.
double token_wise(const std::vector<Kernel>& ks) {
  double sum = 0;
  for (const auto& k : ks) {
    if (k.cls != KernelClass::kAttention) sum += k.flops;
  }
  return sum;
}

// The training config for one sequence of `tokens` tokens (the cost model's kernels and
// activations read seq_len).
TrainingConfig with_tokens(const TrainingConfig& t, std::int64_t tokens) {
  TrainingConfig out = t;
  out.seq_len = static_cast<int>(tokens);
  return out;
}

// `value(a, b)` of every ordered pair of distinct `devices` (group order); 0 on the diagonal.
Eigen::MatrixXd pair_matrix(const Cluster& cluster, const std::vector<int>& devices,
                            double (Cluster::*value)(int, int) const) {
  const int n = static_cast<int>(devices.size());
  Eigen::MatrixXd out = Eigen::MatrixXd::Zero(n, n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i != j) out(i, j) = (cluster.*value)(devices[i], devices[j]);
    }
  }
  return out;
}

}  // namespace

Result<std::vector<MirroredShard>> mirrored_layout(std::int64_t total,
                                                   const std::vector<std::int64_t>& lengths) {
  std::vector<MirroredShard> out;
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const std::int64_t l = lengths[i];
    if (l < 0 || l % 2 != 0) {
      return bad_input("mirrored layout: rank " + std::to_string(i) + " has " + std::to_string(l) +
                       " tokens; expected an even number >= 0");
    }
    const std::int64_t half = l / 2;
    out.push_back({{offset, offset + half}, {total - offset - half, total - offset}});
    offset += half;
  }
  if (2 * offset != total) {
    return bad_input("mirrored layout: the ranks' lengths sum to " + std::to_string(2 * offset) +
                     " tokens; expected the sequence's " + std::to_string(total));
  }
  return out;
}

std::int64_t causal_pairs(TokenRange r) {
  // (y^2 - x^2)/2 + (y - x)/2 = (y - x)(x + y + 1)/2, an integer.
  return r.size() * (r.begin + r.end + 1) / 2;
}

std::int64_t mirrored_rank_pairs(std::int64_t total, std::int64_t length) {
  return length / 2 * (total + 1);
}

std::int64_t mirrored_block_pairs(const std::vector<std::int64_t>& lengths, int query_rank,
                                  int key_rank) {
  const std::int64_t li = lengths[query_rank], lj = lengths[key_rank];
  if (query_rank != key_rank) return li * lj / 2;
  return li * li / 2 + li / 2;
}

double attention_forward_flops(std::int64_t pairs, int q_heads, int head_dim) {
  return 4.0 * head_dim * static_cast<double>(pairs) * q_heads;
}

double attention_backward_flops(std::int64_t pairs, int q_heads, int head_dim) {
  return kFlashBackwardRatio * attention_forward_flops(pairs, q_heads, head_dim);
}

double token_wise_forward_flops(const Model& m, const TrainingConfig& t, std::int64_t tokens) {
  const TrainingConfig one = with_tokens(t, tokens);
  return token_wise(block_forward(m, one, Block::kAttention, 1, 1.0)) +
         token_wise(block_forward(m, one, Block::kMlp, 1, 1.0));
}

double token_wise_backward_flops(const Model& m, const TrainingConfig& t, std::int64_t tokens,
                                 Recompute r) {
  const TrainingConfig one = with_tokens(t, tokens);
  return token_wise(block_backward(m, one, Block::kAttention, 1, 1.0, r)) +
         token_wise(block_backward(m, one, Block::kMlp, 1, 1.0, r));
}

double ring_forward_bytes(const AttentionShape& a, std::int64_t total, std::int64_t length) {
  return kv_bytes(a, total - length, a.bytes_per_element);
}

double ring_backward_bytes(const AttentionShape& a, std::int64_t total, std::int64_t length) {
  return kv_bytes(a, total - length, a.bytes_per_element) +
         kv_bytes(a, total, a.grad_bytes_per_element);
}

void set_ring_hops(const Cluster& cluster, const std::vector<int>& devices,
                   std::vector<RingRank>& ranks) {
  const int p = static_cast<int>(devices.size());
  for (int i = 0; i < p && p > 1; ++i) {
    const int from = devices[visiting_rank(i, 1, p)];
    ranks[i].recv_Bps = cluster.bandwidth(from, devices[i]);
    ranks[i].recv_latency_s = cluster.latency(from, devices[i]);
  }
}

std::vector<double> ring_step_times(const AttentionShape& a, const std::vector<RingRank>& ranks,
                                    bool backward) {
  const int p = ring_size(ranks);
  const std::vector<std::int64_t> lengths = ring_lengths(ranks);
  std::vector<double> steps(p, 0.0);
  for (int k = 0; k < p; ++k) {
    // Backward, step k's transfer carries the dK, dV of step k - 1 (none at step 0) and the
    // K, V of step k + 1 (none at the last step).
    const int step_bytes =
        (k + 1 < p ? a.bytes_per_element : 0) + (backward && k > 0 ? a.grad_bytes_per_element : 0);
    for (int i = 0; i < p; ++i) {
      const std::int64_t pairs = mirrored_block_pairs(lengths, i, visiting_rank(i, k, p));
      const double flops = backward ? attention_backward_flops(pairs, a.q_heads, a.head_dim)
                                    : attention_forward_flops(pairs, a.q_heads, a.head_dim);
      double transfer = 0;
      if (step_bytes > 0) {
        // The block arriving for step k + 1 (backward, the last step's dK, dV: the block
        // this rank's predecessor held at step k - 1, the one this rank holds at step k).
        const double bytes =
            kv_bytes(a, lengths[visiting_rank(i, std::min(k + 1, p - 1), p)], step_bytes);
        transfer = p2p_time(bytes, ranks[i].recv_Bps, ranks[i].recv_latency_s);
      }
      steps[k] = std::max({steps[k], flops / ranks[i].attention_flops_s, transfer});
    }
  }
  if (backward && p > 1) {  // every block's dK, dV come home
    double home = 0;
    for (int i = 0; i < p; ++i) {
      const double bytes = kv_bytes(a, lengths[i], a.grad_bytes_per_element);
      home = std::max(home, p2p_time(bytes, ranks[i].recv_Bps, ranks[i].recv_latency_s));
    }
    steps.push_back(home);
  }
  return steps;
}

double ring_time(const AttentionShape& a, const std::vector<RingRank>& ranks, bool backward) {
  double sum = 0;
  for (double s : ring_step_times(a, ranks, backward)) sum += s;
  return sum;
}

int kv_heads_needed(const AttentionShape& a, int first_head, int count) {
  if (count <= 0) return 0;
  const int group = a.q_heads / a.kv_heads;  // query heads per kv head
  return (first_head + count - 1) / group - first_head / group + 1;
}

std::vector<int> group_kv_heads(const AttentionShape& a, const std::vector<int>& heads) {
  std::vector<int> kv;
  int first = 0;
  for (int h : heads) {
    kv.push_back(kv_heads_needed(a, first, h));
    first += h;
  }
  return kv;
}

Eigen::MatrixXd ulysses_qkv_bytes(const AttentionShape& a, const UlyssesGroup& g) {
  const int n = static_cast<int>(g.shards.size());
  const std::vector<int> kv = group_kv_heads(a, g.heads);
  Eigen::MatrixXd bytes = Eigen::MatrixXd::Zero(n, n);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < n; ++i) {
      if (i == j) continue;
      bytes(j, i) = static_cast<double>(g.shards[j]) * (g.heads[i] + 2 * kv[i]) * a.head_dim *
                    a.bytes_per_element;
    }
  }
  return bytes;
}

Eigen::MatrixXd ulysses_output_bytes(const AttentionShape& a, const UlyssesGroup& g) {
  const int n = static_cast<int>(g.shards.size());
  Eigen::MatrixXd bytes = Eigen::MatrixXd::Zero(n, n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      bytes(i, j) =
          static_cast<double>(g.shards[j]) * g.heads[i] * a.head_dim * a.bytes_per_element;
    }
  }
  return bytes;
}

double all_to_all_time(const Eigen::MatrixXd& bytes, const Eigen::MatrixXd& bandwidth_Bps,
                       const Eigen::MatrixXd& latency_s) {
  const Eigen::Index n = bytes.rows();
  double slowest = 0, latency = 0;
  for (Eigen::Index i = 0; i < n; ++i) {
    double send = 0, recv = 0;
    for (Eigen::Index j = 0; j < n; ++j) {
      if (i == j) continue;
      if (bytes(i, j) > 0) send += bytes(i, j) / bandwidth_Bps(i, j);
      if (bytes(j, i) > 0) recv += bytes(j, i) / bandwidth_Bps(j, i);
      if (bytes(i, j) > 0) latency = std::max(latency, latency_s(i, j));
    }
    slowest = std::max({slowest, send, recv});
  }
  return slowest + latency;
}

Eigen::MatrixXd group_bandwidths(const Cluster& cluster, const std::vector<int>& devices) {
  return pair_matrix(cluster, devices, &Cluster::bandwidth);
}

Eigen::MatrixXd group_latencies(const Cluster& cluster, const std::vector<int>& devices) {
  return pair_matrix(cluster, devices, &Cluster::latency);
}

ModelStates model_state_bytes(double params, int bytes_per_element, int zero_stage, int shards) {
  const double e = bytes_per_element, n = std::max(shards, 1);
  ModelStates s;
  s.weights = e * params / (zero_stage >= 3 ? n : 1);
  s.gradients = e * params / (zero_stage >= 2 ? n : 1);
  s.optimizer = (16 - 2 * e) * params / (zero_stage >= 1 ? n : 1);
  return s;
}

SequenceMemory sequence_device_memory(const Model& m, const TrainingConfig& t,
                                      const AttentionShape& a, const SequenceDeviceShape& s,
                                      Recompute r) {
  SequenceMemory mem;
  mem.states = model_state_bytes(s.params, t.bytes_per_element(), s.zero_stage, s.zero_shards);
  if (s.tensor) {
    TrainingConfig sp = with_tokens(t, s.group_tokens);
    sp.sequence_parallel = true;
    mem.activations = s.layers * activation_bytes_per_layer(m, sp, 1, s.tp, s.phi, r);
  } else {
    mem.activations =
        s.layers * activation_bytes_per_layer(m, with_tokens(t, s.shard_tokens), 1, 1, 1.0, r);
  }
  // Double-buffered blocks: K, V forward; K, V plus dK, dV in the backward (the peak).
  AttentionShape mine = a;
  mine.kv_heads = s.kv_heads;
  mem.ring_buffers =
      2 * kv_bytes(mine, s.ring_block_tokens, a.bytes_per_element + a.grad_bytes_per_element);
  if (!s.tensor) {
    mem.ulysses_buffers = static_cast<double>(s.group_tokens) * (2 * s.q_heads + 2 * s.kv_heads) *
                          a.head_dim * a.bytes_per_element;
  }
  mem.reserve = t.reserve_gib * kGiB;
  return mem;
}

}  // namespace cost
}  // namespace hexi
