// Causal self-attention with grouped-query attention (Ainslie et al. 2023), one
// (sequence, query head) at a time: S = Q K^T / sqrt(d), P = causal softmax(S), O = P V.
// Backward (P saved): dP = dO V^T, dV += P^T dO, dS = P * (dP - rowsum(dP * P)) / sqrt(d),
// dQ = dS K, dK += dS^T Q. Query head j reads KV head j / (hq / hk), so dK and dV sum
// over the query heads of a group. Per-head GEMMs (gemm_cpu.hpp) on strided views of the
// (b, s, heads, d) tensors, in blocks of kRowBlock query rows: rows [r0, r1) see keys
// [0, r1) only, so the GEMMs skip the masked blocks above the diagonal (at s = 256, 0.625 of
// the full s^2 products; the cost model counts half, as the flash kernel runs) and only the
// masked part of the diagonal block is computed and then zeroed. P is stored whole (zeros
// above the diagonal).
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

// Query rows per block: large enough for the GEMMs to run near their peak, small enough to
// skip most of the masked products.
constexpr int kRowBlock = 64;

// In place on rows [r0, r1) of the (s, s) scores of one head: causal softmax of each row
// (exponentials through Eigen's vectorised exp in T, the row sum in double); the masked
// columns of those rows are set to zero.
template <class T>
void causal_softmax(T* p, int s, int r0, int r1) {
  for (int t = r0; t < r1; ++t) {
    T* row = p + static_cast<std::size_t>(t) * s;
    auto visible = array(row, t + 1);
    visible = (visible - visible.maxCoeff()).exp();
    visible /= static_cast<T>(lane_sum(t + 1, [&](int c) { return static_cast<double>(row[c]); }));
    std::fill(row + t + 1, row + s, T(0));
  }
}

// In place on `rows` rows of ld `ld`, their first `cols` columns: dP -> dS = P * (dP -
// rowsum(dP * P)) * scale (P is zero beyond the diagonal, so those entries become zero).
template <class T>
void softmax_backward(T* dp, const T* p, int rows, int cols, int ld, double scale) {
  for (int t = 0; t < rows; ++t) {
    T* drow = dp + static_cast<std::size_t>(t) * ld;
    const T* prow = p + static_cast<std::size_t>(t) * ld;
    const double dot =
        lane_sum(cols, [&](int c) { return static_cast<double>(drow[c]) * prow[c]; });
    for (int c = 0; c < cols; ++c) drow[c] = static_cast<T>(prow[c] * (drow[c] - dot) * scale);
  }
}

// Rounds `rows` rows of ld `ld` to bf16 values, their first `cols` columns.
template <class T>
void round_rows_bf16(T* x, int rows, int cols, int ld) {
  for (int t = 0; t < rows; ++t) round_bf16(x + static_cast<std::size_t>(t) * ld, cols);
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
      for (int r0 = 0; r0 < s; r0 += kRowBlock) {
        const int r1 = std::min(s, r0 + kRowBlock), rows = r1 - r0;
        T* pb = p + static_cast<std::size_t>(r0) * s;
        const std::size_t qr = qo + static_cast<std::size_t>(r0) * ldq;
        // S[r0:r1, 0:r1] = Q[r0:r1] K[0:r1]^T
        gemm<T>(false, true, rows, r1, d, scale, q + qr, ldq, k + kvo, ldkv, T(0), pb, s);
        if (bf16) round_rows_bf16(pb, rows, r1, s);
        causal_softmax(p, s, r0, r1);
        if (bf16) round_rows_bf16(pb, rows, r1, s);
        // O[r0:r1] = P[r0:r1, 0:r1] V[0:r1]
        gemm<T>(false, false, rows, d, r1, T(1), pb, s, v + kvo, ldkv, T(0), out + qr, ldq);
      }
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
  AlignedVector<T> ds(static_cast<std::size_t>(kRowBlock) * s);  // a block's dP, then dS
  for (int bi = 0; bi < b; ++bi) {
    for (int j = 0; j < hq; ++j) {
      const std::size_t qo = hv.q_offset(bi, j), kvo = hv.kv_offset(bi, j);
      const T* p = probs + hv.p_offset(bi, j);
      for (int r0 = 0; r0 < s; r0 += kRowBlock) {
        const int r1 = std::min(s, r0 + kRowBlock), rows = r1 - r0;
        const T* pb = p + static_cast<std::size_t>(r0) * s;
        const std::size_t qr = qo + static_cast<std::size_t>(r0) * ldq;
        // dP[r0:r1, 0:r1] = dO[r0:r1] V[0:r1]^T;  dV[0:r1] += P[r0:r1, 0:r1]^T dO[r0:r1]
        gemm<T>(false, true, rows, r1, d, T(1), dout + qr, ldq, v + kvo, ldkv, T(0), ds.data(), s);
        gemm<T>(true, false, r1, d, rows, T(1), pb, s, dout + qr, ldq, T(1), dv + kvo, ldkv);
        if (bf16) round_rows_bf16(ds.data(), rows, r1, s);
        softmax_backward(ds.data(), pb, rows, r1, s, scale);
        if (bf16) round_rows_bf16(ds.data(), rows, r1, s);
        // dQ[r0:r1] = dS K[0:r1];  dK[0:r1] += dS^T Q[r0:r1]
        gemm<T>(false, false, rows, d, r1, T(1), ds.data(), s, k + kvo, ldkv, T(0), dq + qr, ldq);
        gemm<T>(true, false, r1, d, rows, T(1), ds.data(), s, q + qr, ldq, T(1), dk + kvo, ldkv);
      }
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
