// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"): out = silu(gate) * up with
// silu(g) = g * sigmoid(g) and silu'(g) = sigmoid(g) * (1 + g * (1 - sigmoid(g))).
// Also the residual add, the other elementwise kernel of a block.
#include "topologies/eigen.hpp"

#include "kernels/cpu_kernels.hpp"
#include "kernels/eigen_maps.hpp"

namespace hexi::kernels::cpu {

// Elementwise in T through Eigen arrays (vectorised exp).
template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, std::size_t n) {
  const auto g = array(gate, n);
  array(out, n) = g / (T(1) + (-g).exp()) * array(up, n);
}

template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, std::size_t n) {
  const auto g = array(gate, n);
  const Eigen::Array<T, Eigen::Dynamic, 1> sg = T(1) / (T(1) + (-g).exp());  // sigmoid(g)
  array(dgate, n) = array(dout, n) * array(up, n) * sg * (T(1) + g * (T(1) - sg));
  array(dup, n) = array(dout, n) * g * sg;
}

template <class T>
void add_inplace(T* y, const T* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] += x[i];
}

#define HEXI_INSTANTIATE(T)                                                            \
  template void swiglu_forward<T>(T*, const T*, const T*, std::size_t);                \
  template void swiglu_backward<T>(T*, T*, const T*, const T*, const T*, std::size_t); \
  template void add_inplace<T>(T*, const T*, std::size_t);
HEXI_INSTANTIATE(float)
HEXI_INSTANTIATE(double)
#undef HEXI_INSTANTIATE

}  // namespace hexi::kernels::cpu
