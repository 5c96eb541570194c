// Causal grouped-query attention (semantics and formulas in attention_cpu.cpp): the
// per-head products through strided-batched cuBLAS GEMMs and the causal softmax in a
// warp-per-row kernel. Query head j = kh*g + r reads KV head kh (g = hq/hk). With g > 1,
// Q, K, V (and dO) are first copied head-major, (b, heads, s, d): then the g query heads of
// KV head kh are one (g*s x d) matrix, and each product is ONE strided batch over the b*hk
// KV heads (m = g*s rows against K or V's s rows): a constant number of kernels per call,
// not one batch per sequence and group member. dK and dV sum over the group's query heads
// inside the GEMM (inner dimension g*s), in fp32, and are rounded once. With g = 1 the
// products read the tensors in place, one batch of hq heads per sequence (no copies).
#include <algorithm>
#include <cmath>
#include <functional>

#include "kernels/cuda_common.cuh"

namespace hexi::kernels::cuda {
namespace {

using detail::kThreads;
using detail::kWarp;
constexpr int kRowsPerBlock = kThreads / kWarp;

// In place on rows of length s of (rows, s) scores: causal softmax of row t = row % s.
__global__ void causal_softmax_kernel(float* p, std::size_t rows, int s) {
  const std::size_t row =
      static_cast<std::size_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const int t = static_cast<int>(row % s);
  float* pr = p + row * s;
  float max = -INFINITY;
  for (int c = lane; c <= t; c += kWarp) max = fmaxf(max, pr[c]);
  max = detail::warp_max(max);
  float sum = 0.f;
  for (int c = lane; c <= t; c += kWarp) sum += expf(pr[c] - max);
  const float inv = 1.f / detail::warp_sum(sum);
  for (int c = lane; c < s; c += kWarp) pr[c] = c <= t ? expf(pr[c] - max) * inv : 0.f;
}

// In place: dP -> dS = P * (dP - rowsum(dP * P)) * scale.
__global__ void softmax_backward_kernel(float* dp, const float* p, std::size_t rows, int s,
                                        float scale) {
  const std::size_t row =
      static_cast<std::size_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  float* dr = dp + row * s;
  const float* pr = p + row * s;
  float dot = 0.f;
  for (int c = lane; c < s; c += kWarp) dot += dr[c] * pr[c];
  dot = detail::warp_sum(dot);
  for (int c = lane; c < s; c += kWarp) dr[c] = pr[c] * (dr[c] - dot) * scale;
}

// Copies x between the sequence-major (b, s, heads, d) layout and the head-major
// (b, heads, s, d) one; to_heads picks the direction. Block (t, head, bi) copies one row of d
// (no index division: the grid is the three outer dimensions).
__global__ void permute_kernel(float* __restrict__ out, const float* __restrict__ x, int s,
                               int heads, int d, bool to_heads) {
  const std::size_t t = blockIdx.x, h = blockIdx.y, bi = blockIdx.z;
  const std::size_t head_row = ((bi * heads + h) * s + t) * d,
                    seq_row = ((bi * s + t) * heads + h) * d;
  const std::size_t from = to_heads ? seq_row : head_row, to = to_heads ? head_row : seq_row;
  for (int i = threadIdx.x; i < d; i += blockDim.x) out[to + i] = x[from + i];
}

void permute(Context& c, float* out, const float* x, int b, int s, int heads, int d,
             bool to_heads) {
  if (static_cast<std::size_t>(b) * s * heads * d == 0) return;
  const dim3 grid(static_cast<unsigned>(s), static_cast<unsigned>(heads), static_cast<unsigned>(b));
  const int threads = std::min(kThreads, (d + kWarp - 1) / kWarp * kWarp);
  permute_kernel<<<grid, threads, 0, c.stream()>>>(out, x, s, heads, d, to_heads);
  HEXI_CUDA_LAUNCH_CHECK();
}

// The shapes of one call: b sequences of s tokens, hq query and hk KV heads of d.
struct Shape {
  int b, s, hq, hk, d;
  int g() const { return hq / hk; }
  std::size_t size(int heads) const { return static_cast<std::size_t>(b) * s * heads * d; }
};

// One operand of a strided batch: `stride` elements between its matrices, rows `ld` apart.
struct Mat {
  const float* p;
  int ld;
  long long stride;
};

// Where the products' operands live. Grouped-query (g > 1): in head-major copies, where a KV
// head's g query heads are one matrix of g*s rows: one call, a batch of b*hk. Multi-head
// (g = 1): in the sequence-major tensors themselves (a head every d floats of a token's row):
// one call per sequence, a batch of hq, no copies.
class Layout {
 public:
  explicit Layout(const Shape& sh) : sh_(sh), copies_(sh.g() > 1) {}
  bool copies() const { return copies_; }
  int calls() const { return copies_ ? 1 : sh_.b; }
  int batch() const { return copies_ ? sh_.b * sh_.hk : sh_.hq; }
  int rows() const { return copies_ ? sh_.g() * sh_.s : sh_.s; }  // of a query block
  // Call i's part of a (b, s, heads, d) tensor (copied head-major when copies()).
  Mat tokens(const float* x, int heads, int i) const {
    const long long s = sh_.s, d = sh_.d;
    if (copies_) return {x, sh_.d, heads == sh_.hq ? sh_.g() * s * d : s * d};
    return {x + i * s * heads * d, heads * sh_.d, d};
  }
  // Call i's part of the (b, hq, s, s) scores.
  Mat scores(const float* p, int i) const {
    const long long s = sh_.s;
    if (copies_) return {p, sh_.s, sh_.g() * s * s};
    return {p + i * sh_.hq * s * s, sh_.s, s * s};
  }
  const Shape& shape() const { return sh_; }

