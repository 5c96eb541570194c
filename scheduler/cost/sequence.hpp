#pragma once
// Asymmetric context parallelism (a ring of uneven token shards) and head parallelism (a
// ragged Ulysses all-to-all): the closed-form work, bytes, times and memory of one layer
// (HexiSeq, arXiv 2605.07569).
//
// Notation: S tokens of one sequence, ring ranks i with L_i tokens (even, sum S), d head
// dim, n_q / n_kv query / kv heads, B bytes per element, B_g bytes per gradient element.
//
// Mirrored layout (the zig-zag split generalised to uneven lengths, Hetu's symmetric
// split): rank i holds L_i/2 tokens of the front half, in rank order from token 0, and
// L_i/2 tokens of the back half, in rank order from token S backwards. Causal pairs
// (query q, key k <= q):
//   rank i, all keys          L_i (S + 1) / 2              exactly, whatever the other L_j
//   block (i, j), j != i      L_i L_j / 2                  (one ring step)
//   block (i, i)              L_i^2 / 2 + L_i / 2          (the diagonal step)
// so attention work is linear in L_i and the split is a linear / integer program.
//
// FLOP convention (flash-style kernels, no s^2 memory): forward 4 d FLOPs per pair per
// query head (QK^T and PV, 2 d each); backward 2.5x the forward (recomputes QK^T: 5
// GEMM-sized products instead of 2). cost_model's "attention.bwd" uses Megatron's 2x.

#include <cstdint>
#include <vector>

#include "scheduler/cost/cost_model.hpp"
#include "topologies/cluster.hpp"
#include "topologies/status.hpp"

