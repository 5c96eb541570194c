#pragma once
// The engine's compute seam (a seam: cpu and cuda backends behind one interface): memory, the
// TP-shard blocks of kernels/, the few engine-side kernels (index gather/scatter for gradient
// buckets, loss statistics of a vocab-parallel head, AdamW) and op timing, behind one interface:
//   cpu   backend_cpu.cpp   host memory, kernels/ CPU reference (Eigen), std::chrono
//   cuda  backend_cuda.cu   device memory, kernels/ CUDA (cuBLAS), cudaEvent timing
// Every pointer a Backend method takes is memory of that backend (device memory for
// cuda), except the host side of upload/download. All math is float32; bf16 runs
// (kernels/blocks.hpp "Precision") store bf16 values in float32 buffers and pack them to
// 2-byte bf16 (kernels/bf16.hpp) only to communicate.
//
// Calls are stream-ordered: a backend may run them asynchronously (cuda) as long as
// they execute in call order; synchronize() waits for all of them. Communicators that
// share the backend's memory (MPI for cpu, NCCL for cuda) are ordered with it.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/attention_blockwise.hpp"
#include "kernels/blocks.hpp"
#include "kernels/shapes.hpp"
#include "topologies/status.hpp"

namespace hexi::engine {

using kernels::AttentionGrads;
using kernels::AttentionSaved;
using kernels::AttentionWeights;
using kernels::BlockShape;
using kernels::HeadGrads;
using kernels::HeadSaved;
using kernels::HeadWeights;
using kernels::MlpGrads;
using kernels::MlpSaved;
using kernels::MlpWeights;

// AdamW hyper-parameters (PyTorch torch.optim.AdamW semantics, kernels/cpu_kernels.hpp).
struct AdamW {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // for matrices; norm gains get 0
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;  // "cpu" | "cuda"
  virtual std::string describe() const = 0;   // for reports: device, library versions

