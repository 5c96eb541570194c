#pragma once
// AdamW over a whole parameter buffer (Loshchilov & Hutter 2019, PyTorch's
// torch.optim.AdamW semantics), using cpu::adamw_update per tensor so that weight decay
// applies to matrices only (TensorInfo::decay).

#include "kernels/params.hpp"

namespace hexi::kernels {

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // for tensors with decay == true; 0 for norm gains
};

// AdamW moments, same layout as the parameters, zero-initialised.
template <class T>
struct AdamWState {
  Params<T> m;
  Params<T> v;
  int step = 0;  // steps taken so far

  explicit AdamWState(const ParamLayout& layout) : m(layout), v(layout) {}
};

// One step: params -= AdamW(grads). grads must have params' layout.
template <class T>
void adamw_step(Params<T>& params, const Params<T>& grads, AdamWState<T>& state,
                const AdamWConfig& c);

}  // namespace hexi::kernels
