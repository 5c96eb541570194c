// Linear layers through Eigen: row-major maps over the caller's buffers, no copies.
#include "kernels/cpu_kernels.hpp"
#include "kernels/eigen_maps.hpp"

namespace hexi::kernels::cpu {

template <class T>
void matmul_forward(T* out, const T* x, const T* w, int n, int k, int m) {
  MatrixMap<T>(out, n, m).noalias() =
      ConstMatrixMap<T>(x, n, k) * ConstMatrixMap<T>(w, m, k).transpose();
}

template <class T>
void matmul_backward_input(T* dx, const T* dout, const T* w, int n, int k, int m, bool accumulate) {
  MatrixMap<T> dxm(dx, n, k);
  if (accumulate)
    dxm.noalias() += ConstMatrixMap<T>(dout, n, m) * ConstMatrixMap<T>(w, m, k);
  else
    dxm.noalias() = ConstMatrixMap<T>(dout, n, m) * ConstMatrixMap<T>(w, m, k);
}

template <class T>
void matmul_backward_weight(T* dw, const T* dout, const T* x, int n, int k, int m) {
  MatrixMap<T>(dw, m, k).noalias() +=
      ConstMatrixMap<T>(dout, n, m).transpose() * ConstMatrixMap<T>(x, n, k);
}

#define HEXI_INSTANTIATE(T)                                                            \
  template void matmul_forward<T>(T*, const T*, const T*, int, int, int);              \
  template void matmul_backward_input<T>(T*, const T*, const T*, int, int, int, bool); \
  template void matmul_backward_weight<T>(T*, const T*, const T*, int, int, int);
HEXI_INSTANTIATE(float)
HEXI_INSTANTIATE(double)
#undef HEXI_INSTANTIATE

}  // namespace hexi::kernels::cpu
