// The Megatron-LM export: uniform plans become pretrain_gpt.py arguments that exist in the pinned
// Megatron-LM (every flag checked against studies/megatron_flags.txt), with the plan's
// placement kept where torchrun's nodes can be its machines; uneven layer splits become a
// pipeline layout; asymmetric plans are refused, each asymmetry named, with hexisim's own
// launch instead.
#include "studies/megatron.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "topologies/paths.hpp"

namespace hexi {
namespace {

const std::set<std::string>& megatron_flags() {
  static const std::set<std::string> flags = [] {
    std::set<std::string> out;
    std::ifstream in(data_root() / "studies" / "megatron_flags.txt");
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line[0] != '#') out.insert(line);
    }
    return out;
  }();
  return flags;
}

// A scenario of 2 machines of 8 A800 and Llama-2 7B (32 layers, 32 heads), global batch 16.
Scenario a800_scenario() {
  auto catalogs = load_shipped_catalogs();
  auto s = load_scenario("a800-2x8-llama2-7b", catalogs->gpus, catalogs->models);
  EXPECT_TRUE(s.ok());
  s->training.global_batch = 16;
  s->training.micro_batch = 1;
  s->training.zero_stage = 1;
  s->training.precision = "bf16";
  s->training.recompute = Recompute::kNone;
  return *s;
}

Plan plan_of(const std::string& text) {
  auto p = plan_from_json(*parse_json_text(text, "plan"), "plan");
  EXPECT_TRUE(p.ok()) << p.error().message;
  return *p;
}

std::string value_of(const MegatronExport& e, const std::string& flag) {
  for (const auto& [f, v] : e.args) {
    if (f == flag) return v.empty() ? "(switch)" : v;
  }
  return "";
}

void expect_known_flags(const MegatronExport& e) {
  ASSERT_GT(megatron_flags().size(), 500u) << "megatron_flags.txt not found under " << data_root();
  for (const auto& [flag, value] : e.args) {
    EXPECT_TRUE(megatron_flags().count(flag)) << flag << " is not a Megatron-LM flag";
  }
}

// TP 4, 2 stages, 2 pipelines; pipeline d's stage s on machine s, TP group d: Megatron-LM's
// rank order (TP, DP, PP) puts ranks 0-7 (stage 0 of both) on node 0.
TEST(Megatron, AUniformPlanKeepsItsPlacement) {
  const Scenario sc = a800_scenario();
  const Plan plan = plan_of(R"({"version": 1, "pipelines": [
    {"batch": 8, "stages": [{"devices": [0, 1, 2, 3], "layers": [0, 16]},
                            {"devices": [8, 9, 10, 11], "layers": [16, 32]}]},
    {"batch": 8, "stages": [{"devices": [4, 5, 6, 7], "layers": [0, 16]},
                            {"devices": [12, 13, 14, 15], "layers": [16, 32]}]}]})");
  const MegatronExport e = export_megatron(sc, plan, "s.json", "p.json");
  ASSERT_TRUE(e.runs) << (e.reasons.empty() ? "" : e.reasons.front());
  EXPECT_EQ(e.tp, 4);
  EXPECT_EQ(e.pp, 2);
  EXPECT_EQ(e.dp, 2);
  expect_known_flags(e);
  EXPECT_EQ(value_of(e, "--tensor-model-parallel-size"), "4");
  EXPECT_EQ(value_of(e, "--pipeline-model-parallel-size"), "2");
  EXPECT_EQ(value_of(e, "--global-batch-size"), "16");
  EXPECT_EQ(value_of(e, "--micro-batch-size"), "1");
  EXPECT_EQ(value_of(e, "--num-layers"), "32");
  EXPECT_EQ(value_of(e, "--use-distributed-optimizer"), "(switch)");
  EXPECT_EQ(value_of(e, "--bf16"), "(switch)");
  EXPECT_EQ(value_of(e, "--pipeline-model-parallel-layout"), "");  // an even split
  ASSERT_TRUE(e.placement_kept) << e.placement_note;
  ASSERT_EQ(e.nodes.size(), 2u);
  EXPECT_EQ(e.nodes[0].gpus, "0,1,2,3,4,5,6,7");
  EXPECT_NE(e.nodes[0].machine, e.nodes[1].machine);
  EXPECT_NE(e.launch.find("torchrun --nnodes 2 --nproc-per-node 8"), std::string::npos) << e.launch;
  // A pipeline per machine: Megatron-LM's nodes would mix the machines.
  const Plan by_machine = plan_of(R"({"version": 1, "pipelines": [
    {"batch": 8, "stages": [{"devices": [0, 1, 2, 3], "layers": [0, 16]},
                            {"devices": [4, 5, 6, 7], "layers": [16, 32]}]},
    {"batch": 8, "stages": [{"devices": [8, 9, 10, 11], "layers": [0, 16]},
                            {"devices": [12, 13, 14, 15], "layers": [16, 32]}]}]})");
  const MegatronExport m = export_megatron(sc, by_machine, "s.json", "p.json");
  EXPECT_TRUE(m.runs);
  EXPECT_FALSE(m.placement_kept);
  EXPECT_NE(m.placement_note.find("the placement Megatron-LM's"), std::string::npos)
      << m.placement_note;
}

