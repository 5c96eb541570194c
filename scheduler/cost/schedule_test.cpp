// Pipeline schedules: the orders and the event-by-event timeline, on hand-checkable cases.

#include "scheduler/cost/schedule.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>

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

std::string chunk_text(const std::vector<ChunkStep>& order) {
  std::string s;
  for (const ChunkStep& c : order) {
    s += (c.forward ? "F" : "B") + std::to_string(c.micro_batch) + "." + std::to_string(c.chunk) +
         " ";
  }
  return s;
}

TEST(Schedule, InterleavedOrderIsMegatronsForTwoGroupsOfTwoChunks) {
  // p = 2, v = 2, m = 4 (Fj.c = forward of micro-batch j through chunk c). Group 0 warms up
  // with (p - 1) * 2 + (v - 1) * p = 4 forwards, group 1 with 2; micro-batches go through
  // chunk 0 in pairs, then chunk 1; backwards start at the last chunk.
  EXPECT_EQ(chunk_text(interleaved_order(0, 2, 2, 4)),
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0 ");
  EXPECT_EQ(chunk_text(interleaved_order(1, 2, 2, 4)),
            "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0 ");
}

TEST(Schedule, InterleavedOrderRunsEveryChunkOfEveryMicroBatchOnce) {
  for (int p = 2; p <= 5; ++p) {
    for (int v = 1; v <= 4; ++v) {
      for (int m = p; m <= 4 * p; m += p) {
        for (int r = 0; r < p; ++r) {
          const auto order = interleaved_order(r, p, v, m);
          ASSERT_EQ(order.size(), static_cast<std::size_t>(2 * m * v));
          std::vector<int> seen(static_cast<std::size_t>(2 * m * v), 0);
          for (const ChunkStep& c : order)
            ++seen[static_cast<std::size_t>(((c.forward ? 0 : 1) * v + c.chunk) * m +
                                            c.micro_batch)];
          for (int n : seen) EXPECT_EQ(n, 1) << "p " << p << " v " << v << " m " << m;
        }
      }
    }
  }
  // One chunk: plain 1F1B.
  for (int r = 0; r < 4; ++r) {
    const auto order = interleaved_order(r, 4, 1, 6);
    const auto plain = pipeline_order(PipelineSchedule::k1F1B, r, 4, 6);
    for (std::size_t n = 0; n < plain.size(); ++n) {
      EXPECT_EQ(order[n], (ChunkStep{plain[n].first, plain[n].second, 0}));
    }
  }
}

TEST(Schedule, InterleavedEqualStagesPayTheBubbleDividedByTheChunks) {
  // p groups of v equal chunks, each F = 1/v, B = 2/v: a group's work per micro-batch is
  // F + B = 3 whatever v. No communication: (m + (p - 1) / v) (F + B), i.e. the bubble
  // fraction (p - 1) / v / (m + (p - 1) / v) (Narayanan et al. 2021), exactly here.
  for (int p : {2, 3, 4, 8}) {
    for (int v : {1, 2, 3, 4}) {
      for (int m : {p, 2 * p, 4 * p}) {
        std::vector<StageTimes> st(static_cast<std::size_t>(p * v),
                                   StageTimes{1.0 / v, 2.0 / v, 0, 0});
        const PipelineTimeline t = interleaved_timeline(st, m, v);
        const double bubble = 1 - m * 3.0 / t.time_s;
        const double expect = (p - 1.0) / v / (m + (p - 1.0) / v);
        EXPECT_NEAR(bubble, expect, 0.01 * expect + 1e-12) << "p " << p << " v " << v << " m " << m;
        EXPECT_NEAR(t.time_s, (m + (p - 1.0) / v) * 3.0, 1e-9 * t.time_s);
        if (p == 4 && m == 8) {
          std::printf("interleaved p=%d v=%d m=%d: iteration %.4f, bubble %.4f (expected %.4f)\n",
                      p, v, m, t.time_s, bubble, expect);
        }
      }
    }
  }
}

TEST(Schedule, InterleavedUnevenChunksRunAtTheSlowestGroupsPace) {
  // p = 3 groups, v = 2 chunks of uneven layers (F, B per virtual stage): group 0 holds
  // stages 0 and 3 (F + B = 2 + 3 = 5 per micro-batch), group 1 stages 1 and 4 (5 + 4 = 9),
  // group 2 stages 2 and 5 (4 + 2 = 6). The steady state advances p micro-batches
  // in p times the slowest group's work: t(m + 3) - t(m) = 3 * 9.
  const std::vector<StageTimes> st = {{1, 1, 0, 0}, {2, 3, 0, 0}, {1, 3, 0, 0},
                                      {1, 2, 0, 0}, {2, 2, 0, 0}, {1, 1, 0, 0}};
  const PipelineTimeline t60 = interleaved_timeline(st, 60, 2);
  EXPECT_DOUBLE_EQ(interleaved_timeline(st, 63, 2).time_s - t60.time_s, 3 * 9.0);
  EXPECT_DOUBLE_EQ(t60.period_s, 9.0);
  // Two groups, 0.25 per boundary: group 1 (stages 1 and 3, 3 + 3 = 6 per micro-batch)
  // sets the pace; the transfers hide behind its work.
  const std::vector<StageTimes> two = {
      {0.5, 1, 0.25, 0.25}, {1, 2, 0.25, 0.25}, {0.5, 1, 0.25, 0.25}, {1, 2, 0, 0}};
  EXPECT_DOUBLE_EQ(
      interleaved_timeline(two, 42, 2).time_s - interleaved_timeline(two, 40, 2).time_s, 2 * 6.0);
  // One chunk: the plain 1F1B timeline.
  const auto plain = equal_stages(4, 1.0, 2.0, 0.25);
  EXPECT_DOUBLE_EQ(interleaved_timeline(plain, 6, 1).time_s,
                   pipeline_timeline(plain, 6, PipelineSchedule::k1F1B).time_s);
}

// Stages with durations drawn from [0.1, 1) s (backwards up to 4x the forward), half the cases
// with boundaries up to 3 s: slow links, uneven stages, several critical cycles.
std::vector<StageTimes> random_stages(std::mt19937& rng, int stages) {
  std::uniform_real_distribution<double> u(0.1, 1.0);
  const bool links = rng() % 2 == 0;
  std::vector<StageTimes> st(static_cast<std::size_t>(stages));
  for (StageTimes& s : st) {
    s.forward_s = u(rng);
    s.backward_s = 4 * s.forward_s * u(rng);
    if (links) {
      s.send_s = u(rng) * (rng() % 3 == 0 ? 3.0 : 0.3);
      s.grad_s = rng() % 2 == 0 ? s.send_s : s.send_s * u(rng);
    }
  }
  st.back().send_s = st.back().grad_s = 0;
  return st;
}

// Within 1e-9 of the reference, time and every stage's finish: the event times themselves are
// sums of up to 4 p m rounded durations.
void expect_same_timeline(const PipelineTimeline& got, const PipelineTimeline& want,
                          const std::string& what) {
  EXPECT_NEAR(got.time_s, want.time_s, 1e-9 * want.time_s) << what;
  ASSERT_EQ(got.finish_s.size(), want.finish_s.size()) << what;
  for (std::size_t s = 0; s < want.finish_s.size(); ++s)
    EXPECT_NEAR(got.finish_s[s], want.finish_s[s], 1e-9 * want.time_s) << what << " stage " << s;
  EXPECT_EQ(got.period_s, want.period_s) << what;
}

TEST(Schedule, BeyondTheExactCountATimelineIsItsSteadyStateExtended) {
  // Random pipelines with more micro-batches than are run event by event: the steady state
  // found in a run of about kTimelineExactMicroBatches, extended, is the event-by-event
  // timeline, for 1F1B (cycles of 1 to 4 micro-batches occur), GPipe and interleaved 1F1B.
  std::mt19937 rng(7);
  const int big = kTimelineExactMicroBatches;
  for (int trial = 0; trial < 12; ++trial) {
    const int p = 1 + static_cast<int>(rng() % 8);
    const int m = big + 1 + static_cast<int>(rng() % (3 * big));
    const auto st = random_stages(rng, p);
    for (PipelineSchedule s : {PipelineSchedule::k1F1B, PipelineSchedule::kGPipe}) {
      expect_same_timeline(pipeline_timeline(st, m, s), pipeline_timeline_events(st, m, s),
                           std::string(s == PipelineSchedule::kGPipe ? "gpipe" : "1f1b") +
                               " p=" + std::to_string(p) + " m=" + std::to_string(m));
    }
    const int groups = 2 + static_cast<int>(rng() % 4), chunks = 2 + trial % 2;
    const auto virt = random_stages(rng, groups * chunks);
    const int blocks = big / groups + 1 + static_cast<int>(rng() % 1000);
    expect_same_timeline(interleaved_timeline(virt, blocks * groups, chunks),
                         interleaved_timeline_events(virt, blocks * groups, chunks),
                         "interleaved p=" + std::to_string(groups) + " v=" +
                             std::to_string(chunks) + " m=" + std::to_string(blocks * groups));
  }
  // The slow boundary above alternates 5 and 11 per micro-batch (a cycle of 2): both parities.
  const auto slow = equal_stages(2, 1.0, 2.0, 5.0);
  for (int m : {big + 1, big + 2, 5 * big + 1}) {
    expect_same_timeline(pipeline_timeline(slow, m, PipelineSchedule::k1F1B),
                         pipeline_timeline_events(slow, m, PipelineSchedule::k1F1B),
                         "slow boundary m=" + std::to_string(m));
  }
}

TEST(Schedule, ManyMicroBatchesCostWhatTheSteadyStateCosts) {
  // 2^24 micro-batches: (m + p - 1)(F + B) on equal stages without communication, and the
  // interleaved order's peak in flight is the same as for a few blocks.
  const int m = 1 << 24;
  for (PipelineSchedule s : {PipelineSchedule::k1F1B, PipelineSchedule::kGPipe}) {
    const PipelineTimeline t = pipeline_timeline(equal_stages(8, 1.0, 2.0, 0.0), m, s);
    EXPECT_NEAR(t.time_s, (m + 7) * 3.0, 1e-12 * t.time_s);
  }
  std::vector<StageTimes> st(16, StageTimes{0.5, 1.0, 0, 0});
  const PipelineTimeline t = interleaved_timeline(st, m, 2);
  EXPECT_NEAR(t.time_s, (m + 7.0 / 2) * 3.0, 1e-12 * t.time_s);
  EXPECT_EQ(interleaved_in_flight(0, 8, 2, m), interleaved_in_flight(0, 8, 2, 64));
}

TEST(Schedule, InterleavedInFlightIsThePeakOfTheWholeOrder) {
  // The definition, over the whole order, against the bounded prefix the function reads: by
  // count, and by bytes with chunks of unequal size (an empty first chunk, a large one, equal
  // ones), where the peak of bytes need not be the peak of count.
  const std::vector<std::vector<double>> sizes = {{}, {0, 3, 1, 1}, {5, 1, 2, 7}, {1, 1, 0.25, 9}};
  for (const std::vector<double>& size : sizes) {
    for (int groups = 1; groups <= 6; ++groups) {
      for (int chunks = 1; chunks <= 4; ++chunks) {
        const std::vector<double> bytes =
            size.empty() ? size : std::vector<double>(size.begin(), size.begin() + chunks);
        for (int rank = 0; rank < groups; ++rank) {
          for (int m = 1; m <= 6 * groups + 3; ++m) {
            std::vector<int> now(static_cast<std::size_t>(chunks), 0), peak = now;
            double most = 0;
            for (const ChunkStep& step : interleaved_order(rank, groups, chunks, m)) {
              now[static_cast<std::size_t>(step.chunk)] += step.forward ? 1 : -1;
              double alive = 0;
              for (int c = 0; c < chunks; ++c)
                alive += now[static_cast<std::size_t>(c)] *
                         (bytes.empty() ? 1.0 : bytes[static_cast<std::size_t>(c)]);
              if (alive > most) {
                most = alive;
                peak = now;
              }
            }
            EXPECT_EQ(interleaved_in_flight(rank, groups, chunks, m, bytes), peak)
                << "groups " << groups << " chunks " << chunks << " rank " << rank << " m " << m
                << " sizes " << bytes.size();
          }
        }
      }
    }
  }
  // Where the bytes and the count peak apart, 2 groups of 3 chunks, 8 micro-batches: group 0
  // keeps 7 (chunk, micro-batch) pairs at most, as 3 + 2 + 2, but with its first chunk holding
  // the embedding alone (no layer) its bytes peak at 2 + 2 + 2; group 1, whose last chunk holds
  // the head alone, at 3 + 2 + 0 rather than at the count's 2 + 2 + 1.
  EXPECT_EQ(interleaved_in_flight(0, 2, 3, 8), (std::vector<int>{3, 2, 2}));
  EXPECT_EQ(interleaved_in_flight(0, 2, 3, 8, {0, 1, 1}), (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(interleaved_in_flight(1, 2, 3, 8), (std::vector<int>{2, 2, 1}));
  EXPECT_EQ(interleaved_in_flight(1, 2, 3, 8, {1, 1, 0}), (std::vector<int>{3, 2, 0}));
}

}  // namespace
}  // namespace hexi
