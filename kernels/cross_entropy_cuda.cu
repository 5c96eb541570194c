// Vocab-parallel cross-entropy pieces (semantics in cpu_kernels.hpp and
// cross_entropy_cpu.cpp): one block of kThreads per token row of the logits shard.
#include "kernels/cuda_common.cuh"

namespace hexi::kernels::cuda {
namespace {

using detail::kThreads;

__global__ void row_max_kernel(float* row_max, const float* logits, int vl) {
  const float* row = logits + static_cast<std::size_t>(blockIdx.x) * vl;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < vl; j += kThreads) m = fmaxf(m, row[j]);
  m = detail::block_reduce<true>(m);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

__global__ void partials_kernel(float* partials, const float* logits, const float* row_max,
                                const int* targets, int vl, int vocab_begin) {
  const int i = blockIdx.x;
  const float* row = logits + static_cast<std::size_t>(i) * vl;
  const float max = row_max[i];
  float sum = 0.f;
  for (int j = threadIdx.x; j < vl; j += kThreads) sum += expf(row[j] - max);
  sum = detail::block_reduce<false>(sum);
  if (threadIdx.x == 0) {
    const int local = targets[i] - vocab_begin;
    partials[2 * i] = sum;
    partials[2 * i + 1] = (local >= 0 && local < vl) ? row[local] : 0.f;
  }
}

__global__ void loss_kernel(float* loss, const float* row_max, const float* partials, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) loss[i] = row_max[i] + logf(partials[2 * i]) - partials[2 * i + 1];
}

__global__ void backward_kernel(float* dlogits, const float* logits, const float* row_max,
                                const float* partials, const int* targets, int vl, int vocab_begin,
                                float loss_scale) {
  const int i = blockIdx.x;
  const std::size_t base = static_cast<std::size_t>(i) * vl;
  const float max = row_max[i], inv_sum = 1.f / partials[2 * i];
  const int local = targets[i] - vocab_begin;
  for (int j = threadIdx.x; j < vl; j += kThreads) {
    const float p = expf(logits[base + j] - max) * inv_sum;
    dlogits[base + j] = (p - (j == local ? 1.f : 0.f)) * loss_scale;
  }
}

}  // namespace

void logits_row_max(Context& c, float* row_max, const float* logits, int n, int vl) {
  if (n == 0) return;
  row_max_kernel<<<n, kThreads, 0, c.stream()>>>(row_max, logits, vl);
  HEXI_CUDA_LAUNCH_CHECK();
}

void cross_entropy_partials(Context& c, float* partials, const float* logits, const float* row_max,
                            const int* targets, int n, int vl, int vocab_begin) {
  if (n == 0) return;
  partials_kernel<<<n, kThreads, 0, c.stream()>>>(partials, logits, row_max, targets, vl,
                                                  vocab_begin);
  HEXI_CUDA_LAUNCH_CHECK();
}

void cross_entropy_loss(Context& c, float* loss, const float* row_max, const float* partials,
                        int n) {
  if (n == 0) return;
  loss_kernel<<<detail::blocks_for(n), kThreads, 0, c.stream()>>>(loss, row_max, partials, n);
  HEXI_CUDA_LAUNCH_CHECK();
}

void cross_entropy_backward(Context& c, float* dlogits, const float* logits, const float* row_max,
                            const float* partials, const int* targets, int n, int vl,
                            int vocab_begin, double loss_scale) {
  if (n == 0) return;
  backward_kernel<<<n, kThreads, 0, c.stream()>>>(dlogits, logits, row_max, partials, targets, vl,
                                                  vocab_begin, static_cast<float>(loss_scale));
  HEXI_CUDA_LAUNCH_CHECK();
}

}  // namespace hexi::kernels::cuda
