// The engine's cuda backend inside a real training step, float32 and bf16 mixed precision:
// per op class the best time per step (CUDA events around each op), achieved TFLOP/s
// (program FLOPs, the cost model's count) and `vs_gemm` = that rate over the rate of one
// large cuBLAS GEMM in the same precision measured here (8192 x 8192 x 8192: float32 through
// cublasSgemm with FP32 math, no TF32, as the float32 engine; bf16 inputs with float32
// compute through cublasGemmEx, as the bf16 engine). That GEMM is this bench's measured
// peak; no data-sheet figure enters.
//
// The step is a whole program (hexisim lower) executed by RankRuntime on one GPU, its NCCL
// world of one bootstrapped in memory: 2 layers of a Llama-2-7B-like shape (h 4096,
// f 11008, 32 query heads on 8 KV heads, vocabulary 32000), sequence 2048, global batch 2
// in micro-batches of 1. Without a GPU every benchmark is skipped with the reason.
//
//   build/bench/engine_cuda_bench [--benchmark_filter=Bf16]

#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "bench/engine_steps.hpp"
#include "engine/backend.hpp"
#include "engine/check.hpp"
#include "engine/comm_fake.hpp"
#include "engine/comm_nccl.hpp"
#include "engine/data.hpp"
#include "engine/runtime.hpp"
#include "engine/trace.hpp"
#include "kernels/cuda_kernels.hpp"
#include "scenarios/scenario.hpp"

namespace hexi::engine {
namespace {

// FLOP/s of one 8192^3 cuBLAS GEMM in `precision` ("fp32" or "bf16"), best of 10 after a
// warm-up; 0 when a CUDA or cuBLAS call fails.
double gemm_peak(const std::string& precision) {
  static std::map<std::string, double> cache;
  if (auto it = cache.find(precision); it != cache.end()) return it->second;
  const int n = 8192;
  const bool bf16 = precision == "bf16";
  const std::size_t elem = bf16 ? sizeof(__nv_bfloat16) : sizeof(float);
  void *a = nullptr, *b = nullptr, *c = nullptr;
  cublasHandle_t handle = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  double best = 0;
  if (cudaMalloc(&a, elem * n * n) == cudaSuccess && cudaMalloc(&b, elem * n * n) == cudaSuccess &&
      cudaMalloc(&c, sizeof(float) * n * n) == cudaSuccess &&
      cudaMemset(a, 0x3c, elem * n * n) == cudaSuccess &&
      cudaMemset(b, 0x3c, elem * n * n) == cudaSuccess &&
      cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS &&
      cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH) == CUBLAS_STATUS_SUCCESS &&
      cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess) {
    const float one = 1.0f, zero = 0.0f;
    auto product = [&] {
      if (bf16) {
        return cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b,
                            CUDA_R_16BF, n, &zero, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT);
      }
      return cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, static_cast<float*>(a), n,
                         static_cast<float*>(b), n, &zero, static_cast<float*>(c), n);
    };
    bool ok = product() == CUBLAS_STATUS_SUCCESS;
    for (int trial = 0; ok && trial < 10; ++trial) {
      ok = cudaEventRecord(start) == cudaSuccess && product() == CUBLAS_STATUS_SUCCESS &&
           cudaEventRecord(stop) == cudaSuccess && cudaEventSynchronize(stop) == cudaSuccess;
      float ms = 0;
      if (ok && cudaEventElapsedTime(&ms, start, stop) == cudaSuccess && ms > 0)
        best = std::max(best, 2.0 * n * n * n / (ms * 1e-3));
    }
    if (!ok) best = 0;
  }
  if (start != nullptr) cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  if (handle != nullptr) cublasDestroy(handle);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return cache[precision] = best;
}

