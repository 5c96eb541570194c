// The cpu backend: host memory, the kernels/ CPU reference blocks (GEMMs through
// kernels/gemm_cpu.hpp: OpenBLAS or Eigen) and std::chrono timing. Synchronous: every call
// has finished when it returns.

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

#include "engine/backend.hpp"
#include "kernels/attention_blockwise.hpp"
#include "kernels/bf16.hpp"
#include "kernels/blocks_cpu.hpp"
#include "kernels/cpu_kernels.hpp"
#include "kernels/eigen_maps.hpp"
#include "kernels/gemm_cpu.hpp"
#include "topologies/eigen.hpp"

namespace hexi::engine {
namespace {

namespace kc = kernels::cpu;

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  std::string describe() const override {
    return "cpu: kernels/ CPU reference, float GEMMs on " +
           kernels::cpu::gemm_library_description() + ", elementwise on Eigen (" +
           Eigen::SimdInstructionSetsInUse() + "), 1 thread per rank";
  }

  Result<void*> allocate(std::size_t bytes) override {
    // 64-byte aligned (kernels/eigen_maps.hpp: results must not depend on addresses).
    const std::size_t a = kernels::cpu::kBufferAlignment;
    void* p = std::aligned_alloc(a, (std::max<std::size_t>(bytes, 1) + a - 1) / a * a);
    if (p == nullptr)
      return failure("cpu backend: out of memory allocating " + std::to_string(bytes) + " bytes");
    return p;
  }
  void release(void* p) override { std::free(p); }
  Status upload(void* dst, const void* host, std::size_t bytes) override {
    return copy(dst, host, bytes);
  }
  Status download(void* host, const void* src, std::size_t bytes) override {
    return copy(host, src, bytes);
  }
  Status copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
    return {};
  }
  Status zero(void* dst, std::size_t bytes) override {
    std::memset(dst, 0, bytes);
    return {};
  }

  Status gather(float* dst, const float* src, const std::int64_t* idx, std::size_t n) override {
    for (std::size_t i = 0; i < n; ++i) dst[i] = src[idx[i]];
    return {};
  }
  Status scatter(float* dst, const std::int64_t* idx, const float* src, std::size_t n) override {
    for (std::size_t i = 0; i < n; ++i) dst[idx[i]] = src[i];
    return {};
  }
  Status add_inplace(float* y, const float* x, std::size_t n) override {
    kc::add_inplace(y, x, n);
    return {};
  }
  Status round_bf16(float* dst, const float* src, std::size_t n) override {
    kernels::round_bf16(dst, src, n);
    return {};
  }
  Status to_bf16(std::uint16_t* dst, const float* src, std::size_t n) override {
    kernels::to_bf16(dst, src, n);
    return {};
  }
  Status from_bf16(float* dst, const std::uint16_t* src, std::size_t n) override {
    kernels::from_bf16(dst, src, n);
    return {};
  }

  Status pack_loss_stats(const HeadSaved<float>& saved, int n, float* stats) override {
    for (int i = 0; i < n; ++i) {
      stats[3 * i + 0] = saved.row_max[i];
      stats[3 * i + 1] = saved.partials[2 * i + 0];
      stats[3 * i + 2] = saved.partials[2 * i + 1];
    }
    return {};
  }

  Status combine_loss_stats(const float* gathered, int ranks, int n,
                            const HeadSaved<float>& saved) override {
    for (int i = 0; i < n; ++i) {
      float m = gathered[3 * i];
      for (int r = 1; r < ranks; ++r)
        m = std::max(m, gathered[(static_cast<std::size_t>(r) * n + i) * 3]);
      double sum = 0, target = 0;
      for (int r = 0; r < ranks; ++r) {
        const float* st = gathered + (static_cast<std::size_t>(r) * n + i) * 3;
        sum += static_cast<double>(st[1]) * std::exp(static_cast<double>(st[0]) - m);
        target += st[2];
      }
      saved.row_max[i] = m;
      saved.partials[2 * i + 0] = static_cast<float>(sum);
      saved.partials[2 * i + 1] = static_cast<float>(target);
    }
    return {};
  }

  Status adamw(float* param, const float* grad, float* m, float* v, std::size_t n, const AdamW& c,
               double weight_decay, int step) override {
    kc::adamw_update(param, grad, m, v, n, c.lr, c.beta1, c.beta2, c.eps, weight_decay, step);
    return {};
  }

