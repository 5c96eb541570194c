#include "topologies/cluster_gen.hpp"

#include <gtest/gtest.h>

#include "topologies/cluster.hpp"
#include "topologies/testing.hpp"

namespace hexi {
namespace {

TEST(ClusterGen, ParsesMixSpecs) {
  auto mix = parse_mix("A100:4x8,rtx4090:8x8", testing::shipped_gpus());
  ASSERT_TRUE(mix.ok()) << mix.error().message;
  ASSERT_EQ(mix->size(), 2u);
  EXPECT_EQ((*mix)[0].gpu, "A100-SXM-80GB");
  EXPECT_EQ((*mix)[1].gpu, "RTX4090");
  EXPECT_EQ((*mix)[1].machines, 8);
  EXPECT_EQ((*mix)[1].gpus_per_machine, 8);
}

TEST(ClusterGen, RejectsBadMixSpecs) {
  for (const char* spec :
       {"", "A100", "A100:4", "A100:4x", "A100:0x8", "A100:4x8,", "GTX1080:1x8", "A100:-1x8"}) {
    auto mix = parse_mix(spec, testing::shipped_gpus());
    EXPECT_FALSE(mix.ok()) << spec;
    if (!mix.ok()) {
      EXPECT_EQ(mix.error().kind, ErrorKind::kBadInput);
    }
  }
}

// Found by tests/fuzz (fuzz_mix): 410 102 524 x 42 GPUs overflowed an int while the mix was
// generated (undefined behaviour). A mix over the cluster limit is bad input up front; the
// limit itself still generates a cluster that loads.
TEST(ClusterGen, RefusesMixesOverTheClusterLimit) {
  for (const char* spec : {"A10:410102524x42", "A100:2147483647x1024", "A100:16384x8,A10:1x1"}) {
    auto mix = parse_mix(spec, testing::shipped_gpus());
    ASSERT_FALSE(mix.ok()) << spec;
    EXPECT_EQ(mix.error().kind, ErrorKind::kBadInput);
    EXPECT_NE(mix.error().message.find("a cluster has at most 131072"), std::string::npos)
        << mix.error().message;
  }
  auto mix = parse_mix("A100:16384x8", testing::shipped_gpus());
  ASSERT_TRUE(mix.ok()) << mix.error().message;
  auto c = Cluster::from_json(generate_cluster_json(*mix, FabricOptions{}), "gen",
                              testing::shipped_gpus());
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->num_devices(), kMaxClusterGpus);
}

// Found by tests/fuzz (fuzz_mix, in CI): a GPU in two entries of one mix named both
// machines after itself, and the cluster did not load ("A100-SXM-80GB" used twice). A GPU
// in several entries is a real mix (two machine shapes of one GPU); its machines are numbered.
TEST(ClusterGen, OneGpuInSeveralEntriesGetsDistinctMachineNames) {
  auto mix = parse_mix("A100:1x8,A10:1x1,A100:1x4,A100:2x2", testing::shipped_gpus());
  ASSERT_TRUE(mix.ok()) << mix.error().message;
  auto c = Cluster::from_json(generate_cluster_json(*mix, FabricOptions{}), "gen",
                              testing::shipped_gpus());
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->num_devices(), 8 + 1 + 4 + 2 * 2);
  std::vector<std::string> names;
  for (const Machine& m : c->machines()) names.push_back(m.name);
  EXPECT_EQ(names, (std::vector<std::string>{"A100-SXM-80GB-0", "A10", "A100-SXM-80GB-1",
                                             "A100-SXM-80GB-2", "A100-SXM-80GB-3"}));
}

TEST(ClusterGen, GeneratesLargeClusters) {
  // 10 240 GPUs of four types, 16 machines per leaf with 2:1 oversubscription.
  auto mix = parse_mix("H100:320x8,A100:320x8,RTX4090:320x8,L40S:320x8", testing::shipped_gpus());
  ASSERT_TRUE(mix.ok());
  FabricOptions fabric;
  fabric.oversubscription = 2;
  auto c = Cluster::from_json(generate_cluster_json(*mix, fabric), "gen", testing::shipped_gpus());
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->num_devices(), 10240);
  EXPECT_EQ(c->leaves().size(), 80u);
  EXPECT_EQ(c->name(), "mix-10240-H100-SXMx2560-A100-SXM-80GBx2560-RTX4090x2560-L40Sx2560");
  // Uplink of a 16-machine leaf at 25 GB/s per NIC and 2:1 oversubscription: 200 GB/s.
  EXPECT_DOUBLE_EQ(c->leaves()[0].uplink_Bps, 200e9);
  EXPECT_DOUBLE_EQ(c->bandwidth(0, 10239), 25e9);
}

}  // namespace
}  // namespace hexi
