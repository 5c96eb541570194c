// Linear layers: one GEMM each over the caller's buffers (gemm_cpu.hpp), no copies.
#include "kernels/cpu_kernels.hpp"
#include "kernels/gemm_cpu.hpp"

namespace hexi::kernels::cpu {

template <class T>
void matmul_forward(T* out, const T* x, const T* w, int n, int k, int m) {
  gemm<T>(false, true, n, m, k, T(1), x, k, w, k, T(0), out, m);
}

template <class T>
void matmul_backward_input(T* dx, const T* dout, const T* w, int n, int k, int m, bool accumulate) {
  gemm<T>(false, false, n, k, m, T(1), dout, m, w, k, accumulate ? T(1) : T(0), dx, k);
}

template <class T>
void matmul_backward_weight(T* dw, const T* dout, const T* x, int n, int k, int m) {
  gemm<T>(true, false, m, k, n, T(1), dout, m, x, k, T(1), dw, k);
}

#define HEXI_INSTANTIATE(T)                                                            \
  template void matmul_forward<T>(T*, const T*, const T*, int, int, int);              \
  template void matmul_backward_input<T>(T*, const T*, const T*, int, int, int, bool); \
  template void matmul_backward_weight<T>(T*, const T*, const T*, int, int, int);
HEXI_INSTANTIATE(float)
HEXI_INSTANTIATE(double)
#undef HEXI_INSTANTIATE

}  // namespace hexi::kernels::cpu
