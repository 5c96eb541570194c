// Causal self-attention with grouped-query attention (Ainslie et al. 2023), one
// (sequence, query head) at a time: S = Q K^T / sqrt(d), P = causal softmax(S), O = P V.
// Backward (P saved): dP = dO V^T, dV += P^T dO, dS = P * (dP - rowsum(dP * P)) / sqrt(d),
// dQ = dS K, dK += dS^T Q. Query head j reads KV head j / (hq / hk), so dK and dV sum
// over the query heads of a group. Per-head GEMMs (gemm_cpu.hpp) on strided views of the
// (b, s, heads, d) tensors; the masked upper triangle is computed and then zeroed,
// which keeps this reference plain at twice the minimal FLOPs.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/cpu_kernels.hpp"
#include "kernels/eigen_maps.hpp"
#include "kernels/gemm_cpu.hpp"

namespace hexi::kernels::cpu {
namespace {

// Geometry of one (sequence bi, query head j) pair inside the batch tensors.
struct HeadView {
  int s, hq, hk, d;
  std::size_t q_offset(int bi, int j) const { return (std::size_t(bi) * s * hq + j) * d; }
  std::size_t kv_offset(int bi, int j) const {
    return (std::size_t(bi) * s * hk + j / (hq / hk)) * d;
  }
  std::size_t p_offset(int bi, int j) const { return (std::size_t(bi) * hq + j) * s * s; }
};

// In place on the (s, s) scores of one head: causal softmax of each row (exponentials
// through Eigen's vectorised exp in T, the row sum in double).
template <class T>
void causal_softmax(T* p, int s) {
  for (int t = 0; t < s; ++t) {
    auto visible = array(p + static_cast<std::size_t>(t) * s, t + 1);
    visible = (visible - visible.maxCoeff()).exp();
    visible /= static_cast<T>(visible.template cast<double>().sum());
    std::fill(p + static_cast<std::size_t>(t) * s + t + 1, p + static_cast<std::size_t>(t + 1) * s,
              T(0));
  }
}

// In place: dP (s, s) -> dS = P * (dP - rowsum(dP * P)) * scale.
template <class T>
void softmax_backward(T* dp, const T* p, int s, double scale) {
  for (int t = 0; t < s; ++t) {
    T* drow = dp + static_cast<std::size_t>(t) * s;
    const T* prow = p + static_cast<std::size_t>(t) * s;
    double dot = 0;
    for (int c = 0; c < s; ++c) dot += static_cast<double>(drow[c]) * prow[c];
    for (int c = 0; c < s; ++c) drow[c] = static_cast<T>(prow[c] * (drow[c] - dot) * scale);
  }
}

}  // namespace

template <class T>
void attention_forward(T* out, T* probs, const T* q, const T* k, const T* v, int b, int s, int hq,
                       int hk, int d, bool bf16) {
  const HeadView hv{s, hq, hk, d};
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  const int ldq = hq * d, ldkv = hk * d;
  for (int bi = 0; bi < b; ++bi) {
    for (int j = 0; j < hq; ++j) {
      const std::size_t qo = hv.q_offset(bi, j), kvo = hv.kv_offset(bi, j);
      T* p = probs + hv.p_offset(bi, j);
      gemm<T>(false, true, s, s, d, scale, q + qo, ldq, k + kvo, ldkv, T(0), p, s);  // S = Q K^T
      if (bf16) round_bf16(p, static_cast<std::size_t>(s) * s);
      causal_softmax(p, s);
      if (bf16) round_bf16(p, static_cast<std::size_t>(s) * s);
      gemm<T>(false, false, s, d, s, T(1), p, s, v + kvo, ldkv, T(0), out + qo, ldq);  // O = P V
    }
  }
  if (bf16) round_bf16(out, static_cast<std::size_t>(b) * s * hq * d);
}

template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                        const T* probs, int b, int s, int hq, int hk, int d, bool bf16) {
  const HeadView hv{s, hq, hk, d};
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const int ldq = hq * d, ldkv = hk * d;
  std::fill(dk, dk + std::size_t(b) * s * hk * d, T(0));
  std::fill(dv, dv + std::size_t(b) * s * hk * d, T(0));
  AlignedVector<T> ds(static_cast<std::size_t>(s) * s);  // dP, then dS in place
  for (int bi = 0; bi < b; ++bi) {
    for (int j = 0; j < hq; ++j) {
      const std::size_t qo = hv.q_offset(bi, j), kvo = hv.kv_offset(bi, j);
      const T* p = probs + hv.p_offset(bi, j);
      gemm<T>(false, true, s, s, d, T(1), dout + qo, ldq, v + kvo, ldkv, T(0), ds.data(), s);
      gemm<T>(true, false, s, d, s, T(1), p, s, dout + qo, ldq, T(1), dv + kvo, ldkv);  // P^T dO
      if (bf16) round_bf16(ds.data(), ds.size());
      softmax_backward(ds.data(), p, s, scale);
      if (bf16) round_bf16(ds.data(), ds.size());
      gemm<T>(false, false, s, d, s, T(1), ds.data(), s, k + kvo, ldkv, T(0), dq + qo, ldq);
      gemm<T>(true, false, s, d, s, T(1), ds.data(), s, q + qo, ldq, T(1), dk + kvo, ldkv);
    }
  }
  if (bf16) {  // dK and dV summed over a KV group's query heads in T, then rounded once
    round_bf16(dq, static_cast<std::size_t>(b) * s * hq * d);
    round_bf16(dk, static_cast<std::size_t>(b) * s * hk * d);
    round_bf16(dv, static_cast<std::size_t>(b) * s * hk * d);
  }
}

#define HEXI_INSTANTIATE(T)                                                                    \
  template void attention_forward<T>(T*, T*, const T*, const T*, const T*, int, int, int, int, \
                                     int, bool);                                               \
  template void attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,      \
                                      const T*, int, int, int, int, int, bool);
HEXI_INSTANTIATE(float)
HEXI_INSTANTIATE(double)
#undef HEXI_INSTANTIATE

}  // namespace hexi::kernels::cpu
