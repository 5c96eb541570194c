#pragma once
// Every CUDA runtime and cuBLAS call goes through these macros (each records file, line and the
// library's error string; llm.c's cudaCheck): a failure throws cuda::Error whose message records
// the file, the line, the failed expression and the library's own error string. Kernel launches are
// followed by HEXI_CUDA_CHECK(cudaGetLastError()). The engine catches cuda::Error at
// the rank level and turns it into one clear message and a non-zero exit.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace hexi::kernels::cuda {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* expr, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t s, const char* expr, const char* file,
                                     int line);

}  // namespace hexi::kernels::cuda

#define HEXI_CUDA_CHECK(expr)                                                        \
  do {                                                                               \
    cudaError_t hexi_err_ = (expr);                                                  \
    if (hexi_err_ != cudaSuccess)                                                    \
      ::hexi::kernels::cuda::throw_cuda_error(hexi_err_, #expr, __FILE__, __LINE__); \
  } while (0)

#define HEXI_CUBLAS_CHECK(expr)                                                       \
  do {                                                                                \
    cublasStatus_t hexi_st_ = (expr);                                                 \
    if (hexi_st_ != CUBLAS_STATUS_SUCCESS)                                            \
      ::hexi::kernels::cuda::throw_cublas_error(hexi_st_, #expr, __FILE__, __LINE__); \
  } while (0)
