// Blockwise causal attention on the GPU: semantics, layouts and bf16 rounding points of
// attention_blockwise.hpp, formulas of attention_blockwise_cpu.cpp. A plain first version:
// one warp per query row and query head (forward, dQ) or per key row and KV head (dK, dV),
// the lanes splitting the head dimension (up to kMaxPerLane values each), the other side's
// rows visited one at a time in order, each after the test of the two positions. No
// shared-memory tiling and no tensor cores: correct and deterministic (no atomics, every sum
// in a fixed order) but far from a FlashAttention kernel's speed. Scratch: D = rowsum(dO * O)
// of the query rows (q_tokens, hq) in the backward.
#include <cuda_bf16.h>

#include <cmath>
#include <string>

#include "kernels/attention_blockwise.hpp"
#include "kernels/cuda_common.cuh"

namespace hexi::kernels::cuda {
namespace {

using detail::kThreads;
using detail::kWarp;
constexpr int kWarpsPerBlock = kThreads / kWarp;
constexpr int kMaxPerLane = 8;  // head dimension up to 8 * 32 = 256

__device__ float bf16_value(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

__device__ std::size_t q_at(const AttentionBlockPair& p, int t, int head) {
  return (static_cast<std::size_t>(t) * p.hq + head) * p.d;
}
__device__ std::size_t kv_at(const AttentionBlockPair& p, int t, int kh) {
  return (static_cast<std::size_t>(t) * p.hk + kh) * p.d;
}

// A row of d values spread over a warp: lane l holds elements l, l + 32, ...
struct LaneRow {
  float x[kMaxPerLane];
  __device__ void zero() {
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) x[i] = 0.f;
  }
  __device__ void load(const float* row, int d, int lane) {
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int e = lane + i * kWarp;
      x[i] = e < d ? row[e] : 0.f;
    }
  }
  // The warp's sum of x . row (every lane gets it).
  __device__ float dot(const float* row, int d, int lane) const {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int e = lane + i * kWarp;
      if (e < d) s += x[i] * row[e];
    }
    return detail::warp_sum(s);
  }
  // x = x * a + b * row
  __device__ void scale_add(float a, float b, const float* row, int d, int lane) {
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int e = lane + i * kWarp;
      if (e < d) x[i] = x[i] * a + b * row[e];
    }
  }
  // row += x * a
  __device__ void add_to(float* row, float a, int d, int lane) const {
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int e = lane + i * kWarp;
      if (e < d) row[e] += x[i] * a;
    }
  }
};

// The warp's row index (warps of one block are consecutive rows); rows past the end return
// false for the whole warp at once.
__device__ bool warp_row(std::size_t rows, std::size_t& row, int& lane) {
  row = static_cast<std::size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  lane = threadIdx.x % kWarp;
  return row < rows;
}

// Warp per (query token t, query head j), row = t * hq + j: online softmax over the visible
// keys in order.
__global__ void forward_kernel(float* out, float* lse, const float* q, const float* k,
                               const float* v, AttentionBlockPair p, float scale, bool bf16) {
  std::size_t row = 0;
  int lane = 0;
  if (!warp_row(static_cast<std::size_t>(p.q_tokens) * p.hq, row, lane)) return;
  const int t = static_cast<int>(row / p.hq), j = static_cast<int>(row % p.hq);
  const int kh = j / (p.hq / p.hk), pos = p.q_pos[t];
  LaneRow qr, acc;
  qr.load(q + row * p.d, p.d, lane);
  acc.zero();
  float max = -INFINITY, sum = 0.f;
  for (int c = 0; c < p.kv_tokens; ++c) {
    if (p.kv_pos[c] > pos) continue;
    const float s = qr.dot(k + kv_at(p, c, kh), p.d, lane) * scale;
    const float new_max = fmaxf(max, s);
    const float rescale = expf(max - new_max);  // 0 while max is -inf
    const float pr = expf(s - new_max);
    sum = sum * rescale + pr;
    acc.scale_add(rescale, bf16 ? bf16_value(pr) : pr, v + kv_at(p, c, kh), p.d, lane);
    max = new_max;
  }
  float* o = out + row * p.d;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int e = lane + i * kWarp;
    if (e < p.d) o[e] = sum == 0.f ? 0.f : acc.x[i] / sum;
  }
  if (lane == 0) lse[row] = sum == 0.f ? -INFINITY : max + logf(sum);
}

