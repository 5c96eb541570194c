#pragma once
// Private helpers of the CUDA kernels: launch geometry, warp/block reductions,
// row-major GEMMs over cuBLAS, stream-ordered temporaries.

#include <cstddef>

#include "kernels/cuda_check.hpp"
#include "kernels/cuda_kernels.hpp"

namespace hexi::kernels::cuda::detail {

constexpr int kWarp = 32;
constexpr int kThreads = 256;  // threads per block of the elementwise and row kernels

inline unsigned blocks_for(std::size_t work, int per_block = kThreads) {
  return static_cast<unsigned>((work + per_block - 1) / per_block);
}

// Checks the launch that just happened on this thread (configuration errors).
#define HEXI_CUDA_LAUNCH_CHECK() HEXI_CUDA_CHECK(cudaGetLastError())

__device__ inline float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum (or max) over a block of kThreads threads; every thread gets the result. The
// order of the additions is fixed by the launch geometry, so results are reproducible.
template <bool kMax>
__device__ inline float block_reduce(float v) {
  __shared__ float partial[kThreads / kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = kMax ? warp_max(v) : warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float r = lane < kThreads / kWarp ? partial[lane] : (kMax ? -INFINITY : 0.f);
  r = kMax ? warp_max(r) : warp_sum(r);
  __syncthreads();  // partial[] may be reused by the next call
  return r;
}

// C (m, n) = alpha op(A) op(B) + beta C for row-major matrices with leading dimensions
// lda, ldb, ldc (elements between rows). A row-major matrix is its transpose in
// cuBLAS's column-major view, so C^T = op(B)^T op(A)^T: swap the operands and m, n.
void gemm(Context& c, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
          int lda, const float* b, int ldb, float beta, float* out, int ldc);
// `batch` such products, operand i at a + i*stride_a, b + i*stride_b, out + i*stride_c.
void gemm_batched(Context& c, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                  const float* a, int lda, long long stride_a, const float* b, int ldb,
                  long long stride_b, float beta, float* out, int ldc, long long stride_c,
                  int batch);

// A temporary device buffer, allocated and freed in stream order on the context's
// stream (cudaMallocAsync from the cached pool): no synchronisation, no leaks.
class Temp {
 public:
  Temp(Context& c, std::size_t floats);
  ~Temp();
  Temp(const Temp&) = delete;
  Temp& operator=(const Temp&) = delete;
  float* get() const { return ptr_; }

 private:
  cudaStream_t stream_;
  float* ptr_ = nullptr;
};

}  // namespace hexi::kernels::cuda::detail
