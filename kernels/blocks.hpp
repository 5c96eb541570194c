#pragma once
// The blocks of a Llama decoder on one tensor-parallel shard (Megatron-LM, Shoeybi et
// al. 2019), as the engine calls them between its communication ops. Backend-neutral:
// these views hold host pointers for the CPU functions (blocks_cpu.hpp) and device
// pointers for the CUDA ones (cuda_kernels.hpp); the caller owns all memory.
//
// A decoder layer is x -> x + Attn(RMSNorm(x)) -> . + Mlp(RMSNorm(.)). Each block
// function computes its shard's *partial* output before the TP all-reduce:
//
//   forward:  y_partial = block(x)                      x (n, h) replicated on the TP group
//             engine:   y = x + all_reduce_sum(y_partial)          (add_inplace)
//   backward: dx_partial, grads += block_backward(x, dy)  dy = dL/dy (n, h) replicated
//             engine:   dx = dy + all_reduce_sum(dx_partial)
//
// Column-parallel Wq/Wk/Wv and W_gate/W_up, row-parallel Wo and W_down: the forward
// needs one all-reduce per block and the backward one, as in the cost model.
//
// Gradients that are partial sums over ranks (the engine must add them up):
// - Norm gains (attn_norm, mlp_norm, final_norm) are replicated, but each rank's
//   gradient only sees its shard's part of dL/d(normed x) (the norm backward runs before
//   the backward all-reduce so that a block is one compute op followed by one
//   collective). The gradient is linear in that, so the sum over the TP group is exact:
//   all-reduce norm-gain gradients over the TP group once per step, before the optimizer
//   (Megatron does the same for layernorm gains under sequence parallelism).
// - A replicated KV head (TP degree > k, kv_sharers() > 1): each rank's Wk/Wv gradient
//   only holds its own query heads' contribution; sum it over the kv_sharers() ranks
//   once per step. The dx contributions need nothing extra: they are summed by the
//   block's backward all-reduce like every other column-parallel term.
// With one shard (TP 1) both sums are over one rank: the gradients are complete.
//
// The embedding and the head are vocab-parallel:
//   embedding: out_partial (rows of tokens outside the shard are 0) -> all-reduce SUM.
//   head:      head_forward -> all-reduce MAX(row_max) -> head_loss_partials ->
//              all-reduce SUM(partials) -> head_loss (per-token loss) and head_backward
//              -> dx_partial -> all-reduce SUM (+ the final norm gain, as above).
//
// Precision (BlockShape::bf16). float32 runs compute and store everything in float32.
// bf16 runs are mixed precision as Megatron-LM's --bf16 (Micikevicius et al. 2018): the
// caller passes bf16 weights (float32 master weights stay with the optimizer) and bf16
// inputs; every activation and activation gradient a block writes (normed inputs, Q/K/V,
// scores, probabilities, attention output, gate/up/act, logits, partial outputs and their
// gradients) is rounded to bfloat16 when written. GEMMs read those bf16 values and
// accumulate in float32 (exact products: what a bf16 GEMM with fp32 compute returns up to
// summation order); norms, RoPE, softmax, SwiGLU and the loss compute in float32 from bf16
// inputs and round their output once (fused kernels). Weight gradients are accumulated in
// float32 (Megatron's main_grad with gradient-accumulation fusion), never rounded. The CPU
// backend stores the bf16 values in float32 buffers; the rounding points are the contract.

#include <cstddef>

#include "kernels/shapes.hpp"

