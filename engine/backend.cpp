#include "engine/backend.hpp"

namespace hexi::engine {

#ifdef HEXISIM_HAVE_CUDA
// backend_cuda.cu
Result<std::unique_ptr<Backend>> make_cuda_backend(int local_rank);
bool cuda_backend_built() {
  return true;
}
#else
bool cuda_backend_built() {
  return false;
}
#endif

// ---- sequence-mesh kernels: refused unless a backend implements them --------------------
namespace {
Status no_sequence_kernels(const Backend& b, const char* what) {
  return bad_input("the " + std::string(b.name()) + " backend has no " + what +
                   " kernel: it does not run sequence meshes (context + head parallelism) yet; "
                   "use --backend cpu");
}
}  // namespace

Status Backend::attention_qkv_forward(const BlockShape&, const AttentionWeights<float>&,
                                      const float*, const int*, float*, float*, float*, float*,
                                      float*) {
  return no_sequence_kernels(*this, "attention_qkv_forward");
}
Status Backend::attention_qkv_backward(const BlockShape&, const AttentionWeights<float>&,
                                       const float*, const int*, const float*, const float*, float*,
                                       float*, const float*, float*, const AttentionGrads<float>&) {
  return no_sequence_kernels(*this, "attention_qkv_backward");
}
Status Backend::attention_out_forward(const BlockShape&, const float*, const float*, float*) {
  return no_sequence_kernels(*this, "attention_out_forward");
}
Status Backend::attention_out_backward(const BlockShape&, const float*, const float*, const float*,
                                       float*, float*) {
  return no_sequence_kernels(*this, "attention_out_backward");
}
Status Backend::blockwise_forward(const kernels::AttentionBlockPair&, const float*, const float*,
                                  const float*, float*, float*) {
  return no_sequence_kernels(*this, "blockwise_forward");
}
Status Backend::attention_merge(float*, float*, const float*, const float*, int, int, int) {
  return no_sequence_kernels(*this, "attention_merge");
}
Status Backend::blockwise_backward(const kernels::AttentionBlockPair&, float*, float*, float*,
                                   const float*, const float*, const float*, const float*,
                                   const float*, const float*) {
  return no_sequence_kernels(*this, "blockwise_backward");
}
Status Backend::copy_2d(float*, std::size_t, const float*, std::size_t, std::size_t, std::size_t,
                        bool) {
  return no_sequence_kernels(*this, "copy_2d");
}
Status Backend::fill(float*, float, std::size_t) {
  return no_sequence_kernels(*this, "fill");
}

Result<std::unique_ptr<Backend>> make_backend(std::string_view name, int local_rank) {
  if (name == "cpu") return make_cpu_backend();
  if (name == "cuda") {
#ifdef HEXISIM_HAVE_CUDA
    return make_cuda_backend(local_rank);
#else
    (void)local_rank;
    return bad_input(
        "--backend cuda: this build has no CUDA backend (nvcc was not found when it was "
        "configured)");
#endif
  }
  return bad_input("--backend: expected \"cpu\" or \"cuda\", got \"" + std::string(name) + "\"");
}

}  // namespace hexi::engine
