// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"): out = silu(gate) * up with
// silu(g) = g * sigmoid(g) and silu'(g) = sigmoid(g) * (1 + g * (1 - sigmoid(g))).
// Also the residual add, the other elementwise kernel of a block.
#include <cmath>

#include "kernels/cpu_kernels.hpp"

namespace hexi::kernels::cpu {
namespace {

double sigmoid(double g) {
  return 1.0 / (1.0 + std::exp(-g));
}

}  // namespace

template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<T>(gate[i] * sigmoid(gate[i]) * up[i]);
}

template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const double g = gate[i];
    const double sg = sigmoid(g);
    dgate[i] = static_cast<T>(dout[i] * up[i] * sg * (1.0 + g * (1.0 - sg)));
    dup[i] = static_cast<T>(dout[i] * g * sg);
  }
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
