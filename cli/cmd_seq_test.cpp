// `hexisim seq` end to end: the JSON contract, --out then --layout (the written layout
// evaluates to the same time), determinism, the comparison table, exit codes for bad input.
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "tests/cli_runner.hpp"

namespace hexi::testing {
namespace {

using nlohmann::json;

// A small long-context scenario: 2 machines of 4 GPUs (H100 and A100), 16K tokens.
const char* kScenario = R"({"version": 1, "name": "seq-small",
  "cluster": {"version": 1, "name": "h100-a100-2x4",
              "network": {"nic_GBps": 25, "nics_per_machine": 1},
              "machines": [{"name": "h", "gpu": "H100-SXM", "gpus": 4},
                           {"name": "a", "gpu": "A100-SXM-80GB", "gpus": 4}]},
  "model": "llama-13b-1m",
  "training": {"global_batch": 1, "seq_len": 16384, "zero_stage": 3, "recompute": "full"},
  "scheduler": "hexiseq"})";

// kScenario on two 16 GiB T4, where no layout of Llama 13B fits.
std::string on_two_t4() {
  json scenario = json::parse(kScenario);
  scenario["cluster"]["machines"] = json::array({{{"name", "t"}, {"gpu", "T4"}, {"gpus", 2}}});
  return scenario.dump();
}

// --compare where no scheduler's layout fits (Llama 13B on two 16 GiB T4): the table, then
// bad input, so that a script sees the scenario cannot be laid out.
TEST(CliSeq, CompareExitsTwoWhenNothingFits) {
  auto dir = scratch_dir("seq-nothing-fits");
  const auto sc = dir / "s.json";
  write_text(sc, on_two_t4());
  auto r = run_cli("seq " + sc.string() + " --compare");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.out.find("ring"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("no sequence scheduler found a layout that fits"), std::string::npos)
      << r.err;
  std::filesystem::remove_all(dir);
}

// Without --compare the best layout is shown even where none fits; its answer says so.
TEST(CliSeq, AnswerSaysWhenTheBestLayoutDoesNotFit) {
  auto dir = scratch_dir("seq-best-does-not-fit");
  const auto sc = dir / "s.json";
  write_text(sc, on_two_t4());
  auto r = run_cli("seq " + sc.string());
  EXPECT_NE(r.out.find("; it does NOT fit in memory"), std::string::npos) << r.out;
  write_text(sc, kScenario);
  auto ok = run_cli("seq " + sc.string());
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(ok.out.find("does NOT fit"), std::string::npos) << ok.out;
  std::filesystem::remove_all(dir);
}

TEST(CliSeq, PlansWritesAndReevaluatesTheSameLayout) {
  auto dir = scratch_dir("seq");
  const auto sc = dir / "s.json", a = dir / "a.json", b = dir / "b.json";
  write_text(sc, kScenario);
  auto r1 = run_cli("seq " + sc.string() + " --json --out " + a.string());
  ASSERT_EQ(r1.code, 0) << r1.err;
  json j = json::parse(r1.out);
  for (const char* key : {"iteration_time_s", "tokens_per_s", "fits", "devices", "memory",
                          "sequence", "search_time_s", "scheduler"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["scheduler"], "hexiseq");
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0);
  auto r2 = run_cli("seq " + sc.string() + " --out " + b.string());
  ASSERT_EQ(r2.code, 0) << r2.err;
  EXPECT_EQ(read_text(a), read_text(b));  // deterministic
  auto e = run_cli("seq " + sc.string() + " --layout " + a.string() + " --json");
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_DOUBLE_EQ(json::parse(e.out)["iteration_time_s"].get<double>(),
                   j["iteration_time_s"].get<double>());
  std::filesystem::remove_all(dir);
}

