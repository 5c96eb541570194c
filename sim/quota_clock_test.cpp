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

TEST(QuotaClock, AWholeShareNeverPauses) {
  QuotaClock c(1.0, 5e-3, 2e-3);
  EXPECT_NEAR(c.run(0.1, 0.37), 0.47, 1e-12);
}

}  // namespace
}  // namespace hexi::sim
