// GEMM dispatch of the CPU kernels: OpenBLAS loaded at run time, or Eigen (gemm_cpu.hpp).
#include "kernels/gemm_cpu.hpp"

#include <dlfcn.h>

#include <cctype>
#include <cstdlib>
#include <string>

#include "kernels/eigen_maps.hpp"

namespace hexi::kernels::cpu {
namespace {

// cblas_sgemm's C ABI (cblas.h: CblasRowMajor = 101, CblasNoTrans = 111, CblasTrans = 112);
// declared here so that building needs no BLAS headers: the library is optional at run time.
using CblasSgemm = void (*)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                            const float* a, int lda, const float* b, int ldb, float beta, float* c,
                            int ldc);
using CharQuery = char* (*)();
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

struct OpenBlas {
  CblasSgemm sgemm = nullptr;  // null: not loadable
  bool used = false;           // by gemm<float>
  std::string description;     // the library and why it is (not) used
};

int eigen_float_lanes() {
  return static_cast<int>(Eigen::internal::packet_traits<float>::size);
}

std::string eigen_description() {
  return "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." +
         std::to_string(EIGEN_MAJOR_VERSION) + "." + std::to_string(EIGEN_MINOR_VERSION) + " (" +
         Eigen::SimdInstructionSetsInUse() + ", " + std::to_string(eigen_float_lanes()) +
         " float lanes)";
}

// float lanes of an OpenBLAS x86-64 kernel set (openblas_get_corename()); 0 when unknown.
int openblas_lanes(std::string core) {
  for (char& c : core) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* wide : {"skylakex", "cooperlake", "sapphirerapids"}) {
    if (core == wide) return 16;
  }
  for (const char* avx2 :
       {"haswell", "zen", "excavator", "steamroller", "piledriver", "bulldozer", "sandybridge"}) {
    if (core == avx2) return 8;
  }
  return 0;
}

// choice: "auto", "eigen" or "openblas" (HEXISIM_GEMM).
OpenBlas load_openblas(const std::string& choice) {
  OpenBlas lib;
  if (choice == "eigen") {
    lib.description = eigen_description() + " (HEXISIM_GEMM=eigen)";
    return lib;
  }
  setenv("OPENBLAS_NUM_THREADS", "1", /*overwrite=*/0);
  void* handle = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    lib.description = eigen_description() +
                      " (OpenBLAS not loadable: " + (why != nullptr ? why : "unknown reason") + ")";
    return lib;
  }
  lib.sgemm = reinterpret_cast<CblasSgemm>(dlsym(handle, "cblas_sgemm"));
  // The library may have been loaded (and its thread pool started) before this setenv, by
  // a dependency linked against BLAS: its idle workers spin on sched_yield, a second core's
  // worth of CPU per rank, and under a CPU quota (the testbed) they starve the rank. One
  // thread, as the engine computes on one core per rank.
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(handle, "openblas_set_num_threads"))) set(1);
  auto config = reinterpret_cast<CharQuery>(dlsym(handle, "openblas_get_config"));
  auto core_query = reinterpret_cast<CharQuery>(dlsym(handle, "openblas_get_corename"));
  if (lib.sgemm == nullptr) {
    lib.description = eigen_description() + " (libopenblas.so.0 has no cblas_sgemm)";
    return lib;
  }
  const std::string core = core_query != nullptr ? core_query() : "unknown";
  const char* threads = std::getenv("OPENBLAS_NUM_THREADS");
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  const std::string openblas =
      std::string(config != nullptr ? config() : "OpenBLAS") + ", " + core + " kernels" +
      (forced != nullptr ? std::string(" (OPENBLAS_CORETYPE=") + forced + ")" : std::string()) +
      ", OPENBLAS_NUM_THREADS=" + (threads != nullptr ? threads : "?");
  const int lanes = openblas_lanes(core);
  lib.used = choice == "openblas" || lanes >= eigen_float_lanes();
  lib.description =
      lib.used ? openblas
               : eigen_description() + " (OpenBLAS's kernels are narrower: " + openblas + ")";
  return lib;
}

const OpenBlas& openblas() {
  static const OpenBlas lib = [] {
    const char* env = std::getenv("HEXISIM_GEMM");
    const std::string choice = env != nullptr ? env : "auto";
    const bool known = choice == "auto" || choice == "eigen" || choice == "openblas";
    OpenBlas loaded = load_openblas(known ? choice : "auto");
    if (!known) {
      loaded.description +=
          " (HEXISIM_GEMM=" + choice + " ignored: expected eigen, openblas or auto)";
    }
    return loaded;
  }();
  return lib;
}

template <class T>
using Strided = Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>>;

}  // namespace

template <class T>
void gemm_eigen(bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, int lda,
                const T* b, int ldb, T beta, T* c, int ldc) {
  StridedMap<T> cm(c, m, n, Eigen::OuterStride<>(ldc));
  const Strided<T> am(a, trans_a ? k : m, trans_a ? m : k, Eigen::OuterStride<>(lda));
  const Strided<T> bm(b, trans_b ? n : k, trans_b ? k : n, Eigen::OuterStride<>(ldb));
  auto apply = [&](const auto& op_a, const auto& op_b) {
    if (beta == T(0)) {
      cm.noalias() = alpha * (op_a * op_b);
    } else {
      if (beta != T(1)) cm *= beta;
      cm.noalias() += alpha * (op_a * op_b);
    }
  };
  if (trans_a && trans_b) {
    apply(am.transpose(), bm.transpose());
  } else if (trans_a) {
    apply(am.transpose(), bm);
  } else if (trans_b) {
    apply(am, bm.transpose());
  } else {
    apply(am, bm);
  }
}

bool gemm_openblas(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                   int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  const OpenBlas& lib = openblas();
  if (lib.sgemm == nullptr) return false;  // loaded whenever loadable, used or not
  lib.sgemm(kRowMajor, trans_a ? kTrans : kNoTrans, trans_b ? kTrans : kNoTrans, m, n, k, alpha, a,
            lda, b, ldb, beta, c, ldc);
  return true;
}

template <>
void gemm<float>(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                 int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  // k = 0 (C = beta C) stays on Eigen: BLAS would refuse the leading dimension 0 of A.
  if (k == 0 || !openblas().used ||
      !gemm_openblas(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) {
    gemm_eigen(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

template <>
void gemm<double>(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a,
                  int lda, const double* b, int ldb, double beta, double* c, int ldc) {
  if (m == 0 || n == 0) return;
  gemm_eigen(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

GemmLibrary gemm_library() {
  return openblas().used ? GemmLibrary::kOpenBlas : GemmLibrary::kEigen;
}

std::string gemm_library_description() {
  return openblas().description;
}

template void gemm_eigen<float>(bool, bool, int, int, int, float, const float*, int, const float*,
                                int, float, float*, int);
template void gemm_eigen<double>(bool, bool, int, int, int, double, const double*, int,
                                 const double*, int, double, double*, int);

}  // namespace hexi::kernels::cpu
