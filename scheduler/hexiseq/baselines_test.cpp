// The baselines' layouts (their real constraints, hand-checked) and HexiSeq against all of
// them on heterogeneous clusters: its layout is never slower than any baseline's that fits
// (their layouts lie in its space, and it scores each grouping's even split too).
#include "scheduler/hexiseq/baselines.hpp"

#include <gtest/gtest.h>

#include <cstdio>

#include "scheduler/hexiseq/testing.hpp"

namespace hexi {
namespace {

using testing::catalog_model;
using testing::long_context;
using testing::mixed_cluster;

const Profile kBaselinesProfile;

TrainingConfig with_full_recompute(int seq) {
  TrainingConfig t = long_context(seq);
  t.recompute = Recompute::kFull;
  return t;
}

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

struct Scenario {
  const char* name;
  std::vector<testing::MachineSpec> machines;
  const char* model;
  int seq;
};

TEST(HexiSeqBaselines, HexiSeqIsNeverSlowerThanAnyBaseline) {
  const std::vector<Scenario> scenarios = {
      {"8 H100 + 8 A100", {{"H100-SXM", 8, 1}, {"A100-SXM-80GB", 8, 1}}, "llama3-8b", 131072},
      {"4 H100 + 4 A100 + 4 A800 + 4 L40S",
       {{"H100-SXM", 4, 1}, {"A100-SXM-80GB", 4, 1}, {"A800-SXM-80GB", 4, 1}, {"L40S", 4, 1}},
       "llama3-8b",
       131072},
      {"8 H100 + 8 A100 + 8 L40S",
       {{"H100-SXM", 8, 1}, {"A100-SXM-80GB", 8, 1}, {"L40S", 8, 1}},
       "llama2-7b",
       262144},
  };
  for (const Scenario& sc : scenarios) {
    const Cluster c = mixed_cluster(sc.machines);
    SequenceCost cost(c, catalog_model(sc.model), with_full_recompute(sc.seq), kBaselinesProfile);
    auto ours = run_hexiseq(cost, {}, {});
    ASSERT_TRUE(ours.ok()) << ours.error().message;
    ASSERT_TRUE(ours->time.fits);
    std::printf("%s, %s, S = %d: hexiseq %.3f s (%s, %.2f s search)\n", sc.name, sc.model, sc.seq,
                ours->time.iteration_s, ours->grouping.c_str(), ours->search_time_s);
    double strongest = kInfinity;
    for (const SequenceScheduler& s : sequence_schedulers()) {
      if (s.name == "hexiseq" || s.name == "hexiseq-exact") continue;
      auto theirs = s.run(cost, {}, {});
      ASSERT_TRUE(theirs.ok()) << s.name << ": " << theirs.error().message;
      std::printf("  %-20s %8.3f s  %s%s\n", s.name.c_str(), theirs->time.iteration_s,
                  theirs->grouping.c_str(), theirs->time.fits ? "" : "  (does not fit)");
      if (!theirs->time.fits) continue;
      EXPECT_LE(ours->time.iteration_s, theirs->time.iteration_s * (1 + 1e-12))
          << sc.name << ": " << s.name;
      strongest = std::min(strongest, theirs->time.iteration_s);
    }
    std::printf("  speedup over the strongest baseline: %.3fx\n",
                strongest / ours->time.iteration_s);
  }
}

}  // namespace
}  // namespace hexi