Result<Scenario> gpu_scenario(const std::string& precision) {
  auto gpus = GpuCatalog::load_shipped();
  HEXI_TRY(gpus);
  auto models = ModelCatalog::load_shipped();
  HEXI_TRY(models);
  auto sc = load_scenario("tiny-llama-cpu", *gpus, *models);
  HEXI_TRY(sc);
  Model& m = sc->model;
  m.name = "llama-7b-shape-2l " + precision;
  m.layers = 2;
  m.hidden = 4096;
  m.ffn = 11008;
  m.heads = 32;
  m.kv_heads = 8;
  m.vocab = 32000;
  m.max_seq = 2048;
  sc->training.seq_len = 2048;
  sc->training.global_batch = 2;
  sc->training.precision = precision;
  return sc;
}

void run_cuda_step(benchmark::State& state, const std::string& precision) {
  if (std::string why = kernels::cuda::device_unavailable_reason(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  auto sc = gpu_scenario(precision);
  if (!sc.ok()) {
    state.SkipWithError(sc.error().message.c_str());
    return;
  }
  auto program = whole_model_program(*sc, "bench-cuda");
  if (!program.ok()) {
    state.SkipWithError(program.error().message.c_str());
    return;
  }
  auto data = CorpusSource::load(default_corpus(), sc->training.seq_len, 1);
  if (!data.ok()) {
    state.SkipWithError(data.error().message.c_str());
    return;
  }
  std::vector<StepStats> steps;
  Status status;
  run_fake_world(1, [&](Communicator& boot) -> Status {
    auto backend = make_backend("cuda", 0);
    if (!backend.ok()) return status = backend.error();
    auto world = make_nccl_world(boot, **backend);
    if (!world.ok()) return status = world.error();
    return status = time_steps(state, *program, sc->model, **world, **backend, *data, steps);
  });
  if (!status.ok()) {
    state.SkipWithError(status.error().message.c_str());
    return;
  }
  // Per class the best step; the step itself the fastest one.
  const OpClasses classes = best_classes(*program, steps);
  double step_s = steps.front().seconds;
  for (const StepStats& step : steps) step_s = std::min(step_s, step.seconds);
  const double peak = gemm_peak(precision);
  double total = 0, flops = 0;
  for (const auto& [name, c] : classes) {
    total += c.seconds;
    flops += c.flops;
  }
  std::printf(
      "\n%s step: %.2f ms wall, %.2f ms in ops (%zu ops); cuBLAS %s 8192^3 GEMM: %.1f "
      "TFLOP/s\n",
      sc->model.name.c_str(), step_s * 1e3, total * 1e3, steps[0].ops.size(), precision.c_str(),
      peak * 1e-12);
  std::printf("  %-26s %6s %10s %7s %9s %8s\n", "op class", "count", "ms/step", "share", "TFLOP/s",
              "vs_gemm");
  for (const auto& [name, c] : classes) {
    char tf[32] = "-", vs[32] = "-";
    if (c.flops > 0 && c.seconds > 0) {
      const double rate = c.flops / c.seconds;
      std::snprintf(tf, sizeof tf, "%.1f", rate * 1e-12);
      if (peak > 0) {
        std::snprintf(vs, sizeof vs, "%.2f", rate / peak);
        state.counters[name + " vs_gemm"] = rate / peak;
      }
    }
    std::printf("  %-26s %6d %10.3f %6.1f%% %9s %8s\n", name.c_str(), c.count, c.seconds * 1e3,
                100 * c.seconds / total, tf, vs);
  }
  state.counters["step_s"] = step_s;
  state.counters["tokens/s"] =
      static_cast<double>(sc->training.global_batch) * sc->training.seq_len / step_s;
  if (peak > 0) state.counters["step vs_gemm"] = flops / step_s / peak;
}

void BM_EngineStepCuda(benchmark::State& state) {
  run_cuda_step(state, "fp32");
}
void BM_EngineStepCudaBf16(benchmark::State& state) {
  run_cuda_step(state, "bf16");
}

BENCHMARK(BM_EngineStepCuda)->Iterations(5)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EngineStepCudaBf16)->Iterations(5)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace hexi::engine

BENCHMARK_MAIN();
