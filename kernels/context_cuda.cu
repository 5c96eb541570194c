// Error reporting, device probing, Context, DeviceBuffer, GEMM and temporaries.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda_common.cuh"

namespace hexi::kernels::cuda {

void throw_cuda_error(cudaError_t e, const char* expr, const char* file, int line) {
  throw Error(std::string(file) + ":" + std::to_string(line) + ": " + expr +
              " failed: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

void throw_cublas_error(cublasStatus_t s, const char* expr, const char* file, int line) {
  throw Error(std::string(file) + ":" + std::to_string(line) + ": " + expr +
              " failed: " + cublasGetStatusName(s) + ": " + cublasGetStatusString(s));
}

std::string device_unavailable_reason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error state for later calls
    return std::string("no CUDA device: ") + cudaGetErrorString(e);
  }
  if (count == 0) return "no CUDA device: cudaGetDeviceCount returned 0";
  return {};
}

Context::Context(int device) : device_(device) {
  HEXI_CUDA_CHECK(cudaSetDevice(device));
  HEXI_CUDA_CHECK(cudaStreamCreate(&stream_));
  HEXI_CUBLAS_CHECK(cublasCreate(&cublas_));
  HEXI_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  // Plain FP32 GEMMs: TF32 would make the comparison with the CPU reference loose.
  HEXI_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
  // Keep memory freed by temporaries in the pool instead of returning it at every sync.
  cudaMemPool_t pool = nullptr;
  HEXI_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  std::uint64_t keep = UINT64_MAX;
  HEXI_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
}

Context::~Context() {
  // Destructors must not throw: errors here are ignored (the process is ending or the
  // device already reported its failure).
  if (cublas_) cublasDestroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
  cudaFree(weights_bf16_);
}

void Context::set_bf16_weights(const float* values, std::size_t n) {
  weights_ = nullptr;
  weights_n_ = 0;
  if (values == nullptr || n == 0) return;
  if (n > weights_capacity_) {
    HEXI_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old copy may still be read
    HEXI_CUDA_CHECK(cudaFree(weights_bf16_));
    weights_bf16_ = nullptr;
    weights_capacity_ = 0;
    HEXI_CUDA_CHECK(
        cudaMalloc(reinterpret_cast<void**>(&weights_bf16_), n * sizeof(std::uint16_t)));
    weights_capacity_ = n;
  }
  to_bf16(*this, weights_bf16_, values, n);  // in stream order: before any GEMM reading it
  weights_ = values;
  weights_n_ = n;
}

const std::uint16_t* Context::bf16_weights_of(const float* p, std::size_t count) const {
  // Addresses as integers: p need not point into the registered values.
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  const auto begin = reinterpret_cast<std::uintptr_t>(weights_);
  if (weights_ == nullptr || at < begin || (at - begin) / sizeof(float) + count > weights_n_ ||
      (at - begin) % sizeof(float) != 0) {
    return nullptr;
  }
  return weights_bf16_ + (at - begin) / sizeof(float);
}

void Context::synchronize() {
  HEXI_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// ---- DeviceBuffer -------------------------------------------------------------------

template <class T>
DeviceBuffer<T>::DeviceBuffer(std::size_t n) : n_(n) {
  if (n > 0) HEXI_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), n * sizeof(T)));
}

template <class T>
DeviceBuffer<T>::DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
  upload(host);
}

template <class T>
DeviceBuffer<T>::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

template <class T>
DeviceBuffer<T>::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), n_(o.n_) {
  o.ptr_ = nullptr;
  o.n_ = 0;
}

template <class T>
DeviceBuffer<T>& DeviceBuffer<T>::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = o.ptr_;
    n_ = o.n_;
    o.ptr_ = nullptr;
    o.n_ = 0;
  }
  return *this;
}

template <class T>
void DeviceBuffer<T>::upload(const std::vector<T>& host) {
  if (host.size() != n_) throw Error("DeviceBuffer::upload: size mismatch");
  if (n_ > 0)
    HEXI_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
}

