#pragma once
// CPU reference kernels of a Llama-style decoder, forward and backward. These are the
// specification: plain loops, GEMMs through Eigen, never optimised beyond that: the fast paths are
// checked against it. The CUDA kernels in cuda_kernels.hpp have the same names and arguments (plus
// a leading cuda::Context&) and are tested against these.
//
// Conventions (see shapes.hpp for layouts):
// - T is float or double (double for finite-difference tests); explicit instantiations
//   live in the .cpp files.
// - Activation gradients (dx, dq, ...) are overwritten unless an `accumulate` flag says
//   otherwise. Parameter gradients (dw, dtable, ...) are always accumulated (+=), so
//   micro-batches sum into one gradient buffer that the caller zeroes once per step.
// - Pointers do not alias unless a comment says "in place".

#include <cstddef>

namespace hexi::kernels::cpu {

// ---- linear layers (GEMMs) --------------------------------------------------------
// out (n, m) = x (n, k) . w (m, k)^T
template <class T>
void matmul_forward(T* out, const T* x, const T* w, int n, int k, int m);
// dx (n, k) = dout (n, m) . w (m, k), or += when accumulate
template <class T>
void matmul_backward_input(T* dx, const T* dout, const T* w, int n, int k, int m, bool accumulate);
// dw (m, k) += dout (n, m)^T . x (n, k)
template <class T>
void matmul_backward_weight(T* dw, const T* dout, const T* x, int n, int k, int m);

// ---- RMSNorm (Zhang & Sennrich 2019): out = x / sqrt(mean(x^2) + eps) * w -----------
// out (n, h), rstd (n) = 1/sqrt(mean(x^2) + eps) saved for the backward, x (n, h), w (h)
template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int n, int h, double eps);
// dx (n, h) overwritten, dw (h) accumulated; dout (n, h)
template <class T>
void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd, int n,
                      int h);

// ---- rotary position embedding (Su et al. 2021), "rotate half" pairing -------------
// In place on x (b, s, heads, d): for i < d/2 the pair (x[i], x[i + d/2]) of the token
// at position t is rotated by the angle t * theta^(-2i/d). Positions are 0..s-1 in
// every sequence. The backward rotates by the opposite angle (a rotation's transpose).
template <class T>
void rope_forward(T* x, int b, int s, int heads, int d, double theta);
template <class T>
void rope_backward(T* dx, int b, int s, int heads, int d, double theta);
// The same at explicit positions: x (n, heads, d), token r at position pos[r] (a shard of a
// context-parallel layout, whose tokens are not 0..n-1).
template <class T>
void rope_forward_at(T* x, const int* pos, int n, int heads, int d, double theta);
template <class T>
void rope_backward_at(T* dx, const int* pos, int n, int heads, int d, double theta);

// ---- causal attention with grouped-query attention ----------------------------------
// q (b, s, hq, d), k and v (b, s, hk, d) with hq % hk == 0: query head j reads KV head
// j / (hq / hk). out (b, s, hq, d); probs (b, hq, s, s) softmax(q k^T / sqrt(d)) with
// the causal mask (row t has zeros after column t), saved for the backward.
// bf16: the scores, the probabilities and the output are rounded to bfloat16 as a bf16
// kernel writes them (softmax itself in T); the backward rounds dP, dS, dq, dk and dv.
template <class T>
void attention_forward(T* out, T* probs, const T* q, const T* k, const T* v, int b, int s, int hq,
                       int hk, int d, bool bf16 = false);
// dq (b, s, hq, d), dk and dv (b, s, hk, d) overwritten; dout (b, s, hq, d).
template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                        const T* probs, int b, int s, int hq, int hk, int d, bool bf16 = false);

// ---- SwiGLU (Shazeer 2020): out = silu(gate) * up, elementwise over n values ---------
template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, std::size_t n);
// dgate, dup (n) overwritten; dout (n)
template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, std::size_t n);

// ---- token embedding, vocab-parallel (Megatron) --------------------------------------
// table (vocab_end - vocab_begin, h) holds rows [vocab_begin, vocab_end) of the full
// table. out (n, h): row i = table[tokens[i] - vocab_begin], or zeros when the token is
// outside the shard (the TP all-reduce of the outputs then sums to the full lookup).
template <class T>
void embedding_forward(T* out, const int* tokens, const T* table, int n, int h, int vocab_begin,
                       int vocab_end);
// dtable (vocab_end - vocab_begin, h) += dout rows of the tokens inside the shard.
template <class T>
void embedding_backward(T* dtable, const T* dout, const int* tokens, int n, int h, int vocab_begin,
                        int vocab_end);

// ---- cross-entropy over a vocab-parallel logits shard --------------------------------
// logits (n, vl) hold columns [vocab_begin, vocab_begin + vl) of the full (n, V) logits.
// The softmax needs the whole row, so it is computed in pieces with the engine's
// communicator in between (Megatron's vocab-parallel cross-entropy):
//   1. logits_row_max       -> row_max (n)                 all-reduce MAX over TP
//   2. cross_entropy_partials -> partials (n, 2)           all-reduce SUM over TP
//        [sum_j exp(logit_j - row_max), target logit if the target is in the shard else 0]
//   3. cross_entropy_loss   -> loss (n) = row_max + log(sum) - target logit
//   4. cross_entropy_backward -> dlogits (n, vl) = (softmax - onehot(target)) * loss_scale
// With one shard holding all V columns the all-reduces are the identity.
template <class T>
void logits_row_max(T* row_max, const T* logits, int n, int vl);
template <class T>
void cross_entropy_partials(T* partials, const T* logits, const T* row_max, const int* targets,
                            int n, int vl, int vocab_begin);
template <class T>
void cross_entropy_loss(T* loss, const T* row_max, const T* partials, int n);
// loss_scale = d(objective)/d(loss_i), e.g. 1/(tokens in the global batch) for the mean.
template <class T>
void cross_entropy_backward(T* dlogits, const T* logits, const T* row_max, const T* partials,
                            const int* targets, int n, int vl, int vocab_begin, double loss_scale);

// ---- elementwise ---------------------------------------------------------------------
// y (n) += x (n): the residual connection after the TP all-reduce.
template <class T>
void add_inplace(T* y, const T* x, std::size_t n);

// ---- AdamW (Loshchilov & Hutter 2019), PyTorch's torch.optim.AdamW semantics --------
// step t >= 1 (bias correction). In place on param, m, v (n):
//   param -= lr * weight_decay * param
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   param -= lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
template <class T>
void adamw_update(T* param, const T* grad, T* m, T* v, std::size_t n, double lr, double beta1,
                  double beta2, double eps, double weight_decay, int step);

}  // namespace hexi::kernels::cpu
