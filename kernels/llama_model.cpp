#include "kernels/llama_model.hpp"

#include <numeric>

#include "kernels/blocks_cpu.hpp"
#include "kernels/cpu_kernels.hpp"

namespace hexi::kernels {

template <class T>
LlamaModel<T>::LlamaModel(const LlamaDims& dims, int batch, int seq)
    : dims_(dims), shape_{dims, full_shard(dims), batch, seq} {
  const std::size_t n = static_cast<std::size_t>(shape_.tokens());
  attn_saved_.resize(dims.layers * attention_saved_size(shape_));
  mlp_saved_.resize(dims.layers * mlp_saved_size(shape_));
  head_saved_.resize(head_saved_size(shape_));
  resid_.resize((2 * dims.layers + 1) * n * dims.hidden);
}

template <class T>
T LlamaModel<T>::forward(const Params<T>& p, const int* tokens, const int* targets) {
  const int n = shape_.tokens();
  const std::size_t nh = static_cast<std::size_t>(n) * dims_.hidden;
  auto slot = [&](int i) { return resid_.data() + i * nh; };
  cpu::embedding_block_forward(shape_, p.get("embedding"), tokens, slot(0));
  for (int l = 0; l < dims_.layers; ++l) {
    const auto attn =
        carve_attention_saved(shape_, attn_saved_.data() + l * attention_saved_size(shape_));
    cpu::attention_block_forward(shape_, attention_weights(p, l), slot(2 * l), attn,
                                 slot(2 * l + 1));
    cpu::add_inplace(slot(2 * l + 1), slot(2 * l), nh);
    const auto mlp = carve_mlp_saved(shape_, mlp_saved_.data() + l * mlp_saved_size(shape_));
    cpu::mlp_block_forward(shape_, mlp_weights(p, l), slot(2 * l + 1), mlp, slot(2 * l + 2));
    cpu::add_inplace(slot(2 * l + 2), slot(2 * l + 1), nh);
  }
  const auto head = carve_head_saved(shape_, head_saved_.data());
  cpu::head_forward(shape_, head_weights(p), slot(2 * dims_.layers), head);
  cpu::head_loss_partials(shape_, head, targets);
  AlignedVector<T> loss(n);
  cpu::head_loss(shape_, head, loss.data());
  return static_cast<T>(std::accumulate(loss.begin(), loss.end(), 0.0) / n);
}

template <class T>
T LlamaModel<T>::forward_backward(const Params<T>& p, const int* tokens, const int* targets,
                                  Params<T>& grads, double loss_scale) {
  const T loss = forward(p, tokens, targets);
  const int n = shape_.tokens();
  const std::size_t nh = static_cast<std::size_t>(n) * dims_.hidden;
  auto slot = [&](int i) { return resid_.data() + i * nh; };
  const double scale = loss_scale < 0 ? 1.0 / n : loss_scale;
  AlignedVector<T> dx(nh), dblock(nh);  // dL/d(residual stream), a block's dx_partial
  const auto head = carve_head_saved(shape_, head_saved_.data());
  cpu::head_backward(shape_, head_weights(p), head, slot(2 * dims_.layers), targets, scale,
                     dx.data(), head_grads(grads));
  for (int l = dims_.layers - 1; l >= 0; --l) {
    const auto mlp = carve_mlp_saved(shape_, mlp_saved_.data() + l * mlp_saved_size(shape_));
    cpu::mlp_block_backward(shape_, mlp_weights(p, l), mlp, slot(2 * l + 1), dx.data(),
                            dblock.data(), mlp_grads(grads, l));
    cpu::add_inplace(dx.data(), dblock.data(), nh);
    const auto attn =
        carve_attention_saved(shape_, attn_saved_.data() + l * attention_saved_size(shape_));
    cpu::attention_block_backward(shape_, attention_weights(p, l), attn, slot(2 * l), dx.data(),
                                  dblock.data(), attention_grads(grads, l));
    cpu::add_inplace(dx.data(), dblock.data(), nh);
  }
  cpu::embedding_block_backward(shape_, tokens, dx.data(), grads.get("embedding"));
  return loss;
}

template class LlamaModel<float>;
template class LlamaModel<double>;

}  // namespace hexi::kernels
