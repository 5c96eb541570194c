// The engine's cpu backend inside a real training step: per op class,
// best time per step, achieved GFLOP/s (program FLOPs, i.e. the cost model's count for the
// op's shard) and, for the GEMM-bound classes, `vs_eigen` = the time the op's GEMMs take
// as standalone Eigen products of the same shapes / the op's measured time (1.0: the op
// runs at standalone-GEMM speed; the rest is norms, RoPE, softmax, SwiGLU, temporaries
// and the engine's own bookkeeping), and `vs_peak` = the op's GFLOP/s over one core's measured
// fp32 FMA peak (bench/core_peak.hpp; the cpu backend is single-threaded).
//
// The step is a whole program (hexisim lower) executed by RankRuntime on one rank:
// "small" = 2 layers of h 512, f 1376, 8 heads / 4 KV heads, V 256, sequence 256, global
// batch 2 in micro-batches of 1 (the kernels bench's "small" shape), and "tiny" = the
// shipped tiny-llama-cpu scenario (h 64), each in float32 and in bf16 mixed precision (the
// *Bf16 benchmarks). Both sides are timed in thread CPU time (the
// cpu backend's CpuClock::kThreadCpu marks; everything is single-threaded), so other
// processes on the machine do not skew the ratios; the Eigen reference runs on freshly
// allocated row-major matrices for >= 0.2 s per shape.
//
//   build/bench/engine_bench [--benchmark_filter=small]

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>
#include <tuple>
#include "topologies/eigen.hpp"

#include "bench/core_peak.hpp"
#include "bench/engine_steps.hpp"
#include "engine/comm_fake.hpp"
#include "engine/data.hpp"
#include "engine/runtime.hpp"
#include "engine/trace.hpp"
#include "kernels/gemm_cpu.hpp"
#include "scenarios/scenario.hpp"