  // ---- memory (bytes) ----------------------------------------------------------------
  virtual Result<void*> allocate(std::size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual Status upload(void* dst, const void* host, std::size_t bytes) = 0;
  virtual Status download(void* host, const void* src, std::size_t bytes) = 0;
  virtual Status copy(void* dst, const void* src, std::size_t bytes) = 0;
  virtual Status zero(void* dst, std::size_t bytes) = 0;

  // ---- engine kernels ------------------------------------------------------------------
  // dst[i] = src[idx[i]] for i < n (packing a gradient bucket); idx on the backend.
  virtual Status gather(float* dst, const float* src, const std::int64_t* idx, std::size_t n) = 0;
  // dst[idx[i]] = src[i] (unpacking); indices distinct.
  virtual Status scatter(float* dst, const std::int64_t* idx, const float* src, std::size_t n) = 0;
  // y (n) += x (n)
  virtual Status add_inplace(float* y, const float* x, std::size_t n) = 0;
  // bf16 runs: dst (n) = src rounded to bf16 values (dst == src allowed); packing to and
  // unpacking from 2-byte bf16 bits (kernels/bf16.hpp: round to nearest even; unpacking
  // is exact).
  virtual Status round_bf16(float* dst, const float* src, std::size_t n) = 0;
  virtual Status to_bf16(std::uint16_t* dst, const float* src, std::size_t n) = 0;
  virtual Status from_bf16(float* dst, const std::uint16_t* src, std::size_t n) = 0;
  // bf16 runs: `weights` (n) hold bf16 values and stay unchanged until the next call (the
  // step's compute copy); a backend whose GEMMs read bf16 may keep a bf16 copy of them
  // instead of converting a weight operand on every GEMM (the cuda backend does; the cpu
  // backend's GEMMs are float32). nullptr ends that.
  virtual Status bf16_weights(const float* weights, std::size_t n) {
    (void)weights;
    (void)n;
    return {};
  }
  // stats (n, 3) = [local row max, sum exp(logit - local max), target logit or 0] of a
  // vocab shard's head after head_forward + head_loss_partials with the local max.
  virtual Status pack_loss_stats(const HeadSaved<float>& saved, int n, float* stats) = 0;
  // From every TP rank's stats (ranks, n, 3): saved.row_max = global max M, saved.partials =
  // [sum_r s_r exp(m_r - M), sum_r t_r]; rank order fixed, so all ranks agree bit for bit.
  virtual Status combine_loss_stats(const float* gathered, int ranks, int n,
                                    const HeadSaved<float>& saved) = 0;
  // AdamW on n elements at step t >= 1; weight_decay as given (0 for norm gains).
  virtual Status adamw(float* param, const float* grad, float* m, float* v, std::size_t n,
                       const AdamW& c, double weight_decay, int step) = 0;

  // ---- TP-shard blocks (kernels/blocks.hpp: semantics and the all-reduce protocol) -----
  virtual Status attention_forward(const BlockShape& s, const AttentionWeights<float>& w,
                                   const float* x, const AttentionSaved<float>& saved,
                                   float* y_partial) = 0;
  virtual Status attention_backward(const BlockShape& s, const AttentionWeights<float>& w,
                                    const AttentionSaved<float>& saved, const float* x,
                                    const float* dy, float* dx_partial,
                                    const AttentionGrads<float>& grads) = 0;
  virtual Status mlp_forward(const BlockShape& s, const MlpWeights<float>& w, const float* x,
                             const MlpSaved<float>& saved, float* y_partial) = 0;
  virtual Status mlp_backward(const BlockShape& s, const MlpWeights<float>& w,
                              const MlpSaved<float>& saved, const float* x, const float* dy,
                              float* dx_partial, const MlpGrads<float>& grads) = 0;
  virtual Status embedding_forward(const BlockShape& s, const float* table, const int* tokens,
                                   float* out_partial) = 0;
  virtual Status embedding_backward(const BlockShape& s, const int* tokens, const float* dout,
                                    float* dtable) = 0;
  virtual Status head_forward(const BlockShape& s, const HeadWeights<float>& w, const float* x,
                              const HeadSaved<float>& saved) = 0;
  virtual Status head_loss_partials(const BlockShape& s, const HeadSaved<float>& saved,
                                    const int* targets) = 0;
  virtual Status head_loss(const BlockShape& s, const HeadSaved<float>& saved, float* loss) = 0;
  virtual Status head_backward(const BlockShape& s, const HeadWeights<float>& w,
                               const HeadSaved<float>& saved, const float* x, const int* targets,
                               double loss_scale, float* dx_partial,
                               const HeadGrads<float>& grads) = 0;

  // ---- sequence meshes (context + head parallelism; engine/runtime_seq.cpp) -------------
  // The attention block split around its core (kernels/blocks.hpp, "sequence meshes"; `pos`
  // in backend memory), the blockwise causal core (kernels/attention_blockwise.hpp; the
  // pair's positions in backend memory), strided copies and fills. A backend without them
  // refuses sequence programs: the defaults return an error naming the backend.
  virtual Status attention_qkv_forward(const BlockShape& s, const AttentionWeights<float>& w,
                                       const float* x, const int* pos, float* rstd, float* xn,
                                       float* q, float* k, float* v);
  virtual Status attention_qkv_backward(const BlockShape& s, const AttentionWeights<float>& w,
                                        const float* x, const int* pos, const float* rstd,
                                        const float* xn, float* dq, float* dk, const float* dv,
                                        float* dx_partial, const AttentionGrads<float>& grads);
  virtual Status attention_out_forward(const BlockShape& s, const float* wo, const float* att,
                                       float* y);
  virtual Status attention_out_backward(const BlockShape& s, const float* wo, const float* att,
                                        const float* dy, float* datt, float* dwo);
  virtual Status blockwise_forward(const kernels::AttentionBlockPair& pair, const float* q,
                                   const float* k, const float* v, float* out, float* lse);
  virtual Status attention_merge(float* out, float* lse, const float* out_b, const float* lse_b,
                                 int tokens, int heads, int d);
  // dq, dk, dv accumulated (+=).
  virtual Status blockwise_backward(const kernels::AttentionBlockPair& pair, float* dq, float* dk,
                                    float* dv, const float* dout, const float* q, const float* k,
                                    const float* v, const float* out, const float* lse);
  // For r < rows, c < cols: dst[r * dst_stride + c] = (or += when accumulate)
  // src[r * src_stride + c]; the two regions do not overlap.
  virtual Status copy_2d(float* dst, std::size_t dst_stride, const float* src,
                         std::size_t src_stride, std::size_t rows, std::size_t cols,
                         bool accumulate);
  // dst (n) = value.
  virtual Status fill(float* dst, float value, std::size_t n);

  // ---- ordering and timing ---------------------------------------------------------------
  virtual Status synchronize() = 0;
  // Records a timestamp in stream order (cpu: now; cuda: a cudaEvent). mark_times()
  // synchronizes and returns every mark since the last clear in seconds on the host's
  // steady clock (std::chrono::steady_clock, comparable across processes of a machine).
  virtual void mark() = 0;
  virtual Result<std::vector<double>> mark_times() = 0;
  virtual void clear_marks() = 0;

  // The backend's native stream (cudaStream_t for cuda: NCCL enqueues on it); nullptr
  // for cpu.
  virtual void* stream_handle() { return nullptr; }
};

// "cpu", or "cuda" when this build has the CUDA backend and a device is visible
// (bad input naming the reason otherwise). `local_rank` picks the GPU of this process.
Result<std::unique_ptr<Backend>> make_backend(std::string_view name, int local_rank);
// The cpu backend. Its op timestamps come from the steady clock (comparable across the
// processes of a machine: traces), or from the thread's CPU time (kThreadCpu: for
// single-threaded benchmarks, immune to other processes on the machine).
enum class CpuClock { kSteady, kThreadCpu };
std::unique_ptr<Backend> make_cpu_backend(CpuClock clock = CpuClock::kSteady);
// Whether this build includes the CUDA backend (nvcc was found at configure time).
bool cuda_backend_built();

// An owning allocation of `count` T on a backend (move-only).
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  static Result<DeviceArray> make(Backend& b, std::size_t count) {
    auto p = b.allocate(count * sizeof(T) + (count == 0 ? sizeof(T) : 0));
    if (!p.ok()) return p.error();
    DeviceArray a;
    a.backend_ = &b;
    a.ptr_ = static_cast<T*>(*p);
    a.count_ = count;
    return a;
  }
  ~DeviceArray() { reset(); }
  DeviceArray(DeviceArray&& o) noexcept { *this = std::move(o); }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      reset();
      backend_ = o.backend_;
      ptr_ = o.ptr_;
      count_ = o.count_;
      o.ptr_ = nullptr;
      o.count_ = 0;
    }
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return ptr_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }
  void reset() {
    if (ptr_ != nullptr) backend_->release(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }

 private:
  Backend* backend_ = nullptr;
  T* ptr_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace hexi::engine
