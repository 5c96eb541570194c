// Vocab-parallel embedding (semantics in embedding_cpu.cpp). The backward gives each
// thread one column and walks the tokens in order, so repeated tokens accumulate in a
// fixed order without atomics (deterministic), at the price of h-way parallelism only;
// the embedding backward is a negligible part of a step.
#include "kernels/cuda_common.cuh"

namespace hexi::kernels::cuda {
namespace {

__global__ void embedding_forward_kernel(float* out, const int* tokens, const float* table, int n,
                                         int h, int vocab_begin, int vocab_end) {
  const std::size_t idx = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<std::size_t>(n) * h) return;
  const int i = static_cast<int>(idx / h), j = static_cast<int>(idx % h);
  const int tok = tokens[i];
  out[idx] = (tok >= vocab_begin && tok < vocab_end)
                 ? table[static_cast<std::size_t>(tok - vocab_begin) * h + j]
                 : 0.f;
}

__global__ void embedding_backward_kernel(float* dtable, const float* dout, const int* tokens,
                                          int n, int h, int vocab_begin, int vocab_end) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= h) return;
  for (int i = 0; i < n; ++i) {
    const int tok = tokens[i];
    if (tok >= vocab_begin && tok < vocab_end)
      dtable[static_cast<std::size_t>(tok - vocab_begin) * h + j] +=
          dout[static_cast<std::size_t>(i) * h + j];
  }
}

}  // namespace

void embedding_forward(Context& c, float* out, const int* tokens, const float* table, int n, int h,
                       int vocab_begin, int vocab_end) {
  const std::size_t total = static_cast<std::size_t>(n) * h;
  if (total == 0) return;
  embedding_forward_kernel<<<detail::blocks_for(total), detail::kThreads, 0, c.stream()>>>(
      out, tokens, table, n, h, vocab_begin, vocab_end);
  HEXI_CUDA_LAUNCH_CHECK();
}

void embedding_backward(Context& c, float* dtable, const float* dout, const int* tokens, int n,
                        int h, int vocab_begin, int vocab_end) {
  if (n == 0 || h == 0) return;
  embedding_backward_kernel<<<detail::blocks_for(h, 64), 64, 0, c.stream()>>>(
      dtable, dout, tokens, n, h, vocab_begin, vocab_end);
  HEXI_CUDA_LAUNCH_CHECK();
}

}  // namespace hexi::kernels::cuda