namespace hexi::engine {
namespace {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// C (m, n) = op(A) op(B), inner size k.
struct Gemm {
  int m, n, k;
  bool ta = false, tb = false;
  int count = 1;
  double flops() const { return 2.0 * m * n * k * count; }
};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Standalone Eigen FLOP/s of one shape (cached).
double eigen_rate(const Gemm& g) {
  static std::map<std::tuple<int, int, int, bool, bool>, double> cache;
  const auto key = std::make_tuple(g.m, g.n, g.k, g.ta, g.tb);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const Matrix a = g.ta ? Matrix::Random(g.k, g.m) : Matrix::Random(g.m, g.k);
  const Matrix b = g.tb ? Matrix::Random(g.n, g.k) : Matrix::Random(g.k, g.n);
  Matrix c(g.m, g.n);
  auto product = [&] {
    if (g.ta && g.tb) {
      c.noalias() = a.transpose() * b.transpose();
    } else if (g.ta) {
      c.noalias() = a.transpose() * b;
    } else if (g.tb) {
      c.noalias() = a * b.transpose();
    } else {
      c.noalias() = a * b;
    }
    benchmark::DoNotOptimize(c.data());
  };
  product();
  // Best of 8 trials of >= 0.05 s: the rate without interference from the machine's other
  // processes (a sibling hyperthread's load slows a thread even in CPU time).
  double best = 0;
  for (int trial = 0; trial < 8; ++trial) {
    const double start = now();
    int reps = 0;
    while (now() - start < 0.05) {
      product();
      ++reps;
    }
    best = std::max(best, 2.0 * g.m * g.n * g.k * reps / (now() - start));
  }
  return cache[key] = best;
}

// The GEMMs of each GEMM-bound op class of one micro-batch (kernels/blocks_cpu.cpp):
// linear forward out = x w^T, input gradient dx = dout w, weight gradient dw = dout^T x;
// attention core per (sequence, head) S = Q K^T, O = P V and their backward.
std::map<std::string, std::vector<Gemm>> block_gemms(const Model& m, int b, int s) {
  const int n = b * s, h = m.hidden, f = m.ffn, kd = m.kv_dim(), d = m.head_dim(), V = m.vocab;
  const int heads = b * m.heads;
  std::map<std::string, std::vector<Gemm>> g;
  g["attn.fwd"] = {{n, h, h, false, true},
                   {n, kd, h, false, true, 2},
                   {n, h, h, false, true},
                   {s, s, d, false, true, heads},
                   {s, d, s, false, false, heads}};
  g["attn.bwd"] = {{n, h, h},
                   {h, h, n, true, false},
                   {s, s, d, false, true, heads},
                   {s, d, s, true, false, heads},
                   {s, d, s, false, false, heads},
                   {s, d, s, true, false, heads},
                   {n, h, h},
                   {n, h, kd, false, false, 2},
                   {h, h, n, true, false},
                   {kd, h, n, true, false, 2}};
  g["mlp.fwd"] = {{n, f, h, false, true, 2}, {n, h, f, false, true}};
  g["mlp.bwd"] = {
      {n, f, h}, {h, f, n, true, false}, {n, h, f, false, false, 2}, {f, h, n, true, false, 2}};
  g["head.fwd"] = {{n, V, h, false, true}};
  g["head.bwd"] = {{V, h, n, true, false}, {n, h, V}};
  return g;
}

struct Setup {
  Scenario scenario;
  Program program;
  std::unique_ptr<CorpusSource> data;
};

Setup small_setup() {
  Setup st;
  auto gpus = GpuCatalog::load_shipped();
  auto models = ModelCatalog::load_shipped();
  auto sc = load_scenario("tiny-llama-cpu", *gpus, *models);
  st.scenario = std::move(*sc);
  Model& m = st.scenario.model;
  m.name = "bench-small";
  m.layers = 2;
  m.hidden = 512;
  m.ffn = 1376;
  m.heads = 8;
  m.kv_heads = 4;
  m.vocab = 256;
  m.max_seq = 256;
  st.scenario.training.seq_len = 256;
  st.scenario.training.global_batch = 2;
  return st;
}

Setup tiny_setup() {
  Setup st;
  auto gpus = GpuCatalog::load_shipped();
  auto models = ModelCatalog::load_shipped();
  st.scenario = std::move(*load_scenario("tiny-llama-cpu", *gpus, *models));
  return st;
}

void run_step_bench(benchmark::State& state, Setup st) {
  auto program = whole_model_program(st.scenario, "bench");
  if (!program.ok()) {
    state.SkipWithError(program.error().message.c_str());
    return;
  }
  auto data = CorpusSource::load(default_corpus(), st.scenario.training.seq_len, 1);
  std::vector<StepStats> steps;
  Status status;
  run_fake_world(1, [&](Communicator& world) -> Status {
    auto backend = make_cpu_backend(CpuClock::kThreadCpu);
    return status = time_steps(state, *program, st.scenario.model, world, *backend, *data, steps);
  });
  if (!status.ok()) {
    state.SkipWithError(status.error().message.c_str());
    return;
  }
  // Per class the best step (as the Eigen reference's best trial).
  const double n_steps = 1;
  const OpClasses classes = best_classes(*program, steps);
  const auto gemms = block_gemms(st.scenario.model, 1, st.scenario.training.seq_len);
  double total = 0;
  for (const auto& [name, c] : classes) total += c.seconds;
  std::printf("\n%s step: %.4f s (%zu ops)\n", st.scenario.model.name.c_str(), total / n_steps,
              steps[0].ops.size());
  std::printf("  %-26s %6s %10s %7s %9s %8s %12s %9s\n", "op class", "count", "ms/step", "share",
              "GFLOP/s", "vs_peak", "GEMM GFLOP/s", "vs_eigen");
  for (const auto& [name, c] : classes) {
    const double per_step = c.seconds / n_steps;
    std::string gemm_rate = "-", ratio = "-";
    if (auto it = gemms.find(name); it != gemms.end()) {
      double eigen_s = 0, flops = 0;
      for (const Gemm& g : it->second) {
        eigen_s += g.flops() / eigen_rate(g);
        flops += g.flops();
      }
      const double per_op = c.seconds / c.count;
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.1f", flops / eigen_s / 1e9);
      gemm_rate = buf;
      std::snprintf(buf, sizeof buf, "%.2f", eigen_s / per_op);
      ratio = buf;
      state.counters[name + " vs_eigen"] = eigen_s / per_op;
    }
    char gf[32] = "-", vs_peak[32] = "-";
    if (c.flops > 0) {
      const double rate = c.flops / c.seconds;
      std::snprintf(gf, sizeof gf, "%.1f", rate / 1e9);
      std::snprintf(vs_peak, sizeof vs_peak, "%.2f", rate / bench::core_peak().flops);
      state.counters[name + " GFLOP/s"] = rate / 1e9;
      state.counters[name + " vs_peak"] = rate / bench::core_peak().flops;
    }
    std::printf("  %-26s %6.0f %10.3f %6.1f%% %9s %8s %12s %9s\n", name.c_str(), c.count / n_steps,
                per_step * 1e3, 100 * c.seconds / total, gf, vs_peak, gemm_rate.c_str(),
                ratio.c_str());
  }
  state.counters["step_s"] = total / n_steps;
}

// bf16 mixed precision (kernels/blocks.hpp "Precision"): the same step with the cpu
// backend's bf16 emulation (float32 GEMMs on bf16 values, roundings, packed traffic).
Setup in_bf16(Setup st) {
  st.scenario.training.precision = "bf16";
  st.scenario.model.name += " bf16";
  return st;
}

void BM_EngineStepSmall(benchmark::State& state) {
  run_step_bench(state, small_setup());
}
void BM_EngineStepTiny(benchmark::State& state) {
  run_step_bench(state, tiny_setup());
}
void BM_EngineStepSmallBf16(benchmark::State& state) {
  run_step_bench(state, in_bf16(small_setup()));
}
void BM_EngineStepTinyBf16(benchmark::State& state) {
  run_step_bench(state, in_bf16(tiny_setup()));
}

BENCHMARK(BM_EngineStepSmall)->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EngineStepTiny)->Iterations(20)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EngineStepSmallBf16)->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EngineStepTinyBf16)->Iterations(20)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace hexi::engine

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const auto& peak = hexi::bench::core_peak();
  std::printf("%s\nfloat GEMMs: %s\n", peak.describe().c_str(),
              hexi::kernels::cpu::gemm_library_description().c_str());
  benchmark::AddCustomContext("core_peak", peak.describe());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