// The default returns the fastest of HexiSeq, the baselines with its freedoms and, with
// several sequences per iteration, the pipelines of meshes: on the paper's testbed (8
// sequences), a pipeline of two meshes, simulated close to its closed form.
TEST(CliSeq, DefaultIsTheBestOfHexiSeqTheBaselinesAndPipelines) {
  auto dir = scratch_dir("seq-best");
  const auto sc = dir / "s.json";
  write_text(sc, kScenario);
  auto one = run_cli("seq " + sc.string() + " --json");  // one sequence: no pipeline
  ASSERT_EQ(one.code, 0) << one.err;
  json j = json::parse(one.out);
  ASSERT_EQ(j["best_of"].size(), 5u);
  double fastest = 0;
  for (const auto& row : j["best_of"]) fastest = std::max(fastest, row.value("tokens_per_s", 0.0));
  EXPECT_DOUBLE_EQ(j["tokens_per_s"].get<double>(), fastest);
  EXPECT_EQ(j["scheduler"], "hexiseq");  // ties keep hexiseq (ring on the H100s ties it here)
  auto eight = run_cli("seq hexiseq-paper-testbed-llama-13b-64k --simulate --json");
  ASSERT_EQ(eight.code, 0) << eight.err;
  j = json::parse(eight.out);
  ASSERT_EQ(j["best_of"].size(), 6u);
  EXPECT_EQ(j["scheduler"], "mesh-pipeline");
  EXPECT_EQ(j["stages"], 2);
  for (const auto& row : j["best_of"]) {
    EXPECT_LE(row.value("tokens_per_s", 0.0), j["tokens_per_s"].get<double>()) << row.dump();
  }
  // 1.008 observed.
  EXPECT_NEAR(j["simulated"]["closed_form_over_simulated"].get<double>(), 1.0, 0.03);
  std::filesystem::remove_all(dir);
}

TEST(CliSeq, SimulatesTheLayoutBesideTheClosedForm) {
  auto dir = scratch_dir("seq-sim");
  const auto sc = dir / "s.json", out = dir / "sim";
  write_text(sc, kScenario);
  // On every GPU, USP's contiguous twin (a2a groups on consecutive devices).
  auto r = run_cli("seq " + sc.string() + " --scheduler megatron-cp --every-gpu --json --sim-out " +
                   out.string());
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_TRUE(j.contains("simulated"));
  const json& sim = j["simulated"];
  EXPECT_GT(sim["iteration_time_s"].get<double>(), 0);
  // The closed form and the simulation of this layout: 1.014 observed, held within 2x.
  EXPECT_NEAR(sim["closed_form_over_simulated"].get<double>(), 1.0, 0.028);
  EXPECT_EQ(sim["devices"].size(), 8u);
  EXPECT_TRUE(std::filesystem::exists(out / "report.json"));
  EXPECT_TRUE(std::filesystem::exists(out / "trace.json"));
  json report = json::parse(read_text(out / "report.json"));
  EXPECT_TRUE(report["devices"][0].contains("ring_wait_s"));
  EXPECT_EQ(report["plan"], "a sequence layout: " + j["grouping"].get<std::string>());
  EXPECT_EQ(report["plan_digest"].get<std::string>().size(), 16u);
  // The table form names both times, the per-device tables under --explain, the answer last;
  // --compare writes no report.
  auto t = run_cli("seq " + sc.string() + " --scheduler ring --simulate");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("simulated:"), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("ring wait s"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("\nanswer: "), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("tokens/s ("), std::string::npos) << t.out;  // and simulated
  EXPECT_NE(t.out.find("plan: ring's layout\n"), std::string::npos) << t.out;
  auto x = run_cli("seq " + sc.string() + " --scheduler ring --simulate --explain");
  ASSERT_EQ(x.code, 0) << x.err;
  EXPECT_NE(x.out.find("ring wait s"), std::string::npos) << x.out;
  EXPECT_NE(x.out.find("token-wise ms"), std::string::npos) << x.out;
  EXPECT_EQ(t.out.substr(t.out.rfind("\nanswer: ")), x.out.substr(x.out.rfind("\nanswer: ")));
  auto bad = run_cli("seq " + sc.string() + " --compare --sim-out " + out.string());
  EXPECT_EQ(bad.code, 2) << bad.err;
  std::filesystem::remove_all(dir);
}

