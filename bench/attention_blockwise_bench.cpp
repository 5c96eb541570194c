// Blockwise causal attention (kernels/attention_blockwise.hpp), forward + backward of one
// sequence held as one block (positions 0..s-1: the diagonal block of a ring, half of its
// pairs visible), against the engine's GEMM-bound rate at the same hidden size, and its peak
// memory at growing sequence lengths.
//
// - blockwise/<shape>/<s>: GFLOP/s of forward + backward, counting the model FLOPs of the
//   visible pairs: per pair and query head 4d in the forward (S = Q K^T, O = P V) and 8d in
//   the backward (dP, dV, dQ, dK); the backward's recomputation of S (2d more: FlashAttention
//   counts it) and the masked halves of diagonal tiles are work the kernel does on top.
//   `vs_linear` = its GFLOP/s over the GFLOP/s of linear/<shape>/<s>; `vs_peak` over one
//   core's measured fp32 FMA peak (bench/core_peak.hpp). Target: vs_linear >= 0.5.
// - linear/<shape>/<s>: the engine's GEMM-bound op at hidden h, a linear layer h -> h on s
//   tokens through the kernels the engine runs (cpu::matmul_forward, _backward_input,
//   _backward_weight: 3 GEMMs of 2 s h^2 FLOPs).
// - memory/<shape>/<s>: one forward + backward in a forked child; `peak_MiB` is the child's
//   peak resident memory (getrusage ru_maxrss), `tensors_MiB` what q, k, v, out, lse, dout,
//   dq, dk, dv take, `dense_probs_MiB` what the dense kernel's (hq, s, s) probabilities alone
//   would take. Linear growth of peak_MiB in s shows that no s x s buffer exists.
// Everything is single-threaded (one engine rank computes on one core) and timed in thread
// CPU time, so other processes on the machine do not skew the ratios.
// Shapes: "tiny" is tiny-llama (h 64, 4 query heads on 2 KV heads, d 16); "small" is the
// kernels bench's h 512 (8 query heads on 4 KV heads, d 64).
//
//   build/bench/attention_blockwise_bench [--benchmark_filter=tiny]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "bench/core_peak.hpp"
#include "bench/in_child.hpp"
#include "kernels/attention_blockwise.hpp"
#include "kernels/cpu_kernels.hpp"
#include "kernels/gemm_cpu.hpp"

namespace hexi::kernels {
namespace {

struct Shape {
  const char* name;
  int hidden, hq, hk;
  int d() const { return hidden / hq; }
};
constexpr Shape kTiny{"tiny", 64, 4, 2};
constexpr Shape kSmall{"small", 512, 8, 4};

// CPU seconds of this thread.
double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Model FLOPs of a causal forward + backward over s tokens (see the top comment).
double attention_flops(const Shape& sh, int s) {
  const double pairs = 0.5 * s * (s + 1.0);
  return 12.0 * sh.d() * sh.hq * pairs;
}

// One sequence's tensors, inputs filled with a fixed pattern of O(1) values.
struct Tensors {
  Shape sh;
  int s;
  std::vector<int> pos;
  std::vector<float> q, k, v, out, lse, dout, dq, dk, dv;
  Tensors(const Shape& sh_, int s_)
      : sh(sh_),
        s(s_),
        pos(s_),
        q(std::size_t(s_) * sh_.hq * sh_.d()),
        k(std::size_t(s_) * sh_.hk * sh_.d()),
        v(k.size()),
        out(q.size()),
        lse(std::size_t(s_) * sh_.hq),
        dout(q.size()),
        dq(q.size()),
        dk(k.size()),
        dv(k.size()) {
    std::iota(pos.begin(), pos.end(), 0);
    for (auto* x : {&q, &k, &v, &dout})
      for (std::size_t i = 0; i < x->size(); ++i) (*x)[i] = float(i % 29) / 29.f - 0.5f;
  }
  double bytes() const {
    double n = 0;
    for (const auto* x : {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv}) n += double(x->size());
    return n * sizeof(float);
  }
  AttentionBlockPair pair() const { return {s, s, sh.hq, sh.hk, sh.d(), pos.data(), pos.data()}; }
  void forward_backward() {
    const auto p = pair();
    cpu::blockwise_attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), p);
    std::fill(dq.begin(), dq.end(), 0.f);
    std::fill(dk.begin(), dk.end(), 0.f);
    std::fill(dv.begin(), dv.end(), 0.f);
    cpu::blockwise_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(),
                                      k.data(), v.data(), out.data(), lse.data(), p);
  }
};