namespace hexi {
inline namespace cost {

// Tokens [begin, end) of the sequence.
struct TokenRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const { return end - begin; }
  bool contains(std::int64_t token) const { return begin <= token && token < end; }
};

// One ring rank's tokens: a front range and its mirrored back range, L_i/2 each.
struct MirroredShard {
  TokenRange front;
  TokenRange back;
  std::int64_t tokens() const { return front.size() + back.size(); }
};

// The mirrored layout of `lengths` (L_i, in ring order) over `total` = S tokens. Bad input
// naming the rank when a length is negative or odd, or the lengths do not sum to S.
Result<std::vector<MirroredShard>> mirrored_layout(std::int64_t total,
                                                   const std::vector<std::int64_t>& lengths);

// Causal pairs of a contiguous range [x, y): (y^2 - x^2)/2 + (y - x)/2.
std::int64_t causal_pairs(TokenRange r);
// Causal pairs of rank i's queries against every key: L_i (S + 1) / 2 (L_i even).
std::int64_t mirrored_rank_pairs(std::int64_t total, std::int64_t length);
// Causal pairs of query rank i against key rank j (one ring step): L_i L_j / 2 off the
// diagonal, L_i^2/2 + L_i/2 on it.
std::int64_t mirrored_block_pairs(const std::vector<std::int64_t>& lengths, int query_rank,
                                  int key_rank);

// The heads one layer's attention carries on a ring or inside an all-to-all group.
struct AttentionShape {
  int head_dim = 0;                // d
  int q_heads = 0;                 // n_q
  int kv_heads = 0;                // n_kv (GQA: n_q / n_kv query heads share one)
  int bytes_per_element = 2;       // B: Q, K, V, O (bf16)
  int grad_bytes_per_element = 2;  // B_g: dK, dV on the ring (bf16 Megatron, fp32 zhuzilin)
};

// Flash-style backward over forward FLOPs.
inline constexpr double kFlashBackwardRatio = 2.5;

// Attention FLOPs of `pairs` causal pairs over `q_heads` query heads: forward 4 d per pair
// per head; backward kFlashBackwardRatio times that.
double attention_forward_flops(std::int64_t pairs, int q_heads, int head_dim);
double attention_backward_flops(std::int64_t pairs, int q_heads, int head_dim);

// Token-wise FLOPs of one layer (norms, QKV and output projections, MLP: everything but the
// attention core) for `tokens` tokens of one sequence, from cost_model's kernels: linear in
// tokens. The backward includes recompute `r` (full replays the forward's token-wise part).
double token_wise_forward_flops(const Model& m, const TrainingConfig& t, std::int64_t tokens);
double token_wise_backward_flops(const Model& m, const TrainingConfig& t, std::int64_t tokens,
                                 Recompute r);

// One layer's token-wise kernels (both blocks but the attention core) for one sequence of
// t.seq_len tokens on a device holding `phi` of the weights and running its norms on `share`
// of the tokens, block by block: its forward where `forward`, its backward with recompute `r`
// (the replay included) where `backward`.
std::vector<Kernel> token_wise_kernels(const Model& m, const TrainingConfig& t, double phi,
                                       double share, Recompute r, bool forward, bool backward);

// The attention of `heads` query heads (`kv` kv heads) of `queries` tokens against `keys`
// keys over `pairs` causal pairs as one flash-style kernel (no s^2 memory): reads Q, K, V (and
// O, dO backward), writes O (dQ, dK, dV); shaped for the device model at `sequence` tokens.
Kernel attention_kernel(const AttentionShape& a, std::int64_t pairs, int heads, int kv,
                        std::int64_t queries, std::int64_t keys, int sequence, bool backward);

// ---- ring (context parallel) ------------------------------------------------------------
// Rank i receives from rank i-1 (ring order); at step k (0..P-1) it computes its queries
// against the K/V block of rank i-k while receiving the block of rank i-k-1.
// Bytes rank i receives per layer:
//   forward   K, V of every other block                      2 (S - L_i) n_kv d B
//   backward  K, V again, plus dK, dV of every block         2 (S - L_i) n_kv d B
//             (each block's gradient travels P hops and        + 2 S n_kv d B_g
//             comes home: rank i receives S tokens' worth)
double ring_forward_bytes(const AttentionShape& a, std::int64_t total, std::int64_t length);
double ring_backward_bytes(const AttentionShape& a, std::int64_t total, std::int64_t length);

// What the ring needs of each rank.
struct RingRank {
  std::int64_t tokens = 0;       // L_i
  double attention_flops_s = 0;  // achieved attention FLOP/s (peak x attention efficiency)
  double recv_Bps = 0;           // bytes/s of the hop from the previous rank
  double recv_latency_s = 0;     // s, that hop's latency
};

// The hops of a ring over `devices` (in ring order): rank i's recv_Bps / recv_latency_s
// are the path from devices[i-1] to devices[i] in the cluster's bandwidth matrix.
void set_ring_hops(const Cluster& cluster, const std::vector<int>& devices,
                   std::vector<RingRank>& ranks);

// Time (s) of each ring step of one layer, forward or backward. The ring runs in lockstep
// (the send of step k+1 forwards the block received in step k): step k lasts the slowest
// rank's max(compute of the visiting block, transfer of the next block); the last step
// has no transfer. Backward, compute 2.5x; each step's dK, dV leave when it ends, beside
// the next K, V (ring-flash-attention's loop): step 0 carries K, V, steps 1..P-2 K, V, dK,
// dV, the last step the dK, dV of step P-2, and one extra step brings every block's dK, dV
// home.
std::vector<double> ring_step_times(const AttentionShape& a, const std::vector<RingRank>& ranks,
                                    bool backward);
double ring_time(const AttentionShape& a, const std::vector<RingRank>& ranks, bool backward);

// ---- ragged Ulysses all-to-all ----------------------------------------------------------
// A group of devices with token shards s_i (sum T_g) and query heads h_i (sum n_q,
// contiguous ranges in rank order). Before attention device i needs, for its heads, the
// whole group's Q, K, V; after it, it returns O of its heads to each token owner.
struct UlyssesGroup {
  std::vector<std::int64_t> shards;  // s_i, tokens
  std::vector<int> heads;            // h_i, query heads
};

// Kv heads a device with query heads [first, first + count) needs: every GQA group the
// range touches (a range splitting a group replicates that kv head). 0 when count is 0.
int kv_heads_needed(const AttentionShape& a, int first_head, int count);
// kv(h_i) for every device of the group.
std::vector<int> group_kv_heads(const AttentionShape& a, const std::vector<int>& heads);

// ---- memory per device ------------------------------------------------------------------
// Model states of `params` parameters under mixed-precision Adam (16 bytes/param: e
// weights, e gradients, 16 - 2e fp32 master + moments) sharded over `shards` devices:
// ZeRO 0 none; 1 optimizer; 2 optimizer + gradients; 3 everything.
struct ModelStates {
  double weights = 0;    // bytes
  double gradients = 0;  // bytes
  double optimizer = 0;  // bytes
  double total() const { return weights + gradients + optimizer; }
};
ModelStates model_state_bytes(double params, int bytes_per_element, int zero_stage, int shards);

// What one device of a sequence mesh holds for `layers` layers of one sequence.
struct SequenceDeviceShape {
  int layers = 0;
  double params = 0;                   // parameters before ZeRO (e.g. stage_params)
  int zero_stage = 0;                  // 0..3
  int zero_shards = 1;                 // devices the states are sharded over
  std::int64_t shard_tokens = 0;       // s_i: token-wise activations
  std::int64_t group_tokens = 0;       // T_g: the all-to-all's full-group sequence
  int q_heads = 0;                     // h_i after the all-to-all
  int kv_heads = 0;                    // kv(h_i)
  std::int64_t ring_block_tokens = 0;  // longest block on the ring (0: no ring)
  // A tensor-parallel group's device (sequence_layout.hpp): `tp` devices, `phi` of the
  // weights; its activations are a TP rank's under sequence parallelism for group_tokens,
  // and it has no all-to-all buffers.
  bool tensor = false;
  int tp = 1;
  double phi = 1.0;
};

struct SequenceMemory {
  ModelStates states;
  double activations = 0;      // bytes: layers x activation_bytes_per_layer(s_i)
  double ring_buffers = 0;     // bytes: 2 blocks of K, V (+ dK, dV) of the longest block
  double ulysses_buffers = 0;  // bytes: full-group Q, K, V, O of its heads, one layer
  double reserve = 0;          // bytes
  double total() const {
    return states.total() + activations + ring_buffers + ulysses_buffers + reserve;
  }
};

// Activations: cost_model's per-layer figure for s_i tokens under recompute `r` (selective
// with flash: ~34 s_i h bytes for GPT shapes; full: e s_i h, the layer inputs); a tensor
// group's device: a TP rank's (tp, phi) for T_g tokens under sequence parallelism.
SequenceMemory sequence_device_memory(const Model& m, const TrainingConfig& t,
                                      const AttentionShape& a, const SequenceDeviceShape& s,
                                      Recompute r);

}  // namespace cost
}  // namespace hexi
