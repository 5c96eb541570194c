// hexiseq against hexiseq-exact on seeded random meshes of <= 16 GPUs (issue 13: hexiseq >=
// 0.99 x exact in every case; in time: hexiseq <= exact / 0.99). Both search the same
// grouping family with the same 64 token blocks; the exact program is solved to proven
// optimality per grouping, which takes seconds to minutes per mesh on one core: this binary
// carries the label `slow` (ctest -L slow), one test per mesh.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "scheduler/hexiseq/exact.hpp"
#include "scheduler/hexiseq/testing.hpp"

namespace hexi {
namespace {

using testing::long_context;
using testing::mixed_cluster;
using testing::small_model;

const Profile kProfile;

// A seeded random mesh of <= 16 GPUs: 1-3 machines of 1, 2, 4 or 8 GPUs of the paper's
// four types, NICs of 25 or 100 GB/s. The engine's raw output only (distributions are
// implementation-defined; this must be the same mesh everywhere).
Cluster random_cluster(std::uint64_t seed, std::string* text) {
  std::mt19937_64 rng(seed);
  const char* types[] = {"H100-SXM", "A100-SXM-80GB", "A800-SXM-80GB", "L40S"};
  const int sizes[] = {1, 2, 4, 8};
  std::vector<testing::MachineSpec> machines;
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
double compare_on_random_mesh(std::uint64_t seed) {
  const Model m = small_model(8, 2);
  std::string text;
  const Cluster c = random_cluster(seed, &text);
  const int seq = 16384 << (seed % 3);  // 16K, 32K, 64K
  SequenceCost cost(c, m, long_context(seq), kProfile);
  HexiSeqOptions options;
  options.block_tokens = seq / 64;  // 64 blocks: the exact program's bounds stay small
  options.solver_time_limit_s = 120;
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

class RandomMesh : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(RandomMesh, SearchIsWithinOnePercentOfExact) {
  compare_on_random_mesh(GetParam());
}

// Seeds 1-10: the brief's ten meshes; 11-20: the twenty.
INSTANTIATE_TEST_SUITE_P(HexiSeqExact, RandomMesh, ::testing::Range<std::uint64_t>(1, 21));

}  // namespace
}  // namespace hexi
