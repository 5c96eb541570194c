// Linear layers through Eigen: row-major maps over the caller's buffers, no copies.
#include <Eigen/Core>

#include "kernels/cpu_kernels.hpp"

namespace hexi::kernels::cpu {
namespace {

template <class T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using MapMut = Eigen::Map<Matrix<T>>;
template <class T>
using Map = Eigen::Map<const Matrix<T>>;

}  // namespace

template <class T>
void matmul_forward(T* out, const T* x, const T* w, int n, int k, int m) {
  MapMut<T>(out, n, m).noalias() = Map<T>(x, n, k) * Map<T>(w, m, k).transpose();
}

template <class T>
void matmul_backward_input(T* dx, const T* dout, const T* w, int n, int k, int m, bool accumulate) {
  MapMut<T> dxm(dx, n, k);
  if (accumulate)
    dxm.noalias() += Map<T>(dout, n, m) * Map<T>(w, m, k);
  else
    dxm.noalias() = Map<T>(dout, n, m) * Map<T>(w, m, k);
}

template <class T>
void matmul_backward_weight(T* dw, const T* dout, const T* x, int n, int k, int m) {
  MapMut<T>(dw, m, k).noalias() += Map<T>(dout, n, m).transpose() * Map<T>(x, n, k);
}

#define HEXI_INSTANTIATE(T)                                                            \
  template void matmul_forward<T>(T*, const T*, const T*, int, int, int);              \
  template void matmul_backward_input<T>(T*, const T*, const T*, int, int, int, bool); \
  template void matmul_backward_weight<T>(T*, const T*, const T*, int, int, int);
HEXI_INSTANTIATE(float)
HEXI_INSTANTIATE(double)
#undef HEXI_INSTANTIATE

}  // namespace hexi::kernels::cpu
