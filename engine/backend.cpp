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
