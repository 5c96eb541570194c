// The cuda backend: device memory, the kernels/ CUDA blocks (cuBLAS GEMMs) on one
// stream, a few engine kernels (bucket gather/scatter, vocab-parallel loss statistics)
// and cudaEvent timing. Every CUDA call goes through HEXI_CUDA_CHECK (kernels/
// cuda_check.hpp); the kernels' cuda::Error exceptions become failure Statuses here, so
// nothing escapes into the rank runtime as an exception.
//
// Compiled as CUDA C++17 (see kernels/CMakeLists.txt): this file includes only
// C++17 headers.

#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "kernels/cuda_kernels.hpp"

namespace hexi::engine {
namespace {

namespace kc = kernels::cuda;

constexpr int kThreads = 256;

int blocks_for(std::size_t n) {
  return static_cast<int>((n + kThreads - 1) / kThreads);
}

__global__ void gather_kernel(float* dst, const float* src, const std::int64_t* idx,
                              std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) dst[i] = src[idx[i]];
}

__global__ void scatter_kernel(float* dst, const std::int64_t* idx, const float* src,
                               std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) dst[idx[i]] = src[i];
}

__global__ void pack_stats_kernel(const float* row_max, const float* partials, float* stats,
                                  int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  stats[3 * i + 0] = row_max[i];
  stats[3 * i + 1] = partials[2 * i + 0];
  stats[3 * i + 2] = partials[2 * i + 1];
}

// Same arithmetic and rank order as the cpu backend (double accumulation).
__global__ void combine_stats_kernel(const float* gathered, int ranks, int n, float* row_max,
                                     float* partials) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float m = gathered[3 * i];
  for (int r = 1; r < ranks; ++r) m = fmaxf(m, gathered[(static_cast<std::size_t>(r) * n + i) * 3]);
  double sum = 0, target = 0;
  for (int r = 0; r < ranks; ++r) {
    const float* st = gathered + (static_cast<std::size_t>(r) * n + i) * 3;
    sum += static_cast<double>(st[1]) * exp(static_cast<double>(st[0]) - m);
    target += st[2];
  }
  row_max[i] = m;
  partials[2 * i + 0] = static_cast<float>(sum);
  partials[2 * i + 1] = static_cast<float>(target);
}

// Reports an error kept by note() (and clears it).
#define HEXI_TRY_DEFERRED()                  \
  do {                                       \
    if (deferred_) {                         \
      Error hexi_d_ = std::move(*deferred_); \
      deferred_.reset();                     \
      return hexi_d_;                        \
    }                                        \
  } while (0)