  Status attention_forward(const BlockShape& s, const AttentionWeights<float>& w, const float* x,
                           const AttentionSaved<float>& saved, float* y_partial) override {
    kc::attention_block_forward(s, w, x, saved, y_partial);
    return {};
  }
  Status attention_backward(const BlockShape& s, const AttentionWeights<float>& w,
                            const AttentionSaved<float>& saved, const float* x, const float* dy,
                            float* dx_partial, const AttentionGrads<float>& grads) override {
    kc::attention_block_backward(s, w, saved, x, dy, dx_partial, grads);
    return {};
  }
  Status mlp_forward(const BlockShape& s, const MlpWeights<float>& w, const float* x,
                     const MlpSaved<float>& saved, float* y_partial) override {
    kc::mlp_block_forward(s, w, x, saved, y_partial);
    return {};
  }
  Status mlp_backward(const BlockShape& s, const MlpWeights<float>& w, const MlpSaved<float>& saved,
                      const float* x, const float* dy, float* dx_partial,
                      const MlpGrads<float>& grads) override {
    kc::mlp_block_backward(s, w, saved, x, dy, dx_partial, grads);
    return {};
  }
  Status embedding_forward(const BlockShape& s, const float* table, const int* tokens,
                           float* out_partial) override {
    kc::embedding_block_forward(s, table, tokens, out_partial);
    return {};
  }
  Status embedding_backward(const BlockShape& s, const int* tokens, const float* dout,
                            float* dtable) override {
    kc::embedding_block_backward(s, tokens, dout, dtable);
    return {};
  }
  Status head_forward(const BlockShape& s, const HeadWeights<float>& w, const float* x,
                      const HeadSaved<float>& saved) override {
    kc::head_forward(s, w, x, saved);
    return {};
  }
  Status head_loss_partials(const BlockShape& s, const HeadSaved<float>& saved,
                            const int* targets) override {
    kc::head_loss_partials(s, saved, targets);
    return {};
  }
  Status head_loss(const BlockShape& s, const HeadSaved<float>& saved, float* loss) override {
    kc::head_loss(s, saved, loss);
    return {};
  }
  Status head_backward(const BlockShape& s, const HeadWeights<float>& w,
                       const HeadSaved<float>& saved, const float* x, const int* targets,
                       double loss_scale, float* dx_partial,
                       const HeadGrads<float>& grads) override {
    kc::head_backward(s, w, saved, x, targets, loss_scale, dx_partial, grads);
    return {};
  }

  Status attention_qkv_forward(const BlockShape& s, const AttentionWeights<float>& w,
                               const float* x, const int* pos, float* rstd, float* xn, float* q,
                               float* k, float* v) override {
    kc::attention_qkv_forward(s, w, x, pos, rstd, xn, q, k, v);
    return {};
  }
  Status attention_qkv_backward(const BlockShape& s, const AttentionWeights<float>& w,
                                const float* x, const int* pos, const float* rstd, const float* xn,
                                float* dq, float* dk, const float* dv, float* dx_partial,
                                const AttentionGrads<float>& grads) override {
    kc::attention_qkv_backward(s, w, x, pos, rstd, xn, dq, dk, dv, dx_partial, grads);
    return {};
  }
  Status attention_out_forward(const BlockShape& s, const float* wo, const float* att,
                               float* y) override {
    kc::attention_out_forward(s, wo, att, y);
    return {};
  }
  Status attention_out_backward(const BlockShape& s, const float* wo, const float* att,
                                const float* dy, float* datt, float* dwo) override {
    kc::attention_out_backward(s, wo, att, dy, datt, dwo);
    return {};
  }
  Status blockwise_forward(const kernels::AttentionBlockPair& pair, const float* q, const float* k,
                           const float* v, float* out, float* lse) override {
    kc::blockwise_attention_forward(out, lse, q, k, v, pair);
    return {};
  }
  Status attention_merge(float* out, float* lse, const float* out_b, const float* lse_b, int tokens,
                         int heads, int d) override {
    kc::attention_merge(out, lse, out_b, lse_b, tokens, heads, d);
    return {};
  }
  Status blockwise_backward(const kernels::AttentionBlockPair& pair, float* dq, float* dk,
                            float* dv, const float* dout, const float* q, const float* k,
                            const float* v, const float* out, const float* lse) override {
    kc::blockwise_attention_backward(dq, dk, dv, dout, q, k, v, out, lse, pair);
    return {};
  }
  Status copy_2d(float* dst, std::size_t dst_stride, const float* src, std::size_t src_stride,
                 std::size_t rows, std::size_t cols, bool accumulate) override {
    for (std::size_t r = 0; r < rows; ++r) {
      float* to = dst + r * dst_stride;
      const float* from = src + r * src_stride;
      for (std::size_t c = 0; c < cols; ++c) to[c] = accumulate ? to[c] + from[c] : from[c];
    }
    return {};
  }
  Status fill(float* dst, float value, std::size_t n) override {
    std::fill_n(dst, n, value);
    return {};
  }

  Status synchronize() override { return {}; }
  void mark() override { marks_.push_back(now()); }
  Result<std::vector<double>> mark_times() override { return marks_; }
  void clear_marks() override { marks_.clear(); }

  explicit CpuBackend(CpuClock clock) : clock_(clock) {}

 private:
  double now() const {
    if (clock_ == CpuClock::kThreadCpu) {
      timespec ts{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return ts.tv_sec + ts.tv_nsec * 1e-9;
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  CpuClock clock_;
  std::vector<double> marks_;
};

// The block kernels take their scratch (a backward's dact, dgate, dup: 0.7 MB each at 128
// tokens of small-llama) from the heap and free it when they return. glibc maps blocks above
// its threshold afresh and gives the top of the heap back once enough of it is free, so the
// next call faults its pages in again, zeroed by the kernel: on the testbed, 334 000 minor
// faults in 5 steps of pp3-uneven's first rank against 93 000 with the memory kept, and its
// backward ops 10-15 % slower than the same shapes in another plan, whose other allocations
// happened to pin the heap's top (validation/README.md). Like a GPU framework's caching allocator,
// the process keeps what it freed: no mmap (every block from the heap) and no trimming.
// Process-wide (glibc's malloc has no per-library setting), once.
void keep_freed_memory() {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
  });
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(CpuClock clock) {
  keep_freed_memory();
  return std::make_unique<CpuBackend>(clock);
}

}  // namespace hexi::engine