// A mixture of experts: the experts' flags, each expert split over the TP group (expert TP =
// TP, no expert parallelism) with the all-gather dispatcher, as the cost model assumes.
TEST(Megatron, AMixtureOfExpertsNamesItsExperts) {
  Scenario sc = a800_scenario();
  sc.model.moe = {8, 2, 1024};
  const Plan plan = plan_of(R"({"version": 1, "pipelines": [
    {"batch": 16, "stages": [{"devices": [0, 1, 2, 3], "layers": [0, 16]},
                             {"devices": [8, 9, 10, 11], "layers": [16, 32]}]}]})");
  const MegatronExport e = export_megatron(sc, plan, "s.json", "p.json");
  ASSERT_TRUE(e.runs) << (e.reasons.empty() ? "" : e.reasons.front());
  expect_known_flags(e);
  EXPECT_EQ(value_of(e, "--num-experts"), "8");
  EXPECT_EQ(value_of(e, "--moe-router-topk"), "2");
  EXPECT_EQ(value_of(e, "--moe-ffn-hidden-size"), "11008");
  EXPECT_EQ(value_of(e, "--moe-shared-expert-intermediate-size"), "1024");
  EXPECT_EQ(value_of(e, "--expert-tensor-parallel-size"), "4");
  EXPECT_EQ(value_of(e, "--expert-model-parallel-size"), "1");
  EXPECT_EQ(value_of(e, "--moe-token-dispatcher-type"), "allgather");
  // A dense model names none.
  EXPECT_EQ(value_of(export_megatron(a800_scenario(), plan, "s.json", "p.json"), "--num-experts"),
            "");
  // Whole experts over the TP group: expert parallelism of the TP degree, evenly only.
  Plan whole = plan;
  for (Stage& s : whole.pipelines[0].stages) s.expert_split = {2, 2, 2, 2};
  const MegatronExport ep = export_megatron(sc, whole, "s.json", "p.json");
  ASSERT_TRUE(ep.runs);
  EXPECT_EQ(value_of(ep, "--expert-model-parallel-size"), "4");
  EXPECT_EQ(value_of(ep, "--expert-tensor-parallel-size"), "1");
  whole.pipelines[0].stages[1].expert_split = {3, 1, 2, 2};
  const MegatronExport uneven = export_megatron(sc, whole, "s.json", "p.json");
  EXPECT_FALSE(uneven.runs);
  ASSERT_FALSE(uneven.reasons.empty());
  EXPECT_NE(uneven.reasons.front().find("gives its ranks 3, 1, 2, 2 experts"), std::string::npos)
      << uneven.reasons.front();
}

TEST(Megatron, AnUnevenLayerSplitIsAPipelineLayout) {
  const Scenario sc = a800_scenario();
  const Plan plan = plan_of(R"({"version": 1, "pipelines": [
    {"batch": 16, "stages": [{"devices": [0, 1], "layers": [0, 10]},
                             {"devices": [2, 3], "layers": [10, 22]},
                             {"devices": [4, 5], "layers": [22, 32]}]}]})");
  const MegatronExport e = export_megatron(sc, plan, "s.json", "p.json");
  ASSERT_TRUE(e.runs);
  expect_known_flags(e);
  EXPECT_EQ(value_of(e, "--pipeline-model-parallel-layout"), "\"Et*10|t*12|t*10L\"");
  EXPECT_EQ(e.pp, 3);
  ASSERT_TRUE(e.placement_kept) << e.placement_note;  // 6 of one machine's 8 GPUs
  ASSERT_EQ(e.nodes.size(), 1u);
  EXPECT_EQ(e.nodes[0].gpus, "0,1,2,3,4,5");
  EXPECT_NE(e.launch.find("--nnodes 1 --nproc-per-node 6"), std::string::npos) << e.launch;
}

TEST(Megatron, AsymmetricPlansAreRefusedWithEachAsymmetryNamed) {
  const Scenario sc = a800_scenario();
  const Plan plan = plan_of(R"({"version": 1, "pipelines": [
    {"batch": 10, "stages": [{"devices": [0, 1], "layers": [0, 16]},
                             {"devices": [2, 3], "layers": [16, 32], "recompute": "full"}]},
    {"batch": 6, "stages": [{"devices": [8], "layers": [0, 12]},
                            {"devices": [9], "layers": [12, 20]},
                            {"devices": [10], "layers": [20, 32]}]}]})");
  const MegatronExport e = export_megatron(sc, plan, "s.json", "p.json");
  EXPECT_FALSE(e.runs);
  std::string all;
  for (const auto& r : e.reasons) all += r + "\n";
  for (const char* what : {"TP degrees 1, 2", "pipelines of 2, 3 stages", "take 6, 10 sequences",
                           "split the layers differently", "recompute differently"}) {
    EXPECT_NE(all.find(what), std::string::npos) << what << "\n" << all;
  }
  EXPECT_TRUE(e.args.empty());
  EXPECT_NE(
      e.launch.find("mpirun -np 7 --rankfile rankfile.txt hexisim train s.json --plan p.json"),
      std::string::npos)
      << e.launch;
  EXPECT_NE(e.rankfile.find("rank 4="), std::string::npos) << e.rankfile;
  EXPECT_NE(e.rankfile.find(" slot=0\n"), std::string::npos) << e.rankfile;
}

}  // namespace
}  // namespace hexi
