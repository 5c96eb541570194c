// HexiSeq against every sequence baseline of the registry on heterogeneous clusters: its
// layout is never slower than any baseline's that fits (their layouts lie in its space, and
// it scores each grouping's even split too).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "scheduler/plan/sequence_testing.hpp"
#include "scheduler/scheduler.hpp"

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
