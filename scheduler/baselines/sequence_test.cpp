// The sequence baselines' layouts, hand-checked against their systems' rules (HexiSeq
// against all of them: scheduler/sequence_schedulers_test.cpp).
#include "scheduler/baselines/sequence.hpp"

#include <gtest/gtest.h>

#include "scheduler/plan/sequence_testing.hpp"

namespace hexi {
namespace {

using testing::catalog_model;
using testing::mixed_cluster;
using testing::with_full_recompute;

const Profile kBaselinesProfile;

TEST(HexiSeqBaselines, EvenSplits) {
  EXPECT_EQ(even_split(20, 3), (std::vector<std::int64_t>{8, 6, 6}));  // 10 pairs: 4, 3, 3
  EXPECT_EQ(even_heads(32, 3), (std::vector<int>{11, 11, 10}));
  const SequenceLayout l = even_layout({{0, 1}, {2}}, 12, 4);
  ASSERT_EQ(l.groups.size(), 2u);
  EXPECT_EQ(l.groups[0].tokens, 8);
  EXPECT_EQ(l.groups[0].shards, (std::vector<std::int64_t>{4, 4}));
  EXPECT_EQ(l.groups[0].heads, (std::vector<int>{2, 2}));
  EXPECT_EQ(l.groups[1].heads, (std::vector<int>{4}));
}

TEST(HexiSeqBaselines, LayoutsFollowTheirSystemsRules) {
  // 2 machines x 4 H100; llama2-7b has 32 heads, 32 kv heads; S = 64K. On every GPU (the
  // HexiSeq paper's definition): no subsets.
  const Cluster c = mixed_cluster({{"H100-SXM", 4, 2}});
  SequenceCost cost(c, catalog_model("llama2-7b"), with_full_recompute(65536), kBaselinesProfile);
  HexiSeqOptions every;
  every.idle_slow_types = false;
  auto ring = run_ring(cost, {}, every);
  ASSERT_TRUE(ring.ok()) << ring.error().message;
  EXPECT_EQ(ring->layout.groups.size(), 8u);
  EXPECT_EQ(ring->layout.groups[3].shards, (std::vector<std::int64_t>{8192}));
  EXPECT_EQ(ring->layout.groups[3].heads, (std::vector<int>{32}));
  auto ulysses = run_ulysses(cost, {}, every);  // the largest degree: all 8
  ASSERT_TRUE(ulysses.ok());
  ASSERT_EQ(ulysses->layout.groups.size(), 1u);
  EXPECT_EQ(ulysses->layout.groups[0].heads, std::vector<int>(8, 4));
  auto mcp = run_megatron_cp(cost, {}, every);
  ASSERT_TRUE(mcp.ok());
  EXPECT_EQ(mcp->candidates, 4);  // a2a 1, 2, 4, 8: each divides 32 q and kv heads
  auto usp = run_usp(cost, {}, every);
  ASSERT_TRUE(usp.ok());
  // u = 1, 2, 4, 8 consecutive, and u = 2, 4 also dealt (u = 1, 8 deal the same groups).
  EXPECT_EQ(usp->candidates, 6);
  auto rr = run_round_robin(cost, {}, every);
  ASSERT_TRUE(rr.ok());
  EXPECT_EQ(rr->candidates, 4);
  // Ulysses degree 5 does not divide 32 heads: 5 devices take degree 4.
  auto five = run_ulysses(cost, {0, 1, 2, 3, 4}, every);
  ASSERT_TRUE(five.ok());
  EXPECT_EQ(five->layout.num_devices(), 4);
  for (const auto& r : {*ring, *ulysses, *mcp, *usp, *rr}) {
    EXPECT_TRUE(validate(r.layout, cost.model(), cost.training(), c, "<baseline>").ok())
        << r.grouping;
    EXPECT_EQ(r.layout.num_devices(), 8)  // every GPU
        << r.grouping;
  }
}

TEST(HexiSeqBaselines, SameFreedomsTryEveryTypeAndTheFastestMachines) {
  // 1 machine of 4 H100, 2 of 4 A100 (ids 0-3, 4-7, 8-11), 25 GB/s between machines.
  const Cluster c = mixed_cluster({{"H100-SXM", 4, 1}, {"A100-SXM-80GB", 4, 2}});
  std::vector<int> all(12);
  for (int d = 0; d < 12; ++d) all[d] = d;
  const auto subsets = baseline_subsets(c, all);
  std::vector<std::string> names;
  for (const auto& s : subsets) names.push_back(s.name);
  // The fastest machine is the H100 one, already there as "H100-SXM only": not repeated.
  EXPECT_EQ(names, (std::vector<std::string>{"all 12 GPUs", "H100-SXM only (4 GPUs)",
                                             "A100-SXM-80GB only (8 GPUs)",
                                             "the fastest 2 machines (8 GPUs)"}));
  EXPECT_EQ(subsets[3].devices, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  SequenceCost cost(c, catalog_model("llama2-7b"), with_full_recompute(65536), kBaselinesProfile);
  HexiSeqOptions every;
  every.idle_slow_types = false;
  for (auto run : {run_ring, run_ulysses, run_usp, run_megatron_cp}) {
    auto free = run(cost, {}, {});
    auto spread = run(cost, {}, every);
    ASSERT_TRUE(free.ok() && spread.ok());
    // The subsets include every GPU: with them a baseline is never slower, and it names the
    // subset it took.
    EXPECT_LE(free->time.iteration_s, spread->time.iteration_s * (1 + 1e-12)) << free->grouping;
    EXPECT_NE(free->grouping.find(" GPUs"), std::string::npos) << free->grouping;
    EXPECT_GT(free->candidates, spread->candidates) << free->grouping;
  }
  // Ulysses on the subsets: every degree dividing 32 heads, on the fastest machine first.
  auto u = run_ulysses(cost, {}, {});
  ASSERT_TRUE(u.ok());
  if (u->layout.num_devices() <= 4) {
    EXPECT_EQ(u->layout.devices().back(), u->layout.num_devices() - 1);  // the H100s
  }
}

}  // namespace
}  // namespace hexi
