// The testbed's layout (testbed.hpp): what `hexisim testbed up` builds from a cluster file,
// checked by hand; no root needed (the end-to-end run is CliValidate.QuickOnTheTestbed).
#include "validation/testbed.hpp"

#include <gtest/gtest.h>

#include "scenarios/testing.hpp"

namespace hexi::validation {
namespace {

Cluster cluster_from(const std::string& text) {
  auto json = parse_json_text(text, "cluster.json");
  auto c = Cluster::from_json(*json, "cluster.json", testing::shipped_gpus());
  if (!c) throw std::runtime_error(c.error().message);
  return std::move(*c);
}

TEST(Testbed, LayoutOfTheShippedThreeMachineCluster) {
  auto c = load_cluster("testbed-cpu-3m", testing::shipped_gpus());
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto t = testbed_layout(*c);
  ASSERT_TRUE(t.ok()) << t.error().message;
  ASSERT_EQ(t->machines.size(), 3u);
  EXPECT_EQ(t->machines[0].ns, "hxtb-m0");
  EXPECT_EQ(t->machines[2].ip, "10.77.0.12");
  EXPECT_EQ(t->machines[2].port, "hxtb2");
  EXPECT_DOUBLE_EQ(t->machines[0].rate_bps, 1e9);  // 0.125 GB/s
  EXPECT_DOUBLE_EQ(t->machines[2].rate_bps, 2e8);  // 0.025 GB/s
  EXPECT_EQ(t->machines[1].devices, (std::vector<int>{2, 3}));
  ASSERT_EQ(t->ranks.size(), 6u);
  EXPECT_DOUBLE_EQ(t->ranks[0].share, 0.4);
  EXPECT_DOUBLE_EQ(t->ranks[5].share, 0.2);
  EXPECT_NEAR(t->cores, 1.6, 1e-12);
  ASSERT_EQ(t->flows.size(), 6u);                                     // every ordered machine pair
  for (const auto& f : t->flows) EXPECT_NEAR(f.delay_us, 250, 1e-9);  // nic + switch + nic
  const auto cmds = testbed_up_commands(*t, "/x/hexisim-nfdelay");
  auto has = [&](const std::string& word) {
    for (const auto& cmd : cmds) {
      for (const auto& w : cmd) {
        if (w == word) return true;
      }
    }
    return false;
  };
  EXPECT_TRUE(has("200000000bit"));
  EXPECT_TRUE(has("1000000000bit"));
  EXPECT_TRUE(has("10.77.0.10,10.77.0.12=250.0"));
  EXPECT_EQ(cmds.back()[cmds.back().size() - 8], "/x/hexisim-nfdelay");  // then queue 0, 6 flows
}

TEST(Testbed, RefusesWhatItCannotBuild) {
  auto gpu = testbed_layout(cluster_from(
      R"({"version": 1, "name": "g", "network": {"nic_GBps": 1},
          "machines": [{"name": "m0", "gpu": "A100", "gpus": 2}]})"));
  ASSERT_FALSE(gpu.ok());
  EXPECT_NE(gpu.error().message.find("device 0 is a A100"), std::string::npos)
      << gpu.error().message;
  auto over = testbed_layout(cluster_from(
      R"({"version": 1, "name": "o", "network": {"nic_GBps": 1},
          "machines": [{"name": "m0", "gpu": "cpu-50", "gpus": 4}]})"));
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.error().message.find("sum to 2.00 cores"), std::string::npos)
      << over.error().message;
  auto name = testbed_layout(cluster_from(
      R"({"version": 1, "name": "n", "network": {"nic_GBps": 1},
          "machines": [{"name": "a machine", "gpu": "cpu-20", "gpus": 1}]})"));
  ASSERT_FALSE(name.ok());
  EXPECT_NE(name.error().message.find("\"a machine\""), std::string::npos) << name.error().message;
}

}  // namespace
}  // namespace hexi::validation
