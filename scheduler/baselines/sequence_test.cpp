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
  // 2 machines x 4 H100; llama2-7b has 32 heads, 32 kv heads; S = 64K.
  const Cluster c = mixed_cluster({{"H100-SXM", 4, 2}});
  SequenceCost cost(c, catalog_model("llama2-7b"), with_full_recompute(65536), kBaselinesProfile);
  auto ring = run_ring(cost, {}, {});
  ASSERT_TRUE(ring.ok()) << ring.error().message;
  EXPECT_EQ(ring->layout.groups.size(), 8u);
  EXPECT_EQ(ring->layout.groups[3].shards, (std::vector<std::int64_t>{8192}));
  EXPECT_EQ(ring->layout.groups[3].heads, (std::vector<int>{32}));
  auto ulysses = run_ulysses(cost, {}, {});
  ASSERT_TRUE(ulysses.ok());
  ASSERT_EQ(ulysses->layout.groups.size(), 1u);
  EXPECT_EQ(ulysses->layout.groups[0].heads, std::vector<int>(8, 4));
  auto mcp = run_megatron_cp(cost, {}, {});
  ASSERT_TRUE(mcp.ok());
  EXPECT_EQ(mcp->grouping, "a2a 4 x p2p 2");  // a2a inside each 4-GPU machine
  auto usp = run_usp(cost, {}, {});
  ASSERT_TRUE(usp.ok());
  EXPECT_EQ(usp->candidates, 4);  // u = 1, 2, 4, 8 all divide 32 heads
  auto rr = run_round_robin(cost, {}, {});
  ASSERT_TRUE(rr.ok());
  // Ulysses degree 5 does not divide 32 heads: 5 devices take degree 4.
  auto five = run_ulysses(cost, {0, 1, 2, 3, 4}, {});
  ASSERT_TRUE(five.ok());
  EXPECT_EQ(five->layout.num_devices(), 4);
  for (const auto& r : {*ring, *ulysses, *mcp, *usp, *rr}) {
    EXPECT_TRUE(validate(r.layout, cost.model(), cost.training(), c, "<baseline>").ok())
        << r.grouping;
  }
}

}  // namespace
}  // namespace hexi