namespace hexi::kernels {

// ---- attention block: RMSNorm -> Q,K,V -> RoPE -> causal GQA attention -> Wo --------
template <class T>
struct AttentionWeights {
  const T* norm = nullptr;  // (h)          attn_norm gain, replicated
  const T* wq = nullptr;    // (hq*d, h)    rows [head_begin*d, head_end*d) of Wq
  const T* wk = nullptr;    // (hk*d, h)    rows [kv_begin*d, kv_end*d) of Wk
  const T* wv = nullptr;    // (hk*d, h)    rows [kv_begin*d, kv_end*d) of Wv
  const T* wo = nullptr;    // (h, hq*d)    columns [head_begin*d, head_end*d) of Wo
};
template <class T>
struct AttentionGrads {  // same shapes as AttentionWeights; accumulated (+=)
  T* norm = nullptr;
  T* wq = nullptr;
  T* wk = nullptr;
  T* wv = nullptr;
  T* wo = nullptr;
};
// What the forward keeps for the backward of one micro-batch.
template <class T>
struct AttentionSaved {
  T* rstd = nullptr;   // (n)            1/rms of each token of x
  T* xn = nullptr;     // (n, h)         normalized input
  T* q = nullptr;      // (b, s, hq, d)  after RoPE
  T* k = nullptr;      // (b, s, hk, d)  after RoPE
  T* v = nullptr;      // (b, s, hk, d)
  T* probs = nullptr;  // (b, hq, s, s)  causal softmax
  T* att = nullptr;    // (b, s, hq, d)  attention output, input of Wo
};

// ---- the attention block split around its core (sequence meshes) ---------------------
// A sequence mesh (context + head parallelism) runs the attention block in three parts with
// communication between them: attention_qkv_forward on a device's token shard (RMSNorm, Q,
// K, V of every head, RoPE at the tokens' global positions), the causal attention core
// blockwise on exchanged heads and key/value blocks (attention_blockwise.hpp), and
// attention_out_forward (Wo) on the shard again. Shapes for n = sh.tokens() tokens:
//   pos (n) global token positions; rstd (n), xn (n, h) saved; q (n, hq*d), k, v (n, hk*d);
//   att (n, hq*d) the attention output; y (n, h).
// The backward of the split runs attention_out_backward (datt and dWo), the core's backward,
// then attention_qkv_backward with dq, dk (RoPE-rotated, turned back in place) and dv.
// Float32 only (no bf16 rounding points yet).

// ---- MLP block: RMSNorm -> W_gate, W_up -> SwiGLU -> W_down --------------------------
// A mixture of experts (dims.is_moe()) replaces it by the MoE MLP block, with the same
// protocol (partial output, one all-reduce each way):
//   xn = RMSNorm(x); p = softmax(xn router^T) over the E experts; each token takes its
//   top_k experts by p (ties to the lower index) with gates p_e / sum of its top_k p
//   (Mixtral's router); y = sum over its experts e of gate_e * Expert_e(xn)
//   + Shared(xn), every expert and the shared experts SwiGLU MLPs.
// A rank runs its routed experts [expert_begin, expert_end) on the tokens routed to them,
// each by its FFN columns [ffn_begin, ffn_end), and its shared-expert columns: its output
// is a partial sum, as a dense MLP's column shard is (Megatron-LM's all-gather token
// dispatcher, whole experts or expert tensor parallelism alike). The router is
// replicated and every rank routes identically; its gradient is a partial sum over the
// TP group (linear in each rank's partial output), like a norm gain's.
// Expert weights of a rank: e_gate, e_up (El, fl, h) and e_down (El, h, fl), expert by
// expert, El = shard.experts(), fl = shard.ffn(); shared s_gate, s_up (fs, h), s_down
// (h, fs), fs = shard.shared(). A dense model leaves them null (and router); an MoE
// model leaves w_gate, w_up, w_down null.
template <class T>
struct MlpWeights {
  const T* norm = nullptr;    // (h)      mlp_norm gain, replicated
  const T* w_gate = nullptr;  // (fl, h)  rows [ffn_begin, ffn_end) of W_gate
  const T* w_up = nullptr;    // (fl, h)  rows [ffn_begin, ffn_end) of W_up
  const T* w_down = nullptr;  // (h, fl)  columns [ffn_begin, ffn_end) of W_down
  const T* router = nullptr;  // (E, h)   MoE router, replicated
  const T* e_gate = nullptr;  // (El, fl, h)
  const T* e_up = nullptr;    // (El, fl, h)
  const T* e_down = nullptr;  // (El, h, fl)
  const T* s_gate = nullptr;  // (fs, h)
  const T* s_up = nullptr;    // (fs, h)
  const T* s_down = nullptr;  // (h, fs)
};
template <class T>
struct MlpGrads {
  T* norm = nullptr;
  T* w_gate = nullptr;
  T* w_up = nullptr;
  T* w_down = nullptr;
  T* router = nullptr;
  T* e_gate = nullptr;
  T* e_up = nullptr;
  T* e_down = nullptr;
  T* s_gate = nullptr;
  T* s_up = nullptr;
  T* s_down = nullptr;
};
// A dense block's gate/up/act are (n, fl); an MoE block's are the shared experts' (n, fs),
// and it keeps its routing and its routed experts' rows too: the rows of the tokens routed
// to its experts, expert by expert, tokens in order within an expert (m <= n*top_k rows).
template <class T>
struct MlpSaved {
  T* rstd = nullptr;    // (n)
  T* xn = nullptr;      // (n, h)
  T* gate = nullptr;    // (n, fl)  xn W_gate^T
  T* up = nullptr;      // (n, fl)  xn W_up^T
  T* act = nullptr;     // (n, fl)  silu(gate) * up, input of W_down
  T* probs = nullptr;   // (n, E)        router softmax
  T* chosen = nullptr;  // (n, top_k)    the experts chosen, as exact small integers
  T* gates = nullptr;   // (n, top_k)    their gates
  T* e_gate = nullptr;  // (n*top_k, fl) routed rows
  T* e_up = nullptr;    // (n*top_k, fl)
  T* e_act = nullptr;   // (n*top_k, fl)
  T* e_out = nullptr;   // (n*top_k, h)  each routed row's expert output (before its gate)
};

// ---- head: final RMSNorm -> logits over the vocab shard -> cross-entropy -------------
template <class T>
struct HeadWeights {
  const T* norm = nullptr;  // (h)      final_norm gain, replicated
  const T* w = nullptr;     // (vl, h)  rows [vocab_begin, vocab_end) of the head
};
template <class T>
struct HeadGrads {
  T* norm = nullptr;
  T* w = nullptr;
};
template <class T>
struct HeadSaved {
  T* rstd = nullptr;      // (n)
  T* xn = nullptr;        // (n, h)
  T* logits = nullptr;    // (n, vl)
  T* row_max = nullptr;   // (n)     local max, then the all-reduced (MAX) global max
  T* partials = nullptr;  // (n, 2)  [sum exp(logit - max), target logit], then all-reduced (SUM)
};

// Elements of one micro-batch's saved activations, and views carved out of one
// caller-owned buffer of that many elements (host or device memory alike).
std::size_t attention_saved_size(const BlockShape& s);
std::size_t mlp_saved_size(const BlockShape& s);
std::size_t head_saved_size(const BlockShape& s);
template <class T>
AttentionSaved<T> carve_attention_saved(const BlockShape& s, T* base);
template <class T>
MlpSaved<T> carve_mlp_saved(const BlockShape& s, T* base);
template <class T>
HeadSaved<T> carve_head_saved(const BlockShape& s, T* base);

}  // namespace hexi::kernels
