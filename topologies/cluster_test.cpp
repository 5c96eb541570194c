// Cluster loading and the derived pairwise bandwidth / latency (bottleneck along the
// real path), checked with numbers one can work out by hand.
#include "topologies/cluster.hpp"

#include <gtest/gtest.h>

#include "topologies/cluster_matrices.hpp"
#include "topologies/paths.hpp"
#include "topologies/testing.hpp"

namespace hexi {
namespace {

Result<Cluster> parse(const std::string& text) {
  auto json = parse_json_text(text, "inline.json");
  if (!json) return json.error();
  return Cluster::from_json(*json, "inline.json", testing::shipped_gpus());
}

// Two 4-GPU NVSwitch machines (A100: 300 GB/s NVLink, 32 GB/s PCIe) and one 2-GPU
// host-staged machine split over two sockets, two leaves of two machines max.
const char* kCluster = R"({
  "version": 1, "name": "t",
  "network": {"nic_GBps": 25, "machines_per_leaf": 2, "oversubscription": 4,
              "latency_us": {"nvswitch": 2, "nic": 5, "switch": 1, "socket": 3, "host": 10}},
  "machines": [
    {"name": "a", "gpu": "A100", "gpus": 4, "repeat": 2},
    {"name": "c", "gpu": "RTX4090", "gpus": 2, "sockets": 2, "socket_GBps": 10, "nic_GBps": 12.5}
  ]})";

TEST(Cluster, DevicesAndMachines) {
  auto c = parse(kCluster);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->num_devices(), 10);
  ASSERT_EQ(c->machines().size(), 3u);
  EXPECT_EQ(c->machines()[0].name, "a-0");
  EXPECT_EQ(c->machines()[1].name, "a-1");
  EXPECT_EQ(c->machines()[2].name, "c");
  EXPECT_EQ(c->machines()[1].first_device, 4);
  EXPECT_EQ(c->devices()[9].machine, 2);
  EXPECT_EQ(c->leaves().size(), 2u);
  EXPECT_DOUBLE_EQ(c->peak_flops(), 8 * 312e12 + 2 * 165.2e12);
  EXPECT_DOUBLE_EQ(c->memory_bytes(), (8 * 80 + 2 * 24) * 1073741824.0);
}

TEST(Cluster, PairwiseBandwidthFollowsThePath) {
  auto c = parse(kCluster);
  ASSERT_TRUE(c.ok()) << c.error().message;
  // Same NVSwitch machine: the NVLink rate, one NVSwitch hop.
  EXPECT_DOUBLE_EQ(c->bandwidth(0, 3), 300e9);
  EXPECT_DOUBLE_EQ(c->latency(0, 3), 2e-6);
  EXPECT_EQ(c->link_class(0, 3), LinkClass::kNvSwitch);
  // Same leaf, other machine: min(PCIe 32, NIC 25, NIC 25) = 25 GB/s; NIC + switch + NIC.
  EXPECT_DOUBLE_EQ(c->bandwidth(0, 4), 25e9);
  EXPECT_DOUBLE_EQ(c->latency(0, 4), 5e-6 + 1e-6 + 5e-6);
  EXPECT_EQ(c->link_class(0, 4), LinkClass::kNetworkLeaf);
  // Across the spine: leaf0 uplink = (25 + 25) / 4 = 12.5; leaf1 uplink = 12.5 / 4 = 3.125.
  EXPECT_DOUBLE_EQ(c->bandwidth(0, 8), 3.125e9);
  EXPECT_DOUBLE_EQ(c->latency(0, 8), 5e-6 + 3 * 1e-6 + 5e-6);
  EXPECT_EQ(c->link_class(0, 8), LinkClass::kNetworkSpine);
  // Host-staged pair split over two sockets: min(16 GB/s staged, 10 GB/s inter-socket).
  EXPECT_DOUBLE_EQ(c->bandwidth(8, 9), 10e9);
  EXPECT_DOUBLE_EQ(c->latency(8, 9), 10e-6 + 3e-6);
  EXPECT_EQ(c->link_class(8, 9), LinkClass::kHost);
  // Symmetric matrix with a zero diagonal.
  Eigen::MatrixXd bw = bandwidth_matrix(*c);
  EXPECT_EQ(bw.rows(), 10);
  EXPECT_TRUE(bw.isApprox(bw.transpose()));
  EXPECT_DOUBLE_EQ(bw(5, 5), 0);
  EXPECT_DOUBLE_EQ(bw(0, 8), 3.125e9);
  EXPECT_DOUBLE_EQ(latency_matrix(*c)(0, 4), 11e-6);
}

TEST(Cluster, OverridesReplaceThePath) {
  std::string text = kCluster;
  text.insert(text.rfind('}'), R"(, "overrides": [{"devices": [0, 9], "GBps": 1, "latency_us": 100},
                                              {"machines": ["a-1", "c"], "GBps": 2, "latency_us": 50}])");
  auto c = parse(text);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_DOUBLE_EQ(c->bandwidth(0, 9), 1e9);
  EXPECT_DOUBLE_EQ(c->latency(9, 0), 100e-6);
  EXPECT_DOUBLE_EQ(c->bandwidth(5, 8), 2e9);
  EXPECT_EQ(c->link_class(5, 8), LinkClass::kOverride);
  EXPECT_DOUBLE_EQ(c->bandwidth(0, 8), 3.125e9);  // untouched pair
}

