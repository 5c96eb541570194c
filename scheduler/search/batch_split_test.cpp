// The batch split against brute force: the smallest slowest-pipeline time over
// every split of the micro-batches.
#include "scheduler/search/batch_split.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

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

// The split as specified in batch_split.hpp, one micro-batch at a time (O(total) moves).
BatchSplit reference_split(const std::vector<const PipelineCurve*>& curves, int total) {
  const int d = static_cast<int>(curves.size());
  std::vector<double> rate(d);
  const int guess = std::max(1, total / d);
  for (int p = 0; p < d; ++p) {
    double b = curves[p]->bottleneck(guess);
    if (std::isinf(b)) b = curves[p]->bottleneck(1);
    rate[p] = 1.0 / b;
  }
  std::vector<int> m = proportional_split(rate, total);
  for (;;) {
    int slow = 0;
    for (int p = 1; p < d; ++p)
      if (curves[p]->time(m[p]) > curves[slow]->time(m[slow])) slow = p;
    if (m[slow] <= 1) break;
    int to = -1;
    double to_time = kInfeasible;
    for (int q = 0; q < d; ++q) {
      if (q != slow && curves[q]->time(m[q] + 1) < to_time) {
        to_time = curves[q]->time(m[q] + 1);
        to = q;
      }
    }
    if (to < 0 || !(to_time < curves[slow]->time(m[slow]))) break;
    --m[slow];
    ++m[to];
  }
  BatchSplit out;
  out.slowest_s = 0;
  for (int p = 0; p < d; ++p) out.slowest_s = std::max(out.slowest_s, curves[p]->time(m[p]));
  out.micro_batches = m;
  return out;
}

// A stage of `layers`-independent memory: `per_flight` of `capacity` bytes per micro-batch
// in flight (a 2-stage 1F1B pipeline's first stage holds 2 once m >= 2).
StageTerms stage(double per_layer_s, double send_s, double per_flight, double capacity = 10) {
  StageTerms t;
  t.per_layer_s = per_layer_s;
  t.send_s = send_s;
  t.mem_base_f = per_flight;
  t.capacity_bytes = capacity;
  return t;
}

TEST(BatchSplit, AShareAPipelineCannotRunIsHandedOutAsTheSingleMovesWould) {
  // `tight` runs one micro-batch and no more (its bottleneck at the even share is infinite,
  // so the proportional start gives it a share by its bottleneck at one micro-batch); the
  // split hands what it cannot run out at once and ends where the moves one at a time end,
  // micro-batch for micro-batch, ties (`fast` and `twin`) included.
  const auto sched = PipelineSchedule::k1F1B;
  PipelineCurve fast({stage(0.010, 0.002, 1), stage(0.012, 0, 1)}, 8, sched);
  PipelineCurve slow({stage(0.030, 0.004, 1), stage(0.025, 0.004, 1), stage(0.02, 0, 1)}, 8, sched);
  PipelineCurve tight({stage(0.001, 0.001, 6), stage(0.001, 0, 1)}, 8, sched);
  PipelineCurve twin({stage(0.010, 0.002, 1), stage(0.012, 0, 1)}, 8, sched);
  ASSERT_LT(tight.time(1), kInfeasible);
  ASSERT_EQ(tight.time(2), kInfeasible);
  const std::vector<std::vector<const PipelineCurve*>> sets = {{&fast, &tight},
                                                               {&tight, &fast, &slow},
                                                               {&slow, &tight, &tight, &fast},
                                                               {&fast, &twin},
                                                               {&tight, &fast, &twin, &slow}};
  for (std::size_t k = 0; k < sets.size(); ++k) {
    for (int total : {4, 5, 17, 64, 333, 1000, 4099}) {
      const BatchSplit got = split_micro_batches(sets[k], total);
      const BatchSplit want = reference_split(sets[k], total);
      EXPECT_EQ(got.micro_batches, want.micro_batches) << "set " << k << " total " << total;
      EXPECT_EQ(got.slowest_s, want.slowest_s) << "set " << k << " total " << total;
    }
  }
}

TEST(BatchSplit, AHugeShareIsNotMovedOneMicroBatchAtATime) {
  // 2^20 micro-batches, one pipeline able to run only one: the other takes the rest, and
  // its curve is solved at a few counts (bisection), not at every count it passes through
  // (each solved count is memoised: memory_bytes() counts them).
  const auto sched = PipelineSchedule::k1F1B;
  PipelineCurve fast({stage(0.010, 0.002, 1), stage(0.012, 0, 1)}, 8, sched);
  PipelineCurve tight({stage(0.001, 0.001, 6), stage(0.001, 0, 1)}, 8, sched);
  const int total = 1 << 20;
  const BatchSplit split = split_micro_batches({&fast, &tight}, total);
  EXPECT_EQ(split.micro_batches, (std::vector<int>{total - 1, 1}));
  EXPECT_EQ(split.slowest_s, fast.time(total - 1));
  EXPECT_LT(fast.memory_bytes(), std::size_t{1} << 20) << "counts solved: one per micro-batch?";
}

}  // namespace
}  // namespace hexi
