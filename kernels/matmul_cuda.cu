// Linear layers through cuBLAS SGEMM (row-major wrappers in cuda_common.cuh).
#include "kernels/cuda_common.cuh"

namespace hexi::kernels::cuda {

void matmul_forward(Context& c, float* out, const float* x, const float* w, int n, int k, int m) {
  // out (n, m) = x (n, k) . w (m, k)^T
  detail::gemm(c, false, true, n, m, k, 1.f, x, k, w, k, 0.f, out, m);
}

void matmul_backward_input(Context& c, float* dx, const float* dout, const float* w, int n, int k,
                           int m, bool accumulate) {
  // dx (n, k) (+)= dout (n, m) . w (m, k)
  detail::gemm(c, false, false, n, k, m, 1.f, dout, m, w, k, accumulate ? 1.f : 0.f, dx, k);
}

void matmul_backward_weight(Context& c, float* dw, const float* dout, const float* x, int n, int k,
                            int m) {
  // dw (m, k) += dout (n, m)^T . x (n, k)
  detail::gemm(c, true, false, m, k, n, 1.f, dout, m, x, k, 1.f, dw, k);
}

}  // namespace hexi::kernels::cuda