TEST(CliSeq, CompareRunsEveryBaselineAndHexiSeqIsNeverSlower) {
  auto dir = scratch_dir("seq-compare");
  const auto sc = dir / "s.json";
  write_text(sc, kScenario);
  // The budget bounds hexiseq-exact's programs (a minute and more on these 8 GPUs).
  auto r = run_cli("seq " + sc.string() + " --compare --simulate --json --time-budget 15");
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  double hexiseq = 0, best_baseline = 0;
  for (const auto& s : j["schedulers"]) {
    if (!s.contains("tokens_per_s") || !s["fits"].get<bool>()) continue;
    // Every fitting layout simulated, against the best simulated baseline.
    EXPECT_GT(s["simulated"]["iteration_time_s"].get<double>(), 0) << s["scheduler"];
    EXPECT_GT(s["simulated"]["vs_best_baseline"].get<double>(), 0) << s["scheduler"];
    const std::string name = s["scheduler"];
    // Only the exact search says whether its programs were proven (here the budget decides).
    EXPECT_EQ(s.contains("proven"), name == "hexiseq-exact") << name;
    if (s.contains("proven") && s["proven"].get<bool>()) {
      EXPECT_EQ(s["gap"], 0.0);
    }
    const bool every = s["every_gpu"].get<bool>();
    EXPECT_LE(s["gpus_used"].get<int>(), 8) << name;
    if (every) {
      EXPECT_EQ(s["gpus_used"].get<int>(), 8) << name;  // 8 divides the 40 heads
    }
    if (name == "hexiseq" && !every) hexiseq = s["tokens_per_s"];
    if (name.rfind("hexiseq", 0) != 0 && !every) {
      best_baseline = std::max(best_baseline, s["tokens_per_s"].get<double>());
    }
  }
  ASSERT_GT(best_baseline, 0);
  // HexiSeq against the strongest baseline given its freedoms (GPU subsets here: the H100
  // machine alone), and the paper's definition: the strongest on every GPU, far weaker here.
  EXPECT_GE(hexiseq, best_baseline * (1 - 1e-9));
  EXPECT_DOUBLE_EQ(j["best_baseline"]["closed_form"]["tokens_per_s"].get<double>(), best_baseline);
  const double every_best = j["best_every_gpu_baseline"]["closed_form"]["tokens_per_s"];
  EXPECT_LT(every_best, best_baseline);
  EXPECT_TRUE(j["best_baseline"].contains("simulated"));
  std::filesystem::remove_all(dir);
}

// --exact-budget 0 skips the exact search inside --compare, and says so in its row; each
// scheduler's time is on stderr; the flag alone is bad input.
TEST(CliSeq, CompareCanSkipTheExactSearchAndTimesEachScheduler) {
  auto dir = scratch_dir("seq-compare-skip");
  const auto sc = dir / "s.json";
  write_text(sc, kScenario);
  auto r = run_cli("seq " + sc.string() + " --compare --json --exact-budget 0");
  ASSERT_EQ(r.code, 0) << r.err;
  bool skipped = false;
  const json j = json::parse(r.out);
  for (const auto& s : j["schedulers"]) {
    if (s["scheduler"] == "hexiseq-exact") {
      skipped = s.value("error", "") == "skipped: --exact-budget 0";
    }
  }
  EXPECT_TRUE(skipped) << r.out;
  EXPECT_NE(r.err.find("hexisim: seq: ring: "), std::string::npos) << r.err;
  auto alone = run_cli("seq " + sc.string() + " --exact-budget 5");
  EXPECT_EQ(alone.code, 2);
  EXPECT_NE(alone.err.find("--exact-budget bounds hexiseq-exact inside --compare"),
            std::string::npos)
      << alone.err;
  std::filesystem::remove_all(dir);
}

// A budget that runs out inside CBC's search: with a MIP start, CBC 2.10's preprocessing
// crashed when its time limit struck (every budget of 0.2-1.5 s here, and CI's --compare
// once). The cut-short search still answers with a fitting layout and says it was cut.
TEST(CliSeq, ExactSearchCutShortByItsBudgetStillAnswers) {
  auto dir = scratch_dir("seq-exact-budget");
  const auto sc = dir / "s.json";
  write_text(sc, kScenario);
  for (const char* budget : {"0.3", "1"}) {
    auto r =
        run_cli("seq " + sc.string() + " --scheduler hexiseq-exact --json --time-budget " + budget);
    ASSERT_EQ(r.code, 0) << budget << ": " << r.err;
    json j = json::parse(r.out);
    EXPECT_TRUE(j["budget_exhausted"].get<bool>()) << budget;
    EXPECT_FALSE(j["proven"].get<bool>()) << budget;
    EXPECT_TRUE(j["fits"].get<bool>()) << budget;
    EXPECT_GT(j["tokens_per_s"].get<double>(), 0) << budget;
  }
  std::filesystem::remove_all(dir);
}

