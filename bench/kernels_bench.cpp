// CPU kernels against a standalone Eigen GEMM of the same shape and against the core's
// measured fp32 FMA peak (bench/core_peak.hpp; GEMM-bound ops at h >= 512 aim at >= 70 % of
// it). Every benchmark reports GFLOP/s, `vs_peak` (its GFLOP/s over one core's peak: the
// kernels are single-threaded) and `vs_eigen`:
// - a linear-layer kernel (matmul_*): its GFLOP/s over the GFLOP/s of a plain Eigen
//   product `C = A * B` with the same (m, n, k) and transposes, on freshly allocated
//   Eigen matrices (no maps, no accumulation), timed in the same process;
// - a block (attention, MLP, head; forward or backward): the time its GEMMs would take
//   at those standalone Eigen rates over its measured time, i.e. how much of the block
//   is GEMM at full speed (the rest is norms, RoPE, softmax, SwiGLU, temporaries).
// Both sides are timed in thread CPU time (everything here is single-threaded), so other
// processes on the machine do not skew the ratio.
// Shapes: "tiny" is tiny-llama (h 64, f 172, 4 heads / 2 KV, V 256) with b 2, s 32 as
// in the oracle; "small" is h 512, f 1376, 8 heads / 4 KV, V 256, b 2, s 256.
//
//   build/bench/kernels_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <ctime>
#include <map>
#include <string>
#include <tuple>
#include <vector>
#include "topologies/eigen.hpp"

#include "bench/core_peak.hpp"
#include "kernels/blocks_cpu.hpp"
#include "kernels/cpu_kernels.hpp"
#include "kernels/gemm_cpu.hpp"
#include "kernels/params.hpp"

