// HexiSeq against every sequence baseline of the registry on heterogeneous clusters: its
// layout is never slower than any baseline's that fits (their layouts lie in its space, and
// it scores each grouping's even split too).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "scheduler/plan/sequence_testing.hpp"
#include "scheduler/scheduler.hpp"

namespace hexi {
namespace {

using testing::catalog_model;
using testing::long_context;
using testing::mixed_cluster;
using testing::with_full_recompute;

const Profile kBaselinesProfile;

struct Case {
  const char* name;
  std::vector<testing::MachineSpec> machines;
  const char* model;
  int seq;
};

TEST(HexiSeqBaselines, HexiSeqIsNeverSlowerThanAnyBaseline) {
  const std::vector<Case> scenarios = {
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
  for (const Case& sc : scenarios) {
    const Cluster c = mixed_cluster(sc.machines);
    Scenario scenario;
    scenario.cluster = c;
    scenario.model = catalog_model(sc.model);
    scenario.training = with_full_recompute(sc.seq);
    scenario.profile = kBaselinesProfile;
    SequenceCost cost(c, scenario.model, scenario.training, kBaselinesProfile);
    auto ours = run_hexiseq(cost, {}, {});
    ASSERT_TRUE(ours.ok()) << ours.error().message;
    ASSERT_TRUE(ours->time.fits);
    std::printf("%s, %s, S = %d: hexiseq %.3f s (%s, %.2f s search)\n", sc.name, sc.model, sc.seq,
                ours->time.iteration_s, ours->grouping.c_str(), ours->search_time_s);
    double strongest = kInfinity;
    for (const SchedulerInfo& s : schedulers()) {
      if (s.kind != SchedulerKind::kSequence) continue;
      if (s.name == "hexiseq" || s.name == "hexiseq-exact") continue;
      auto scheduled = s.run(scenario, {});
      ASSERT_TRUE(scheduled.ok()) << s.name << ": " << scheduled.error().message;
      const HexiSeqResult& theirs = *scheduled->sequence;
      std::printf("  %-20s %8.3f s  %s%s\n", s.name.c_str(), theirs.time.iteration_s,
                  theirs.grouping.c_str(), theirs.time.fits ? "" : "  (does not fit)");
      if (!theirs.time.fits) continue;
      EXPECT_LE(ours->time.iteration_s, theirs.time.iteration_s * (1 + 1e-12))
          << sc.name << ": " << s.name;
      strongest = std::min(strongest, theirs.time.iteration_s);
    }
    std::printf("  speedup over the strongest baseline: %.3fx\n",
                strongest / ours->time.iteration_s);
  }
}

// Through the registry each sequence scheduler keeps the faster of ZeRO-2 and the training's
// stage that fits: the better of the two single-stage runs, and never above the training's.
TEST(Registry, SequenceSchedulersKeepTheFasterZeroStage) {
  Scenario sc;
  sc.cluster = mixed_cluster({{"H100-SXM", 4, 1}, {"A100-SXM-80GB", 4, 1}});
  sc.model = catalog_model("llama3-8b");
  sc.training = with_full_recompute(65536);
  sc.training.global_batch = 8;  // the gradient all-reduce amortised: ZeRO-2 can win
  sc.profile = kBaselinesProfile;
  SchedulerOptions one_stage;
  one_stage.sequence.zero_stages = false;
  std::set<int> chosen;
  for (const char* name : {"hexiseq", "ring", "usp"}) {
    std::map<int, double> alone;  // stage -> iteration s of the single-stage run
    for (int stage : {2, 3}) {
      Scenario at = sc;
      at.training.zero_stage = stage;
      auto r = run_scheduler(name, at, one_stage);
      ASSERT_TRUE(r.ok()) << name << ": " << r.error().message;
      EXPECT_EQ(r->sequence->zero_stage, stage) << name;
      if (r->fits) alone[stage] = r->iteration_time_s;
    }
    ASSERT_FALSE(alone.empty()) << name;
    sc.training.zero_stage = 3;
    auto both = run_scheduler(name, sc, {});
    ASSERT_TRUE(both.ok()) << name << ": " << both.error().message;
    const auto fastest = std::min_element(alone.begin(), alone.end(),
                                          [](auto& a, auto& b) { return a.second < b.second; });
    EXPECT_EQ(both->sequence->zero_stage, fastest->first) << name;
    chosen.insert(fastest->first);
    EXPECT_DOUBLE_EQ(both->iteration_time_s, fastest->second) << name;
    sc.training.zero_stage = 1;  // the ceiling: ZeRO-1 only
    auto capped = run_scheduler(name, sc, {});
    ASSERT_TRUE(capped.ok()) << name << ": " << capped.error().message;
    EXPECT_EQ(capped->sequence->zero_stage, 1) << name;
  }
  EXPECT_TRUE(chosen.count(2)) << "no scheduler here is faster under ZeRO-2: the test shows little";
}

// The one registry: every kind through one call shape, each name once, the document and
// the estimate the kind's own account holds.
TEST(Registry, EverySchedulerOnceWithOneCallShape) {
  std::set<std::string> names;
  std::map<SchedulerKind, int> kinds;
  for (const SchedulerInfo& s : schedulers()) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
    EXPECT_FALSE(s.description.empty()) << s.name;
    ++kinds[s.kind];
  }
  EXPECT_EQ(kinds[SchedulerKind::kPipeline], 7);
  EXPECT_EQ(kinds[SchedulerKind::kSequence], 8);
  EXPECT_EQ(kinds[SchedulerKind::kHybrid], 1);
  EXPECT_EQ(scheduler_names(SchedulerKind::kSequence),
            "hexiseq, hexiseq-exact, ring, ulysses, usp, megatron-cp, hexiseq-homogeneous, "
            "round-robin");

  Scenario sc;
  sc.cluster = mixed_cluster({{"H100-SXM", 2, 1}, {"A100-SXM-80GB", 2, 1}});
  sc.model = testing::small_model();
  sc.training = long_context(8192);
  auto ring = run_scheduler("ring", sc, {});
  ASSERT_TRUE(ring.ok()) << ring.error().message;
  EXPECT_EQ(ring->kind, SchedulerKind::kSequence);
  ASSERT_TRUE(ring->sequence && ring->document.layout && !ring->document.plan);
  EXPECT_EQ(to_json(*ring->document.layout), to_json(ring->sequence->layout));
  EXPECT_EQ(ring->iteration_time_s, ring->sequence->time.iteration_s);
  EXPECT_EQ(ring->tokens_per_s, ring->sequence->time.tokens_per_s);

  // A sequence or hybrid scheduler where a pipeline one is expected: bad input naming the
  // command that runs it.
  auto seq = run_pipeline_scheduler("hexiseq", sc, {});
  ASSERT_FALSE(seq.ok());
  EXPECT_EQ(seq.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(seq.error().message.find("hexisim seq SCENARIO --scheduler hexiseq"), std::string::npos)
      << seq.error().message;
  auto hybrid = run_pipeline_scheduler("mesh-pipeline", sc, {});
  ASSERT_FALSE(hybrid.ok());
  EXPECT_NE(hybrid.error().message.find("--pipeline"), std::string::npos) << hybrid.error().message;
  auto unknown = run_scheduler("ringg", sc, {});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("round-robin, mesh-pipeline"), std::string::npos)
      << unknown.error().message;
}

}  // namespace
}  // namespace hexi
