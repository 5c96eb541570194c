#pragma once
// Helpers of the cuda backend's tests (backend_cuda_test, nccl_mpi_test): why a test must
// skip, and Buffers on the device for the collective suite.

#include <cuda_runtime.h>

#include <string>

#include "engine/comm_suite.hpp"
#include "kernels/cuda_kernels.hpp"

namespace hexi::engine {

// Empty when `gpus_needed` GPUs can be used; else the reason (no driver, no device, too few).
inline std::string cuda_skip_reason(int gpus_needed) {
  std::string why = kernels::cuda::device_unavailable_reason();
  if (!why.empty()) return why;
  int count = 0;
  cudaGetDeviceCount(&count);
  if (count < gpus_needed) {
    return std::to_string(gpus_needed) + " ranks need " + std::to_string(gpus_needed) +
           " GPUs, found " + std::to_string(count);
  }
  return {};
}

// The collective suite's buffers in device memory (cudaMalloc, copies through the host).
inline Buffers cuda_device_buffers() {
  Buffers b;
  b.alloc = [](std::size_t bytes) {
    void* p = nullptr;
    cudaMalloc(&p, bytes == 0 ? 1 : bytes);
    return p;
  };
  b.free = [](void* p) { cudaFree(p); };
  b.to_device = [](void* dst, const void* src, std::size_t n) {
    cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice);
  };
  b.to_host = [](void* dst, const void* src, std::size_t n) {
    cudaDeviceSynchronize();
    cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost);
  };
  return b;
}

}  // namespace hexi::engine