namespace hexi::kernels {
namespace {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct BenchShape {
  const char* name;
  LlamaDims dims;
  int batch, seq;
  int n() const { return batch * seq; }
};
const BenchShape kShapes[] = {
    {"tiny", {1, 64, 172, 4, 2, 256}, 2, 32},
    {"small", {1, 512, 1376, 8, 4, 256}, 2, 256},
};

// CPU seconds of this thread.
double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// FLOP/s of a standalone Eigen product C (m, n) = op(A) op(B) with inner size k, measured
// once per shape for at least 0.2 s.
double eigen_rate(int m, int n, int k, bool trans_a, bool trans_b) {
  static std::map<std::tuple<int, int, int, bool, bool>, double> cache;
  const auto key = std::make_tuple(m, n, k, trans_a, trans_b);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const Matrix a = trans_a ? Matrix::Random(k, m) : Matrix::Random(m, k);
  const Matrix b = trans_b ? Matrix::Random(n, k) : Matrix::Random(k, n);
  Matrix c(m, n);
  auto product = [&] {
    if (trans_a && trans_b)
      c.noalias() = a.transpose() * b.transpose();
    else if (trans_a)
      c.noalias() = a.transpose() * b;
    else if (trans_b)
      c.noalias() = a * b.transpose();
    else
      c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
  };
  product();  // warm-up
  const double start = thread_seconds();
  int reps = 0;
  double seconds = 0;
  do {
    product();
    ++reps;
    seconds = thread_seconds() - start;
  } while (seconds < 0.2);
  return cache[key] = 2.0 * m * n * k * reps / seconds;
}

// A GEMM of a block, for the Eigen reference time.
struct Gemm {
  int m, n, k;
  bool ta, tb;
  int count = 1;
  double flops() const { return 2.0 * m * n * k * count; }
};
double eigen_seconds(const std::vector<Gemm>& gemms) {
  double t = 0;
  for (const Gemm& g : gemms) t += g.flops() / eigen_rate(g.m, g.n, g.k, g.ta, g.tb);
  return t;
}
double total_flops(const std::vector<Gemm>& gemms) {
  double f = 0;
  for (const Gemm& g : gemms) f += g.flops();
  return f;
}

void report(benchmark::State& state, const std::vector<Gemm>& gemms) {
  const double flops = total_flops(gemms);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  // Filled in after the loop: measured seconds per iteration vs the Eigen reference.
  state.counters["vs_eigen"] = 0;
}
void finish(benchmark::State& state, const std::vector<Gemm>& gemms, double seconds) {
  const double per_iteration = seconds / static_cast<double>(state.iterations());
  state.counters["vs_eigen"] = eigen_seconds(gemms) / per_iteration;
  state.counters["vs_peak"] = total_flops(gemms) / per_iteration / bench::core_peak().flops;
}

template <class F>
double timed_loop(benchmark::State& state, F body) {
  double seconds = 0;
  for (auto _ : state) {
    const double start = thread_seconds();
    body();
    seconds += thread_seconds() - start;
  }
  return seconds;
}

std::vector<float> filled(std::size_t n, float v = 0.01f) {
  return std::vector<float>(n, v);
}

// ---- linear layers: out (n, m) = x (n, k) w (m, k)^T and its two backward GEMMs ------
enum class Pass { kForward, kInput, kWeight };

void BM_matmul(benchmark::State& state, int n, int k, int m, Pass pass) {
  const auto x = filled(std::size_t(n) * k), w = filled(std::size_t(m) * k);
  auto out = filled(std::size_t(n) * m), dx = filled(std::size_t(n) * k),
       dw = filled(std::size_t(m) * k);
  std::vector<Gemm> g;
  if (pass == Pass::kForward) g = {{n, m, k, false, true}};
  if (pass == Pass::kInput) g = {{n, k, m, false, false}};
  if (pass == Pass::kWeight) g = {{m, k, n, true, false}};
  report(state, g);
  const double s = timed_loop(state, [&] {
    if (pass == Pass::kForward) cpu::matmul_forward(out.data(), x.data(), w.data(), n, k, m);
    if (pass == Pass::kInput)
      cpu::matmul_backward_input(dx.data(), out.data(), w.data(), n, k, m, false);
    if (pass == Pass::kWeight)
      cpu::matmul_backward_weight(dw.data(), out.data(), x.data(), n, k, m);
    benchmark::ClobberMemory();
  });
  finish(state, g, s);
}

// The two GEMM libraries of kernels/gemm_cpu.hpp on a square product, against the core's
// peak (the kernels below use whichever gemm_library() chose).
void BM_gemm(benchmark::State& state, cpu::GemmLibrary library, int n) {
  const auto a = filled(std::size_t(n) * n, 0.5f), b = filled(std::size_t(n) * n, 0.25f);
  auto c = filled(std::size_t(n) * n);
  const std::vector<Gemm> g = {{n, n, n, false, false}};
  if (library == cpu::GemmLibrary::kOpenBlas &&
      !cpu::gemm_openblas(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n)) {
    state.SkipWithError("OpenBLAS is not loadable");
    return;
  }
  report(state, g);
  const double seconds = timed_loop(state, [&] {
    if (library == cpu::GemmLibrary::kEigen) {
      cpu::gemm_eigen(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    } else {
      cpu::gemm_openblas(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    }
    benchmark::ClobberMemory();
  });
  finish(state, g, seconds);
}

// ---- blocks --------------------------------------------------------------------------
std::vector<Gemm> attention_gemms(const BlockShape& sh, bool backward) {
  const int n = sh.tokens(), h = sh.dims.hidden, qw = sh.q_width(), kw = sh.kv_width();
  const int s = sh.seq, d = sh.head_dim(), heads = sh.batch * sh.q_heads();
  if (!backward)
    return {{n, qw, h, false, true},
            {n, kw, h, false, true, 2},
            {n, h, qw, false, true},
            {s, s, d, false, true, heads},
            {s, d, s, false, false, heads}};
  return {{n, qw, h, false, false},       {qw, h, n, true, false},        // wo dgrad, wgrad
          {s, s, d, false, true, heads},  {s, d, s, true, false, heads},  // dP, dV
          {s, d, s, false, false, heads}, {s, d, s, true, false, heads},  // dQ, dK
          {n, h, qw, false, false},       {n, h, kw, false, false, 2},    // dxn
          {qw, h, n, true, false},        {kw, h, n, true, false, 2}};    // wq, wk, wv
}

std::vector<Gemm> mlp_gemms(const BlockShape& sh, bool backward) {
  const int n = sh.tokens(), h = sh.dims.hidden, f = sh.ffn();
  if (!backward) return {{n, f, h, false, true, 2}, {n, h, f, false, true}};
  return {{n, f, h, false, false},
          {h, f, n, true, false},  // w_down dgrad, wgrad
          {n, h, f, false, false, 2},
          {f, h, n, true, false, 2}};  // gate/up dgrad, wgrad
}

std::vector<Gemm> head_gemms(const BlockShape& sh, bool backward) {
  const int n = sh.tokens(), h = sh.dims.hidden, v = sh.vocab();
  if (!backward) return {{n, v, h, false, true}};
  return {{v, h, n, true, false}, {n, h, v, false, false}};
}

struct BlockFixture {
  BlockShape sh;
  Params<float> p, g;
  std::vector<float> x, dy, y, dx, attn, mlp, head;
  std::vector<int> targets;

  explicit BlockFixture(const BenchShape& b)
      : sh{b.dims, full_shard(b.dims), b.batch, b.seq},
        p(stage_layout(b.dims, {0, 1, false, true, full_shard(b.dims)})),
        g(p.layout),
        x(filled(std::size_t(sh.tokens()) * b.dims.hidden, 0.5f)),
        dy(x),
        y(x),
        dx(x),
        attn(attention_saved_size(sh)),
        mlp(mlp_saved_size(sh)),
        head(head_saved_size(sh)),
        targets(sh.tokens(), 1) {
    init_params(p, b.dims, {1, 0.0});
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(i % 17) / 17.f - 0.5f;
  }
};

enum class Block { kAttention, kMlp, kHead };

void BM_block(benchmark::State& state, const BenchShape& b, Block block, bool backward) {
  BlockFixture f(b);
  const auto as = carve_attention_saved(f.sh, f.attn.data());
  const auto ms = carve_mlp_saved(f.sh, f.mlp.data());
  const auto hs = carve_head_saved(f.sh, f.head.data());
  auto fwd = [&] {
    if (block == Block::kAttention)
      cpu::attention_block_forward(f.sh, attention_weights(f.p, 0), f.x.data(), as, f.y.data());
    if (block == Block::kMlp)
      cpu::mlp_block_forward(f.sh, mlp_weights(f.p, 0), f.x.data(), ms, f.y.data());
    if (block == Block::kHead) {
      cpu::head_forward(f.sh, head_weights(f.p), f.x.data(), hs);
      cpu::head_loss_partials(f.sh, hs, f.targets.data());
    }
  };
  auto bwd = [&] {
    if (block == Block::kAttention)
      cpu::attention_block_backward(f.sh, attention_weights(f.p, 0), as, f.x.data(), f.dy.data(),
                                    f.dx.data(), attention_grads(f.g, 0));
    if (block == Block::kMlp)
      cpu::mlp_block_backward(f.sh, mlp_weights(f.p, 0), ms, f.x.data(), f.dy.data(), f.dx.data(),
                              mlp_grads(f.g, 0));
    if (block == Block::kHead)
      cpu::head_backward(f.sh, head_weights(f.p), hs, f.x.data(), f.targets.data(), 1e-3,
                         f.dx.data(), head_grads(f.g));
  };
  fwd();
  const std::vector<Gemm> g = block == Block::kAttention ? attention_gemms(f.sh, backward)
                              : block == Block::kMlp     ? mlp_gemms(f.sh, backward)
                                                         : head_gemms(f.sh, backward);
  report(state, g);
  const double s = timed_loop(state, [&] {
    backward ? bwd() : fwd();
    benchmark::ClobberMemory();
  });
  finish(state, g, s);
}

void register_all() {
  for (int n : {256, 1024}) {
    benchmark::RegisterBenchmark(("gemm/eigen/" + std::to_string(n)).c_str(), BM_gemm,
                                 cpu::GemmLibrary::kEigen, n);
    benchmark::RegisterBenchmark(("gemm/openblas/" + std::to_string(n)).c_str(), BM_gemm,
                                 cpu::GemmLibrary::kOpenBlas, n);
  }
  for (const BenchShape& b : kShapes) {
    const int n = b.n(), h = b.dims.hidden, f = b.dims.ffn, v = b.dims.vocab;
    const std::string s = b.name;
    struct Linear {
      const char* name;
      int k, m;
    };
    for (const Linear& l : {Linear{"qkv_q", h, h}, Linear{"gate", h, f}, Linear{"down", f, h},
                            Linear{"logits", h, v}}) {
      benchmark::RegisterBenchmark(("matmul_forward/" + s + "/" + l.name).c_str(), BM_matmul, n,
                                   l.k, l.m, Pass::kForward);
      benchmark::RegisterBenchmark(("matmul_backward_input/" + s + "/" + l.name).c_str(), BM_matmul,
                                   n, l.k, l.m, Pass::kInput);
      benchmark::RegisterBenchmark(("matmul_backward_weight/" + s + "/" + l.name).c_str(),
                                   BM_matmul, n, l.k, l.m, Pass::kWeight);
    }
    for (bool bw : {false, true}) {
      const std::string pass = bw ? "backward" : "forward";
      benchmark::RegisterBenchmark(("attention_block_" + pass + "/" + s).c_str(), BM_block, b,
                                   Block::kAttention, bw);
      benchmark::RegisterBenchmark(("mlp_block_" + pass + "/" + s).c_str(), BM_block, b,
                                   Block::kMlp, bw);
      benchmark::RegisterBenchmark(("head_" + pass + "/" + s).c_str(), BM_block, b, Block::kHead,
                                   bw);
    }
  }
}

}  // namespace
}  // namespace hexi::kernels

int main(int argc, char** argv) {
  hexi::kernels::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // Measured before any benchmark runs, printed with the context (stderr) and into JSON output.
  const auto& peak = hexi::bench::core_peak();
  benchmark::AddCustomContext("core_peak", peak.describe());
  benchmark::AddCustomContext("core_peak_GFLOPs", std::to_string(peak.flops / 1e9));
  benchmark::AddCustomContext("gemm_library", hexi::kernels::cpu::gemm_library_description());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
