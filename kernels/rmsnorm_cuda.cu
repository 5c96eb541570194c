// RMSNorm forward and backward (formulas in rmsnorm_cpu.cpp). One warp per row for the
// per-token work; the gain gradient sums over tokens in two deterministic passes
// (fixed chunks of rows, then the chunks in order) instead of atomics.
#include "kernels/cuda_common.cuh"

namespace hexi::kernels::cuda {
namespace {

using detail::kThreads;
using detail::kWarp;
constexpr int kRowsPerBlock = kThreads / kWarp;
constexpr int kRowsPerChunk = 64;  // rows summed by one thread in the gain gradient

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* x, const float* w,
                                       int n, int h, float eps) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= n) return;
  const float* xr = x + static_cast<std::size_t>(row) * h;
  float sum_sq = 0.f;
  for (int j = lane; j < h; j += kWarp) sum_sq += xr[j] * xr[j];
  const float r = rsqrtf(detail::warp_sum(sum_sq) / h + eps);
  float* yr = out + static_cast<std::size_t>(row) * h;
  for (int j = lane; j < h; j += kWarp) yr[j] = xr[j] * r * w[j];
  if (lane == 0) rstd[row] = r;
}

__global__ void rmsnorm_backward_dx_kernel(float* dx, const float* dout, const float* x,
                                           const float* w, const float* rstd, int n, int h) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= n) return;
  const std::size_t base = static_cast<std::size_t>(row) * h;
  float c = 0.f;
  for (int j = lane; j < h; j += kWarp) c += dout[base + j] * w[j] * x[base + j];
  c = detail::warp_sum(c);
  const float r = rstd[row];
  for (int j = lane; j < h; j += kWarp)
    dx[base + j] = r * (w[j] * dout[base + j] - x[base + j] * r * r * c / h);
}

// partial (chunks, h): sum over the chunk's rows of dout * x * rstd, one thread per column.
__global__ void rmsnorm_dw_partial_kernel(float* partial, const float* dout, const float* x,
                                          const float* rstd, int n, int h) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int chunk = blockIdx.y;
  if (col >= h) return;
  const int end = min(n, (chunk + 1) * kRowsPerChunk);
  float sum = 0.f;
  for (int row = chunk * kRowsPerChunk; row < end; ++row) {
    const std::size_t i = static_cast<std::size_t>(row) * h + col;
    sum += dout[i] * x[i] * rstd[row];
  }
  partial[static_cast<std::size_t>(chunk) * h + col] = sum;
}

// dw (h) += sum over chunks, in chunk order.
__global__ void column_sum_kernel(float* dw, const float* partial, int chunks, int h) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= h) return;
  float sum = 0.f;
  for (int chunk = 0; chunk < chunks; ++chunk)
    sum += partial[static_cast<std::size_t>(chunk) * h + col];
  dw[col] += sum;
}

}  // namespace

void rmsnorm_forward(Context& c, float* out, float* rstd, const float* x, const float* w, int n,
                     int h, double eps) {
  rmsnorm_forward_kernel<<<detail::blocks_for(n, kRowsPerBlock), kThreads, 0, c.stream()>>>(
      out, rstd, x, w, n, h, static_cast<float>(eps));
  HEXI_CUDA_LAUNCH_CHECK();
}

void rmsnorm_backward(Context& c, float* dx, float* dw, const float* dout, const float* x,
                      const float* w, const float* rstd, int n, int h) {
  rmsnorm_backward_dx_kernel<<<detail::blocks_for(n, kRowsPerBlock), kThreads, 0, c.stream()>>>(
      dx, dout, x, w, rstd, n, h);
  HEXI_CUDA_LAUNCH_CHECK();
  const int chunks = (n + kRowsPerChunk - 1) / kRowsPerChunk;
  detail::Temp partial(c, static_cast<std::size_t>(chunks) * h);
  const dim3 grid(detail::blocks_for(h), chunks);
  rmsnorm_dw_partial_kernel<<<grid, kThreads, 0, c.stream()>>>(partial.get(), dout, x, rstd, n, h);
  HEXI_CUDA_LAUNCH_CHECK();
  column_sum_kernel<<<detail::blocks_for(h), kThreads, 0, c.stream()>>>(dw, partial.get(), chunks,
                                                                        h);
  HEXI_CUDA_LAUNCH_CHECK();
}

}  // namespace hexi::kernels::cuda
