// hexiseq-exact: its program against brute force over every token split, shard and head
// count of a small mesh, and the search against it on the eleven random meshes of at most 8
// GPUs (all twenty, up to 16 GPUs: exact_random_test.cpp).
#include "scheduler/hexiseq/exact.hpp"

#include <gtest/gtest.h>

#include <cstdio>

#include "scheduler/hexiseq/random_mesh.hpp"
#include "scheduler/plan/sequence_testing.hpp"

namespace hexi {
namespace {

using testing::long_context;
using testing::mixed_cluster;
using testing::small_model;

const Profile kExactProfile;

TEST(HexiSeqExact, ProgramMatchesBruteForceOverTheModel) {
  // Group {0, 1} (two H100 of one machine) and group {2} (an A100 on another machine),
  // 4 heads (2 kv), S = 4096 in blocks of 256: every T_0, shard of device 0 and heads of
  // device 0 (device 1 and group 1 take the rest), the model's value where memory fits.
  const Cluster c = mixed_cluster({{"H100-SXM", 2, 1}, {"A100-SXM-80GB", 1, 1}});
  const Model m = small_model(4, 2);
  SequenceCost cost(c, m, long_context(4096), kExactProfile);
  const LinearModel lm(cost, 3);
  const Grouping g{"brute", {{0, 1}, {2}}};
  HexiSeqOptions options;
  const ExactGrouping e = solve_exact(lm, g, 256, options);
  ASSERT_TRUE(e.layout && e.optimal);
  double best = kInfinity;
  for (std::int64_t t0 = 1; t0 < 16; ++t0) {
    for (std::int64_t x0 = 0; x0 <= t0; ++x0) {
      for (int h0 = 0; h0 <= 4; ++h0) {
        SequenceLayout l;
        l.groups.push_back({{0, 1}, 256 * t0, {256 * x0, 256 * (t0 - x0)}, {h0, 4 - h0}});
        l.groups.push_back({{2}, 256 * (16 - t0), {256 * (16 - t0)}, {4}});
        if (lm.memory_excess(l) <= 0) best = std::min(best, lm.value(l));
      }
    }
  }
  EXPECT_NEAR(e.model_s / best, 1.0, 1e-6);
  EXPECT_NEAR(lm.value(*e.layout) / best, 1.0, 1e-6);
  std::printf("exact %.6f ms, brute force %.6f ms\n", e.model_s * 1e3, best * 1e3);
}

// The random meshes (random_mesh.hpp) of at most 8 GPUs: under a second each, meshes 8 and
// 10 (4 H100 with 4 A100 or 4 L40S over 25 GB/s) about 10 s each, proven.
class SmallRandomMesh : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(SmallRandomMesh, SearchIsWithinOnePercentOfExact) {
  testing::compare_on_random_mesh(GetParam());
}

INSTANTIATE_TEST_SUITE_P(HexiSeqExact, SmallRandomMesh,
                         ::testing::Values(2, 4, 5, 7, 8, 10, 11, 14, 16, 17, 18));

TEST(HexiSeqExact, TimeBudgetStopsTheProgramsAndSaysSo) {
  // 4 H100 and 4 L40S over 25 GB/s: about a minute of programs without a budget.
  const Cluster c = mixed_cluster({{"H100-SXM", 4, 1}, {"L40S", 4, 1}});
  SequenceCost cost(c, small_model(8, 2), long_context(32768), kExactProfile);
  HexiSeqOptions options;
  options.block_tokens = 512;
  options.time_budget_s = 2;
  auto e = run_hexiseq_exact(cost, {}, options);
  if (e.ok()) {
    EXPECT_TRUE(e->best.budget_exhausted);
    EXPECT_FALSE(e->proven);
    EXPECT_TRUE(e->best.time.fits);
  } else {
    EXPECT_NE(e.error().message.find("time budget"), std::string::npos) << e.error().message;
  }
  options.time_budget_s = 1e-9;  // nothing solved at all
  auto none = run_hexiseq_exact(cost, {}, options);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("time budget ran out"), std::string::npos)
      << none.error().message;
}

TEST(HexiSeqExact, RefusesLargeMeshes) {
  const Cluster c = mixed_cluster({{"H100-SXM", 8, 3}});
  SequenceCost cost(c, small_model(8, 2), long_context(16384), kExactProfile);
  auto e = run_hexiseq_exact(cost, {}, {});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("at most 16"), std::string::npos);
}

}  // namespace
}  // namespace hexi
