// The TP-shard blocks composed from the CPU reference kernels (protocol: blocks.hpp).
#include "kernels/blocks_cpu.hpp"

#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/cpu_kernels.hpp"
#include "kernels/eigen_maps.hpp"

namespace hexi::kernels::cpu {
namespace {

std::size_t elems(int rows, int cols) {
  return static_cast<std::size_t>(rows) * cols;
}

// Mixed precision (sh.bf16): a tensor the block writes is stored as bf16 values. GEMMs
// read bf16 inputs and accumulate in T, as a bf16 GEMM with fp32 compute does.
template <class T>
void stored(const BlockShape& sh, T* x, std::size_t n) {
  if (sh.bf16) round_bf16(x, n);
}

}  // namespace

template <class T>
void attention_block_forward(const BlockShape& sh, const AttentionWeights<T>& w, const T* x,
                             const AttentionSaved<T>& sv, T* y_partial) {
  const int n = sh.tokens(), h = sh.dims.hidden, d = sh.head_dim();
  const int hq = sh.q_heads(), hk = sh.kv_heads();
  rmsnorm_forward(sv.xn, sv.rstd, x, w.norm, n, h, sh.dims.norm_eps);
  stored(sh, sv.xn, elems(n, h));
  matmul_forward(sv.q, sv.xn, w.wq, n, h, sh.q_width());
  matmul_forward(sv.k, sv.xn, w.wk, n, h, sh.kv_width());
  matmul_forward(sv.v, sv.xn, w.wv, n, h, sh.kv_width());
  stored(sh, sv.v, elems(n, sh.kv_width()));
  rope_forward(sv.q, sh.batch, sh.seq, hq, d, sh.dims.rope_theta);  // fused: one rounding
  rope_forward(sv.k, sh.batch, sh.seq, hk, d, sh.dims.rope_theta);
  stored(sh, sv.q, elems(n, sh.q_width()));
  stored(sh, sv.k, elems(n, sh.kv_width()));
  attention_forward(sv.att, sv.probs, sv.q, sv.k, sv.v, sh.batch, sh.seq, hq, hk, d, sh.bf16);
  matmul_forward(y_partial, sv.att, w.wo, n, sh.q_width(), h);
  stored(sh, y_partial, elems(n, h));
}

template <class T>
void attention_block_backward(const BlockShape& sh, const AttentionWeights<T>& w,
                              const AttentionSaved<T>& sv, const T* x, const T* dy, T* dx_partial,
                              const AttentionGrads<T>& g) {
  const int n = sh.tokens(), h = sh.dims.hidden, d = sh.head_dim();
  const int hq = sh.q_heads(), hk = sh.kv_heads(), qw = sh.q_width(), kw = sh.kv_width();
  AlignedVector<T> datt(elems(n, qw)), dq(elems(n, qw)), dk(elems(n, kw)), dv(elems(n, kw));
  AlignedVector<T> dxn(elems(n, h));
  matmul_backward_input(datt.data(), dy, w.wo, n, qw, h, false);
  stored(sh, datt.data(), datt.size());
  matmul_backward_weight(g.wo, dy, sv.att, n, qw, h);
  attention_backward(dq.data(), dk.data(), dv.data(), datt.data(), sv.q, sv.k, sv.v, sv.probs,
                     sh.batch, sh.seq, hq, hk, d, sh.bf16);
  rope_backward(dq.data(), sh.batch, sh.seq, hq, d, sh.dims.rope_theta);
  rope_backward(dk.data(), sh.batch, sh.seq, hk, d, sh.dims.rope_theta);
  stored(sh, dq.data(), dq.size());
  stored(sh, dk.data(), dk.size());
  // One fused QKV GEMM in a bf16 run: dxn accumulates in T and is rounded once.
  matmul_backward_input(dxn.data(), dq.data(), w.wq, n, h, qw, false);
  matmul_backward_input(dxn.data(), dk.data(), w.wk, n, h, kw, true);
  matmul_backward_input(dxn.data(), dv.data(), w.wv, n, h, kw, true);
  stored(sh, dxn.data(), dxn.size());
  matmul_backward_weight(g.wq, dq.data(), sv.xn, n, h, qw);
  matmul_backward_weight(g.wk, dk.data(), sv.xn, n, h, kw);
  matmul_backward_weight(g.wv, dv.data(), sv.xn, n, h, kw);
  rmsnorm_backward(dx_partial, g.norm, dxn.data(), x, w.norm, sv.rstd, n, h);
  stored(sh, dx_partial, elems(n, h));
}

template <class T>
void attention_qkv_forward(const BlockShape& sh, const AttentionWeights<T>& w, const T* x,
                           const int* pos, T* rstd, T* xn, T* q, T* k, T* v) {
  const int n = sh.tokens(), h = sh.dims.hidden, d = sh.head_dim();
  rmsnorm_forward(xn, rstd, x, w.norm, n, h, sh.dims.norm_eps);
  matmul_forward(q, xn, w.wq, n, h, sh.q_width());
  matmul_forward(k, xn, w.wk, n, h, sh.kv_width());
  matmul_forward(v, xn, w.wv, n, h, sh.kv_width());
  rope_forward_at(q, pos, n, sh.q_heads(), d, sh.dims.rope_theta);
  rope_forward_at(k, pos, n, sh.kv_heads(), d, sh.dims.rope_theta);
}

template <class T>
void attention_qkv_backward(const BlockShape& sh, const AttentionWeights<T>& w, const T* x,
                            const int* pos, const T* rstd, const T* xn, T* dq, T* dk, const T* dv,
                            T* dx_partial, const AttentionGrads<T>& g) {
  const int n = sh.tokens(), h = sh.dims.hidden, d = sh.head_dim();
  const int qw = sh.q_width(), kw = sh.kv_width();
  AlignedVector<T> dxn(elems(n, h));
  rope_backward_at(dq, pos, n, sh.q_heads(), d, sh.dims.rope_theta);
  rope_backward_at(dk, pos, n, sh.kv_heads(), d, sh.dims.rope_theta);
  matmul_backward_input(dxn.data(), dq, w.wq, n, h, qw, false);
  matmul_backward_input(dxn.data(), dk, w.wk, n, h, kw, true);
  matmul_backward_input(dxn.data(), dv, w.wv, n, h, kw, true);
  matmul_backward_weight(g.wq, dq, xn, n, h, qw);
  matmul_backward_weight(g.wk, dk, xn, n, h, kw);
  matmul_backward_weight(g.wv, dv, xn, n, h, kw);
  rmsnorm_backward(dx_partial, g.norm, dxn.data(), x, w.norm, rstd, n, h);
}

template <class T>
void attention_out_forward(const BlockShape& sh, const T* wo, const T* att, T* y) {
  matmul_forward(y, att, wo, sh.tokens(), sh.q_width(), sh.dims.hidden);
}

template <class T>
void attention_out_backward(const BlockShape& sh, const T* wo, const T* att, const T* dy, T* datt,
                            T* dwo) {
  const int n = sh.tokens(), h = sh.dims.hidden, qw = sh.q_width();
  matmul_backward_input(datt, dy, wo, n, qw, h, false);
  matmul_backward_weight(dwo, dy, att, n, qw, h);
}

template <class T>
void mlp_block_forward(const BlockShape& sh, const MlpWeights<T>& w, const T* x,
                       const MlpSaved<T>& sv, T* y_partial) {
  const int n = sh.tokens(), h = sh.dims.hidden, f = sh.ffn();
  rmsnorm_forward(sv.xn, sv.rstd, x, w.norm, n, h, sh.dims.norm_eps);
  stored(sh, sv.xn, elems(n, h));
  matmul_forward(sv.gate, sv.xn, w.w_gate, n, h, f);
  matmul_forward(sv.up, sv.xn, w.w_up, n, h, f);
  stored(sh, sv.gate, elems(n, f));
  stored(sh, sv.up, elems(n, f));
  swiglu_forward(sv.act, sv.gate, sv.up, elems(n, f));
  stored(sh, sv.act, elems(n, f));
  matmul_forward(y_partial, sv.act, w.w_down, n, f, h);
  stored(sh, y_partial, elems(n, h));
}

template <class T>
void mlp_block_backward(const BlockShape& sh, const MlpWeights<T>& w, const MlpSaved<T>& sv,
                        const T* x, const T* dy, T* dx_partial, const MlpGrads<T>& g) {
  const int n = sh.tokens(), h = sh.dims.hidden, f = sh.ffn();
  AlignedVector<T> dact(elems(n, f)), dgate(elems(n, f)), dup(elems(n, f)), dxn(elems(n, h));
  matmul_backward_input(dact.data(), dy, w.w_down, n, f, h, false);
  stored(sh, dact.data(), dact.size());
  matmul_backward_weight(g.w_down, dy, sv.act, n, f, h);
  swiglu_backward(dgate.data(), dup.data(), dact.data(), sv.gate, sv.up, elems(n, f));
  stored(sh, dgate.data(), dgate.size());
  stored(sh, dup.data(), dup.size());
  matmul_backward_input(dxn.data(), dgate.data(), w.w_gate, n, h, f, false);
  matmul_backward_input(dxn.data(), dup.data(), w.w_up, n, h, f, true);
  stored(sh, dxn.data(), dxn.size());
  matmul_backward_weight(g.w_gate, dgate.data(), sv.xn, n, h, f);
  matmul_backward_weight(g.w_up, dup.data(), sv.xn, n, h, f);
  rmsnorm_backward(dx_partial, g.norm, dxn.data(), x, w.norm, sv.rstd, n, h);
  stored(sh, dx_partial, elems(n, h));
}

template <class T>
void embedding_block_forward(const BlockShape& sh, const T* table, const int* tokens,
                             T* out_partial) {
  embedding_forward(out_partial, tokens, table, sh.tokens(), sh.dims.hidden, sh.shard.vocab_begin,
                    sh.shard.vocab_end);
}

template <class T>
void embedding_block_backward(const BlockShape& sh, const int* tokens, const T* dout, T* dtable) {
  embedding_backward(dtable, dout, tokens, sh.tokens(), sh.dims.hidden, sh.shard.vocab_begin,
                     sh.shard.vocab_end);
}

template <class T>
void head_forward(const BlockShape& sh, const HeadWeights<T>& w, const T* x,
                  const HeadSaved<T>& sv) {
  const int n = sh.tokens(), h = sh.dims.hidden;
  rmsnorm_forward(sv.xn, sv.rstd, x, w.norm, n, h, sh.dims.norm_eps);
  stored(sh, sv.xn, elems(n, h));
  matmul_forward(sv.logits, sv.xn, w.w, n, h, sh.vocab());
  stored(sh, sv.logits, elems(n, sh.vocab()));  // the loss reads them in T
  logits_row_max(sv.row_max, sv.logits, n, sh.vocab());
}

template <class T>
void head_loss_partials(const BlockShape& sh, const HeadSaved<T>& sv, const int* targets) {
  cross_entropy_partials(sv.partials, sv.logits, sv.row_max, targets, sh.tokens(), sh.vocab(),
                         sh.shard.vocab_begin);
}

template <class T>
void head_loss(const BlockShape& sh, const HeadSaved<T>& sv, T* loss) {
  cross_entropy_loss(loss, sv.row_max, sv.partials, sh.tokens());
}

template <class T>
void head_backward(const BlockShape& sh, const HeadWeights<T>& w, const HeadSaved<T>& sv,
                   const T* x, const int* targets, double loss_scale, T* dx_partial,
                   const HeadGrads<T>& g) {
  const int n = sh.tokens(), h = sh.dims.hidden, vl = sh.vocab();
  AlignedVector<T> dlogits(elems(n, vl)), dxn(elems(n, h));
  cross_entropy_backward(dlogits.data(), sv.logits, sv.row_max, sv.partials, targets, n, vl,
                         sh.shard.vocab_begin, loss_scale);
  stored(sh, dlogits.data(), dlogits.size());
  matmul_backward_weight(g.w, dlogits.data(), sv.xn, n, h, vl);
  matmul_backward_input(dxn.data(), dlogits.data(), w.w, n, h, vl, false);
  stored(sh, dxn.data(), dxn.size());
  rmsnorm_backward(dx_partial, g.norm, dxn.data(), x, w.norm, sv.rstd, n, h);
  stored(sh, dx_partial, elems(n, h));
}

#define HEXI_INSTANTIATE(T)                                                                        \
  template void attention_block_forward<T>(const BlockShape&, const AttentionWeights<T>&,          \
                                           const T*, const AttentionSaved<T>&, T*);                \
  template void attention_block_backward<T>(const BlockShape&, const AttentionWeights<T>&,         \
                                            const AttentionSaved<T>&, const T*, const T*, T*,      \
                                            const AttentionGrads<T>&);                             \
  template void attention_qkv_forward<T>(const BlockShape&, const AttentionWeights<T>&, const T*,  \
                                         const int*, T*, T*, T*, T*, T*);                          \
  template void attention_qkv_backward<T>(const BlockShape&, const AttentionWeights<T>&, const T*, \
                                          const int*, const T*, const T*, T*, T*, const T*, T*,    \
                                          const AttentionGrads<T>&);                               \
  template void attention_out_forward<T>(const BlockShape&, const T*, const T*, T*);               \
  template void attention_out_backward<T>(const BlockShape&, const T*, const T*, const T*, T*,     \
                                          T*);                                                     \
  template void mlp_block_forward<T>(const BlockShape&, const MlpWeights<T>&, const T*,            \
                                     const MlpSaved<T>&, T*);                                      \
  template void mlp_block_backward<T>(const BlockShape&, const MlpWeights<T>&, const MlpSaved<T>&, \
                                      const T*, const T*, T*, const MlpGrads<T>&);                 \
  template void embedding_block_forward<T>(const BlockShape&, const T*, const int*, T*);           \
  template void embedding_block_backward<T>(const BlockShape&, const int*, const T*, T*);          \
  template void head_forward<T>(const BlockShape&, const HeadWeights<T>&, const T*,                \
                                const HeadSaved<T>&);                                              \
  template void head_loss_partials<T>(const BlockShape&, const HeadSaved<T>&, const int*);         \
  template void head_loss<T>(const BlockShape&, const HeadSaved<T>&, T*);                          \
  template void head_backward<T>(const BlockShape&, const HeadWeights<T>&, const HeadSaved<T>&,    \
                                 const T*, const int*, double, T*, const HeadGrads<T>&);
HEXI_INSTANTIATE(float)
HEXI_INSTANTIATE(double)
#undef HEXI_INSTANTIATE

}  // namespace hexi::kernels::cpu
