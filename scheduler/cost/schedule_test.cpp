// Pipeline schedules: the orders and the event-by-event timeline, on hand-checkable cases.

#include "scheduler/cost/schedule.hpp"

#include <gtest/gtest.h>

namespace hexi {
namespace {

std::vector<StageTimes> equal_stages(int p, double f, double b, double c) {
  std::vector<StageTimes> st(p, StageTimes{f, b, c, c});
  st.back().send_s = st.back().grad_s = 0;
  return st;
}

TEST(Schedule, EqualStagesWithoutCommunicationPayTheTextbookBubble) {
  // (m + p - 1) (F + B) for 1F1B and GPipe alike.
  for (PipelineSchedule s : {PipelineSchedule::k1F1B, PipelineSchedule::kGPipe}) {
    for (int p : {1, 2, 4, 7}) {
      for (int m : {1, 3, 8, 20}) {
        PipelineTimeline t = pipeline_timeline(equal_stages(p, 1.0, 2.0, 0.0), m, s);
        EXPECT_DOUBLE_EQ(t.time_s, (m + p - 1) * 3.0) << "p=" << p << " m=" << m;
        EXPECT_DOUBLE_EQ(t.finish_s.front(), t.time_s);
      }
    }
  }
}

TEST(Schedule, ASlowBoundaryCostsForwardPlusBackwardPlusTransferPerMicroBatch) {
  // Two stages, F = 1, B = 2, C = 5: each micro-batch's gradient comes back only after
  // the activation went over and stage 1 ran it; 1F1B alternates, so the steady state
  // is F + B + C = 8 per micro-batch, not max(F + B, C) = 5.
  // The cycle through both stages advances two micro-batches (stage 0 holds two in
  // flight): micro-batch by micro-batch the pipeline alternates 5 and 11.
  const std::vector<StageTimes> st = equal_stages(2, 1.0, 2.0, 5.0);
  EXPECT_DOUBLE_EQ(pipeline_period(st), 8.0);
  const double t40 = pipeline_timeline(st, 40, PipelineSchedule::k1F1B).time_s;
  const double t42 = pipeline_timeline(st, 42, PipelineSchedule::k1F1B).time_s;
  EXPECT_DOUBLE_EQ(t42 - t40, 2 * 8.0);
  // One micro-batch: F0 + C + F1 + B1 + C + B0.
  EXPECT_DOUBLE_EQ(pipeline_timeline(st, 1, PipelineSchedule::k1F1B).time_s, 1 + 5 + 1 + 2 + 5 + 2);
}

TEST(Schedule, PeriodIsTheWorstCycleMean) {
  // Stages 3 and 1 apart by C = 0.5: windows of one stage (F + B), of two (their mean
  // plus C), and the channel itself.
  std::vector<StageTimes> st = {{1, 2, 0.5, 0.5}, {0.5, 0.5, 0, 0}};
  EXPECT_DOUBLE_EQ(pipeline_period(st), 3.0);  // stage 0 alone: 3 > (3 + 1 + 1) / 2
  st[0].send_s = st[0].grad_s = 4;             // (3 + 1 + 8) / 2 = 6 > 4
  EXPECT_DOUBLE_EQ(pipeline_period(st), 6.0);
  const double t20 = pipeline_timeline(st, 20, PipelineSchedule::k1F1B).time_s;
  const double t22 = pipeline_timeline(st, 22, PipelineSchedule::k1F1B).time_s;
  EXPECT_DOUBLE_EQ(t22 - t20, 2 * 6.0);
}

TEST(Schedule, StagesFinishFromTheLastToTheFirst) {
  PipelineTimeline t =
      pipeline_timeline(equal_stages(4, 1.0, 2.0, 0.25), 6, PipelineSchedule::k1F1B);
  ASSERT_EQ(t.finish_s.size(), 4u);
  for (int s = 0; s + 1 < 4; ++s) EXPECT_GT(t.finish_s[s], t.finish_s[s + 1]);
  EXPECT_DOUBLE_EQ(t.time_s, t.finish_s.front());
}

TEST(Schedule, OrdersOfOneFOneBAndGPipe) {
  auto text = [](const std::vector<std::pair<bool, int>>& o) {
    std::string s;
    for (auto [f, j] : o) s += (f ? "F" : "B") + std::to_string(j) + " ";
    return s;
  };
  EXPECT_EQ(text(pipeline_order(PipelineSchedule::k1F1B, 1, 3, 3)), "F0 F1 B0 F2 B1 B2 ");
  EXPECT_EQ(text(pipeline_order(PipelineSchedule::kGPipe, 0, 3, 2)), "F0 F1 B0 B1 ");
}

TEST(Schedule, StepsAreTheOrdersEntries) {
  for (PipelineSchedule schedule : {PipelineSchedule::k1F1B, PipelineSchedule::kGPipe}) {
    for (int stages = 1; stages <= 6; ++stages) {
      for (int stage = 0; stage < stages; ++stage) {
        for (int m = 1; m <= 9; ++m) {
          const auto order = pipeline_order(schedule, stage, stages, m);
          ASSERT_EQ(order.size(), static_cast<std::size_t>(2 * m));
          for (int n = 0; n < 2 * m; ++n)
            EXPECT_EQ(pipeline_step(schedule, stage, stages, m, n), order[n])
                << "stage " << stage << " of " << stages << ", m " << m << ", step " << n;
        }
      }
    }
  }
}

}  // namespace
}  // namespace hexi
