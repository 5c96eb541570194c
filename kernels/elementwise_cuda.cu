// Elementwise kernels (semantics in swiglu_cpu.cpp, adamw_cpu.cpp): one thread per
// element, grid-stride loops so any n fits one launch.
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda_common.cuh"

namespace hexi::kernels::cuda {
namespace {

constexpr unsigned kMaxBlocks = 65535;

unsigned grid_for(std::size_t n) {
  return std::min<std::size_t>(detail::blocks_for(n), kMaxBlocks);
}

#define HEXI_GRID_STRIDE(i, n)                                                                   \
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)

__device__ inline float sigmoid(float g) {
  return 1.f / (1.f + expf(-g));
}

__global__ void swiglu_forward_kernel(float* out, const float* gate, const float* up,
                                      std::size_t n) {
  HEXI_GRID_STRIDE(i, n) {
    out[i] = gate[i] * sigmoid(gate[i]) * up[i];
  }
}

__global__ void swiglu_backward_kernel(float* dgate, float* dup, const float* dout,
                                       const float* gate, const float* up, std::size_t n) {
  HEXI_GRID_STRIDE(i, n) {
    const float g = gate[i], sg = sigmoid(g);
    dgate[i] = dout[i] * up[i] * sg * (1.f + g * (1.f - sg));
    dup[i] = dout[i] * g * sg;
  }
}

__global__ void add_kernel(float* y, const float* x, std::size_t n) {
  HEXI_GRID_STRIDE(i, n) {
    y[i] += x[i];
  }
}

__global__ void round_bf16_kernel(float* dst, const float* src, std::size_t n) {
  HEXI_GRID_STRIDE(i, n) {
    dst[i] = __bfloat162float(__float2bfloat16_rn(src[i]));
  }
}

__global__ void to_bf16_kernel(std::uint16_t* dst, const float* src, std::size_t n) {
  HEXI_GRID_STRIDE(i, n) {
    dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));
  }
}

__global__ void from_bf16_kernel(float* dst, const std::uint16_t* src, std::size_t n) {
  HEXI_GRID_STRIDE(i, n) {
    dst[i] = __bfloat162float(__ushort_as_bfloat16(src[i]));
  }
}

__global__ void copy_2d_kernel(float* dst, std::size_t dst_stride, const float* src,
                               std::size_t src_stride, std::size_t rows, std::size_t cols,
                               bool accumulate) {
  HEXI_GRID_STRIDE(i, rows * cols) {
    const std::size_t r = i / cols, c = i % cols;
    float* to = dst + r * dst_stride + c;
    const float from = src[r * src_stride + c];
    *to = accumulate ? *to + from : from;
  }
}

__global__ void fill_kernel(float* dst, float value, std::size_t n) {
  HEXI_GRID_STRIDE(i, n) {
    dst[i] = value;
  }
}

// step_size = lr / (1 - beta1^t), bias2_sqrt = sqrt(1 - beta2^t), computed on the host.
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, std::size_t n,
                             float lr, float beta1, float beta2, float eps, float weight_decay,
                             float step_size, float bias2_sqrt) {
  HEXI_GRID_STRIDE(i, n) {
    const float g = grad[i];
    const float p = param[i] * (1.f - lr * weight_decay);
    const float mi = beta1 * m[i] + (1.f - beta1) * g;
    const float vi = beta2 * v[i] + (1.f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = p - step_size * mi / (sqrtf(vi) / bias2_sqrt + eps);
  }
}

}  // namespace

void swiglu_forward(Context& c, float* out, const float* gate, const float* up, std::size_t n) {
  if (n == 0) return;
  swiglu_forward_kernel<<<grid_for(n), detail::kThreads, 0, c.stream()>>>(out, gate, up, n);
  HEXI_CUDA_LAUNCH_CHECK();
}

void swiglu_backward(Context& c, float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, std::size_t n) {
  if (n == 0) return;
  swiglu_backward_kernel<<<grid_for(n), detail::kThreads, 0, c.stream()>>>(dgate, dup, dout, gate,
                                                                           up, n);
  HEXI_CUDA_LAUNCH_CHECK();
}

void add_inplace(Context& c, float* y, const float* x, std::size_t n) {
  if (n == 0) return;
  add_kernel<<<grid_for(n), detail::kThreads, 0, c.stream()>>>(y, x, n);
  HEXI_CUDA_LAUNCH_CHECK();
}

void copy_2d(Context& c, float* dst, std::size_t dst_stride, const float* src,
             std::size_t src_stride, std::size_t rows, std::size_t cols, bool accumulate) {
  if (rows * cols == 0) return;
  copy_2d_kernel<<<grid_for(rows * cols), detail::kThreads, 0, c.stream()>>>(
      dst, dst_stride, src, src_stride, rows, cols, accumulate);
  HEXI_CUDA_LAUNCH_CHECK();
}

void fill(Context& c, float* dst, float value, std::size_t n) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), detail::kThreads, 0, c.stream()>>>(dst, value, n);
  HEXI_CUDA_LAUNCH_CHECK();
}

void round_bf16(Context& c, float* dst, const float* src, std::size_t n) {
  if (n == 0) return;
  round_bf16_kernel<<<grid_for(n), detail::kThreads, 0, c.stream()>>>(dst, src, n);
  HEXI_CUDA_LAUNCH_CHECK();
}

void to_bf16(Context& c, std::uint16_t* dst, const float* src, std::size_t n) {
  if (n == 0) return;
  to_bf16_kernel<<<grid_for(n), detail::kThreads, 0, c.stream()>>>(dst, src, n);
  HEXI_CUDA_LAUNCH_CHECK();
}

void from_bf16(Context& c, float* dst, const std::uint16_t* src, std::size_t n) {
  if (n == 0) return;
  from_bf16_kernel<<<grid_for(n), detail::kThreads, 0, c.stream()>>>(dst, src, n);
  HEXI_CUDA_LAUNCH_CHECK();
}

void adamw_update(Context& c, float* param, const float* grad, float* m, float* v, std::size_t n,
                  double lr, double beta1, double beta2, double eps, double weight_decay,
                  int step) {
  if (n == 0) return;
  const double step_size = lr / (1.0 - std::pow(beta1, step));
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(beta2, step));
  adamw_kernel<<<grid_for(n), detail::kThreads, 0, c.stream()>>>(
      param, grad, m, v, n, float(lr), float(beta1), float(beta2), float(eps), float(weight_decay),
      float(step_size), float(bias2_sqrt));
  HEXI_CUDA_LAUNCH_CHECK();
}

}  // namespace hexi::kernels::cuda
