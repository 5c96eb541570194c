// Collective algorithms expanded into flows: byte counts per the bus factors of
// scheduler/cost/collectives.hpp (nccl-tests PERFORMANCE.md), the hierarchical variant's parts.

#include "sim/collective_algos.hpp"

#include <gtest/gtest.h>

#include "scheduler/plan/testing.hpp"

namespace hexi::sim {
namespace {

double total_bytes(const Phase& p) {
  double s = 0;
  for (const auto& f : p.flows) s += f.bytes;
  return s;
}

TEST(CollectiveAlgos, RingAllReduceSendsTwoNMinusOneOverNPerRank) {
  Cluster c = testing::make_cluster(1, 8);
  auto phases = expand_collective(Collective::kAllReduce, {0, 1, 2, 3}, 100, Algorithm::kRing, c);
  ASSERT_EQ(phases.size(), 1u);
  ASSERT_EQ(phases[0].flows.size(), 4u);
  EXPECT_DOUBLE_EQ(phases[0].flows[0].bytes, 150);   // 2 * 3/4 * 100
  EXPECT_DOUBLE_EQ(phases[0].flows[0].message, 25);  // S/n per step
  EXPECT_EQ(phases[0].flows[3].src, 3);
  EXPECT_EQ(phases[0].flows[3].dst, 0);
  EXPECT_EQ(phases[0].latency_steps, 6);
}

TEST(CollectiveAlgos, GatherScatterBroadcastAllToAll) {
  Cluster c = testing::make_cluster(1, 8);
  auto ag = expand_collective(Collective::kAllGather, {0, 1, 2, 3}, 100, Algorithm::kAuto, c);
  EXPECT_DOUBLE_EQ(ag[0].flows[0].bytes, 75);
  EXPECT_EQ(ag[0].latency_steps, 3);
  auto bc = expand_collective(Collective::kBroadcast, {5, 6, 7}, 100, Algorithm::kAuto, c);
  ASSERT_EQ(bc[0].flows.size(), 2u);  // 5 -> 6 -> 7, pipelined
  EXPECT_EQ(bc[0].flows[0].src, 5);
  EXPECT_DOUBLE_EQ(bc[0].flows[1].bytes, 100);
  auto a2a = expand_collective(Collective::kAllToAll, {0, 1, 2, 3}, 100, Algorithm::kAuto, c);
  EXPECT_EQ(a2a[0].flows.size(), 12u);
  EXPECT_DOUBLE_EQ(total_bytes(a2a[0]), 12 * 25.0);
  EXPECT_TRUE(expand_collective(Collective::kAllReduce, {3}, 100, Algorithm::kAuto, c).empty());
}

// A group that names machines out of order is ringed machine by machine, as NCCL builds its
// rings from the topology: two off-machine edges per ring (one each way per machine), not one
// per member; a broadcast keeps its root first.
TEST(CollectiveAlgos, RingsAndChainsGoMachineByMachine) {
  Cluster c = testing::make_cluster(3, 4);
  const std::vector<int> scattered{0, 4, 1, 8, 5, 9};
  auto off_machine = [&c](const Phase& p) {
    int n = 0;
    for (const auto& f : p.flows) n += c.devices()[f.src].machine != c.devices()[f.dst].machine;
    return n;
  };
  auto ar = expand_collective(Collective::kAllReduce, scattered, 100, Algorithm::kRing, c);
  ASSERT_EQ(ar[0].flows.size(), 6u);
  EXPECT_EQ(off_machine(ar[0]), 3);  // 0 1 | 4 5 | 8 9: three machine boundaries, one each
  EXPECT_EQ(ar[0].flows[0].src, 0);
  EXPECT_EQ(ar[0].flows[0].dst, 1);
  EXPECT_EQ(ar[0].flows[1].dst, 4);
  auto ag = expand_collective(Collective::kAllGather, scattered, 100, Algorithm::kAuto, c);
  EXPECT_EQ(off_machine(ag[0]), 3);
  auto bc = expand_collective(Collective::kBroadcast, {5, 0, 6, 1}, 100, Algorithm::kAuto, c);
  ASSERT_EQ(bc[0].flows.size(), 3u);
  EXPECT_EQ(bc[0].flows[0].src, 5);  // the root
  EXPECT_EQ(bc[0].flows[0].dst, 6);
  EXPECT_EQ(off_machine(bc[0]), 1);
}

// The closed form rings a group in the simulator's order too: named across machines
// (0 2 1 3), the ring runs 0 1 | 2 3, whose host-staged edges (4 GB/s) are slower than the
// network (12.5 GB/s); in rank order every edge would cross the network.
TEST(CollectiveAlgos, TheClosedFormRingsMachineByMachineAsTheSimulator) {
  Cluster c = testing::cluster_from({{"version", 1},
                                     {"name", "two"},
                                     {"network", {{"nic_GBps", 12.5}, {"rates", "nominal"}}},
                                     {"machines",
                                      {{{"gpu", "RTX3090"},
                                        {"gpus", 2},
                                        {"repeat", 2},
                                        {"intra", {{"kind", "host"}, {"GBps", 4}}}}}}});
  EXPECT_EQ(machine_order({0, 2, 1, 3}, c), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_DOUBLE_EQ(ring_link(c, {0, 2, 1, 3}, 1e6).first, 4e9);
  EXPECT_DOUBLE_EQ(ring_link(c, {0, 2}, 1e6).first, 12.5e9);
  auto ar = expand_collective(Collective::kAllReduce, {0, 2, 1, 3}, 100, Algorithm::kRing, c);
  EXPECT_EQ(ar[0].flows[0].dst, 1);
}

TEST(CollectiveAlgos, HierarchicalAllReduceWhenMachinesHoldEqualBlocks) {
  Cluster c = testing::make_cluster(2, 4);
  EXPECT_EQ(machine_blocks({0, 1, 4, 5}, c).size(), 2u);
  EXPECT_TRUE(machine_blocks({0, 1, 4}, c).empty());  // unequal
  EXPECT_TRUE(machine_blocks({0, 4}, c).empty());     // one per machine: a ring is as good
  auto phases = expand_collective(Collective::kAllReduce, {0, 1, 4, 5}, 100, Algorithm::kAuto, c);
  ASSERT_EQ(phases.size(), 1u);  // pipelined: every part at once
  const auto& flows = phases[0].flows;
  ASSERT_EQ(flows.size(), 12u);  // per machine 2 reduce-scatter + 2 all-gather, 2 x 2 across
  EXPECT_DOUBLE_EQ(flows[0].bytes, 50);    // reduce-scatter inside the machine: 1/2 * 100
  EXPECT_DOUBLE_EQ(flows[0].message, 50);  // S/g per step
  EXPECT_EQ(c.devices()[flows[8].src].machine, 0);
  EXPECT_EQ(c.devices()[flows[8].dst].machine, 1);
  EXPECT_DOUBLE_EQ(flows[8].bytes, 50);    // 2 * 1/2 * (100 / 2) across the machines
  EXPECT_DOUBLE_EQ(flows[8].message, 25);  // S/(g M) per step
  EXPECT_EQ(phases[0].latency_steps, 4);   // 1 + 2 + 1
  EXPECT_EQ(phases[0].part_steps, (std::vector<int>{2, 2}));  // inside, across
  EXPECT_EQ(flows[0].part, 0);
  EXPECT_EQ(flows[8].part, 1);
  auto ring = expand_collective(Collective::kAllReduce, {0, 1, 4, 5}, 100, Algorithm::kRing, c);
  EXPECT_EQ(ring.size(), 1u);
}

}  // namespace
}  // namespace hexi::sim
