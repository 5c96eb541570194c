// Blockwise causal attention (attention_blockwise.hpp) on 64 x 64 tiles of tokens.
//
// Packing: the g = hq / hk query heads of KV head kh read the same K and V tiles, so a query
// tile of `rows` tokens is packed into one (g * rows, d) matrix (row r * rows + i = token
// t0 + i of query head kh * g + r) and every tile product is one GEMM (gemm_cpu.hpp) of
// g * rows rows against a strided view of K or V, or against the K or V tile transposed
// into a (d, 64) scratch (see transpose_tile).
//
// Forward, per packed query tile over the key tiles with a visible pair (FlashAttention-2's
// Algorithm 1, Dao 2023: normalisation deferred to the end):
//   S = Q K^T / sqrt(d);  m' = max(m, rowmax S);  P = exp(S - m');
//   l = l exp(m - m') + rowsum P;  acc = acc exp(m - m') + P V;  then out = acc / l,
//   lse = m + log l (l = 0: no visible key, lse = -inf, out = 0).
// Backward, per packed query tile over the key tiles (P recomputed from the final lse):
//   P = exp(S - lse);  dV += P^T dO;  dP = dO V^T;  dS = P (dP - D) / sqrt(d);
//   dK += dS^T Q;  dQ += dS K;  with D = rowsum(dO * O) (= rowsum(P * dP) over all keys).
// bf16: P (for P V and P^T dO) and dS (for dS K and dS^T Q) are rounded just before those
// GEMMs; the row sums and dS use the unrounded P, as FlashAttention-2 does.
// Tile pairs whose positions show no visible pair are skipped, pairs that are entirely
// visible are not masked; only the others compare positions element by element.
//
// Masked scores are -inf before the row maximum and set to exactly 0 after the exponential:
// Eigen's vectorised exp clamps its argument and returns a denormal (about 1e-39), not 0,
// for -inf, which would give a fully masked row a finite lse.
#include "kernels/attention_blockwise.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/bf16.hpp"
#include "kernels/eigen_maps.hpp"
#include "kernels/gemm_cpu.hpp"

