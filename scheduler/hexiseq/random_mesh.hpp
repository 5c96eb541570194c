#pragma once
// Test-only: seeded random meshes of <= 16 GPUs and the comparison of hexiseq with
// hexiseq-exact on one (the target: hexiseq >= 0.99 x exact; in time: hexiseq <=
// exact / 0.99). Both search the same meshes and grouping family with the same 64 token blocks.

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>

#include "scheduler/hexiseq/exact.hpp"
#include "scheduler/plan/sequence_testing.hpp"

namespace hexi::testing {

// A seeded random mesh of <= 16 GPUs: 1-3 machines of 1, 2, 4 or 8 GPUs of the paper's
// four types, NICs of 25 or 100 GB/s. The engine's raw output only (distributions are
// implementation-defined; this must be the same mesh everywhere).
inline Cluster random_cluster(std::uint64_t seed, std::string* text) {
  std::mt19937_64 rng(seed);
  const char* types[] = {"H100-SXM", "A100-SXM-80GB", "A800-SXM-80GB", "L40S"};
  const int sizes[] = {1, 2, 4, 8};
  std::vector<MachineSpec> machines;
  int total = 0;
  const int count = 1 + static_cast<int>(rng() % 3);
  for (int m = 0; m < count; ++m) {
    const int gpus = sizes[rng() % 4];
    const char* type = types[rng() % 4];
    if (total + gpus > 16) break;
    machines.push_back({type, gpus, 1});
    total += gpus;
    *text += std::string(m ? " + " : "") + std::to_string(gpus) + "x" + type;
  }
  if (total < 2) {
    machines.push_back({"A100-SXM-80GB", 2, 1});
    *text += " + 2xA100-SXM-80GB";
  }
  const double nic = rng() % 2 ? 100 : 25;
  *text += ", NIC " + std::to_string(static_cast<int>(nic)) + " GB/s";
  return mixed_cluster(machines, nic);
}

// hexiseq and hexiseq-exact on the random mesh of `seed`; returns exact / hexiseq in time.
inline double compare_on_random_mesh(std::uint64_t seed, double exact_limit_s = 120) {
  const Model m = small_model(8, 2);
  std::string text;
  const Cluster c = random_cluster(seed, &text);
  const int seq = 16384 << (seed % 3);  // 16K, 32K, 64K
  const Profile profile;
  SequenceCost cost(c, m, long_context(seq), profile);
  HexiSeqOptions options;
  options.block_tokens = seq / 64;              // 64 blocks: the exact program's bounds stay small
  options.solver_time_limit_s = exact_limit_s;  // per exact program; hexiseq's take far less
  auto heuristic = run_hexiseq(cost, {}, options);
  auto exact = run_hexiseq_exact(cost, {}, options);
  if (!heuristic.ok() || !exact.ok()) {
    ADD_FAILURE() << text << ": "
                  << (heuristic.ok() ? exact.error().message : heuristic.error().message);
    return 0;
  }
  EXPECT_TRUE(exact->proven) << text;
  const double ratio = exact->best.time.iteration_s / heuristic->time.iteration_s;
  std::printf(
      "seed %2d  %-55s S=%6d  hexiseq %.4f s (%s, %.2f s)  exact %.4f s (%s, %ld "
      "programs, %.2f s)  ratio %.4f\n",
      static_cast<int>(seed), text.c_str(), seq, heuristic->time.iteration_s,
      heuristic->grouping.c_str(), heuristic->search_time_s, exact->best.time.iteration_s,
      exact->best.grouping.c_str(), exact->groupings, exact->best.search_time_s, ratio);
  EXPECT_GE(ratio, 0.99) << text << "\nhexiseq " << dump_json(to_json(heuristic->layout))
                         << "\nexact   " << dump_json(to_json(exact->best.layout));
  return ratio;
}

}  // namespace hexi::testing