// Runs `f`, turning CUDA errors (thrown by kernels/ and HEXI_CUDA_CHECK) into a Status.
template <class F>
Status guarded(const char* what, F&& f) {
  try {
    f();
    return {};
  } catch (const kc::Error& e) {
    return failure(std::string("cuda backend, ") + what + ": " + e.what());
  }
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device), ctx_(device) {}
  // Destructors cannot report: cudaEventDestroy's result is ignored (the rank is ending).
  ~CudaBackend() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }

  std::string_view name() const override { return "cuda"; }
  std::string describe() const override {
    cudaDeviceProp prop{};
    int runtime = 0;
    const cudaError_t e = cudaGetDeviceProperties(&prop, device_);
    if (e != cudaSuccess || cudaRuntimeGetVersion(&runtime) != cudaSuccess) {
      return "cuda: device " + std::to_string(device_) +
             " (properties unavailable: " + cudaGetErrorString(e) + ")";
    }
    return "cuda: " + std::string(prop.name) + " (device " + std::to_string(device_) + ", sm_" +
           std::to_string(prop.major) + std::to_string(prop.minor) + "), CUDA runtime " +
           std::to_string(runtime) + ", kernels/ CUDA + cuBLAS FP32";
  }

  Result<void*> allocate(std::size_t bytes) override {
    void* p = nullptr;
    Status s =
        guarded("allocate", [&] { HEXI_CUDA_CHECK(cudaMalloc(&p, bytes == 0 ? 1 : bytes)); });
    if (!s.ok()) return s.error();
    return p;
  }
  void release(void* p) override { note(cudaFree(p), "cudaFree(p)", __LINE__); }
  // Host buffers are pageable: synchronous copies, so the caller may reuse them at once.
  Status upload(void* dst, const void* host, std::size_t bytes) override {
    return guarded("upload", [&] {
      HEXI_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, ctx_.stream()));
      ctx_.synchronize();
    });
  }
  Status download(void* host, const void* src, std::size_t bytes) override {
    return guarded("download", [&] {
      HEXI_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, ctx_.stream()));
      ctx_.synchronize();
    });
  }
  Status copy(void* dst, const void* src, std::size_t bytes) override {
    return guarded("copy", [&] {
      if (bytes > 0)
        HEXI_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx_.stream()));
    });
  }
  Status zero(void* dst, std::size_t bytes) override {
    return guarded("zero", [&] { HEXI_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, ctx_.stream())); });
  }

  Status gather(float* dst, const float* src, const std::int64_t* idx, std::size_t n) override {
    return launch("gather", n, [&] {
      gather_kernel<<<blocks_for(n), kThreads, 0, ctx_.stream()>>>(dst, src, idx, n);
    });
  }
  Status scatter(float* dst, const std::int64_t* idx, const float* src, std::size_t n) override {
    return launch("scatter", n, [&] {
      scatter_kernel<<<blocks_for(n), kThreads, 0, ctx_.stream()>>>(dst, idx, src, n);
    });
  }
  Status add_inplace(float* y, const float* x, std::size_t n) override {
    return guarded("add_inplace", [&] { kc::add_inplace(ctx_, y, x, n); });
  }
  Status round_bf16(float* dst, const float* src, std::size_t n) override {
    return guarded("round_bf16", [&] { kc::round_bf16(ctx_, dst, src, n); });
  }
  Status to_bf16(std::uint16_t* dst, const float* src, std::size_t n) override {
    return guarded("to_bf16", [&] { kc::to_bf16(ctx_, dst, src, n); });
  }
  Status bf16_weights(const float* weights, std::size_t n) override {
    return guarded("bf16_weights", [&] { ctx_.set_bf16_weights(weights, n); });
  }
  Status from_bf16(float* dst, const std::uint16_t* src, std::size_t n) override {
    return guarded("from_bf16", [&] { kc::from_bf16(ctx_, dst, src, n); });
  }
  Status pack_loss_stats(const HeadSaved<float>& saved, int n, float* stats) override {
    return launch("pack_loss_stats", n, [&] {
      pack_stats_kernel<<<blocks_for(n), kThreads, 0, ctx_.stream()>>>(saved.row_max,
                                                                       saved.partials, stats, n);
    });
  }
  Status combine_loss_stats(const float* gathered, int ranks, int n,
                            const HeadSaved<float>& saved) override {
    return launch("combine_loss_stats", n, [&] {
      combine_stats_kernel<<<blocks_for(n), kThreads, 0, ctx_.stream()>>>(
          gathered, ranks, n, saved.row_max, saved.partials);
    });
  }
  Status adamw(float* param, const float* grad, float* m, float* v, std::size_t n, const AdamW& c,
               double weight_decay, int step) override {
    return guarded("adamw", [&] {
      kc::adamw_update(ctx_, param, grad, m, v, n, c.lr, c.beta1, c.beta2, c.eps, weight_decay,
                       step);
    });
  }

  Status attention_forward(const BlockShape& s, const AttentionWeights<float>& w, const float* x,
                           const AttentionSaved<float>& saved, float* y_partial) override {
    return guarded("attention forward",
                   [&] { kc::attention_block_forward(ctx_, s, w, x, saved, y_partial); });
  }
  Status attention_backward(const BlockShape& s, const AttentionWeights<float>& w,
                            const AttentionSaved<float>& saved, const float* x, const float* dy,
                            float* dx_partial, const AttentionGrads<float>& grads) override {
    return guarded("attention backward", [&] {
      kc::attention_block_backward(ctx_, s, w, saved, x, dy, dx_partial, grads);
    });
  }
  Status mlp_forward(const BlockShape& s, const MlpWeights<float>& w, const float* x,
                     const MlpSaved<float>& saved, float* y_partial) override {
    return guarded("mlp forward", [&] { kc::mlp_block_forward(ctx_, s, w, x, saved, y_partial); });
  }
  Status mlp_backward(const BlockShape& s, const MlpWeights<float>& w, const MlpSaved<float>& saved,
                      const float* x, const float* dy, float* dx_partial,
                      const MlpGrads<float>& grads) override {
    return guarded("mlp backward",
                   [&] { kc::mlp_block_backward(ctx_, s, w, saved, x, dy, dx_partial, grads); });
  }
  Status embedding_forward(const BlockShape& s, const float* table, const int* tokens,
                           float* out) override {
    return guarded("embedding forward",
                   [&] { kc::embedding_block_forward(ctx_, s, table, tokens, out); });
  }
  Status embedding_backward(const BlockShape& s, const int* tokens, const float* dout,
                            float* dtable) override {
    return guarded("embedding backward",
                   [&] { kc::embedding_block_backward(ctx_, s, tokens, dout, dtable); });
  }
  Status head_forward(const BlockShape& s, const HeadWeights<float>& w, const float* x,
                      const HeadSaved<float>& saved) override {
    return guarded("head forward", [&] { kc::head_forward(ctx_, s, w, x, saved); });
  }
  Status head_loss_partials(const BlockShape& s, const HeadSaved<float>& saved,
                            const int* targets) override {
    return guarded("head loss partials", [&] { kc::head_loss_partials(ctx_, s, saved, targets); });
  }
  Status head_loss(const BlockShape& s, const HeadSaved<float>& saved, float* loss) override {
    return guarded("head loss", [&] { kc::head_loss(ctx_, s, saved, loss); });
  }
  Status head_backward(const BlockShape& s, const HeadWeights<float>& w,
                       const HeadSaved<float>& saved, const float* x, const int* targets,
                       double loss_scale, float* dx_partial,
                       const HeadGrads<float>& grads) override {
    return guarded("head backward", [&] {
      kc::head_backward(ctx_, s, w, saved, x, targets, loss_scale, dx_partial, grads);
    });
  }

  Status attention_qkv_forward(const BlockShape& s, const AttentionWeights<float>& w,
                               const float* x, const int* pos, float* rstd, float* xn, float* q,
                               float* k, float* v) override {
    return guarded("attention qkv forward",
                   [&] { kc::attention_qkv_forward(ctx_, s, w, x, pos, rstd, xn, q, k, v); });
  }
  Status attention_qkv_backward(const BlockShape& s, const AttentionWeights<float>& w,
                                const float* x, const int* pos, const float* rstd, const float* xn,
                                float* dq, float* dk, const float* dv, float* dx_partial,
                                const AttentionGrads<float>& grads) override {
    return guarded("attention qkv backward", [&] {
      kc::attention_qkv_backward(ctx_, s, w, x, pos, rstd, xn, dq, dk, dv, dx_partial, grads);
    });
  }
  Status attention_out_forward(const BlockShape& s, const float* wo, const float* att,
                               float* y) override {
    return guarded("attention output forward",
                   [&] { kc::attention_out_forward(ctx_, s, wo, att, y); });
  }
  Status attention_out_backward(const BlockShape& s, const float* wo, const float* att,
                                const float* dy, float* datt, float* dwo) override {
    return guarded("attention output backward",
                   [&] { kc::attention_out_backward(ctx_, s, wo, att, dy, datt, dwo); });
  }
  Status blockwise_forward(const kernels::AttentionBlockPair& pair, const float* q, const float* k,
                           const float* v, float* out, float* lse) override {
    return guarded("blockwise attention forward",
                   [&] { kc::blockwise_attention_forward(ctx_, out, lse, q, k, v, pair); });
  }
  Status attention_merge(float* out, float* lse, const float* out_b, const float* lse_b, int tokens,
                         int heads, int d) override {
    return guarded("attention merge",
                   [&] { kc::attention_merge(ctx_, out, lse, out_b, lse_b, tokens, heads, d); });
  }
  Status blockwise_backward(const kernels::AttentionBlockPair& pair, float* dq, float* dk,
                            float* dv, const float* dout, const float* q, const float* k,
                            const float* v, const float* out, const float* lse) override {
    return guarded("blockwise attention backward", [&] {
      kc::blockwise_attention_backward(ctx_, dq, dk, dv, dout, q, k, v, out, lse, pair);
    });
  }
  Status copy_2d(float* dst, std::size_t dst_stride, const float* src, std::size_t src_stride,
                 std::size_t rows, std::size_t cols, bool accumulate) override {
    return guarded("copy_2d", [&] {
      kc::copy_2d(ctx_, dst, dst_stride, src, src_stride, rows, cols, accumulate);
    });
  }
  Status fill(float* dst, float value, std::size_t n) override {
    return guarded("fill", [&] { kc::fill(ctx_, dst, value, n); });
  }

  Status synchronize() override {
    HEXI_TRY_DEFERRED();
    return guarded("synchronize", [&] { ctx_.synchronize(); });
  }

  // Events in stream order; the first mark after a clear anchors them to the host's
  // steady clock (the stream is drained first, so the event fires at that moment).
  // mark() cannot return a Status: its CUDA errors are kept and reported by the next
  // synchronize() or mark_times().
  void mark() override {
    if (used_ == 0) {
      note(cudaStreamSynchronize(ctx_.stream()), "cudaStreamSynchronize", __LINE__);
      anchor_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
                      .count();
    }
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      note(cudaEventCreate(&e), "cudaEventCreate", __LINE__);
      events_.push_back(e);
    }
    note(cudaEventRecord(events_[used_++], ctx_.stream()), "cudaEventRecord", __LINE__);
  }
  Result<std::vector<double>> mark_times() override {
    HEXI_TRY_DEFERRED();
    std::vector<double> out;
    Status s = guarded("mark_times", [&] {
      HEXI_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
      for (std::size_t i = 0; i < used_; ++i) {
        float ms = 0;
        HEXI_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[0], events_[i]));
        out.push_back(anchor_s_ + ms * 1e-3);
      }
    });
    if (!s.ok()) return s.error();
    return out;
  }
  void clear_marks() override { used_ = 0; }
  void* stream_handle() override { return ctx_.stream(); }

 private:
  // Keeps the first error of a call that cannot return a Status (file, line, CUDA's text).
  void note(cudaError_t e, const char* expr, int line) {
    if (e != cudaSuccess && !deferred_) {
      deferred_ = failure(std::string(__FILE__) + ":" + std::to_string(line) + ": " + expr +
                          " failed: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
    }
  }

  template <class F>
  Status launch(const char* what, std::size_t n, F&& f) {
    if (n == 0) return {};
    return guarded(what, [&] {
      f();
      HEXI_CUDA_CHECK(cudaGetLastError());
    });
  }

  int device_;
  kc::Context ctx_;
  std::vector<cudaEvent_t> events_;
  std::size_t used_ = 0;
  double anchor_s_ = 0;
  std::optional<Error> deferred_;
};

}  // namespace

Result<std::unique_ptr<Backend>> make_cuda_backend(int local_rank) {
  const std::string why = kc::device_unavailable_reason();
  if (!why.empty()) return bad_input("--backend cuda: " + why);
  int count = 0;
  int device = 0;
  try {
    HEXI_CUDA_CHECK(cudaGetDeviceCount(&count));
    device = local_rank % count;
    return std::unique_ptr<Backend>(new CudaBackend(device));
  } catch (const kc::Error& e) {
    return failure(std::string("--backend cuda: cannot set up device ") + std::to_string(device) +
                   ": " + e.what());
  }
}

}  // namespace hexi::engine
