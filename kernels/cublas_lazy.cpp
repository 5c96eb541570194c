// The cuBLAS functions the CUDA kernels call, loaded from libcublas on first use instead of
// linked: loading libcublas (and the libcublasLt it needs) runs its initialisers, about
// 0.5 s and 210 MiB of touched memory in every process, whether or not it ever uses a GPU,
// and every hexisim command, test and MPI rank links the CUDA backend. Each function below
// has cublas_api.h's signature and forwards to the library's own; where the library cannot
// be loaded, the calls return CUBLAS_STATUS_NOT_INITIALIZED and cublasGetStatusString says
// why (the CUDA backend's errors quote it).
#include <cublas_v2.h>
#include <dlfcn.h>

#include <string>

namespace {

struct Library {
  void* handle = nullptr;
  std::string error;  // why it could not be loaded
};

const Library& library() {
  static const Library lib = [] {
    Library l;
    const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    // The loader's own search first (LD_LIBRARY_PATH, the cache), then the toolkit this
    // build was configured with.
    l.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (l.handle == nullptr) {
      const std::string first = dlerror();
      l.handle =
          dlopen((std::string(HEXISIM_CUBLAS_DIR) + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL);
      if (l.handle == nullptr) l.error = name + " could not be loaded: " + first;
    }
    return l;
  }();
  return lib;
}

void* symbol(const char* name) {
  return library().handle ? dlsym(library().handle, name) : nullptr;
}

}  // namespace

// Defines `name` (declared by cublas_api.h; the pointer's type is spelled out: C++ code
// sees overloads of some) as a call of the library's `name`.
#define HEXI_CUBLAS_FORWARD(name, params, args)                     \
  cublasStatus_t name params {                                      \
    using Fn = cublasStatus_t(*) params;                            \
    static const Fn fn = reinterpret_cast<Fn>(symbol(#name));       \
    return fn != nullptr ? fn args : CUBLAS_STATUS_NOT_INITIALIZED; \
  }

HEXI_CUBLAS_FORWARD(cublasCreate_v2, (cublasHandle_t * handle), (handle))
HEXI_CUBLAS_FORWARD(cublasDestroy_v2, (cublasHandle_t handle), (handle))
HEXI_CUBLAS_FORWARD(cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream),
                    (handle, stream))
HEXI_CUBLAS_FORWARD(cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode), (handle, mode))
HEXI_CUBLAS_FORWARD(cublasSgemm_v2,
                    (cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m,
                     int n, int k, const float* alpha, const float* a, int lda, const float* b,
                     int ldb, const float* beta, float* c, int ldc),
                    (handle, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
HEXI_CUBLAS_FORWARD(cublasGemmEx,
                    (cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m,
                     int n, int k, const void* alpha, const void* a, cudaDataType at, int lda,
                     const void* b, cudaDataType bt, int ldb, const void* beta, void* c,
                     cudaDataType ct, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo),
                    (handle, ta, tb, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc,
                     compute, algo))
HEXI_CUBLAS_FORWARD(cublasSgemmStridedBatched,
                    (cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m,
                     int n, int k, const float* alpha, const float* a, int lda,
                     long long int stride_a, const float* b, int ldb, long long int stride_b,
                     const float* beta, float* c, int ldc, long long int stride_c, int batch),
                    (handle, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c,
                     ldc, stride_c, batch))
HEXI_CUBLAS_FORWARD(cublasGemmStridedBatchedEx,
                    (cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m,
                     int n, int k, const void* alpha, const void* a, cudaDataType at, int lda,
                     long long int stride_a, const void* b, cudaDataType bt, int ldb,
                     long long int stride_b, const void* beta, void* c, cudaDataType ct, int ldc,
                     long long int stride_c, int batch, cublasComputeType_t compute,
                     cublasGemmAlgo_t algo),
                    (handle, ta, tb, m, n, k, alpha, a, at, lda, stride_a, b, bt, ldb, stride_b,
                     beta, c, ct, ldc, stride_c, batch, compute, algo))

const char* cublasGetStatusName(cublasStatus_t status) {
  static const auto fn =
      reinterpret_cast<decltype(&cublasGetStatusName)>(symbol("cublasGetStatusName"));
  return fn != nullptr ? fn(status) : "CUBLAS_STATUS_NOT_INITIALIZED";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  static const auto fn =
      reinterpret_cast<decltype(&cublasGetStatusString)>(symbol("cublasGetStatusString"));
  if (fn != nullptr) return fn(status);
  return library().error.empty() ? "cuBLAS lacks cublasGetStatusString" : library().error.c_str();
}