// A linear layer h -> h on n tokens: forward and both backward GEMMs, as the engine runs them.
struct Linear {
  int n, h;
  std::vector<float> x, w, y, dx, dw;
  Linear(int n_, int h_)
      : n(n_),
        h(h_),
        x(std::size_t(n_) * h_, 0.25f),
        w(std::size_t(h_) * h_, 0.01f),
        y(x.size()),
        dx(x.size()),
        dw(w.size()) {}
  double flops() const { return 3 * 2.0 * n * h * h; }
  void run() {
    cpu::matmul_forward(y.data(), x.data(), w.data(), n, h, h);
    cpu::matmul_backward_input(dx.data(), y.data(), w.data(), n, h, h, false);
    cpu::matmul_backward_weight(dw.data(), y.data(), x.data(), n, h, h);
  }
};

// FLOP/s of Linear(n, h), best of 5 trials of >= 0.1 s (cached per shape).
double linear_rate(int n, int h) {
  static std::map<std::pair<int, int>, double> cache;
  if (auto it = cache.find({n, h}); it != cache.end()) return it->second;
  Linear lin(n, h);
  lin.run();  // warm-up
  double best = 0;
  for (int trial = 0; trial < 5; ++trial) {
    const double start = thread_seconds();
    int reps = 0;
    do {
      lin.run();
      ++reps;
    } while (thread_seconds() - start < 0.1);
    best = std::max(best, lin.flops() * reps / (thread_seconds() - start));
  }
  return cache[{n, h}] = best;
}

template <class F>
double timed_loop(benchmark::State& state, F body) {
  double seconds = 0;
  for (auto _ : state) {
    const double start = thread_seconds();
    body();
    benchmark::ClobberMemory();
    seconds += thread_seconds() - start;
  }
  return seconds / static_cast<double>(state.iterations());
}

void BM_blockwise(benchmark::State& state, Shape sh, int s) {
  Tensors t(sh, s);
  const double per_iteration = timed_loop(state, [&] { t.forward_backward(); });
  const double rate = attention_flops(sh, s) / per_iteration;
  state.counters["GFLOP/s"] = rate * 1e-9;
  state.counters["linear_GFLOP/s"] = linear_rate(s, sh.hidden) * 1e-9;
  state.counters["vs_linear"] = rate / linear_rate(s, sh.hidden);
  state.counters["vs_peak"] = rate / bench::core_peak().flops;
}

void BM_linear(benchmark::State& state, Shape sh, int s) {
  Linear lin(s, sh.hidden);
  const double per_iteration = timed_loop(state, [&] { lin.run(); });
  state.counters["GFLOP/s"] = lin.flops() / per_iteration * 1e-9;
  state.counters["vs_peak"] = lin.flops() / per_iteration / bench::core_peak().flops;
}

// One forward + backward in a forked child: its peak RSS belongs to that run alone.
void BM_memory(benchmark::State& state, Shape sh, int s) {
  for (auto _ : state) {
    const auto run = bench::run_in_child([&] {
      Tensors t(sh, s);
      const double start = thread_seconds();
      t.forward_backward();
      return thread_seconds() - start;
    });
    if (!run) {
      state.SkipWithError("child failed");
      return;
    }
    const double seconds = run->value;
    state.SetIterationTime(seconds);
    state.counters["peak_MiB"] = run->peak_MiB;
    state.counters["tensors_MiB"] = Tensors(sh, s).bytes() / (1 << 20);
    state.counters["dense_probs_MiB"] = double(sh.hq) * s * s * sizeof(float) / (1 << 20);
    state.counters["GFLOP/s"] = attention_flops(sh, s) / seconds * 1e-9;
  }
}

void register_all() {
  for (const Shape& sh : {kTiny, kSmall}) {
    for (int s : {1024, 4096}) {
      const std::string suffix = std::string(sh.name) + "/" + std::to_string(s);
      benchmark::RegisterBenchmark(("blockwise/" + suffix).c_str(), BM_blockwise, sh, s)
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("linear/" + suffix).c_str(), BM_linear, sh, s)
          ->Unit(benchmark::kMillisecond);
    }
  }
  for (int s : {4096, 8192, 16384}) {
    benchmark::RegisterBenchmark(("memory/tiny/" + std::to_string(s)).c_str(), BM_memory, kTiny, s)
        ->UseManualTime()
        ->Iterations(1)
        ->Unit(benchmark::kSecond);
  }
}

}  // namespace
}  // namespace hexi::kernels

int main(int argc, char** argv) {
  hexi::kernels::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const auto& peak = hexi::bench::core_peak();
  benchmark::AddCustomContext("core_peak", peak.describe());
  benchmark::AddCustomContext("gemm_library", hexi::kernels::cpu::gemm_library_description());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