template <class T>
std::vector<T> DeviceBuffer<T>::download() const {
  std::vector<T> host(n_);
  if (n_ > 0)
    HEXI_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

template <class T>
void DeviceBuffer<T>::zero() {
  if (n_ > 0) HEXI_CUDA_CHECK(cudaMemset(ptr_, 0, n_ * sizeof(T)));
}

template class DeviceBuffer<float>;
template class DeviceBuffer<int>;

// ---- GEMM and temporaries -------------------------------------------------------------

namespace detail {

namespace {
cublasOperation_t op(bool trans) {
  return trans ? CUBLAS_OP_T : CUBLAS_OP_N;
}
}  // namespace

// A bf16 copy of a row-major operand (bf16 GEMMs): `batch` matrices `stride` elements
// apart, each `rows` rows of `cols` elements, `ld` apart. Exact when the operand holds bf16
// values, as the blocks guarantee in bf16 runs. An operand inside the context's registered
// weights (Context::set_bf16_weights) is read from their bf16 copy, not converted again.
namespace {
class Bf16Operand {
 public:
  Bf16Operand(Context& c, const float* src, int rows, int cols, int ld, long long stride = 0,
              int batch = 1)
      : count_(static_cast<std::size_t>(batch - 1) * stride +
               static_cast<std::size_t>(rows - 1) * ld + cols),
        copy_(c.bf16_weights_of(src, count_)),
        temp_(c, copy_ != nullptr ? 0 : (count_ + 1) / 2) {
    if (copy_ == nullptr) to_bf16(c, reinterpret_cast<std::uint16_t*>(temp_.get()), src, count_);
  }
  const std::uint16_t* get() const {
    return copy_ != nullptr ? copy_ : reinterpret_cast<const std::uint16_t*>(temp_.get());
  }

 private:
  std::size_t count_;
  const std::uint16_t* copy_;
  Temp temp_;
};
}  // namespace

void gemm(Context& c, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
          int lda, const float* b, int ldb, float beta, float* out, int ldc) {
  if (!c.bf16_gemm()) {
    HEXI_CUBLAS_CHECK(cublasSgemm(c.cublas(), op(trans_b), op(trans_a), n, m, k, &alpha, b, ldb, a,
                                  lda, &beta, out, ldc));
    return;
  }
  const Bf16Operand a16(c, a, trans_a ? k : m, trans_a ? m : k, lda);
  const Bf16Operand b16(c, b, trans_b ? n : k, trans_b ? k : n, ldb);
  HEXI_CUBLAS_CHECK(cublasGemmEx(c.cublas(), op(trans_b), op(trans_a), n, m, k, &alpha, b16.get(),
                                 CUDA_R_16BF, ldb, a16.get(), CUDA_R_16BF, lda, &beta, out,
                                 CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void gemm_batched(Context& c, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                  const float* a, int lda, long long stride_a, const float* b, int ldb,
                  long long stride_b, float beta, float* out, int ldc, long long stride_c,
                  int batch) {
  if (!c.bf16_gemm()) {
    HEXI_CUBLAS_CHECK(cublasSgemmStridedBatched(c.cublas(), op(trans_b), op(trans_a), n, m, k,
                                                &alpha, b, ldb, stride_b, a, lda, stride_a, &beta,
                                                out, ldc, stride_c, batch));
    return;
  }
  const Bf16Operand a16(c, a, trans_a ? k : m, trans_a ? m : k, lda, stride_a, batch);
  const Bf16Operand b16(c, b, trans_b ? n : k, trans_b ? k : n, ldb, stride_b, batch);
  HEXI_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      c.cublas(), op(trans_b), op(trans_a), n, m, k, &alpha, b16.get(), CUDA_R_16BF, ldb, stride_b,
      a16.get(), CUDA_R_16BF, lda, stride_a, &beta, out, CUDA_R_32F, ldc, stride_c, batch,
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

Temp::Temp(Context& c, std::size_t floats) : stream_(c.stream()) {
  if (floats > 0)
    HEXI_CUDA_CHECK(
        cudaMallocAsync(reinterpret_cast<void**>(&ptr_), floats * sizeof(float), stream_));
}

Temp::~Temp() {
  if (ptr_) cudaFreeAsync(ptr_, stream_);
}

}  // namespace detail
}  // namespace hexi::kernels::cuda
