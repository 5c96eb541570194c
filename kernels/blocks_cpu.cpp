// The TP-shard blocks composed from the CPU reference kernels (protocol: blocks.hpp).
#include "kernels/blocks_cpu.hpp"

#include <algorithm>
#include <cmath>
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

// The rows a rank's routed experts run: for each held expert (in order) the (token, slot)
// pairs routed to it, tokens in order; expert e's rows are [begin[e], begin[e + 1]).
struct Routing {
  std::vector<int> token, slot;
  std::vector<std::size_t> begin;
};

// Calls f(first row, rows m, weights' offset) for every held expert with rows routed to it.
template <class F>
void for_each_held_expert(const BlockShape& sh, const Routing& r, F f) {
  for (int le = 0; le < sh.experts(); ++le) {
    const std::size_t b = r.begin[le];
    const int m = static_cast<int>(r.begin[le + 1] - b);
    if (m > 0) f(b, m, elems(sh.ffn(), sh.dims.hidden) * le);
  }
}

template <class T>
Routing held_routing(const BlockShape& sh, const T* chosen) {
  const int n = sh.tokens(), k = sh.dims.top_k;
  Routing r;
  r.begin.push_back(0);
  for (int e = sh.shard.expert_begin; e < sh.shard.expert_end; ++e) {
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < k; ++j) {
        if (static_cast<int>(chosen[static_cast<std::size_t>(i) * k + j]) != e) continue;
        r.token.push_back(i);
        r.slot.push_back(j);
      }
    }
    r.begin.push_back(r.token.size());
  }
  return r;
}

// probs = softmax(xn router^T); each token's top_k experts (ties to the lower index) and
// their gates, renormalised over the chosen.
template <class T>
void route_tokens(const BlockShape& sh, const T* router, const MlpSaved<T>& sv) {
  const int n = sh.tokens(), h = sh.dims.hidden, E = sh.dims.experts, k = sh.dims.top_k;
  matmul_forward(sv.probs, sv.xn, router, n, h, E);
  std::vector<char> taken(E);
  for (int i = 0; i < n; ++i) {
    T* p = sv.probs + static_cast<std::size_t>(i) * E;
    const T top = *std::max_element(p, p + E);
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += std::exp(static_cast<double>(p[e] - top));
    for (int e = 0; e < E; ++e)
      p[e] = static_cast<T>(std::exp(static_cast<double>(p[e] - top)) / sum);
    std::fill(taken.begin(), taken.end(), 0);
    double chosen_sum = 0;
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int e = 0; e < E; ++e)
        if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
      taken[best] = 1;
      sv.chosen[static_cast<std::size_t>(i) * k + j] = static_cast<T>(best);
      chosen_sum += p[best];
    }
    for (int j = 0; j < k; ++j) {
      const std::size_t c = static_cast<std::size_t>(i) * k + j;
      sv.gates[c] = static_cast<T>(p[static_cast<int>(sv.chosen[c])] / chosen_sum);
    }
  }
}

// The MoE MLP block (blocks.hpp): routing, this rank's routed experts on their rows, its
// shared-expert columns.
template <class T>
void moe_block_forward(const BlockShape& sh, const MlpWeights<T>& w, const T* x,
                       const MlpSaved<T>& sv, T* y_partial) {
  const int n = sh.tokens(), h = sh.dims.hidden, fl = sh.ffn(), fs = sh.shared();
  const int k = sh.dims.top_k;
  rmsnorm_forward(sv.xn, sv.rstd, x, w.norm, n, h, sh.dims.norm_eps);
  route_tokens(sh, w.router, sv);
  if (fs > 0) {
    matmul_forward(sv.gate, sv.xn, w.s_gate, n, h, fs);
    matmul_forward(sv.up, sv.xn, w.s_up, n, h, fs);
    swiglu_forward(sv.act, sv.gate, sv.up, elems(n, fs));
    matmul_forward(y_partial, sv.act, w.s_down, n, fs, h);
  } else {
    std::fill_n(y_partial, elems(n, h), T(0));
  }
  const Routing r = held_routing(sh, sv.chosen);
  AlignedVector<T> xe(elems(static_cast<int>(r.token.size()), h));
  for (std::size_t row = 0; row < r.token.size(); ++row)
    std::copy_n(sv.xn + elems(r.token[row], h), h, xe.data() + row * h);
  for_each_held_expert(sh, r, [&](std::size_t b, int m, std::size_t weights) {
    matmul_forward(sv.e_gate + b * fl, xe.data() + b * h, w.e_gate + weights, m, h, fl);
    matmul_forward(sv.e_up + b * fl, xe.data() + b * h, w.e_up + weights, m, h, fl);
    swiglu_forward(sv.e_act + b * fl, sv.e_gate + b * fl, sv.e_up + b * fl, elems(m, fl));
    matmul_forward(sv.e_out + b * h, sv.e_act + b * fl, w.e_down + weights, m, fl, h);
  });
  for (std::size_t row = 0; row < r.token.size(); ++row) {
    const T g = sv.gates[static_cast<std::size_t>(r.token[row]) * k + r.slot[row]];
    T* y = y_partial + elems(r.token[row], h);
    const T* out = sv.e_out + row * h;
    for (int c = 0; c < h; ++c) y[c] += g * out[c];
  }
}

