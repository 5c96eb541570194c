#include "scenarios/scenario.hpp"

#include <gtest/gtest.h>

#include "topologies/paths.hpp"

namespace hexi {
namespace {

struct Catalogs {
  GpuCatalog gpus = *GpuCatalog::load_shipped();
  ModelCatalog models = *ModelCatalog::load_shipped();
};
const Catalogs& cat() {
  static const Catalogs c;
  return c;
}

Result<Scenario> parse(const std::string& text) {
  auto json = parse_json_text(text, "s.json");
  if (!json) return json.error();
  return scenario_from_json(*json, "s.json", cat().gpus, cat().models);
}

TEST(Scenario, EveryShippedScenarioLoads) {
  auto names = shipped_scenarios();
  EXPECT_GE(names.size(), 8u);
  for (const auto& n : names) {
    auto s = load_scenario(n, cat().gpus, cat().models);
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_EQ(s->name, n);
  }
  auto d = load_scenario("hexiscale-setting1-llama2-7b", cat().gpus, cat().models);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->cluster.num_devices(), 40);
  EXPECT_EQ(d->model.name, "llama2-7b");
  ASSERT_TRUE(d->plan.has_value());
}

TEST(Scenario, InlineClusterModelAndDefaults) {
  auto s = parse(R"({"version": 1, "name": "x",
    "cluster": {"version": 1, "name": "c", "network": {"nic_GBps": 10},
                "machines": [{"gpu": "A100", "gpus": 2}]},
    "model": "tiny-llama", "training": {"global_batch": 8, "seq_len": 32}})");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->cluster.num_devices(), 2);
  EXPECT_EQ(s->training.global_batch, 8);
  EXPECT_EQ(s->training.micro_batch, 1);
  EXPECT_EQ(s->training.recompute, Recompute::kSelective);
  EXPECT_EQ(s->scheduler, "hexiscale");
  EXPECT_EQ(s->seed, 1u);
}

TEST(Scenario, BadInput) {
  const std::string head = R"({"version": 1, "name": "x", "cluster": "hexiscale-setting1", )";
  for (auto [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {head + R"("model": "llama9"})", "s.json: /model: expected a model from the catalog"},
           {R"({"version": 1, "name": "x", "cluster": "nowhere", "model": "llama2-7b"})",
            "unknown cluster \"nowhere\""},
           {R"({"version": 1, "name": "x", "cluster": "missing/c.json", "model": "llama2-7b"})",
            "c.json: cannot open file"},
           {head + R"("model": "llama2-7b", "training": {"global_batch": 10, "micro_batch": 4}})",
            "s.json: /training/global_batch: expected a multiple of micro_batch (4), got 10"},
           {head + R"("model": "llama2-7b", "training": {"recompute": "some"}})",
            "s.json: /training/recompute: expected \"none\", \"selective\" or \"full\""},
           {head + R"("model": "llama2-7b", "seed": -1})",
            "s.json: /seed: expected an integer >= 0, got -1"},
           {head + R"("model": "llama2-7b", "profile": "none.json"})",
            "none.json: cannot open file"}}) {
    auto s = parse(text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.error().kind, ErrorKind::kBadInput);
    EXPECT_NE(s.error().message.find(expected), std::string::npos) << s.error().message;
  }
}

TEST(Scenario, UnknownShippedScenarioListsTheKnownOnes) {
  auto s = load_scenario("no-such-scenario", cat().gpus, cat().models);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("hexiscale-setting1-llama2-7b"), std::string::npos);
}

TEST(Scenario, SequenceLongerThanTheModelIsBadInput) {
  auto s = parse(R"({"version": 1, "name": "x", "cluster": "tiny-cpu-2x4", "model": "tiny-llama",
    "training": {"global_batch": 8, "seq_len": 100000}})");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("s.json: /training/seq_len: seq_len 100000 is longer than the "
                                   "model's max_seq"),
            std::string::npos)
      << s.error().message;
}

// ZeRO 2 and 3 load (sequence layouts model them); pipeline plans refuse them by name.
TEST(Scenario, ZeroStagesAboveOneAreForSequenceLayoutsOnly) {
  auto s = parse(R"({"version": 1, "name": "x", "cluster": "tiny-cpu-2x4", "model": "tiny-llama",
    "training": {"global_batch": 8, "seq_len": 32, "zero_stage": 3}})");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->training.zero_stage, 3);
  auto st = check_zero_stage(s->training, "s.json");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(st.error().message.find("s.json: training.zero_stage 3: pipeline plans"),
            std::string::npos)
      << st.error().message;
  s->training.zero_stage = 1;
  EXPECT_TRUE(check_zero_stage(s->training, "s.json").ok());
  auto bad = parse(R"({"version": 1, "name": "x", "cluster": "tiny-cpu-2x4", "model": "tiny-llama",
    "training": {"global_batch": 8, "seq_len": 32, "zero_stage": 4}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("/training/zero_stage"), std::string::npos);
}

TEST(Scenario, RecordsEveryFileItWasReadFrom) {
  auto s = load_scenario("hexiscale-setting1-llama2-7b", cat().gpus, cat().models);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->inputs.size(), 3u);  // scenario, cluster, plan
  EXPECT_EQ(s->inputs[0].filename(), "hexiscale-setting1-llama2-7b.json");
  EXPECT_EQ(s->inputs[1], data_root() / "topologies/clusters/hexiscale-setting1.json");
  EXPECT_EQ(s->inputs[2].filename(), "hexiscale-setting1-llama2-7b-hand.json");
}

// Found by fuzz_scenario: a name longer than the file system allows made
// std::filesystem::exists throw (ENAMETOOLONG) out of the loader.
TEST(Scenario, OverlongNamesAreUnknownNotAnException) {
  const std::string name(5000, 'c');
  auto s =
      parse(R"({"version": 1, "name": "x", "cluster": ")" + name + R"(", "model": "tiny-llama"})");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("unknown cluster"), std::string::npos) << s.error().message;
  auto t = load_scenario(name, cat().gpus, cat().models);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("unknown scenario"), std::string::npos);
}

}  // namespace
}  // namespace hexi
