#pragma once
// A single-process tiny Llama, forward + backward, composed from the CPU block
// functions with one shard holding everything: the engine's single-process reference
// and the program checked against the PyTorch oracle (oracle.hpp).
//
//   x0 = embedding[tokens]                              (n, h), n = b*s
//   for l: x = x + Attn_l(RMSNorm(x)); x = x + Mlp_l(RMSNorm(x))
//   loss = mean_i CrossEntropy(RMSNorm(x) head^T, targets)_i

#include <vector>

#include "kernels/aligned.hpp"
#include "kernels/params.hpp"
#include "kernels/shapes.hpp"

namespace hexi::kernels {

template <class T>
class LlamaModel {
 public:
  // Activations for micro-batches of `batch` sequences of `seq` tokens.
  LlamaModel(const LlamaDims& dims, int batch, int seq);

  // Mean cross-entropy over the batch*seq tokens. tokens, targets (b, s) in [0, V).
  T forward(const Params<T>& p, const int* tokens, const int* targets);
  // forward, then grads += loss_scale * d(sum of token losses)/d(params). loss_scale
  // 1/(b*s) (the default, < 0) differentiates the returned mean; pass 1/(global tokens)
  // to accumulate micro-batches into the gradient of a global mean.
  T forward_backward(const Params<T>& p, const int* tokens, const int* targets, Params<T>& grads,
                     double loss_scale = -1.0);

  const LlamaDims& dims() const { return dims_; }
  const BlockShape& shape() const { return shape_; }

 private:
  LlamaDims dims_;
  BlockShape shape_;
  AlignedVector<T> attn_saved_;  // (layers, attention_saved_size)
  AlignedVector<T> mlp_saved_;   // (layers, mlp_saved_size)
  AlignedVector<T> head_saved_;  // (head_saved_size)
  AlignedVector<T> resid_;       // (2*layers + 1, n, h): input of every block, then the head's
};

}  // namespace hexi::kernels
