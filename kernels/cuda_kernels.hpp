#pragma once
// CUDA kernels of the Llama decoder (float32, GEMMs through cuBLAS in FP32 without
// TF32). Same names, arguments, layouts and accumulate/overwrite rules as the CPU
// reference (cpu_kernels.hpp, blocks_cpu.hpp) plus a leading Context&; every pointer,
// tokens and targets included, is device memory. Each kernel is tested against its CPU
// reference (cuda_kernels_test.cpp) and benchmarked against the GPU's peak
// (bench/kernels_cuda_bench.cpp). Deterministic: no atomics; reductions over tokens run
// in a fixed order, so a run repeats bit for bit on the same GPU.
//
// Built only when nvcc is found (HEXISIM_HAVE_CUDA); link hexi_kernels_cuda.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention_blockwise.hpp"
#include "kernels/blocks.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/shapes.hpp"

namespace hexi::kernels::cuda {

// Empty when a CUDA device is usable, otherwise why not (tests skip with it):
// "no CUDA device: <cudaGetErrorString>".
std::string device_unavailable_reason();

// A device, a stream and a cuBLAS handle bound to it (FP32 math, no TF32). Kernels
// run asynchronously on stream(); temporaries come from the device's stream-ordered
// memory pool (cudaMallocAsync), which the constructor sets to keep freed memory
// cached. Not thread-safe; one per rank.
class Context {
 public:
  explicit Context(int device = 0);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  void synchronize();  // waits for everything queued on stream()
  // Mixed precision: while set, the GEMMs of this context read their float32 operands as
  // bf16 (converted exactly: they hold bf16 values) and run as cuBLAS bf16 GEMMs with
  // fp32 compute and fp32 output (cublasGemmEx). The blocks set it from BlockShape::bf16.
  bool bf16_gemm() const { return bf16_gemm_; }
  void set_bf16_gemm(bool on) { bf16_gemm_ = on; }
  // A bf16 copy of `n` float32 values that hold bf16 numbers (the engine's compute copy of
  // the weights, rounded at each step's start): until the next call, a bf16 GEMM operand
  // that lies inside [values, values + n) is read from the copy instead of being converted
  // on every call (the same bf16 numbers: results are bit-identical). values nullptr (or n
  // 0) drops the copy's use; its memory is kept for the next call. The values must not
  // change while registered.
  void set_bf16_weights(const float* values, std::size_t n);
  // The copy of `p` when [p, p + count) lies inside the registered values, else nullptr.
  const std::uint16_t* bf16_weights_of(const float* p, std::size_t count) const;

 private:
  bool bf16_gemm_ = false;
  const float* weights_ = nullptr;  // the registered float32 values
  std::size_t weights_n_ = 0;
  std::uint16_t* weights_bf16_ = nullptr;  // their bf16 copy (cudaMalloc)
  std::size_t weights_capacity_ = 0;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
};

// Owning device array (RAII) with host copies, for tests, benchmarks and the engine.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n);
  explicit DeviceBuffer(const std::vector<T>& host);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  std::size_t size() const { return n_; }
  void upload(const std::vector<T>& host);  // host.size() == size()
  std::vector<T> download() const;
  void zero();

 private:
  T* ptr_ = nullptr;
  std::size_t n_ = 0;
};

// ---- kernels (see cpu_kernels.hpp for the semantics of each) -------------------------
void matmul_forward(Context& c, float* out, const float* x, const float* w, int n, int k, int m);
void matmul_backward_input(Context& c, float* dx, const float* dout, const float* w, int n, int k,
                           int m, bool accumulate);
void matmul_backward_weight(Context& c, float* dw, const float* dout, const float* x, int n, int k,
                            int m);

void rmsnorm_forward(Context& c, float* out, float* rstd, const float* x, const float* w, int n,
                     int h, double eps);
void rmsnorm_backward(Context& c, float* dx, float* dw, const float* dout, const float* x,
                      const float* w, const float* rstd, int n, int h);

void rope_forward(Context& c, float* x, int b, int s, int heads, int d, double theta);
void rope_backward(Context& c, float* dx, int b, int s, int heads, int d, double theta);
// At explicit positions (device memory): x (n, heads, d), token r at position pos[r].
void rope_forward_at(Context& c, float* x, const int* pos, int n, int heads, int d, double theta);
void rope_backward_at(Context& c, float* dx, const int* pos, int n, int heads, int d, double theta);

void attention_forward(Context& c, float* out, float* probs, const float* q, const float* k,
                       const float* v, int b, int s, int hq, int hk, int d, bool bf16 = false);
void attention_backward(Context& c, float* dq, float* dk, float* dv, const float* dout,
                        const float* q, const float* k, const float* v, const float* probs, int b,
                        int s, int hq, int hk, int d, bool bf16 = false);

// Blockwise (ring) attention, attention_blockwise.hpp: pair.q_pos and pair.kv_pos are device
// memory too. Head dimension up to 256 (cuda::Error beyond).
void blockwise_attention_forward(Context& c, float* out, float* lse, const float* q, const float* k,
                                 const float* v, const AttentionBlockPair& pair, bool bf16 = false);
