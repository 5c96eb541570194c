// CUDA kernels against the GPU's peak (llm.c dev/cuda style): memory-bound kernels report
// GB/s and `of_peak` = achieved / peak HBM bandwidth; GEMM-bound ones (linear layers,
// attention, blocks) report TFLOP/s and `of_peak` = achieved / peak FP32 (non-tensor)
// throughput, since these kernels run plain FP32 cuBLAS without TF32. Peaks come from the
// device's attributes: HBM = 2 (DDR) x memory clock x bus width / 8; FP32 = 2 (FMA) x
// FP32 lanes per SM (64 on sm_80, 128 on sm_86/89/90+) x SMs x SM clock. Times are CUDA
// events around each call (manual time). Without a GPU every benchmark is skipped with
// the reason. Shape: one Llama-2-7B-like layer, h 4096, f 11008, 32 query heads on 8 KV
// heads (GQA), b 1, s 2048, vocab 32000.
//
//   build/bench/kernels_cuda_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <functional>
#include <memory>
#include <string>

#include "kernels/cuda_kernels.hpp"
#include "kernels/params.hpp"

namespace hexi::kernels {
namespace {

using cuda::DeviceBuffer;

const LlamaDims kDims{1, 4096, 11008, 32, 8, 32000};
constexpr int kBatch = 1, kSeq = 2048, kTokens = kBatch * kSeq;

struct Peak {
  double bytes_per_s = 0;
  double flops = 0;
};

int fp32_lanes_per_sm(int major, int minor) {
  if (major == 8 && minor == 0) return 64;  // A100
  if (major >= 8) return 128;               // sm_86, sm_89, sm_90 and later
  return 64;
}

Peak device_peak(int device) {
  int mem_khz = 0, bus_bits = 0, sm_khz = 0, sms = 0, major = 0, minor = 0;
  HEXI_CUDA_CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device));
  HEXI_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
  HEXI_CUDA_CHECK(cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, device));
  HEXI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  HEXI_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  HEXI_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return {2.0 * mem_khz * 1e3 * bus_bits / 8.0,
          2.0 * fp32_lanes_per_sm(major, minor) * sms * sm_khz * 1e3};
}

// The shared context, or nullptr (and the benchmark skipped) without a device.
cuda::Context* context(benchmark::State& state) {
  static const std::string reason = cuda::device_unavailable_reason();
  if (!reason.empty()) {
    state.SkipWithError(reason.c_str());
    return nullptr;
  }
  static std::unique_ptr<cuda::Context> ctx = std::make_unique<cuda::Context>();
  return ctx.get();
}

