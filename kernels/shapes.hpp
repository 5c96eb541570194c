#pragma once
// Shapes of a Llama-style decoder and of one tensor-parallel (TP) shard of it.
//
// Tensor layout conventions for all of kernels/ (CPU reference and CUDA alike):
// - Row-major, contiguous, no padding. The innermost (last) index varies fastest.
// - Activations are (n, features) with n = b*s tokens, token index i = bi*s + t: a
//   micro-batch of b sequences of s tokens, sequence-major. Per-head activations are
//   (b, s, heads, d): the projection output (n, heads*d) read with heads inside tokens.
// - A linear layer's weight is (out_features, in_features), as in PyTorch: y = x W^T.
// - Vectors (norm gains) are (features).
//
// Notation as in scheduler/cost/cost_model.hpp: b micro-batch, s sequence, h hidden,
// f ffn, a query heads, k kv heads, d = h/a, g = a/k query heads per kv head, V vocab.

#include <cstddef>
#include <string>

namespace hexi::kernels {

// Shape of the whole model (tiny-llama in scenarios/models.json: 4, 64, 172, 4, 2, 256).
struct LlamaDims {
  int layers = 0;
  int hidden = 0;               // h
  int ffn = 0;                  // f, SwiGLU inner width
  int heads = 0;                // a, query heads
  int kv_heads = 0;             // k, key/value heads (grouped-query attention; k divides a)
  int vocab = 0;                // V
  double norm_eps = 1e-5;       // RMSNorm epsilon (Llama 2)
  double rope_theta = 10000.0;  // RoPE base (Llama 2)
  // Mixture of experts (experts > 0): every layer's MLP block routes each token to top_k
  // of `experts` SwiGLU experts of width ffn, plus shared experts of total width
  // shared_ffn that see every token (blocks.hpp, "MoE MLP block").
  int experts = 0;
  int top_k = 0;
  int shared_ffn = 0;

  int head_dim() const { return hidden / heads; }      // d
  int group_size() const { return heads / kv_heads; }  // g
  bool is_moe() const { return experts > 0; }
};

// Empty when the dims are usable, otherwise what is wrong (e.g. "hidden 63 is not a
// multiple of heads 4").
std::string validate_dims(const LlamaDims& d);

// What one TP rank holds of every layer (Megatron-LM, Shoeybi et al. 2019):
// - query heads [head_begin, head_end): rows of Wq/Wk/Wv (column-parallel) and the same
//   columns of Wo (row-parallel). A shard is made of whole KV groups, or lies inside one
//   KV group; in the latter case that KV head is replicated on every rank whose heads
//   fall into its group (see kv_begin below and blocks.hpp for its gradient).
// - FFN columns [ffn_begin, ffn_end): rows of W_gate/W_up, columns of W_down.
// - vocabulary rows [vocab_begin, vocab_end) of the embedding table and the head.
// - Mixture of experts: routed experts [expert_begin, expert_end), each by its FFN columns
//   [ffn_begin, ffn_end) (by columns: every expert, a column range; whole experts: a range
//   of experts, every column), and shared-expert columns [shared_begin, shared_end).
//   Either expert range may be empty on a rank (it holds no routed or shared expert).
// Norm gains and the router are replicated on every rank. The single-process model is
// full_shard().
struct TpShard {
  int head_begin = 0;
  int head_end = 0;
  int ffn_begin = 0;
  int ffn_end = 0;
  int vocab_begin = 0;
  int vocab_end = 0;
  int expert_begin = 0;
  int expert_end = 0;
  int shared_begin = 0;
  int shared_end = 0;

  int heads() const { return head_end - head_begin; }
  int ffn() const { return ffn_end - ffn_begin; }
  int vocab() const { return vocab_end - vocab_begin; }
  int experts() const { return expert_end - expert_begin; }
  int shared() const { return shared_end - shared_begin; }
  // Written out (not "= default"): the CUDA sources that include this header are C++17.
  bool operator==(const TpShard& o) const {
    return head_begin == o.head_begin && head_end == o.head_end && ffn_begin == o.ffn_begin &&
           ffn_end == o.ffn_end && vocab_begin == o.vocab_begin && vocab_end == o.vocab_end &&
           expert_begin == o.expert_begin && expert_end == o.expert_end &&
           shared_begin == o.shared_begin && shared_end == o.shared_end;
  }
};

// The shard holding everything (TP degree 1).
TpShard full_shard(const LlamaDims& d);

// Rank `rank` of an even TP split of degree tp: heads in equal contiguous ranges
// (needs a % tp == 0, and either k % tp == 0 or tp % k == 0 so that shards respect KV
// groups); FFN columns and vocabulary rows in contiguous ranges
// [floor(x*rank/tp), floor(x*(rank+1)/tp)) (uneven when tp does not divide them). A
// mixture of experts' routed experts are split by columns (every expert on every rank)
// and its shared experts' columns as the FFN's.
TpShard tp_shard(const LlamaDims& d, int rank, int tp);

// Empty when `s` is a valid shard of `d` (ranges inside the model, non-empty, heads made
// of whole KV groups or inside one KV group; a mixture of experts' ranges inside the
// model and, when the shard holds some routed expert, a non-empty column range; a dense
// model's expert ranges empty), otherwise what is wrong.
std::string validate_shard(const LlamaDims& d, const TpShard& s);
// Empty when tp_shard(d, r, tp) is defined for every rank r, otherwise why not.
std::string validate_tp_degree(const LlamaDims& d, int tp);

// KV heads a shard needs: [kv_begin, kv_end). One KV head when the shard lies inside a
// group (replicated KV head), else the shard's whole groups.
int kv_begin(const LlamaDims& d, const TpShard& s);
int kv_end(const LlamaDims& d, const TpShard& s);

// TP ranks of an even split (tp_shard) that share rank's KV heads: [first, first+count).
// count == 1 unless tp > k, where count = tp/k ranks hold one replicated KV head and
// their Wk/Wv gradients are partial sums (blocks.hpp).
struct RankRange {
  int first = 0;
  int count = 1;
};
RankRange kv_sharers(const LlamaDims& d, int rank, int tp);

// One block call: a micro-batch of `batch` sequences of `seq` tokens on one shard.
struct BlockShape {
  LlamaDims dims;
  TpShard shard;
  int batch = 1;  // b
  int seq = 1;    // s
  // Mixed precision (bf16): every activation and activation-gradient tensor the block
  // writes is rounded to bfloat16 (blocks.hpp, "Precision"); weights must already be
  // bf16 values. false: everything float32.
  bool bf16 = false;

  int tokens() const { return batch * seq; }                                    // n = b*s
  int head_dim() const { return dims.head_dim(); }                              // d
  int q_heads() const { return shard.heads(); }                                 // local query heads
  int kv_heads() const { return kv_end(dims, shard) - kv_begin(dims, shard); }  // local
  int q_width() const { return q_heads() * head_dim(); }    // columns of local Q
  int kv_width() const { return kv_heads() * head_dim(); }  // columns of local K, V
  int ffn() const { return shard.ffn(); }                   // local FFN columns
  int experts() const { return shard.experts(); }           // local routed experts
  int shared() const { return shard.shared(); }             // local shared-expert columns
  int vocab() const { return shard.vocab(); }               // local vocabulary rows
};

}  // namespace hexi::kernels