 private:
  Shape sh_;
  bool copies_;
};

// Every call's C = alpha op(A) op(B) (beta 0) for the layout.
void product(Context& c, const Layout& l, bool trans_a, bool trans_b, int m, int n, int k,
             float alpha, const std::function<Mat(int)>& a, const std::function<Mat(int)>& b,
             const std::function<Mat(int)>& out) {
  for (int i = 0; i < l.calls(); ++i) {
    const Mat ma = a(i), mb = b(i), mc = out(i);
    // The output's view is read-only only to share Mat with the inputs.
    detail::gemm_batched(c, trans_a, trans_b, m, n, k, alpha, ma.p, ma.ld, ma.stride, mb.p, mb.ld,
                         mb.stride, 0.f, const_cast<float*>(mc.p), mc.ld, mc.stride, l.batch());
  }
}

// A (b, s, heads, d) input as the layout reads it: its head-major copy, or itself.
class Input {
 public:
  Input(Context& c, const Layout& l, const float* x, int heads)
      : x_(x), copy_(c, l.copies() ? l.shape().size(heads) : 0) {
    const Shape& sh = l.shape();
    if (l.copies()) permute(c, copy_.get(), x, sh.b, sh.s, heads, sh.d, true);
  }
  const float* get() const { return copy_.get() != nullptr ? copy_.get() : x_; }

 private:
  const float* x_;
  detail::Temp copy_;
};

// A (b, s, heads, d) output as the layout writes it: a head-major temporary that finish()
// copies back, or the output itself.
class Output {
 public:
  Output(Context& c, const Layout& l, float* x, int heads)
      : l_(l), x_(x), heads_(heads), copy_(c, l.copies() ? l.shape().size(heads) : 0) {}
  float* get() const { return copy_.get() != nullptr ? copy_.get() : x_; }
  void finish(Context& c) const {
    const Shape& sh = l_.shape();
    if (l_.copies()) permute(c, x_, copy_.get(), sh.b, sh.s, heads_, sh.d, false);
  }

