#include "sim/quota_clock.hpp"

#include <gtest/gtest.h>

namespace hexi::sim {
namespace {

// cpu-20: 1 ms of quota per 5 ms period, periods starting at 0.
TEST(QuotaClock, RunsAtFullSpeedUntilTheQuotaIsSpentThenWaitsForTheNextPeriod) {
  QuotaClock c(0.2, 5e-3, 0);
  // 10 ms at the average rate = 2 ms of the core: [0, 1) ms, paused, [5, 6) ms.
  EXPECT_NEAR(c.run(0, 10e-3), 6e-3, 1e-12);
  // The next period's quota is whole: 1 ms of average time = 0.2 ms of the core.
  EXPECT_NEAR(c.run(10e-3, 1e-3), 10.2e-3, 1e-12);
  // Later in the same period, 0.8 ms of quota is left: 4 ms at the average rate fits.
  EXPECT_NEAR(c.run(12e-3, 4e-3), 12.8e-3, 1e-12);
  // Nothing left: the op waits for the period starting at 15 ms.
  EXPECT_NEAR(c.run(13e-3, 1e-3), 15.2e-3, 1e-12);
}

TEST(QuotaClock, UnusedQuotaIsNotCarriedOverAndThePhaseShiftsThePeriods) {
  QuotaClock c(0.4, 5e-3, 1e-3);  // cpu-40, periods [1, 6), [6, 11) ms, ...
  // From 5.5 ms: 0.5 ms of the core before the period ends at 6, then 1.5 ms more in the new
  // period: 2 ms of the core = 5 ms at the average rate.
  EXPECT_NEAR(c.run(5.5e-3, 5e-3), 7.5e-3, 1e-12);
  // A long op at the average rate takes its duration, give or take the phase.
  QuotaClock d(0.4, 5e-3, 0);
  EXPECT_NEAR(d.run(0, 1.0), 1.0 - 3e-3, 1e-9);  // 2 ms of each of 200 periods
}

// A communication op spends CPU on the same clock; the rank is one thread, so an op that asks
// for the core before the last one ended gets it when that one ends.
TEST(QuotaClock, CommunicationSpendsTheQuotaAndOpsTakeTheCoreInTurn) {
  QuotaClock c(0.2, 5e-3, 0);
  EXPECT_NEAR(c.spend(0, 0.9e-3), 0.9e-3, 1e-12);  // within the first period's 1 ms
  // 0.3 ms more at 2 ms: 0.1 ms is left in this period, the rest from 5 ms.
  EXPECT_NEAR(c.spend(2e-3, 0.3e-3), 5.2e-3, 1e-12);
  // 1 ms at the average rate (0.2 ms of the core), asked for at 4 ms: from 5.2 ms.
  EXPECT_NEAR(c.run(4e-3, 1e-3), 5.4e-3, 1e-12);
}

// Waiting polls at a share of a core: cpu-20 polling at 10 % spends 0.1 ms of quota per ms.
TEST(QuotaClock, PollsSpendTheQuotaAndAThrottledWaiterNoticesInItsNextPeriod) {
  QuotaClock c(0.2, 5e-3, 0);
  EXPECT_NEAR(c.spend(0, 0.5e-3), 0.5e-3, 1e-12);  // 0.5 ms of the core: 0.5 ms left
  // Waiting from 0.5 to 3 ms polls 0.25 ms: the arrival is noticed at once.
  EXPECT_NEAR(c.wait(0.5e-3, 3e-3, 0.1), 3e-3, 1e-12);
  // 0.25 ms left would last 2.5 ms of polls, to 5.5 ms; the period ends at 5 ms first, and
  // the new period's quota lasts past the arrival at 7 ms (0.2 ms of it spent).
  EXPECT_NEAR(c.wait(3e-3, 7e-3, 0.1), 7e-3, 1e-12);
  // 0.5 ms more leaves 0.3 ms, 3 ms of polls from 7.5 ms: the period ends at 10 ms first.
  EXPECT_NEAR(c.spend(7e-3, 0.5e-3), 7.5e-3, 1e-12);
  EXPECT_NEAR(c.wait(7.5e-3, 10.5e-3, 0.1), 10.5e-3, 1e-12);
  // 0.05 ms used in [10, 15); 0.9 ms more leaves 0.05 ms: the polls from 11.4 ms spend it by
  // 11.9 ms, before the arrival at 12 ms. The rank is throttled: it notices at 15 ms.
  EXPECT_NEAR(c.spend(10.5e-3, 0.9e-3), 11.4e-3, 1e-12);
  EXPECT_NEAR(c.wait(11.4e-3, 12e-3, 0.1), 15e-3, 1e-12);
  // The next op starts there, with the whole quota of [15, 20).
  EXPECT_NEAR(c.run(12e-3, 1e-3), 15.2e-3, 1e-12);
  // Free polls, or an arrival before the rank waits: nothing to notice late.
  EXPECT_NEAR(c.wait(16e-3, 30e-3, 0), 30e-3, 1e-12);
  EXPECT_NEAR(c.wait(31e-3, 30e-3, 0.1), 31e-3, 1e-12);
  // Polling at 50 %, a fresh quota lasts 2 ms of each 5 ms period: over a long wait only the
  // period the message arrives in matters.
  QuotaClock d(0.2, 5e-3, 0);
  EXPECT_NEAR(d.wait(0, 1.001, 0.5), 1.001, 1e-12);
  EXPECT_NEAR(d.wait(1.001, 2.003, 0.5), 2.005, 1e-12);
}

TEST(QuotaClock, AWholeShareNeverPauses) {
  QuotaClock c(1.0, 5e-3, 2e-3);
  EXPECT_NEAR(c.run(0.1, 0.37), 0.47, 1e-12);
}

}  // namespace
}  // namespace hexi::sim
