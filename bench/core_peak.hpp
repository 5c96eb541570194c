#pragma once
// The machine's compute peak, measured by the benchmark itself (never taken from a data
// sheet): what "% of peak" in kernels_bench and engine_bench is relative to.
//
// - fp32 FMA peak of one core: a register-resident loop of independent fused multiply-adds
//   on the widest vectors this build targets (AVX-512, AVX2 + FMA, or SSE2 multiply + add:
//   the same ISA Eigen is compiled for), best of several trials in thread CPU time.
// - clock: a chain of dependent integer additions (one per cycle on every x86 core since
//   the Pentium Pro) timed the same way; 0 where the chain cannot be built (not x86-64).
// - FMA instructions per cycle = FMA peak / (clock x 2 x lanes), rounded: how many vector
//   FMA units the core has at this width (Zen 4 runs a 512-bit FMA on its two 256-bit
//   units at once, so it reads 1 at 16 lanes, 2 at 8).
// - cores: std::thread::hardware_concurrency (the machine's peak is cores x the core's;
//   the engine's CPU ops are single-threaded, so they compare with one core).

#include <string>

namespace hexi::bench {

struct CorePeak {
  std::string isa;           // the vector ISA of the FMA loop: "AVX-512", "AVX2+FMA", "SSE2"
  std::string eigen_simd;    // Eigen::SimdInstructionSetsInUse() in this build
  int lanes = 0;             // fp32 lanes per vector
  double clock_hz = 0;       // measured (0: unknown)
  double fma_per_cycle = 0;  // vector FMA instructions per cycle, rounded (0: clock unknown)
  double flops = 0;          // measured fp32 FLOP/s of one core (an FMA counts 2)
  int cores = 0;
  std::string describe() const;  // one line for benchmark output
};

// Measured once per process (about a second), then cached.
const CorePeak& core_peak();

}  // namespace hexi::bench