 private:
  const Layout& l_;
  float* x_;
  int heads_;
  detail::Temp copy_;
};

}  // namespace

void attention_forward(Context& c, float* out, float* probs, const float* q, const float* k,
                       const float* v, int b, int s, int hq, int hk, int d, bool bf16) {
  const Layout l(Shape{b, s, hq, hk, d});
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  const std::size_t rows = static_cast<std::size_t>(b) * hq * s;
  const Input qi(c, l, q, hq), ki(c, l, k, hk), vi(c, l, v, hk);
  const Output o(c, l, out, hq);
  const auto qm = [&](int i) { return l.tokens(qi.get(), hq, i); };
  const auto km = [&](int i) { return l.tokens(ki.get(), hk, i); };
  const auto vm = [&](int i) { return l.tokens(vi.get(), hk, i); };
  const auto pm = [&](int i) { return l.scores(probs, i); };
  const auto om = [&](int i) { return l.tokens(o.get(), hq, i); };
  product(c, l, false, true, l.rows(), s, d, scale, qm, km, pm);  // S = scale * Q K^T
  if (bf16) round_bf16(c, probs, probs, rows * s);                // bf16 scores
  causal_softmax_kernel<<<detail::blocks_for(rows, kRowsPerBlock), kThreads, 0, c.stream()>>>(
      probs, rows, s);
  HEXI_CUDA_LAUNCH_CHECK();
  if (bf16) round_bf16(c, probs, probs, rows * s);
  product(c, l, false, false, l.rows(), d, s, 1.f, pm, vm, om);  // O = P V
  o.finish(c);
  if (bf16) round_bf16(c, out, out, rows * d);
}

void attention_backward(Context& c, float* dq, float* dk, float* dv, const float* dout,
                        const float* q, const float* k, const float* v, const float* probs, int b,
                        int s, int hq, int hk, int d, bool bf16) {
  const Layout l(Shape{b, s, hq, hk, d});
  const std::size_t rows = static_cast<std::size_t>(b) * hq * s;
  const Input qi(c, l, q, hq), ki(c, l, k, hk), vi(c, l, v, hk), doi(c, l, dout, hq);
  const Output dqo(c, l, dq, hq), dko(c, l, dk, hk), dvo(c, l, dv, hk);
  const detail::Temp ds(c, rows * s);  // dP, then dS in place; layout of probs
  const auto tok = [&](const float* x, int heads) {
    return [&l, x, heads](int i) { return l.tokens(x, heads, i); };
  };
  const auto pm = [&](int i) { return l.scores(probs, i); };
  const auto dsm = [&](int i) { return l.scores(ds.get(), i); };
  // dP = dO V^T; dV = P^T dO (for g > 1, inner dimension g*s: the sum over the group).
  product(c, l, false, true, l.rows(), s, d, 1.f, tok(doi.get(), hq), tok(vi.get(), hk), dsm);
  product(c, l, true, false, s, d, l.rows(), 1.f, pm, tok(doi.get(), hq), tok(dvo.get(), hk));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  if (bf16) round_bf16(c, ds.get(), ds.get(), rows * s);  // bf16 dP
  softmax_backward_kernel<<<detail::blocks_for(rows, kRowsPerBlock), kThreads, 0, c.stream()>>>(
      ds.get(), probs, rows, s, scale);
  HEXI_CUDA_LAUNCH_CHECK();
  if (bf16) round_bf16(c, ds.get(), ds.get(), rows * s);
  // dQ = dS K; dK = dS^T Q.
  product(c, l, false, false, l.rows(), d, s, 1.f, dsm, tok(ki.get(), hk), tok(dqo.get(), hq));
  product(c, l, true, false, s, d, l.rows(), 1.f, dsm, tok(qi.get(), hq), tok(dko.get(), hk));
  dqo.finish(c);
  dko.finish(c);
  dvo.finish(c);
  if (bf16) {  // dK and dV summed over a KV group's query heads in fp32, then rounded once
    const Shape& sh = l.shape();
    round_bf16(c, dq, dq, sh.size(hq));
    round_bf16(c, dk, dk, sh.size(hk));
    round_bf16(c, dv, dv, sh.size(hk));
  }
}

}  // namespace hexi::kernels::cuda