// Times `op` with CUDA events each iteration; reports GB/s or TFLOP/s against the peak.
void run(benchmark::State& state, cuda::Context& c, double bytes, double flops,
         const std::function<void()>& op) {
  cudaEvent_t start, stop;
  HEXI_CUDA_CHECK(cudaEventCreate(&start));
  HEXI_CUDA_CHECK(cudaEventCreate(&stop));
  op();  // warm-up (cuBLAS heuristics, pool growth)
  c.synchronize();
  for (auto _ : state) {
    HEXI_CUDA_CHECK(cudaEventRecord(start, c.stream()));
    op();
    HEXI_CUDA_CHECK(cudaEventRecord(stop, c.stream()));
    HEXI_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    HEXI_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms * 1e-3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  const Peak peak = device_peak(c.device());
  using benchmark::Counter;
  if (flops > 0) {
    state.counters["TFLOP/s"] = Counter(flops * 1e-12, Counter::kIsIterationInvariantRate);
    state.counters["of_peak"] = Counter(flops / peak.flops, Counter::kIsIterationInvariantRate);
  } else {
    state.counters["GB/s"] = Counter(bytes * 1e-9, Counter::kIsIterationInvariantRate);
    state.counters["of_peak"] =
        Counter(bytes / peak.bytes_per_s, Counter::kIsIterationInvariantRate);
  }
}

DeviceBuffer<float> buffer(std::size_t n, float value = 0.01f) {
  return DeviceBuffer<float>(std::vector<float>(n, value));
}

constexpr double kF = sizeof(float);

// ---- memory-bound kernels -------------------------------------------------------------

void BM_rmsnorm(benchmark::State& state, bool backward) {
  cuda::Context* c = context(state);
  if (!c) return;
  const int n = kTokens, h = kDims.hidden;
  auto x = buffer(std::size_t(n) * h), w = buffer(h, 1.f), out = buffer(std::size_t(n) * h),
       rstd = buffer(n), dx = buffer(std::size_t(n) * h), dw = buffer(h);
  cuda::rmsnorm_forward(*c, out.get(), rstd.get(), x.get(), w.get(), n, h, 1e-5);
  // forward reads x, writes out; backward reads dout and x twice, writes dx.
  const double bytes = (backward ? 5.0 : 2.0) * n * h * kF;
  run(state, *c, bytes, 0, [&] {
    if (backward)
      cuda::rmsnorm_backward(*c, dx.get(), dw.get(), out.get(), x.get(), w.get(), rstd.get(), n, h);
    else
      cuda::rmsnorm_forward(*c, out.get(), rstd.get(), x.get(), w.get(), n, h, 1e-5);
  });
}

void BM_rope(benchmark::State& state) {
  cuda::Context* c = context(state);
  if (!c) return;
  auto q = buffer(std::size_t(kTokens) * kDims.hidden);
  run(state, *c, 2.0 * kTokens * kDims.hidden * kF, 0,
      [&] { cuda::rope_forward(*c, q.get(), kBatch, kSeq, kDims.heads, kDims.head_dim(), 1e4); });
}

void BM_swiglu(benchmark::State& state, bool backward) {
  cuda::Context* c = context(state);
  if (!c) return;
  const std::size_t n = std::size_t(kTokens) * kDims.ffn;
  auto g = buffer(n), u = buffer(n), o = buffer(n), dg = buffer(n), du = buffer(n);
  run(state, *c, (backward ? 5.0 : 3.0) * n * kF, 0, [&] {
    if (backward)
      cuda::swiglu_backward(*c, dg.get(), du.get(), o.get(), g.get(), u.get(), n);
    else
      cuda::swiglu_forward(*c, o.get(), g.get(), u.get(), n);
  });
}

void BM_add(benchmark::State& state) {
  cuda::Context* c = context(state);
  if (!c) return;
  const std::size_t n = std::size_t(kTokens) * kDims.hidden;
  auto y = buffer(n), x = buffer(n);
  run(state, *c, 3.0 * n * kF, 0, [&] { cuda::add_inplace(*c, y.get(), x.get(), n); });
}

void BM_adamw(benchmark::State& state) {
  cuda::Context* c = context(state);
  if (!c) return;
  const std::size_t n = std::size_t(64) << 20;  // 64 Mi parameters
  auto p = buffer(n), g = buffer(n), m = buffer(n), v = buffer(n);
  int step = 0;
  // reads param, grad, m, v; writes param, m, v.
  run(state, *c, 7.0 * n * kF, 0, [&] {
    cuda::adamw_update(*c, p.get(), g.get(), m.get(), v.get(), n, 1e-4, 0.9, 0.95, 1e-8, 0.1,
                       ++step);
  });
}

void BM_embedding_forward(benchmark::State& state) {
  cuda::Context* c = context(state);
  if (!c) return;
  auto table = buffer(std::size_t(kDims.vocab) * kDims.hidden),
       out = buffer(std::size_t(kTokens) * kDims.hidden);
  DeviceBuffer<int> tokens(std::vector<int>(kTokens, 7));
  run(state, *c, 2.0 * kTokens * kDims.hidden * kF, 0, [&] {
    cuda::embedding_forward(*c, out.get(), tokens.get(), table.get(), kTokens, kDims.hidden, 0,
                            kDims.vocab);
  });
}

void BM_cross_entropy(benchmark::State& state, bool backward) {
  cuda::Context* c = context(state);
  if (!c) return;
  const int n = kTokens, v = kDims.vocab;
  auto logits = buffer(std::size_t(n) * v), max = buffer(n), part = buffer(2 * n),
       dl = buffer(std::size_t(n) * v);
  DeviceBuffer<int> targets(std::vector<int>(n, 3));
  cuda::logits_row_max(*c, max.get(), logits.get(), n, v);
  cuda::cross_entropy_partials(*c, part.get(), logits.get(), max.get(), targets.get(), n, v, 0);
  // forward: max and partials each read the logits; backward reads them and writes dlogits.
  run(state, *c, 2.0 * n * v * kF, 0, [&] {
    if (backward) {
      cuda::cross_entropy_backward(*c, dl.get(), logits.get(), max.get(), part.get(), targets.get(),
                                   n, v, 0, 1.0 / n);
    } else {
      cuda::logits_row_max(*c, max.get(), logits.get(), n, v);
      cuda::cross_entropy_partials(*c, part.get(), logits.get(), max.get(), targets.get(), n, v, 0);
    }
  });
}

// ---- GEMM-bound kernels ---------------------------------------------------------------

void BM_matmul(benchmark::State& state, int k, int m, int pass) {
  cuda::Context* c = context(state);
  if (!c) return;
  const int n = kTokens;
  auto x = buffer(std::size_t(n) * k), w = buffer(std::size_t(m) * k),
       out = buffer(std::size_t(n) * m);
  run(state, *c, 0, 2.0 * n * k * m, [&] {
    if (pass == 0) cuda::matmul_forward(*c, out.get(), x.get(), w.get(), n, k, m);
    if (pass == 1) cuda::matmul_backward_input(*c, x.get(), out.get(), w.get(), n, k, m, false);
    if (pass == 2) cuda::matmul_backward_weight(*c, w.get(), out.get(), x.get(), n, k, m);
  });
}

void BM_attention(benchmark::State& state, bool backward) {
  cuda::Context* c = context(state);
  if (!c) return;
  const int hq = kDims.heads, hk = kDims.kv_heads, d = kDims.head_dim();
  const std::size_t qn = std::size_t(kTokens) * hq * d, kn = std::size_t(kTokens) * hk * d;
  auto q = buffer(qn), k = buffer(kn), v = buffer(kn), out = buffer(qn),
       probs = buffer(std::size_t(kBatch) * hq * kSeq * kSeq), dq = buffer(qn), dk = buffer(kn),
       dv = buffer(kn);
  cuda::attention_forward(*c, out.get(), probs.get(), q.get(), k.get(), v.get(), kBatch, kSeq, hq,
                          hk, d);
  // Both products over the full s x s square (the masked half is computed too).
  const double fwd_flops = 4.0 * kBatch * hq * double(kSeq) * kSeq * d;
  run(state, *c, 0, backward ? 2 * fwd_flops : fwd_flops, [&] {
    if (backward)
      cuda::attention_backward(*c, dq.get(), dk.get(), dv.get(), out.get(), q.get(), k.get(),
                               v.get(), probs.get(), kBatch, kSeq, hq, hk, d);
    else
      cuda::attention_forward(*c, out.get(), probs.get(), q.get(), k.get(), v.get(), kBatch, kSeq,
                              hq, hk, d);
  });
}

void BM_mlp_block(benchmark::State& state, bool backward) {
  cuda::Context* c = context(state);
  if (!c) return;
  const BlockShape sh{kDims, full_shard(kDims), kBatch, kSeq};
  const ParamLayout layout = stage_layout(kDims, {0, 1, false, false, sh.shard});
  auto p = buffer(layout.total), g = buffer(layout.total), saved = buffer(mlp_saved_size(sh)),
       x = buffer(std::size_t(kTokens) * kDims.hidden), y = buffer(x.size()), dx = buffer(x.size());
  auto at = [&](DeviceBuffer<float>& b, const char* name) {
    return b.get() + layout.find(std::string("layers.0.") + name)->offset;
  };
  const MlpWeights<float> w{at(p, "mlp_norm"), at(p, "w_gate"), at(p, "w_up"), at(p, "w_down")};
  const MlpGrads<float> gr{at(g, "mlp_norm"), at(g, "w_gate"), at(g, "w_up"), at(g, "w_down")};
  const auto sv = carve_mlp_saved(sh, saved.get());
  cuda::mlp_block_forward(*c, sh, w, x.get(), sv, y.get());
  const double fwd_flops = 6.0 * kTokens * kDims.hidden * double(kDims.ffn);
  run(state, *c, 0, backward ? 2 * fwd_flops : fwd_flops, [&] {
    if (backward)
      cuda::mlp_block_backward(*c, sh, w, sv, x.get(), y.get(), dx.get(), gr);
    else
      cuda::mlp_block_forward(*c, sh, w, x.get(), sv, y.get());
  });
}

void register_all() {
  using benchmark::RegisterBenchmark;
  const int h = kDims.hidden, f = kDims.ffn;
  for (bool bw : {false, true}) {
    const std::string pass = bw ? "backward" : "forward";
    RegisterBenchmark(("rmsnorm_" + pass).c_str(), BM_rmsnorm, bw)->UseManualTime();
    RegisterBenchmark(("swiglu_" + pass).c_str(), BM_swiglu, bw)->UseManualTime();
    RegisterBenchmark(("cross_entropy_" + pass).c_str(), BM_cross_entropy, bw)->UseManualTime();
    RegisterBenchmark(("attention_" + pass).c_str(), BM_attention, bw)->UseManualTime();
    RegisterBenchmark(("mlp_block_" + pass).c_str(), BM_mlp_block, bw)->UseManualTime();
  }
  RegisterBenchmark("rope_forward", BM_rope)->UseManualTime();
  RegisterBenchmark("add_inplace", BM_add)->UseManualTime();
  RegisterBenchmark("adamw_update", BM_adamw)->UseManualTime();
  RegisterBenchmark("embedding_forward", BM_embedding_forward)->UseManualTime();
  const char* passes[] = {"forward", "backward_input", "backward_weight"};
  for (int pass = 0; pass < 3; ++pass) {
    RegisterBenchmark((std::string("matmul_") + passes[pass] + "/qkv_q").c_str(), BM_matmul, h, h,
                      pass)
        ->UseManualTime();
    RegisterBenchmark((std::string("matmul_") + passes[pass] + "/gate").c_str(), BM_matmul, h, f,
                      pass)
        ->UseManualTime();
  }
}

}  // namespace
}  // namespace hexi::kernels

int main(int argc, char** argv) {
  hexi::kernels::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
