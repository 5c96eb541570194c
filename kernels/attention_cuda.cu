// Causal grouped-query attention (semantics and formulas in attention_cpu.cpp): the
// per-head products through strided-batched cuBLAS SGEMMs and the causal softmax in a
// warp-per-row kernel. Query head j = kh*g + r reads KV head kh (g = hq/hk): for a
// fixed sequence bi and group member r, the hk query heads kh*g + r are one strided
// batch (stride g*d in Q, d in K and V, g*s*s in P). dK and dV sum over r in order.
#include <cmath>

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

// Offsets and strides of the strided batch (bi, r) described above.
struct Batch {
  int s, hq, hk, d;
  int g() const { return hq / hk; }
  std::size_t q(int bi, int r) const { return (static_cast<std::size_t>(bi) * s * hq + r) * d; }
  std::size_t kv(int bi) const { return static_cast<std::size_t>(bi) * s * hk * d; }
  std::size_t p(int bi, int r) const { return (static_cast<std::size_t>(bi) * hq + r) * s * s; }
  long long q_stride() const { return static_cast<long long>(g()) * d; }
  long long kv_stride() const { return d; }
  long long p_stride() const { return static_cast<long long>(g()) * s * s; }
};

}  // namespace

void attention_forward(Context& c, float* out, float* probs, const float* q, const float* k,
                       const float* v, int b, int s, int hq, int hk, int d, bool bf16) {
  const Batch bt{s, hq, hk, d};
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  const std::size_t rows = static_cast<std::size_t>(b) * hq * s;
  for (int bi = 0; bi < b; ++bi)
    for (int r = 0; r < bt.g(); ++r)  // S = scale * Q K^T
      detail::gemm_batched(c, false, true, s, s, d, scale, q + bt.q(bi, r), hq * d, bt.q_stride(),
                           k + bt.kv(bi), hk * d, bt.kv_stride(), 0.f, probs + bt.p(bi, r), s,
                           bt.p_stride(), hk);
  if (bf16) round_bf16(c, probs, probs, rows * s);  // bf16 scores
  causal_softmax_kernel<<<detail::blocks_for(rows, kRowsPerBlock), kThreads, 0, c.stream()>>>(
      probs, rows, s);
  HEXI_CUDA_LAUNCH_CHECK();
  if (bf16) round_bf16(c, probs, probs, rows * s);
  for (int bi = 0; bi < b; ++bi)
    for (int r = 0; r < bt.g(); ++r)  // O = P V
      detail::gemm_batched(c, false, false, s, d, s, 1.f, probs + bt.p(bi, r), s, bt.p_stride(),
                           v + bt.kv(bi), hk * d, bt.kv_stride(), 0.f, out + bt.q(bi, r), hq * d,
                           bt.q_stride(), hk);
  if (bf16) round_bf16(c, out, out, rows * d);
}

void attention_backward(Context& c, float* dq, float* dk, float* dv, const float* dout,
                        const float* q, const float* k, const float* v, const float* probs, int b,
                        int s, int hq, int hk, int d, bool bf16) {
  const Batch bt{s, hq, hk, d};
  const std::size_t rows = static_cast<std::size_t>(b) * hq * s;
  detail::Temp ds(c, rows * s);  // dP, then dS in place; layout of probs
  for (int bi = 0; bi < b; ++bi) {
    for (int r = 0; r < bt.g(); ++r) {
      const float beta = r == 0 ? 0.f : 1.f;  // the first group member overwrites dV
      // dP = dO V^T
      detail::gemm_batched(c, false, true, s, s, d, 1.f, dout + bt.q(bi, r), hq * d, bt.q_stride(),
                           v + bt.kv(bi), hk * d, bt.kv_stride(), 0.f, ds.get() + bt.p(bi, r), s,
                           bt.p_stride(), hk);
      // dV (+)= P^T dO
      detail::gemm_batched(c, true, false, s, d, s, 1.f, probs + bt.p(bi, r), s, bt.p_stride(),
                           dout + bt.q(bi, r), hq * d, bt.q_stride(), beta, dv + bt.kv(bi), hk * d,
                           bt.kv_stride(), hk);
    }
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  if (bf16) round_bf16(c, ds.get(), ds.get(), rows * s);  // bf16 dP
  softmax_backward_kernel<<<detail::blocks_for(rows, kRowsPerBlock), kThreads, 0, c.stream()>>>(
      ds.get(), probs, rows, s, scale);
  HEXI_CUDA_LAUNCH_CHECK();
  if (bf16) round_bf16(c, ds.get(), ds.get(), rows * s);
  for (int bi = 0; bi < b; ++bi) {
    for (int r = 0; r < bt.g(); ++r) {
      const float beta = r == 0 ? 0.f : 1.f;
      // dQ = dS K
      detail::gemm_batched(c, false, false, s, d, s, 1.f, ds.get() + bt.p(bi, r), s, bt.p_stride(),
                           k + bt.kv(bi), hk * d, bt.kv_stride(), 0.f, dq + bt.q(bi, r), hq * d,
                           bt.q_stride(), hk);
      // dK (+)= dS^T Q
      detail::gemm_batched(c, true, false, s, d, s, 1.f, ds.get() + bt.p(bi, r), s, bt.p_stride(),
                           q + bt.q(bi, r), hq * d, bt.q_stride(), beta, dk + bt.kv(bi), hk * d,
                           bt.kv_stride(), hk);
    }
  }
  if (bf16) {  // dK and dV summed over a KV group's query heads in fp32, then rounded once
    const std::size_t kv = static_cast<std::size_t>(b) * s * hk * d;
    round_bf16(c, dq, dq, rows * d);
    round_bf16(c, dk, dk, kv);
    round_bf16(c, dv, dv, kv);
  }
}

}  // namespace hexi::kernels::cuda
