#pragma once
// CPU reference of the TP-shard blocks (semantics and the engine's protocol around
// them: blocks.hpp). Composed from cpu_kernels.hpp. x, dy, y_partial, dx_partial are
// (n, h) with n = shape.tokens().

#include "kernels/blocks.hpp"
#include "kernels/shapes.hpp"

namespace hexi::kernels::cpu {

// y_partial (n, h) = this shard's share of Attn(RMSNorm(x)); fills `saved`.
template <class T>
void attention_block_forward(const BlockShape& shape, const AttentionWeights<T>& w, const T* x,
                             const AttentionSaved<T>& saved, T* y_partial);
// dx_partial (n, h) overwritten; grads accumulated. dy = dL/d(block output).
template <class T>
void attention_block_backward(const BlockShape& shape, const AttentionWeights<T>& w,
                              const AttentionSaved<T>& saved, const T* x, const T* dy,
                              T* dx_partial, const AttentionGrads<T>& grads);

// The attention block split around its core (blocks.hpp, "sequence meshes").
template <class T>
void attention_qkv_forward(const BlockShape& shape, const AttentionWeights<T>& w, const T* x,
                           const int* pos, T* rstd, T* xn, T* q, T* k, T* v);
template <class T>
void attention_qkv_backward(const BlockShape& shape, const AttentionWeights<T>& w, const T* x,
                            const int* pos, const T* rstd, const T* xn, T* dq, T* dk, const T* dv,
                            T* dx_partial, const AttentionGrads<T>& grads);
template <class T>
void attention_out_forward(const BlockShape& shape, const T* wo, const T* att, T* y);
template <class T>
void attention_out_backward(const BlockShape& shape, const T* wo, const T* att, const T* dy,
                            T* datt, T* dwo);

template <class T>
void mlp_block_forward(const BlockShape& shape, const MlpWeights<T>& w, const T* x,
                       const MlpSaved<T>& saved, T* y_partial);
template <class T>
void mlp_block_backward(const BlockShape& shape, const MlpWeights<T>& w, const MlpSaved<T>& saved,
                        const T* x, const T* dy, T* dx_partial, const MlpGrads<T>& grads);

// out_partial (n, h): embedding rows of the tokens in this shard's vocabulary, else 0.
template <class T>
void embedding_block_forward(const BlockShape& shape, const T* table, const int* tokens,
                             T* out_partial);
// dtable (vl, h) += rows of dout (n, h) (the full, replicated gradient) of in-shard tokens.
template <class T>
void embedding_block_backward(const BlockShape& shape, const int* tokens, const T* dout, T* dtable);

// Final norm and logits shard; saved.row_max = the local row max (all-reduce MAX next).
template <class T>
void head_forward(const BlockShape& shape, const HeadWeights<T>& w, const T* x,
                  const HeadSaved<T>& saved);
// saved.partials from the global row max (all-reduce SUM next). targets (n) in [0, V).
template <class T>
void head_loss_partials(const BlockShape& shape, const HeadSaved<T>& saved, const int* targets);
// loss (n): per-token cross-entropy from the all-reduced max and partials.
template <class T>
void head_loss(const BlockShape& shape, const HeadSaved<T>& saved, T* loss);
// dx_partial (n, h) overwritten, grads accumulated; loss_scale = dObjective/dloss_i.
template <class T>
void head_backward(const BlockShape& shape, const HeadWeights<T>& w, const HeadSaved<T>& saved,
                   const T* x, const int* targets, double loss_scale, T* dx_partial,
                   const HeadGrads<T>& grads);

}  // namespace hexi::kernels::cpu
