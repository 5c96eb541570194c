// RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization"):
//   y = x * r * w,  r = 1/sqrt(mean(x^2) + eps)
// Backward, with c = sum_j dy_j w_j x_j over the row:
//   dx_k = r * (w_k dy_k - x_k r^2 c / h),  dw_j += sum over rows of dy_j x_j r
// Row sums accumulate in double so the reference is accurate for float and double.
#include <cmath>

#include "kernels/cpu_kernels.hpp"
#include "kernels/eigen_maps.hpp"

namespace hexi::kernels::cpu {

template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int n, int h, double eps) {
  for (int i = 0; i < n; ++i) {
    const T* xi = x + static_cast<std::size_t>(i) * h;
    T* yi = out + static_cast<std::size_t>(i) * h;
    const double sum_sq =
        lane_sum(h, [&](int j) { return static_cast<double>(xi[j]) * static_cast<double>(xi[j]); });
    const double r = 1.0 / std::sqrt(sum_sq / h + eps);
    for (int j = 0; j < h; ++j) yi[j] = static_cast<T>(xi[j] * r * w[j]);
    rstd[i] = static_cast<T>(r);
  }
}

template <class T>
void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd, int n,
                      int h) {
  for (int i = 0; i < n; ++i) {
    const std::size_t row = static_cast<std::size_t>(i) * h;
    const double r = rstd[i];
    const double c =
        lane_sum(h, [&](int j) { return static_cast<double>(dout[row + j]) * w[j] * x[row + j]; });
    for (int j = 0; j < h; ++j) {
      dx[row + j] = static_cast<T>(r * (w[j] * dout[row + j] - x[row + j] * r * r * c / h));
      dw[j] += static_cast<T>(dout[row + j] * x[row + j] * r);
    }
  }
}

#define HEXI_INSTANTIATE(T)                                                       \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, int, int, double); \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int, int);
HEXI_INSTANTIATE(float)
HEXI_INSTANTIATE(double)
#undef HEXI_INSTANTIATE

}  // namespace hexi::kernels::cpu
