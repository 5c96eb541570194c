#include "bench/core_peak.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <thread>
#include "topologies/eigen.hpp"

#if defined(__AVX512F__) || defined(__AVX__) || defined(__SSE2__)
#include <immintrin.h>
#endif

namespace hexi::bench {
namespace {

// The FMA loop's vector: the widest this build targets, as Eigen's packets are.
#if defined(__AVX512F__)
using Vec = __m512;
constexpr int kLanes = 16;
constexpr int kChains = 24;  // independent accumulators: > latency x units, < 32 registers
constexpr const char* kIsa = "AVX-512";
inline Vec splat(float x) {
  return _mm512_set1_ps(x);
}
inline Vec fused(Vec a, Vec b, Vec c) {
  return _mm512_fmadd_ps(a, b, c);
}
inline float lane0(Vec a) {
  return _mm512_cvtss_f32(a);
}
#elif defined(__AVX__) && defined(__FMA__)
using Vec = __m256;
constexpr int kLanes = 8;
constexpr int kChains = 12;  // 16 registers: 12 accumulators and the two operands
constexpr const char* kIsa = "AVX2+FMA";
inline Vec splat(float x) {
  return _mm256_set1_ps(x);
}
inline Vec fused(Vec a, Vec b, Vec c) {
  return _mm256_fmadd_ps(a, b, c);
}
inline float lane0(Vec a) {
  return _mm256_cvtss_f32(a);
}
#elif defined(__SSE2__)
using Vec = __m128;
constexpr int kLanes = 4;
constexpr int kChains = 12;
constexpr const char* kIsa = "SSE2 (multiply + add)";
inline Vec splat(float x) {
  return _mm_set1_ps(x);
}
inline Vec fused(Vec a, Vec b, Vec c) {
  return _mm_add_ps(_mm_mul_ps(a, b), c);
}
inline float lane0(Vec a) {
  return _mm_cvtss_f32(a);
}
#else
using Vec = float;
constexpr int kLanes = 1;
constexpr int kChains = 8;
constexpr const char* kIsa = "scalar";
inline Vec splat(float x) {
  return x;
}
inline Vec fused(Vec a, Vec b, Vec c) {
  return a * b + c;
}
inline float lane0(Vec a) {
  return a;
}
#endif

double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The best rate of `body(reps)` (which does `work` units per rep) over 5 trials of >= 0.05 s
// of thread CPU time each: the rate without interference from other processes.
template <class Body>
double best_rate(double work_per_rep, Body body) {
  double best = 0;
  for (int trial = 0; trial < 5; ++trial) {
    std::int64_t reps = 0;
    const double start = thread_seconds();
    double elapsed = 0;
    while (elapsed < 0.05) {
      body(1 << 14);
      reps += 1 << 14;
      elapsed = thread_seconds() - start;
    }
    best = std::max(best, work_per_rep * static_cast<double>(reps) / elapsed);
  }
  return best;
}

// FLOP/s of kChains independent FMA chains on registers (acc = acc * a + b converges, so
// no value overflows or goes subnormal).
double fma_flops() {
  volatile float sink = 0;
  const double flops = best_rate(2.0 * kLanes * kChains, [&](std::int64_t reps) {
    Vec acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = splat(1.0f + 0.001f * static_cast<float>(c));
    const Vec a = splat(0.999999f), b = splat(1e-7f);
    for (std::int64_t r = 0; r < reps; ++r) {
#pragma GCC unroll 32
      for (int c = 0; c < kChains; ++c) acc[c] = fused(acc[c], a, b);
    }
    float sum = 0;
    for (int c = 0; c < kChains; ++c) sum += lane0(acc[c]);
    sink = sum;
  });
  (void)sink;
  return flops;
}

// Cycles/s: 100 dependent one-cycle integer additions per rep.
double clock_hz() {
#if defined(__x86_64__)
  return best_rate(100.0, [](std::int64_t reps) {
    std::uint64_t x = 0;
    for (std::int64_t r = 0; r < reps; ++r) {
      asm volatile(".rept 100\n\taddq $1, %0\n\t.endr" : "+r"(x));
    }
  });
#else
  return 0;
#endif
}

CorePeak measure() {
  CorePeak p;
  p.isa = kIsa;
  p.eigen_simd = Eigen::SimdInstructionSetsInUse();
  p.lanes = kLanes;
  p.clock_hz = clock_hz();
  p.flops = fma_flops();
  if (p.clock_hz > 0) p.fma_per_cycle = std::round(p.flops / (p.clock_hz * 2.0 * kLanes));
  p.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return p;
}

}  // namespace

std::string CorePeak::describe() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "core fp32 peak (measured): %.1f GFLOP/s = %s, %d lanes x 2 FLOP x %.0f FMA/cycle "
                "x %.2f GHz (measured clock); %d cores, machine peak %.1f GFLOP/s; Eigen SIMD: %s",
                flops / 1e9, isa.c_str(), lanes, fma_per_cycle, clock_hz / 1e9, cores,
                cores * flops / 1e9, eigen_simd.c_str());
  return buf;
}

const CorePeak& core_peak() {
  static const CorePeak peak = measure();
  return peak;
}

}  // namespace hexi::bench
