// A scenario asked for in parts: made without a file, or a shipped one with parts replaced;
// missing, clashing and misplaced parts named by their flags.
#include "scenarios/question.hpp"

#include <gtest/gtest.h>

#include "scenarios/scenario.hpp"

namespace hexi {
namespace {

const ShippedCatalogs& asked_catalogs() {
  static const ShippedCatalogs c = *load_shipped_catalogs();
  return c;
}

Result<Scenario> load_asked(const ScenarioQuestion& q) {
  auto asked = ask_scenario(q, asked_catalogs().gpus);
  if (!asked) return asked.error();
  return scenario_from_json(asked->json, asked->file.empty() ? "<command line>" : asked->file,
                            asked_catalogs().gpus, asked_catalogs().models);
}

std::string asked_error(const ScenarioQuestion& q) {
  auto s = load_asked(q);
  return s ? "" : s.error().message;
}

TEST(ScenarioQuestion, AMixAndAModelMakeAScenario) {
  ScenarioQuestion q;
  q.mix = "A100:2x8,RTX4090:2x8";
  q.nic_GBps = 1.25;
  q.transport = "tcp";
  q.model = "llama2-13b";
  q.global_batch = 128;
  q.micro_batch = 1;
  q.seq_len = 4096;
  auto s = load_asked(q);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->cluster.num_devices(), 32);
  EXPECT_EQ(s->cluster.network_transport(), Transport::kTcp);
  EXPECT_EQ(s->model.name, "llama2-13b");
  EXPECT_EQ(s->training.global_batch, 128);
  EXPECT_EQ(s->training.seq_len, 4096);
  EXPECT_EQ(s->name, "mix-32-A100-SXM-80GBx16-RTX4090x16-llama2-13b");
  auto again = ask_scenario(q, asked_catalogs().gpus);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(dump_json(again->json), dump_json(ask_scenario(q, asked_catalogs().gpus)->json));
}

TEST(ScenarioQuestion, PartsReplaceTheBaseScenarios) {
  ScenarioQuestion q;
  q.base = "hexiscale-setting1-llama2-7b";
  const Scenario base = *load_asked(q);
  EXPECT_FALSE(q.any_part());
  q.global_batch = 2 * base.training.global_batch;
  q.model = "llama2-13b";
  auto s = load_asked(q);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->training.global_batch, 2 * base.training.global_batch);
  EXPECT_EQ(s->training.seq_len, base.training.seq_len);
  EXPECT_EQ(s->model.name, "llama2-13b");
  EXPECT_EQ(s->cluster.num_devices(), base.cluster.num_devices());
  EXPECT_EQ(s->name, base.name + "-asked");
}

TEST(ScenarioQuestion, MissingClashingAndMisplacedPartsNameTheirFlags) {
  ScenarioQuestion q;
  EXPECT_NE(asked_error(q).find("give a SCENARIO"), std::string::npos) << asked_error(q);
  q.mix = "A100:1x8";
  EXPECT_NE(asked_error(q).find("or --model to ask"), std::string::npos) << asked_error(q);
  q.model = "llama2-7b";
  q.cluster = "hexiscale-setting1";
  EXPECT_NE(asked_error(q).find("--mix and --cluster"), std::string::npos) << asked_error(q);
  q.mix.clear();
  q.nic_GBps = 100;
  EXPECT_NE(asked_error(q).find("--nic-GBps describes the network of a generated cluster"),
            std::string::npos)
      << asked_error(q);
  q.nic_GBps.reset();
  EXPECT_EQ(asked_error(q), "");
  q.cluster.clear();
  q.mix = "B200X:1x8";
  EXPECT_EQ(asked_error(q).rfind("--mix: ", 0), 0u) << asked_error(q);
  q.mix = "A100:1x8";
  q.transport = "smoke";
  EXPECT_NE(asked_error(q).find("/network/transport"), std::string::npos) << asked_error(q);
  q.transport.clear();
  q.global_batch = 7;
  q.micro_batch = 2;
  EXPECT_NE(asked_error(q).find("/training/global_batch"), std::string::npos) << asked_error(q);
  q.global_batch = 8;
  q.model = "no-such-model";
  EXPECT_NE(asked_error(q).find("/model"), std::string::npos) << asked_error(q);
  q.model = "llama2-7b";
  q.base = "no-such-scenario";
  EXPECT_NE(asked_error(q).find("unknown scenario"), std::string::npos) << asked_error(q);
}

}  // namespace
}  // namespace hexi
