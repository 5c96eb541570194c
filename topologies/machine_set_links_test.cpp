// MachineSetLinks against the loop it replaces: the least path_link bandwidth and the largest
// latency from each machine to every other machine of a set, on clusters of several leaves
// (oversubscribed uplinks, NICs and PCIe of several sizes, one leaf without a spine).
#include "topologies/machine_set_links.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>

#include "topologies/testing.hpp"

namespace hexi {
namespace {

Cluster parse_links_cluster(const std::string& text) {
  auto json = parse_json_text(text, "inline.json");
  EXPECT_TRUE(json.ok());
  auto c = Cluster::from_json(*json, "inline.json", testing::shipped_gpus());
  EXPECT_TRUE(c.ok()) << c.error().message;
  return *c;
}

// The loop: path_link (link() without overrides) from GPU 0 of m to GPU 0 of each other
// machine of the set.
PairLink loop(const Cluster& c, const std::vector<int>& set, int m) {
  PairLink out{std::numeric_limits<double>::infinity(), 0.0};
  for (int other : set) {
    if (other == m) continue;
    const PairLink l = c.link(c.machines()[m].first_device, c.machines()[other].first_device);
    out.bandwidth_Bps = std::min(out.bandwidth_Bps, l.bandwidth_Bps);
    out.latency_s = std::max(out.latency_s, l.latency_s);
  }
  return out;
}

void expect_as_the_loop(const Cluster& c, std::mt19937& rng) {
  const int machines = static_cast<int>(c.machines().size());
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<int> set;
    const int size = static_cast<int>(rng() % (machines + 2));
    for (int k = 0; k < size; ++k) set.push_back(static_cast<int>(rng() % machines));
    const MachineSetLinks links(c, set);
    for (int m = 0; m < machines; ++m) {
      const PairLink want = loop(c, set, m), got = links.from(m);
      EXPECT_EQ(got.bandwidth_Bps, want.bandwidth_Bps) << "trial " << trial << " machine " << m;
      EXPECT_EQ(got.latency_s, want.latency_s) << "trial " << trial << " machine " << m;
    }
  }
}

TEST(MachineSetLinks, AreTheLoopOverTheSet) {
  // Four leaves of three machines, oversubscribed 3:1: NICs of 12.5 to 50 GB/s, PCIe of 16
  // (RTX 4090) and 32 (A100) GB/s, so that each of the terms is the least somewhere.
  const Cluster c = parse_links_cluster(R"({"version": 1, "name": "t",
    "network": {"nic_GBps": 25, "machines_per_leaf": 3, "oversubscription": 3},
    "machines": [
      {"name": "a", "gpu": "A100", "gpus": 8, "repeat": 4, "nic_GBps": 50},
      {"name": "b", "gpu": "RTX4090", "gpus": 4, "repeat": 3, "nic_GBps": 12.5},
      {"name": "c", "gpu": "A100", "gpus": 4, "repeat": 5}]})");
  std::mt19937 rng(3);
  expect_as_the_loop(c, rng);
}

TEST(MachineSetLinks, LeavesWithoutASpineHaveNoPath) {
  const Cluster c = parse_links_cluster(R"({"version": 1, "name": "t",
    "network": {"nic_GBps": 25, "machines_per_leaf": 2, "spine": false},
    "machines": [{"name": "a", "gpu": "A100", "gpus": 2, "repeat": 5}]})");
  std::mt19937 rng(5);
  expect_as_the_loop(c, rng);
  EXPECT_EQ(MachineSetLinks(c, {0, 1, 2}).from(0).bandwidth_Bps, 0.0);
  EXPECT_EQ(MachineSetLinks(c, {0}).from(0).bandwidth_Bps, std::numeric_limits<double>::infinity());
}

}  // namespace
}  // namespace hexi
