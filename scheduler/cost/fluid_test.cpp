// The fluid network model: max-min fair rates, a transfer between events and the closed
// forms, with numbers worked out by hand.
#include "scheduler/cost/fluid.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

namespace hexi {
namespace {

using Links = std::vector<std::pair<int, double>>;  // (link, the flow's flows there)

// The rates of flows with caps `caps` crossing `links` over links of `capacity`.
std::vector<double> rates(std::vector<double> capacity, const std::vector<double>& caps,
                          const std::vector<Links>& links) {
  std::vector<FairFlow> flows;
  for (std::size_t i = 0; i < caps.size(); ++i) flows.push_back({caps[i], &links[i], 0});
  std::vector<FairFlow*> of;
  for (FairFlow& f : flows) of.push_back(&f);
  MaxMinFair(std::move(capacity)).solve(of);
  std::vector<double> out;
  for (const FairFlow& f : flows) out.push_back(f.rate);
  return out;
}

constexpr double kInf = INFINITY;

TEST(Fluid, TwoFlowsShareALinkEqually) {
  // Two flows share a 10 GB/s link, neither capped below it: each gets 5.
  const auto r = rates({10e9}, {kInf, kInf}, {{{0, 1.0}}, {{0, 1.0}}});
  EXPECT_DOUBLE_EQ(r[0], 5e9);
  EXPECT_DOUBLE_EQ(r[1], 5e9);
  EXPECT_DOUBLE_EQ(fair_share(10e9, 2), 5e9);  // the closed form of the same case
}

TEST(Fluid, ACappedFlowLeavesTheRestToTheOther) {
  // On a 10 GB/s link, a flow capped at 2 GB/s by its own path takes 2; the other gets 8.
  const auto r = rates({10e9}, {2e9, kInf}, {{{0, 1.0}}, {{0, 1.0}}});
  EXPECT_DOUBLE_EQ(r[0], 2e9);
  EXPECT_DOUBLE_EQ(r[1], 8e9);
}

TEST(Fluid, AFlowHeldBackAtOneLinkLeavesItsShareOfTheOther) {
  // Link 0 of 10 GB/s carries flows A and B; link 1 of 4 GB/s carries A and C. Link 1 fills
  // first, at 2 GB/s each for A and C; B then rises alone on link 0's remaining 8 GB/s.
  const auto r =
      rates({10e9, 4e9}, {kInf, kInf, kInf}, {{{0, 1.0}, {1, 1.0}}, {{0, 1.0}}, {{1, 1.0}}});
  EXPECT_DOUBLE_EQ(r[0], 2e9);
  EXPECT_DOUBLE_EQ(r[1], 8e9);
  EXPECT_DOUBLE_EQ(r[2], 2e9);
}

TEST(Fluid, AFlowStandingForSeveralCountsEach) {
  // A flow standing for 3 equal flows and one more flow on a 12 GB/s link: 4 flows, 3 each.
  const auto r = rates({12e9}, {kInf, kInf}, {{{0, 3.0}}, {{0, 1.0}}});
  EXPECT_DOUBLE_EQ(r[0], 3e9);
  EXPECT_DOUBLE_EQ(r[1], 3e9);
}

TEST(Fluid, AFlowWithNeitherCapNorLinkIsUnbounded) {
  const auto r = rates({10e9}, {kInf, 4e9}, {{}, {}});
  EXPECT_TRUE(std::isinf(r[0]));
  EXPECT_DOUBLE_EQ(r[1], 4e9);
}

TEST(Fluid, SolvesAgainWithItsBuffersReset) {
  // The same solver, two events: two flows (5 GB/s each), then one alone (10 GB/s).
  const Links one{{0, 1.0}};
  FairFlow a{kInf, &one, 0}, b{kInf, &one, 0};
  MaxMinFair share({10e9});
  std::vector<FairFlow*> both{&a, &b}, alone{&a};
  share.solve(both);
  EXPECT_DOUBLE_EQ(a.rate, 5e9);
  share.solve(alone);
  EXPECT_DOUBLE_EQ(a.rate, 10e9);
}

TEST(Fluid, WorkDropsLinearlyBetweenEvents) {
  // 100 MB at 5 GB/s from 0 s: 50 MB left at 10 ms; at 10 GB/s from then it ends at 15 ms.
  FluidWork w{100e6, 5e9, 0};
  EXPECT_DOUBLE_EQ(w.end_s(0), 0.02);
  w.advance_to(0.01);
  EXPECT_DOUBLE_EQ(w.left, 50e6);
  EXPECT_DOUBLE_EQ(w.updated_s, 0.01);
  w.rate = 10e9;
  EXPECT_DOUBLE_EQ(w.end_s(0.01), 0.015);
  // Past its end it is done: the end is now, not earlier.
  w.advance_to(0.02);
  EXPECT_DOUBLE_EQ(w.end_s(0.02), 0.02);
}

TEST(Fluid, SharedNicGivesEveryFlowItsFairShare) {
  // A 10 GB/s NIC, two ring flows of 50 MB beside a 1 GB backlog: three flows at 3.33 GB/s,
  // the ring's end after 15 ms (50 MB / 3.33 GB/s), the backlog 50 MB further.
  SharedNic s = shared_nic(100e6, 2, 1e9, 10e9);
  EXPECT_DOUBLE_EQ(s.ring_s, 0.015);
  EXPECT_DOUBLE_EQ(s.moved_bytes, 50e6);
  // The solver's answer for the same three flows: 3.33 GB/s each, 50 MB in 15 ms.
  const auto r = rates({10e9}, {kInf, kInf}, {{{0, 2.0}}, {{0, 1.0}}});
  EXPECT_NEAR(50e6 / r[0], s.ring_s, 1e-15);
  // A 20 MB backlog ends first (after 6 ms at 3.33 GB/s); the ring's remaining 60 MB then
  // take the whole NIC: 12 ms, the 120 MB at 10 GB/s.
  s = shared_nic(100e6, 2, 20e6, 10e9);
  EXPECT_DOUBLE_EQ(s.ring_s, 0.012);
  EXPECT_DOUBLE_EQ(s.moved_bytes, 20e6);
  // No backlog: the ring alone, 10 ms. No ring flow: nothing moves beside it.
  EXPECT_DOUBLE_EQ(shared_nic(100e6, 2, 0, 10e9).ring_s, 0.01);
  EXPECT_DOUBLE_EQ(shared_nic(0, 0, 1e9, 10e9).moved_bytes, 0.0);
}

}  // namespace
}  // namespace hexi
