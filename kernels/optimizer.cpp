#include "kernels/optimizer.hpp"

#include <stdexcept>

#include "kernels/cpu_kernels.hpp"

namespace hexi::kernels {

template <class T>
void adamw_step(Params<T>& params, const Params<T>& grads, AdamWState<T>& state,
                const AdamWConfig& c) {
  if (grads.data.size() != params.data.size() || state.m.data.size() != params.data.size())
    throw std::invalid_argument("adamw_step: parameters, gradients and moments differ in size");
  ++state.step;
  for (const TensorInfo& t : params.layout.tensors) {
    const double decay = t.decay ? c.weight_decay : 0.0;
    cpu::adamw_update(params.get(t), grads.get(t), state.m.get(t), state.v.get(t), t.size(), c.lr,
                      c.beta1, c.beta2, c.eps, decay, state.step);
  }
}

template void adamw_step<float>(Params<float>&, const Params<float>&, AdamWState<float>&,
                                const AdamWConfig&);
template void adamw_step<double>(Params<double>&, const Params<double>&, AdamWState<double>&,
                                 const AdamWConfig&);

}  // namespace hexi::kernels