template <class T>
void moe_block_backward(const BlockShape& sh, const MlpWeights<T>& w, const MlpSaved<T>& sv,
                        const T* x, const T* dy, T* dx_partial, const MlpGrads<T>& g) {
  const int n = sh.tokens(), h = sh.dims.hidden, fl = sh.ffn(), fs = sh.shared();
  const int E = sh.dims.experts, k = sh.dims.top_k;
  AlignedVector<T> dxn(elems(n, h), T(0));
  if (fs > 0) {
    AlignedVector<T> dact(elems(n, fs)), dgate(elems(n, fs)), dup(elems(n, fs));
    matmul_backward_input(dact.data(), dy, w.s_down, n, fs, h, false);
    matmul_backward_weight(g.s_down, dy, sv.act, n, fs, h);
    swiglu_backward(dgate.data(), dup.data(), dact.data(), sv.gate, sv.up, elems(n, fs));
    matmul_backward_input(dxn.data(), dgate.data(), w.s_gate, n, h, fs, false);
    matmul_backward_input(dxn.data(), dup.data(), w.s_up, n, h, fs, true);
    matmul_backward_weight(g.s_gate, dgate.data(), sv.xn, n, h, fs);
    matmul_backward_weight(g.s_up, dup.data(), sv.xn, n, h, fs);
  }
  // Routed experts: dL/d(expert output) = gate * dy; dL/d(gate) = dy . expert output.
  const Routing r = held_routing(sh, sv.chosen);
  const std::size_t rows = r.token.size();
  AlignedVector<T> xe(rows * h), dout(rows * h), dxe(rows * h);
  AlignedVector<T> dact(rows * fl), dgate(rows * fl), dup(rows * fl);
  std::vector<double> dgates(elems(n, k), 0.0);
  for (std::size_t row = 0; row < rows; ++row) {
    const std::size_t c = static_cast<std::size_t>(r.token[row]) * k + r.slot[row];
    const T* dyi = dy + elems(r.token[row], h);
    const T* out = sv.e_out + row * h;
    double dot = 0;
    for (int col = 0; col < h; ++col) {
      dout[row * h + col] = sv.gates[c] * dyi[col];
      dot += static_cast<double>(dyi[col]) * out[col];
    }
    dgates[c] = dot;
    std::copy_n(sv.xn + elems(r.token[row], h), h, xe.data() + row * h);
  }
  for_each_held_expert(sh, r, [&](std::size_t b, int m, std::size_t weights) {
    matmul_backward_input(dact.data() + b * fl, dout.data() + b * h, w.e_down + weights, m, fl, h,
                          false);
    matmul_backward_weight(g.e_down + weights, dout.data() + b * h, sv.e_act + b * fl, m, fl, h);
    swiglu_backward(dgate.data() + b * fl, dup.data() + b * fl, dact.data() + b * fl,
                    sv.e_gate + b * fl, sv.e_up + b * fl, elems(m, fl));
    matmul_backward_input(dxe.data() + b * h, dgate.data() + b * fl, w.e_gate + weights, m, h, fl,
                          false);
    matmul_backward_input(dxe.data() + b * h, dup.data() + b * fl, w.e_up + weights, m, h, fl,
                          true);
    matmul_backward_weight(g.e_gate + weights, dgate.data() + b * fl, xe.data() + b * h, m, h, fl);
    matmul_backward_weight(g.e_up + weights, dup.data() + b * fl, xe.data() + b * h, m, h, fl);
  });
  for (std::size_t row = 0; row < rows; ++row) {
    T* d = dxn.data() + elems(r.token[row], h);
    for (int col = 0; col < h; ++col) d[col] += dxe[row * h + col];
  }
  // The router: gates g_j = p_j / S over the chosen (S their sum), p = softmax(logits).
  AlignedVector<T> dlogits(elems(n, E));
  std::vector<double> dp(E);
  for (int i = 0; i < n; ++i) {
    const T* p = sv.probs + elems(i, E);
    const std::size_t c0 = static_cast<std::size_t>(i) * k;
    double chosen_sum = 0, weighted = 0;
    for (int j = 0; j < k; ++j) {
      chosen_sum += p[static_cast<int>(sv.chosen[c0 + j])];
      weighted += static_cast<double>(sv.gates[c0 + j]) * dgates[c0 + j];
    }
    std::fill(dp.begin(), dp.end(), 0.0);
    for (int j = 0; j < k; ++j)
      dp[static_cast<int>(sv.chosen[c0 + j])] = (dgates[c0 + j] - weighted) / chosen_sum;
    double pdp = 0;
    for (int e = 0; e < E; ++e) pdp += p[e] * dp[e];
    for (int e = 0; e < E; ++e) dlogits[elems(i, E) + e] = static_cast<T>(p[e] * (dp[e] - pdp));
  }
  matmul_backward_weight(g.router, dlogits.data(), sv.xn, n, h, E);
  matmul_backward_input(dxn.data(), dlogits.data(), w.router, n, h, E, true);
  rmsnorm_backward(dx_partial, g.norm, dxn.data(), x, w.norm, sv.rstd, n, h);
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
  if (sh.dims.is_moe()) return moe_block_forward(sh, w, x, sv, y_partial);
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
  if (sh.dims.is_moe()) return moe_block_backward(sh, w, sv, x, dy, dx_partial, g);
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
