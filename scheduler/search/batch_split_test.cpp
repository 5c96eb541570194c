// The batch split against brute force: the smallest slowest-pipeline time over
// every split of the micro-batches.
#include "scheduler/search/batch_split.hpp"

#include <gtest/gtest.h>

#include "scheduler/search/testing.hpp"

namespace hexi {
namespace {

TEST(BatchSplit, EqualsBruteForceMinimum) {
  Scenario sc = testing::shipped_scenario("hexiscale-setting2-llama2-7b");
  CostModel cm(sc.cluster, sc.model, sc.training, sc.profile);
  // Three unlike pipelines: two A800 stages, two 4090 TP-2 stages, one A800 TP-4 stage.
  const int L = sc.model.layers;
  PipelineCurve a(pipeline_terms(cm, {{24}, {25}}, 3, 1), L, sc.training.schedule);
  PipelineCurve b(pipeline_terms(cm, {{16, 17}, {18, 19}}, 3, 1), L, sc.training.schedule);
  PipelineCurve c(pipeline_terms(cm, {{26, 27, 28, 29}}, 3, 1), L, sc.training.schedule);
  for (int total = 3; total <= 24; ++total) {
    double best = kInfeasible;
    for (int x = 1; x <= total - 2; ++x) {
      for (int y = 1; x + y <= total - 1; ++y) {
        best = std::min(best, std::max({a.time(x), b.time(y), c.time(total - x - y)}));
      }
    }
    ASSERT_NE(best, kInfeasible) << "total " << total;
    BatchSplit split = split_micro_batches({&a, &b, &c}, total);
    ASSERT_EQ(split.micro_batches.size(), 3u);
    EXPECT_EQ(split.micro_batches[0] + split.micro_batches[1] + split.micro_batches[2], total);
    EXPECT_EQ(split.slowest_s, best) << "total " << total;
  }
}

TEST(BatchSplit, FasterPipelinesGetMore) {
  Scenario sc = testing::shipped_scenario("hexiscale-setting2-llama2-7b");
  CostModel cm(sc.cluster, sc.model, sc.training, sc.profile);
  const int L = sc.model.layers;
  // Eight 3090s against eight A800s (4.4x the FLOP/s).
  PipelineCurve slow(pipeline_terms(cm, {{8, 9, 10, 11}, {12, 13, 14, 15}}, 2, 1), L,
                     sc.training.schedule);
  PipelineCurve fast(pipeline_terms(cm, {{24, 25, 26, 27}, {28, 29, 30, 31}}, 2, 1), L,
                     sc.training.schedule);
  BatchSplit split = split_micro_batches({&slow, &fast}, 128);
  ASSERT_EQ(split.micro_batches.size(), 2u);
  EXPECT_GT(split.micro_batches[1], 2 * split.micro_batches[0]);
}

TEST(BatchSplit, TooFewMicroBatchesIsInfeasible) {
  Scenario sc = testing::shipped_scenario("hexiscale-setting2-llama2-7b");
  CostModel cm(sc.cluster, sc.model, sc.training, sc.profile);
  PipelineCurve a(pipeline_terms(cm, {{24, 25, 26, 27}}, 2, 1), sc.model.layers,
                  sc.training.schedule);
  EXPECT_TRUE(split_micro_batches({&a, &a}, 1).micro_batches.empty());
  EXPECT_EQ(even_split(3, 10), (std::vector<int>{4, 3, 3}));
}

}  // namespace
}  // namespace hexi