void attention_merge(Context& c, float* out, float* lse, const float* out_b, const float* lse_b,
                     int tokens, int heads, int d);
void blockwise_attention_backward(Context& c, float* dq, float* dk, float* dv, const float* dout,
                                  const float* q, const float* k, const float* v, const float* out,
                                  const float* lse, const AttentionBlockPair& pair,
                                  bool bf16 = false);

void swiglu_forward(Context& c, float* out, const float* gate, const float* up, std::size_t n);
void swiglu_backward(Context& c, float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, std::size_t n);

void embedding_forward(Context& c, float* out, const int* tokens, const float* table, int n, int h,
                       int vocab_begin, int vocab_end);
void embedding_backward(Context& c, float* dtable, const float* dout, const int* tokens, int n,
                        int h, int vocab_begin, int vocab_end);

void logits_row_max(Context& c, float* row_max, const float* logits, int n, int vl);
void cross_entropy_partials(Context& c, float* partials, const float* logits, const float* row_max,
                            const int* targets, int n, int vl, int vocab_begin);
void cross_entropy_loss(Context& c, float* loss, const float* row_max, const float* partials,
                        int n);
void cross_entropy_backward(Context& c, float* dlogits, const float* logits, const float* row_max,
                            const float* partials, const int* targets, int n, int vl,
                            int vocab_begin, double loss_scale);

void add_inplace(Context& c, float* y, const float* x, std::size_t n);
// For r < rows, c < cols: dst[r * dst_stride + c] = (or += when accumulate)
// src[r * src_stride + c]; dst (n) = value.
void copy_2d(Context& c, float* dst, std::size_t dst_stride, const float* src,
             std::size_t src_stride, std::size_t rows, std::size_t cols, bool accumulate);
void fill(Context& c, float* dst, float value, std::size_t n);

// bf16 (kernels/bf16.hpp semantics, __float2bfloat16_rn): dst = src rounded to bf16 values
// (dst == src allowed); packing to and unpacking from 2-byte bf16 bits.
void round_bf16(Context& c, float* dst, const float* src, std::size_t n);
void to_bf16(Context& c, std::uint16_t* dst, const float* src, std::size_t n);
void from_bf16(Context& c, float* dst, const std::uint16_t* src, std::size_t n);

void adamw_update(Context& c, float* param, const float* grad, float* m, float* v, std::size_t n,
                  double lr, double beta1, double beta2, double eps, double weight_decay, int step);

// ---- TP-shard blocks (see blocks.hpp and blocks_cpu.hpp) -----------------------------
void attention_block_forward(Context& c, const BlockShape& shape, const AttentionWeights<float>& w,
                             const float* x, const AttentionSaved<float>& saved, float* y_partial);
void attention_block_backward(Context& c, const BlockShape& shape, const AttentionWeights<float>& w,
                              const AttentionSaved<float>& saved, const float* x, const float* dy,
                              float* dx_partial, const AttentionGrads<float>& grads);
// The attention block split around its core (blocks.hpp, "sequence meshes"; float32).
void attention_qkv_forward(Context& c, const BlockShape& shape, const AttentionWeights<float>& w,
                           const float* x, const int* pos, float* rstd, float* xn, float* q,
                           float* k, float* v);
void attention_qkv_backward(Context& c, const BlockShape& shape, const AttentionWeights<float>& w,
                            const float* x, const int* pos, const float* rstd, const float* xn,
                            float* dq, float* dk, const float* dv, float* dx_partial,
                            const AttentionGrads<float>& grads);
void attention_out_forward(Context& c, const BlockShape& shape, const float* wo, const float* att,
                           float* y);
void attention_out_backward(Context& c, const BlockShape& shape, const float* wo, const float* att,
                            const float* dy, float* datt, float* dwo);
void mlp_block_forward(Context& c, const BlockShape& shape, const MlpWeights<float>& w,
                       const float* x, const MlpSaved<float>& saved, float* y_partial);
void mlp_block_backward(Context& c, const BlockShape& shape, const MlpWeights<float>& w,
                        const MlpSaved<float>& saved, const float* x, const float* dy,
                        float* dx_partial, const MlpGrads<float>& grads);
void embedding_block_forward(Context& c, const BlockShape& shape, const float* table,
                             const int* tokens, float* out_partial);
void embedding_block_backward(Context& c, const BlockShape& shape, const int* tokens,
                              const float* dout, float* dtable);
void head_forward(Context& c, const BlockShape& shape, const HeadWeights<float>& w, const float* x,
                  const HeadSaved<float>& saved);
void head_loss_partials(Context& c, const BlockShape& shape, const HeadSaved<float>& saved,
                        const int* targets);
void head_loss(Context& c, const BlockShape& shape, const HeadSaved<float>& saved, float* loss);
void head_backward(Context& c, const BlockShape& shape, const HeadWeights<float>& w,
                   const HeadSaved<float>& saved, const float* x, const int* targets,
                   double loss_scale, float* dx_partial, const HeadGrads<float>& grads);

}  // namespace hexi::kernels::cuda
