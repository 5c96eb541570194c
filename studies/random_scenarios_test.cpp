#include "studies/random_scenarios.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "scenarios/testing.hpp"

namespace hexi {
namespace {

using testing::shipped_gpus;
using testing::shipped_models;

Json scenario_json(std::uint64_t seed, const RandomScenarioLimits& limits = {}) {
  auto json = random_user_scenario_json(seed, limits, shipped_gpus(), shipped_models());
  if (!json) throw std::runtime_error(json.error().message);
  return std::move(*json);
}

Scenario scenario(std::uint64_t seed, const RandomScenarioLimits& limits = {}) {
  auto sc = random_user_scenario(seed, limits, shipped_gpus(), shipped_models());
  if (!sc) throw std::runtime_error(sc.error().message);
  return std::move(*sc);
}

TEST(RandomScenarios, SameSeedSameFileBytes) {
  for (std::uint64_t seed : {0ull, 1ull, 17ull, 123456789ull, 0xfedcba9876543210ull}) {
    EXPECT_EQ(dump_json(scenario_json(seed), 2), dump_json(scenario_json(seed), 2)) << seed;
  }
  std::set<std::string> clusters;
  for (std::uint64_t seed = 1; seed <= 50; ++seed)
    clusters.insert(dump_json(scenario_json(seed)["cluster"]["machines"]));
  EXPECT_GE(clusters.size(), 45u);  // seeds give different machines, bar a rare repeat
}

TEST(RandomScenarios, SeedOneIsPinned) {
  // What seed 1 draws with the default limits and the shipped catalogs, from splitmix64 by
  // integer arithmetic: the same on every platform. It moves only when the generator, the GPU
  // catalog's order or kRandomScenarioModels change (and with it the suite's seeds).
  const Scenario sc = scenario(1);
  EXPECT_EQ(sc.name, "random-1");
  EXPECT_EQ(cluster_mix(sc.cluster),
            "RTX4090:3x4,H200:2x1,H100-SXM:1x8,H100-SXM:1x2,A100-PCIe-40GB:5x4");
  EXPECT_EQ(to_string(sc.cluster.network_transport()), "rdma");
  EXPECT_EQ(sc.model.name, "llama-30b");
  EXPECT_EQ(sc.training.global_batch, 512);
  EXPECT_EQ(sc.training.seq_len, 2048);  // llama-30b's max_seq
}

// Every property a scenario of `limits` must have.
void expect_within(const Scenario& sc, std::uint64_t seed, const RandomScenarioLimits& limits) {
  SCOPED_TRACE("seed " + std::to_string(seed) + ": " + sc.description);
  EXPECT_EQ(sc.name, "random-" + std::to_string(seed));
  const Cluster& c = sc.cluster;
  EXPECT_GE(c.num_devices(), limits.min_gpus);
  EXPECT_LE(c.num_devices(), limits.max_gpus);
  // gpu_types() holds each type once, as the loader met it: 2 to 4 distinct names, no CPU.
  std::set<std::string> names;
  for (const GpuSpec& g : c.gpu_types()) {
    names.insert(g.name);
    EXPECT_NE(g.architecture, Architecture::kCpu) << g.name;
  }
  EXPECT_EQ(names.size(), c.gpu_types().size());
  EXPECT_GE(names.size(), 2u);
  EXPECT_LE(names.size(), 4u);
  for (const Machine& m : c.machines()) {
    EXPECT_TRUE(m.num_gpus == 1 || m.num_gpus == 2 || m.num_gpus == 4 || m.num_gpus == 8) << m.name;
    EXPECT_EQ(m.nic_Bps, c.machines()[0].nic_Bps) << m.name;
  }
  EXPECT_EQ(c.connected_parts().size(), 1u);
  const double nic_GBps = c.machines()[0].nic_Bps / 1e9;
  if (c.network_transport() == Transport::kTcp) {
    EXPECT_GE(nic_GBps, 0.5);
    EXPECT_LE(nic_GBps, 3.0);
  } else {
    EXPECT_EQ(c.network_transport(), Transport::kRdma);
    EXPECT_GE(nic_GBps, 12.5);
    EXPECT_LE(nic_GBps, 25.0);
  }
  const auto& models = kRandomScenarioModels;
  EXPECT_NE(std::find(std::begin(models), std::end(models), sc.model.name), std::end(models));
  EXPECT_LE(sc.model.params(), limits.max_model_params);
  const int b = sc.training.global_batch;
  EXPECT_TRUE(b == 32 || b == 64 || b == 128 || b == 256 || b == 512) << b;
  EXPECT_LE(b, limits.max_global_batch);
  EXPECT_TRUE(sc.training.seq_len == 2048 || sc.training.seq_len == 4096);
  EXPECT_LE(sc.training.seq_len, sc.model.max_seq);
  EXPECT_EQ(sc.training.micro_batch, 1);
  EXPECT_EQ(sc.training.zero_stage, 1);
  EXPECT_EQ(sc.training.recompute, Recompute::kSelective);
}

TEST(RandomScenarios, LimitsHoldOverManySeeds) {
  RandomScenarioLimits small;
  small.min_gpus = 8;
  small.max_gpus = 24;
  small.max_model_params = 14e9;
  small.max_global_batch = 128;
  RandomScenarioLimits tight;  // four types of 8-GPU machines cannot fit in 5 GPUs
  tight.min_gpus = 2;
  tight.max_gpus = 5;
  for (const RandomScenarioLimits& limits : {RandomScenarioLimits{}, small, tight}) {
    std::set<std::string> transports, models;
    std::set<std::size_t> type_counts;
    std::set<int> sizes;
    for (std::uint64_t seed = 1; seed <= 300; ++seed) {
      const Scenario sc = scenario(seed, limits);
      expect_within(sc, seed, limits);
      transports.insert(std::string(to_string(sc.cluster.network_transport())));
      models.insert(sc.model.name);
      type_counts.insert(sc.cluster.gpu_types().size());
      sizes.insert(sc.cluster.num_devices());
    }
    // Every kind of draw happens over 300 seeds.
    EXPECT_EQ(transports.size(), 2u);
    EXPECT_EQ(type_counts.size(), 3u);  // 2, 3 and 4 types
    EXPECT_GE(*sizes.rbegin() - *sizes.begin(), (limits.max_gpus - limits.min_gpus) / 2);
    std::size_t eligible = 0;
    for (const char* name : kRandomScenarioModels)
      eligible += shipped_models().find(name)->params() <= limits.max_model_params;
    EXPECT_EQ(models.size(), eligible);
  }
}

TEST(RandomScenarios, LimitsThatAllowNothingAreBadInput) {
  auto bad = [](RandomScenarioLimits l) {
    auto r = random_user_scenario_json(1, l, shipped_gpus(), shipped_models());
    return !r.ok() && r.error().kind == ErrorKind::kBadInput;
  };
  RandomScenarioLimits l;
  l.min_gpus = 1;
  EXPECT_TRUE(bad(l));
  l = {};
  l.min_gpus = 40;
  l.max_gpus = 30;
  EXPECT_TRUE(bad(l));
  l = {};
  l.max_model_params = 1e9;  // below Llama-2 7B
  EXPECT_TRUE(bad(l));
  l = {};
  l.max_global_batch = 16;
  EXPECT_TRUE(bad(l));
}

TEST(RandomScenarios, ClusterMixGroupsRunsOfOneTypeAndSize) {
  auto c =
      Cluster::from_json(parse_json_text(R"({"version": 1, "name": "m", "network": {"nic_GBps": 25},
        "machines": [{"gpu": "A100", "gpus": 8, "repeat": 2}, {"gpu": "A100", "gpus": 2},
                     {"name": "r", "gpu": "RTX4090", "gpus": 4, "repeat": 3}]})",
                                         "m.json")
                             .value(),
                         "m.json", shipped_gpus());
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(cluster_mix(*c), "A100-SXM-80GB:2x8,A100-SXM-80GB:1x2,RTX4090:3x4");
}

}  // namespace
}  // namespace hexi