// Warp per row of (tokens, heads): the merge of attention_merge.
__global__ void merge_kernel(float* out, float* lse, const float* out_b, const float* lse_b,
                             std::size_t rows, int d) {
  std::size_t row = 0;
  int lane = 0;
  if (!warp_row(rows, row, lane)) return;
  const float a = lse[row], b = lse_b[row];
  if (b == -INFINITY) return;
  const float merged = a == -INFINITY ? b : fmaxf(a, b) + log1pf(expf(-fabsf(a - b)));
  const float wa = a == -INFINITY ? 0.f : expf(a - merged);
  const float wb = a == -INFINITY ? 1.f : expf(b - merged);
  for (int e = lane; e < d; e += kWarp) {
    const std::size_t at = row * d + e;
    out[at] = a == -INFINITY ? out_b[at] : out[at] * wa + out_b[at] * wb;
  }
  if (lane == 0) lse[row] = merged;
}

// Warp per query row: D = rowsum(dO * O).
__global__ void dsum_kernel(float* dsum, const float* dout, const float* out, std::size_t rows,
                            int d) {
  std::size_t row = 0;
  int lane = 0;
  if (!warp_row(rows, row, lane)) return;
  LaneRow dr;
  dr.load(dout + row * d, d, lane);
  const float s = dr.dot(out + row * d, d, lane);
  if (lane == 0) dsum[row] = s;
}

// Warp per query row: dQ += sum over visible keys of dS K.
__global__ void dq_kernel(float* dq, const float* dout, const float* q, const float* k,
                          const float* v, const float* lse, const float* dsum, AttentionBlockPair p,
                          float scale, bool bf16) {
  std::size_t row = 0;
  int lane = 0;
  if (!warp_row(static_cast<std::size_t>(p.q_tokens) * p.hq, row, lane)) return;
  const int t = static_cast<int>(row / p.hq), j = static_cast<int>(row % p.hq);
  const int kh = j / (p.hq / p.hk), pos = p.q_pos[t];
  LaneRow qr, dr, acc;
  qr.load(q + row * p.d, p.d, lane);
  dr.load(dout + row * p.d, p.d, lane);
  acc.zero();
  for (int c = 0; c < p.kv_tokens; ++c) {
    if (p.kv_pos[c] > pos) continue;
    const float pr = expf(qr.dot(k + kv_at(p, c, kh), p.d, lane) * scale - lse[row]);
    const float dp = dr.dot(v + kv_at(p, c, kh), p.d, lane);
    const float ds = pr * (dp - dsum[row]) * scale;
    acc.scale_add(1.f, bf16 ? bf16_value(ds) : ds, k + kv_at(p, c, kh), p.d, lane);
  }
  acc.add_to(dq + row * p.d, 1.f, p.d, lane);
}