namespace hexi::kernels::cpu {
namespace {

constexpr int kTile = 64;  // tokens per query tile and per key tile

template <class T>
constexpr T kNegInf = -std::numeric_limits<T>::infinity();

// Tokens [begin, begin + size) of a block and the range of their positions.
struct Tile {
  int begin = 0, size = 0;
  int lo = 0, hi = 0;  // min and max position
};

Tile tile_at(const int* pos, int tokens, int begin) {
  Tile t{begin, std::min(kTile, tokens - begin)};
  const auto [lo, hi] = std::minmax_element(pos + begin, pos + begin + t.size);
  t.lo = *lo;
  t.hi = *hi;
  return t;
}

enum class Visible { kNone, kAll, kSome };  // which (query, key) pairs of a tile pair

Visible visible(const Tile& q, const Tile& k) {
  if (k.lo > q.hi) return Visible::kNone;
  if (k.hi <= q.lo) return Visible::kAll;
  return Visible::kSome;
}

// Offsets into the block's tensors, and the packed query tiles of KV head kh.
struct Geometry {
  const AttentionBlockPair& p;
  int g() const { return p.hq / p.hk; }
  int q_ld() const { return p.hq * p.d; }
  int kv_ld() const { return p.hk * p.d; }
  std::size_t q_at(int t, int head) const { return (std::size_t(t) * p.hq + head) * p.d; }
  std::size_t kv_at(int t, int kh) const { return (std::size_t(t) * p.hk + kh) * p.d; }
  // Packed row r * rows + i of a query tile <-> (token t0 + i, query head kh * g + r).
  template <class F>
  void for_each_packed_row(int kh, const Tile& qt, F f) const {
    for (int r = 0; r < g(); ++r)
      for (int i = 0; i < qt.size; ++i) f(r * qt.size + i, qt.begin + i, kh * g() + r);
  }
};

// dst (g * rows, d) = the query tile's rows of src (q_tokens, hq, d).
template <class T>
void pack(T* dst, const T* src, const Geometry& geo, int kh, const Tile& qt) {
  const int d = geo.p.d;
  geo.for_each_packed_row(kh, qt, [&](int row, int t, int head) {
    std::copy_n(src + geo.q_at(t, head), d, dst + std::size_t(row) * d);
  });
}

// Sets the scores of invisible (query, key) pairs of the tile pair to `value`;
// s is (g * rows, kTile).
template <class T>
void mask(T* s, T value, const Geometry& geo, int kh, const Tile& qt, const Tile& kt) {
  geo.for_each_packed_row(kh, qt, [&](int row, int t, int) {
    const int q_pos = geo.p.q_pos[t];
    T* srow = s + std::size_t(row) * kTile;
    for (int c = 0; c < kt.size; ++c)
      if (geo.p.kv_pos[kt.begin + c] > q_pos) srow[c] = value;
  });
}

// bf16: rows [0, m) of s (m, kTile) rounded to bf16 values.
template <class T>
void round_rows(T* s, int m, int cols) {
  for (int row = 0; row < m; ++row) round_bf16(s + std::size_t(row) * kTile, cols);
}

// dst (d, kTile) = the key tile's rows of x (kv_tokens, hk, d) of KV head kh, transposed:
// the tile products S = Q K^T and dP = dO V^T then run as GEMMs without a transposed
// operand. OpenBLAS 0.3.21 sends the transposed form at d 16 to its general kernel (82
// GFLOP/s on this project's Xeon for the (128, 64, 16) product) and this one to its
// small-matrix kernel (140 GFLOP/s); the copy costs a few percent of a tile pair.
template <class T>
void transpose_tile(T* dst, const T* x, const Geometry& geo, int kh, const Tile& kt) {
  StridedMap<T>(dst, geo.p.d, kt.size, Eigen::OuterStride<>(kTile)) =
      ConstStridedMap<T>(x + geo.kv_at(kt.begin, kh), kt.size, geo.p.d,
                         Eigen::OuterStride<>(geo.kv_ld()))
          .transpose();
}

// s (g * rows, kTile) = Q K^T / sqrt(d) of the packed queries qp (g * rows, d) and the
// transposed key tile kt_t (d, kTile), -inf where invisible.
template <class T>
void scores(T* s, const T* qp, const T* kt_t, const Geometry& geo, int kh, const Tile& qt,
            const Tile& kt, Visible vis) {
  const int m = geo.g() * qt.size, d = geo.p.d;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  gemm<T>(false, false, m, kt.size, d, scale, qp, d, kt_t, kTile, T(0), s, kTile);
  if (vis == Visible::kSome) mask(s, kNegInf<T>, geo, kh, qt, kt);
}

// Running softmax state of the m rows of a packed query tile. A tile is taken in two steps,
// so that invisible pairs can be zeroed between them: exponentiate, then accumulate.
template <class T>
struct OnlineSoftmax {
  AlignedVector<T> max, sum, acc;  // (m), (m), (m, d): unnormalised output
  AlignedVector<T> base, rescale;  // (m) of the tile being taken: the new max (0 for -inf),
                                   // exp(old max - base)
  int d;
  OnlineSoftmax(int rows, int d_)
      : max(rows), sum(rows), acc(std::size_t(rows) * d_), base(rows), rescale(rows), d(d_) {}
  void reset() {
    std::fill(max.begin(), max.end(), kNegInf<T>);
    std::fill(sum.begin(), sum.end(), T(0));
    std::fill(acc.begin(), acc.end(), T(0));
  }
  // In place on s (m, kTile): scores -> exp(S - new max). A row with nothing visible yet keeps
  // max -inf and takes base 0 (exp(-inf - -inf) would be NaN); its rescale multiplies a sum
  // and an acc that are still exactly 0.
  void exponentiate(T* s, int m, int cols) {
    for (int row = 0; row < m; ++row) {
      const T new_max = std::max(max[row], array(s + std::size_t(row) * kTile, cols).maxCoeff());
      base[row] = new_max == kNegInf<T> ? T(0) : new_max;
      rescale[row] = max[row];
      max[row] = new_max;
    }
    array(rescale.data(), m) = (array(rescale.data(), m) - array(base.data(), m)).exp();
    for (int row = 0; row < m; ++row) {
      auto p = array(s + std::size_t(row) * kTile, cols);
      p = (p - base[row]).exp();
    }
  }
  // sum = sum * rescale + rowsum P; acc *= rescale (the caller then adds P V).
  void accumulate(const T* p, int m, int cols) {
    for (int row = 0; row < m; ++row) {
      sum[row] = sum[row] * rescale[row] + array(p + std::size_t(row) * kTile, cols).sum();
      array(acc.data() + std::size_t(row) * d, d) *= rescale[row];
    }
  }
};

// In place on s (m, kTile): scores -> P = exp(S - lse). A row whose final lse is -inf sees
// no key of any block, so all its pairs are invisible and mask() zeroes them afterwards.
template <class T>
void probabilities(T* s, const T* lse, int m, int cols) {
  for (int row = 0; row < m; ++row) {
    auto p = array(s + std::size_t(row) * kTile, cols);
    p = (p - lse[row]).exp();
  }
}

// In place on dp (m, kTile): dP -> dS = P (dP - D) * scale.
template <class T>
void softmax_backward(T* dp, const T* p, const T* dsum, int m, int cols, T scale) {
  for (int row = 0; row < m; ++row) {
    const std::size_t at = std::size_t(row) * kTile;
    array(dp + at, cols) = array(p + at, cols) * (array(dp + at, cols) - dsum[row]) * scale;
  }
}

}  // namespace

template <class T>
void blockwise_attention_forward(T* out, T* lse, const T* q, const T* k, const T* v,
                                 const AttentionBlockPair& pair, bool bf16) {
  const Geometry geo{pair};
  const int d = pair.d, max_rows = geo.g() * kTile;
  AlignedVector<T> qp(std::size_t(max_rows) * d), s(std::size_t(max_rows) * kTile);
  AlignedVector<T> k_t(std::size_t(d) * kTile);  // the key tile, transposed
  OnlineSoftmax<T> state(max_rows, d);
  for (int kh = 0; kh < pair.hk; ++kh) {
    for (int t0 = 0; t0 < pair.q_tokens; t0 += kTile) {
      const Tile qt = tile_at(pair.q_pos, pair.q_tokens, t0);
      const int m = geo.g() * qt.size;
      pack(qp.data(), q, geo, kh, qt);
      state.reset();
      for (int c0 = 0; c0 < pair.kv_tokens; c0 += kTile) {
        const Tile kt = tile_at(pair.kv_pos, pair.kv_tokens, c0);
        const Visible vis = visible(qt, kt);
        if (vis == Visible::kNone) continue;
        transpose_tile(k_t.data(), k, geo, kh, kt);
        scores(s.data(), qp.data(), k_t.data(), geo, kh, qt, kt, vis);
        state.exponentiate(s.data(), m, kt.size);
        if (vis == Visible::kSome) mask(s.data(), T(0), geo, kh, qt, kt);
        state.accumulate(s.data(), m, kt.size);
        if (bf16) round_rows(s.data(), m, kt.size);
        gemm<T>(false, false, m, d, kt.size, T(1), s.data(), kTile, v + geo.kv_at(c0, kh),
                geo.kv_ld(), T(1), state.acc.data(), d);  // acc += P V
      }
      geo.for_each_packed_row(kh, qt, [&](int row, int t, int head) {
        const T sum = state.sum[row];
        auto o = array(out + geo.q_at(t, head), d);
        const auto acc = array(state.acc.data() + std::size_t(row) * d, d);
        if (sum == T(0)) {
          o.setZero();
        } else {
          o = acc / sum;
        }
        lse[std::size_t(t) * pair.hq + head] =
            sum == T(0) ? kNegInf<T> : state.max[row] + std::log(sum);
      });
    }
  }
}

template <class T>
void attention_merge(T* out, T* lse, const T* out_b, const T* lse_b, int tokens, int heads, int d) {
  const std::size_t rows = std::size_t(tokens) * heads;
  for (std::size_t row = 0; row < rows; ++row) {
    const T a = lse[row], b = lse_b[row];
    auto o = array(out + row * d, d);
    const auto ob = array(out_b + row * d, d);
    if (b == kNegInf<T>) continue;
    if (a == kNegInf<T>) {
      o = ob;
      lse[row] = b;
      continue;
    }
    const T merged = std::max(a, b) + std::log1p(std::exp(-std::abs(a - b)));
    o = o * std::exp(a - merged) + ob * std::exp(b - merged);
    lse[row] = merged;
  }
}

template <class T>
void blockwise_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k,
                                  const T* v, const T* out, const T* lse,
                                  const AttentionBlockPair& pair, bool bf16) {
  const Geometry geo{pair};
  const int d = pair.d, max_rows = geo.g() * kTile;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  AlignedVector<T> qp(std::size_t(max_rows) * d), dop(qp.size()), dqp(qp.size());
  AlignedVector<T> p(std::size_t(max_rows) * kTile), ds(p.size());
  AlignedVector<T> lse_p(max_rows), dsum(max_rows);               // lse and D of the packed rows
  AlignedVector<T> k_t(std::size_t(d) * kTile), v_t(k_t.size());  // K and V tiles, transposed
  for (int kh = 0; kh < pair.hk; ++kh) {
    for (int t0 = 0; t0 < pair.q_tokens; t0 += kTile) {
      const Tile qt = tile_at(pair.q_pos, pair.q_tokens, t0);
      const int m = geo.g() * qt.size;
      pack(qp.data(), q, geo, kh, qt);
      pack(dop.data(), dout, geo, kh, qt);
      geo.for_each_packed_row(kh, qt, [&](int row, int t, int head) {
        lse_p[row] = lse[std::size_t(t) * pair.hq + head];
        const T* dout_row = dout + geo.q_at(t, head);
        const T* out_row = out + geo.q_at(t, head);
        dsum[row] = static_cast<T>(
            lane_sum(d, [&](int c) { return static_cast<double>(dout_row[c]) * out_row[c]; }));
      });
      std::fill(dqp.begin(), dqp.end(), T(0));
      for (int c0 = 0; c0 < pair.kv_tokens; c0 += kTile) {
        const Tile kt = tile_at(pair.kv_pos, pair.kv_tokens, c0);
        const Visible vis = visible(qt, kt);
        if (vis == Visible::kNone) continue;
        transpose_tile(k_t.data(), k, geo, kh, kt);
        transpose_tile(v_t.data(), v, geo, kh, kt);
        scores(p.data(), qp.data(), k_t.data(), geo, kh, qt, kt, vis);
        probabilities(p.data(), lse_p.data(), m, kt.size);
        if (vis == Visible::kSome) mask(p.data(), T(0), geo, kh, qt, kt);
        gemm<T>(false, false, m, kt.size, d, T(1), dop.data(), d, v_t.data(), kTile, T(0),
                ds.data(), kTile);  // dP = dO V^T
        softmax_backward(ds.data(), p.data(), dsum.data(), m, kt.size, scale);
        if (bf16) {
          round_rows(p.data(), m, kt.size);
          round_rows(ds.data(), m, kt.size);
        }
        gemm<T>(true, false, kt.size, d, m, T(1), p.data(), kTile, dop.data(), d, T(1),
                dv + geo.kv_at(c0, kh), geo.kv_ld());  // dV += P^T dO
        gemm<T>(true, false, kt.size, d, m, T(1), ds.data(), kTile, qp.data(), d, T(1),
                dk + geo.kv_at(c0, kh), geo.kv_ld());  // dK += dS^T Q
        gemm<T>(false, false, m, d, kt.size, T(1), ds.data(), kTile, k + geo.kv_at(c0, kh),
                geo.kv_ld(), T(1), dqp.data(), d);  // dQ += dS K
      }
      geo.for_each_packed_row(kh, qt, [&](int row, int t, int head) {
        array(dq + geo.q_at(t, head), d) += array(dqp.data() + std::size_t(row) * d, d);
      });
    }
  }
}

#define HEXI_INSTANTIATE(T)                                                               \
  template void blockwise_attention_forward<T>(T*, T*, const T*, const T*, const T*,      \
                                               const AttentionBlockPair&, bool);          \
  template void attention_merge<T>(T*, T*, const T*, const T*, int, int, int);            \
  template void blockwise_attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, \
                                                const T*, const T*, const T*,             \
                                                const AttentionBlockPair&, bool);
HEXI_INSTANTIATE(float)
HEXI_INSTANTIATE(double)
#undef HEXI_INSTANTIATE

}  // namespace hexi::kernels::cpu