TEST(CliSeq, PipelineOfMeshesWritesAPlanTheSimulatorAgreesWith) {
  auto dir = scratch_dir("seq-pipeline");
  const auto sc = dir / "s.json", plan = dir / "plan.json";
  // kScenario with 4 sequences per iteration under ZeRO-1 (pipeline plans run ZeRO 0-1).
  json scenario = json::parse(kScenario);
  scenario["training"]["global_batch"] = 4;
  scenario["training"]["zero_stage"] = 1;
  write_text(sc, scenario.dump());
  auto r = run_cli("seq " + sc.string() + " --pipeline --json --out " + plan.string());
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_EQ(j["tried"].size(), 2u);  // one mesh, then one stage per machine
  EXPECT_EQ(j["tried"][0]["stages"], 1);
  EXPECT_EQ(j["tried"][1]["gpus"], "4,4");
  double best = 1e300;
  for (const auto& t : j["tried"]) {
    if (t["fits"].get<bool>()) best = std::min(best, t["iteration_time_s"].get<double>());
  }
  EXPECT_DOUBLE_EQ(j["iteration_time_s"].get<double>(), best);
  EXPECT_EQ(json::parse(read_text(plan)), j["plan"]);
  // The plan file simulates (its mesh stages lowered) close to the search's estimate.
  auto s = run_cli("simulate " + sc.string() + " --plan " + plan.string() + " --json");
  ASSERT_EQ(s.code, 0) << s.err;
  const double simulated = json::parse(s.out)["iteration_time_s"].get<double>();
  EXPECT_NEAR(simulated / best, 1.0, 0.05) << simulated << " vs " << best;  // 0.968 observed
  // --max-stages 1 tries the one mesh only: the first row of the full search.
  auto one = run_cli("seq " + sc.string() + " --pipeline --max-stages 1 --json");
  ASSERT_EQ(one.code, 0) << one.err;
  const json k = json::parse(one.out);
  ASSERT_EQ(k["tried"].size(), 1u);
  EXPECT_EQ(k["tried"][0], j["tried"][0]);
  EXPECT_DOUBLE_EQ(k["iteration_time_s"].get<double>(),
                   j["tried"][0]["iteration_time_s"].get<double>());
  // ZeRO-3 (kScenario as it is): the pipelines are planned under ZeRO-1, and say so.
  write_text(sc, kScenario);
  auto zero3 = run_cli("seq " + sc.string() + " --pipeline");
  EXPECT_EQ(zero3.code, 0) << zero3.err;
  EXPECT_NE(zero3.out.find("ZeRO-1: pipeline plans model ZeRO 0 and 1"), std::string::npos)
      << zero3.out;
  // Flags that plan one layout: exit 2.
  auto mixed = run_cli("seq " + sc.string() + " --pipeline --compare");
  EXPECT_EQ(mixed.code, 2);
  EXPECT_NE(mixed.err.find("--pipeline"), std::string::npos) << mixed.err;
  std::filesystem::remove_all(dir);
}

TEST(CliSeq, BadInputExitsWithTwo) {
  auto dir = scratch_dir("seq-bad");
  const auto sc = dir / "s.json", layout = dir / "l.json";
  write_text(sc, kScenario);
  auto r = run_cli("seq " + sc.string() + " --scheduler nonsense");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown sequence scheduler"), std::string::npos) << r.err;
  r = run_cli("seq " + sc.string() + " --solver nonsense");
  EXPECT_EQ(r.code, 2);
  // Shards not summing to the group's tokens: file, JSON path and numbers.
  write_text(layout, R"({"sequence": {"groups": [{"devices": [0, 1, 2, 3, 4, 5, 6, 7],
    "tokens": 16384, "shards": [2048, 2048, 2048, 2048, 2048, 2048, 2048, 1024],
    "heads": [5, 5, 5, 5, 5, 5, 5, 5]}]}})");
  r = run_cli("seq " + sc.string() + " --layout " + layout.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("l.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/sequence/groups/0"), std::string::npos) << r.err;
  write_text(layout, R"({"groups": []})");
  r = run_cli("seq " + sc.string() + " --layout " + layout.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("\"sequence\""), std::string::npos) << r.err;
  // Pipeline commands refuse the ZeRO-3 scenario by name.
  r = run_cli("plan " + sc.string() + " --scheduler hexiscale");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("zero_stage 3"), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hexi::testing
