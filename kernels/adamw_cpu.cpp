// AdamW (Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization") in the
// order of PyTorch 1.13's _single_tensor_adamw: decay first, then the moments, then the
// bias-corrected step. Each element is computed in double and stored in T.
#include <cmath>

#include "kernels/cpu_kernels.hpp"

namespace hexi::kernels::cpu {

template <class T>
void adamw_update(T* param, const T* grad, T* m, T* v, std::size_t n, double lr, double beta1,
                  double beta2, double eps, double weight_decay, int step) {
  const double bias1 = 1.0 - std::pow(beta1, step);
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(beta2, step));
  for (std::size_t i = 0; i < n; ++i) {
    const double g = grad[i];
    const double p = param[i] * (1.0 - lr * weight_decay);
    const double mi = beta1 * m[i] + (1.0 - beta1) * g;
    const double vi = beta2 * v[i] + (1.0 - beta2) * g * g;
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    param[i] = static_cast<T>(p - (lr / bias1) * mi / (std::sqrt(vi) / bias2_sqrt + eps));
  }
}

template void adamw_update<float>(float*, const float*, float*, float*, std::size_t, double, double,
                                  double, double, double, int);
template void adamw_update<double>(double*, const double*, double*, double*, std::size_t, double,
                                   double, double, double, double, int);

}  // namespace hexi::kernels::cpu