TEST(Cluster, DisconnectedPartsAreReported) {
  std::string text = kCluster;
  text.replace(text.find("\"oversubscription\": 4"), 21, "\"spine\": false");
  auto c = parse(text);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->connected_parts().size(), 2u);
  EXPECT_DOUBLE_EQ(c->bandwidth(0, 8), 0);
  EXPECT_DOUBLE_EQ(c->bandwidth(0, 4), 25e9);
}

struct BadCase {
  const char* what;
  std::string from, to;  // replace `from` in kCluster by `to`
  const char* expected;  // substring of the message
};

TEST(Cluster, BadInputNamesFilePathAndExpectation) {
  const BadCase cases[] = {
      {"unknown GPU", "\"gpu\": \"RTX4090\"", "\"gpu\": \"GTX1080\"",
       "inline.json: /machines/1/gpu: expected a GPU type from the catalog"},
      {"negative NIC", "\"nic_GBps\": 12.5", "\"nic_GBps\": -1",
       "inline.json: /machines/1/nic_GBps: expected a number in [1e-06, 1e+06], got -1"},
      {"zero NIC", "\"nic_GBps\": 25", "\"nic_GBps\": 0",
       "inline.json: /network/nic_GBps: expected a number in [1e-06, 1e+06], got 0"},
      // A denormal bandwidth made every time infinite and every estimate "fit".
      {"denormal NIC", "\"nic_GBps\": 25", "\"nic_GBps\": 1e-320",
       "inline.json: /network/nic_GBps: expected a number in [1e-06, 1e+06]"},
      {"endless latency", "\"nic\": 5", "\"nic\": 1e300",
       "inline.json: /network/latency_us/nic: expected a number in [1e-06, 1e+07]"},
      // 2^20 machines x 1 024 GPUs is within each field's range but not buildable.
      {"2^30 GPUs", "\"gpus\": 4, \"repeat\": 2", "\"gpus\": 1024, \"repeat\": 1048576",
       "inline.json: /machines/0: the cluster would have 1073741824 GPUs or more; hexisim "
       "models at most 131072"},
      {"missing gpus", "\"gpus\": 2, ", "",
       "inline.json: /machines/1: missing required field \"gpus\""},
      {"zero gpus", "\"gpus\": 4", "\"gpus\": 0",
       "inline.json: /machines/0/gpus: expected an integer in [1, 1024], got 0"},
      {"typo", "\"sockets\": 2", "\"socket\": 2",
       "inline.json: /machines/1: unknown field \"socket\""},
      {"bad kind", "\"sockets\": 2", "\"intra\": {\"kind\": \"infiniband\"}",
       "inline.json: /machines/1/intra/kind: expected one of nvswitch"},
      {"version", "\"version\": 1", "\"version\": 7",
       "inline.json: /version: expected format version 1, got 7"},
  };
  for (const auto& bc : cases) {
    std::string text = kCluster;
    auto at = text.find(bc.from);
    ASSERT_NE(at, std::string::npos) << bc.what;
    text.replace(at, bc.from.size(), bc.to);
    auto c = parse(text);
    ASSERT_FALSE(c.ok()) << bc.what;
    EXPECT_EQ(c.error().kind, ErrorKind::kBadInput) << bc.what;
    EXPECT_NE(c.error().message.find(bc.expected), std::string::npos)
        << bc.what << ": " << c.error().message;
  }
}

TEST(Cluster, BadOverrides) {
  for (auto [override_text, expected] : std::vector<std::pair<std::string, std::string>>{
           {R"({"devices": [0, 10], "GBps": 1, "latency_us": 1})",
            "/overrides/0/devices/1: expected an integer in [0, 9], got 10"},
           {R"({"devices": [3, 3], "GBps": 1, "latency_us": 1})",
            "/overrides/0/devices: expected two different devices"},
           {R"({"machines": ["a-0", "zz"], "GBps": 1, "latency_us": 1})",
            "/overrides/0/machines/1: expected the name of a machine"},
           {R"({"devices": [0, 1], "GBps": 0, "latency_us": 1})",
            "/overrides/0/GBps: expected a number in [1e-06, 1e+06], got 0"}}) {
    std::string text = kCluster;
    text.insert(text.rfind('}'), ", \"overrides\": [" + override_text + "]");
    auto c = parse(text);
    ASSERT_FALSE(c.ok()) << override_text;
    EXPECT_NE(c.error().message.find(expected), std::string::npos) << c.error().message;
  }
}

TEST(Cluster, ShippedClustersLoad) {
  const std::vector<std::pair<std::string, int>> expected = {
      {"hexiscale-setting1", 40}, {"hexiscale-setting2", 32}, {"hexiscale-setting3", 56},
      {"a800-pcie-2x8", 16},      {"a800-pcie-4x8", 32},      {"testbed-h100-a100-16", 16},
      {"mix-128-4types", 128},    {"mix-1024-4types", 1024}};
  for (const auto& [name, gpus] : expected) {
    auto c = Cluster::load(data_root() / "topologies/clusters" / (name + ".json"),
                           testing::shipped_gpus());
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_EQ(c->num_devices(), gpus) << name;
    EXPECT_EQ(c->connected_parts().size(), 1u) << name;
  }
}

}  // namespace
}  // namespace hexi