// Warp per (key token c, KV head kh), row = c * hk + kh: dK += dS^T Q and dV += P^T dO over
// the visible query rows of the group's query heads, in order.
__global__ void dkv_kernel(float* dk, float* dv, const float* dout, const float* q, const float* k,
                           const float* v, const float* lse, const float* dsum,
                           AttentionBlockPair p, float scale, bool bf16) {
  std::size_t row = 0;
  int lane = 0;
  if (!warp_row(static_cast<std::size_t>(p.kv_tokens) * p.hk, row, lane)) return;
  const int c = static_cast<int>(row / p.hk), kh = static_cast<int>(row % p.hk);
  const int g = p.hq / p.hk, pos = p.kv_pos[c];
  LaneRow kr, vr, dk_acc, dv_acc;
  kr.load(k + row * p.d, p.d, lane);
  vr.load(v + row * p.d, p.d, lane);
  dk_acc.zero();
  dv_acc.zero();
  for (int t = 0; t < p.q_tokens; ++t) {
    if (pos > p.q_pos[t]) continue;
    for (int j = kh * g; j < (kh + 1) * g; ++j) {
      const std::size_t qrow = static_cast<std::size_t>(t) * p.hq + j;
      const float* qv = q + q_at(p, t, j);
      const float* dov = dout + q_at(p, t, j);
      const float pr = expf(kr.dot(qv, p.d, lane) * scale - lse[qrow]);
      const float dp = vr.dot(dov, p.d, lane);
      const float ds = pr * (dp - dsum[qrow]) * scale;
      dv_acc.scale_add(1.f, bf16 ? bf16_value(pr) : pr, dov, p.d, lane);
      dk_acc.scale_add(1.f, bf16 ? bf16_value(ds) : ds, qv, p.d, lane);
    }
  }
  dk_acc.add_to(dk + row * p.d, 1.f, p.d, lane);
  dv_acc.add_to(dv + row * p.d, 1.f, p.d, lane);
}

void check_head_dim(int d) {
  if (d > kMaxPerLane * kWarp)
    throw Error("blockwise attention: head dimension " + std::to_string(d) + " exceeds " +
                std::to_string(kMaxPerLane * kWarp));
}

float softmax_scale(int d) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
}

}  // namespace

void blockwise_attention_forward(Context& c, float* out, float* lse, const float* q, const float* k,
                                 const float* v, const AttentionBlockPair& pair, bool bf16) {
  check_head_dim(pair.d);
  const std::size_t rows = static_cast<std::size_t>(pair.q_tokens) * pair.hq;
  if (rows == 0) return;
  forward_kernel<<<detail::blocks_for(rows, kWarpsPerBlock), kThreads, 0, c.stream()>>>(
      out, lse, q, k, v, pair, softmax_scale(pair.d), bf16);
  HEXI_CUDA_LAUNCH_CHECK();
}

void attention_merge(Context& c, float* out, float* lse, const float* out_b, const float* lse_b,
                     int tokens, int heads, int d) {
  const std::size_t rows = static_cast<std::size_t>(tokens) * heads;
  if (rows == 0) return;
  merge_kernel<<<detail::blocks_for(rows, kWarpsPerBlock), kThreads, 0, c.stream()>>>(
      out, lse, out_b, lse_b, rows, d);
  HEXI_CUDA_LAUNCH_CHECK();
}

void blockwise_attention_backward(Context& c, float* dq, float* dk, float* dv, const float* dout,
                                  const float* q, const float* k, const float* v, const float* out,
                                  const float* lse, const AttentionBlockPair& pair, bool bf16) {
  check_head_dim(pair.d);
  const std::size_t q_rows = static_cast<std::size_t>(pair.q_tokens) * pair.hq;
  const std::size_t kv_rows = static_cast<std::size_t>(pair.kv_tokens) * pair.hk;
  if (q_rows == 0 || kv_rows == 0) return;
  const float scale = softmax_scale(pair.d);
  detail::Temp dsum(c, q_rows);
  dsum_kernel<<<detail::blocks_for(q_rows, kWarpsPerBlock), kThreads, 0, c.stream()>>>(
      dsum.get(), dout, out, q_rows, pair.d);
  HEXI_CUDA_LAUNCH_CHECK();
  dq_kernel<<<detail::blocks_for(q_rows, kWarpsPerBlock), kThreads, 0, c.stream()>>>(
      dq, dout, q, k, v, lse, dsum.get(), pair, scale, bf16);
  HEXI_CUDA_LAUNCH_CHECK();
  dkv_kernel<<<detail::blocks_for(kv_rows, kWarpsPerBlock), kThreads, 0, c.stream()>>>(
      dk, dv, dout, q, k, v, lse, dsum.get(), pair, scale, bf16);
  HEXI_CUDA_LAUNCH_CHECK();
}

}  // namespace hexi::kernels::cuda
