// Ring collectives: bus-bandwidth factors and times worked out by hand.
#include "scheduler/cost/collectives.hpp"

#include <gtest/gtest.h>

#include <cstdio>

namespace hexi {
namespace {

TEST(Collectives, BusFactors) {
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllReduce, 4), 1.5);   // 2(n-1)/n
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllGather, 4), 0.75);  // (n-1)/n
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kReduceScatter, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllToAll, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kBroadcast, 3), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllReduce, 1), 0.0);
}

TEST(Collectives, RingAllReduceTime) {
  // 1 GB over 4 ranks at 10 GB/s with 10 us per hop: 1.5 * 0.1 s + 2 * 3 * 10 us.
  std::printf(
      "ring all-reduce, 1 GB, 4 ranks, 10 GB/s, 10 us: %.6f s (2(n-1)/n*S/bw + 2(n-1)*lat = "
      "0.150060)\n",
      collective_time(Collective::kAllReduce, 1e9, 4, 10e9, 10e-6));
  EXPECT_DOUBLE_EQ(collective_time(Collective::kAllReduce, 1e9, 4, 10e9, 10e-6), 0.15 + 60e-6);
  // All-gather of 1 GB (gathered size) over 8 ranks: 7/8 * 0.1 s + 7 hops.
  EXPECT_DOUBLE_EQ(collective_time(Collective::kAllGather, 1e9, 8, 10e9, 10e-6), 0.0875 + 70e-6);
  EXPECT_DOUBLE_EQ(collective_time(Collective::kAllReduce, 1e9, 1, 10e9, 10e-6), 0.0);
  EXPECT_DOUBLE_EQ(p2p_time(1e9, 10e9, 10e-6), 0.1 + 10e-6);
  EXPECT_DOUBLE_EQ(p2p_time(0, 10e9, 10e-6), 0.0);
}

}  // namespace
}  // namespace hexi
