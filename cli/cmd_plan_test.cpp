// `hexisim plan` end to end (the contract: README command table): the JSON contract, --out,
// --explain, determinism of the written plan, and exit codes for bad input.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/cli_runner.hpp"

namespace hexi::testing {
namespace {

using nlohmann::json;

TEST(CliPlan, JsonHasTheContractFields) {
  auto r = run_cli("plan testbed-h100-a100-llama2-13b --json");
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  for (const char* key : {"plan", "estimate", "search_time_s", "scheduler"})
    EXPECT_TRUE(j.contains(key)) << key;
  for (const char* key : {"iteration_time_s", "tokens_per_s", "mfu"})
    EXPECT_TRUE(j["estimate"].contains(key)) << key;
  EXPECT_EQ(j["scheduler"], "hexiscale");
  EXPECT_EQ(j["plan"]["version"], 1);
  EXPECT_GT(j["estimate"]["tokens_per_s"].get<double>(), 0);
}

TEST(CliPlan, ReportsWhatTheSearchDid) {
  // 16 GPUs: the device-level search, whose phases are the sweep and the refinement.
  auto r = run_cli("plan testbed-h100-a100-llama2-13b --json");
  ASSERT_EQ(r.code, 0) << r.err;
  json s = json::parse(r.out)["search"];
  EXPECT_EQ(s["mode"], "device-level");
  EXPECT_EQ(s["stopped"], "converged");
  ASSERT_EQ(s["phases"].size(), 2u) << s.dump();
  EXPECT_EQ(s["phases"][0]["name"], "sweep");
  EXPECT_EQ(s["phases"][1]["name"], "refinement");
  long sum = 0;
  for (const auto& p : s["phases"]) sum += p["candidates"].get<long>();
  EXPECT_EQ(sum, s["candidates"].get<long>());
  // One line on stderr says the same.
  EXPECT_NE(r.err.find("hexiscale (device-level): "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("converged"), std::string::npos) << r.err;
  auto e = run_cli("plan testbed-h100-a100-llama2-13b --explain");
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("search: hexiscale (device-level): "), std::string::npos) << e.out;
  // A time budget that the search cannot meet says so.
  auto b = run_cli("plan mix-128-llama2-70b --time-budget 0.001 --json");
  ASSERT_EQ(b.code, 0) << b.err;
  json bs = json::parse(b.out)["search"];
  EXPECT_EQ(bs["mode"], "machine-level + device refinement");
  EXPECT_EQ(bs["stopped"], "budget");
  // 128 GPUs, the device-level refinement's range: no expected cost (SaysWhatALongSearch...).
  EXPECT_EQ(b.err.find("of search expected"), std::string::npos) << b.err;
}

TEST(CliPlan, VerifyReturnsTheFastestSimulatedOfTheTopPlans) {
  auto r = run_cli("plan tiny-llama-cpu --verify 5 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_TRUE(j.contains("verify")) << j.dump();
  const json& v = j["verify"];
  EXPECT_EQ(v["fidelity"], "stage");
  ASSERT_EQ(v["plans"].size(), 6u);
  double best_sim = 0, prev_est = 1e300;
  int best_rank = -1;
  for (const auto& p : v["plans"]) {
    // Ranked by the closed form, best first.
    EXPECT_LE(p["estimate_tokens_per_s"].get<double>(), prev_est * (1 + 1e-12));
    prev_est = p["estimate_tokens_per_s"].get<double>();
    if (p["simulated_tokens_per_s"].get<double>() > best_sim) {
      best_sim = p["simulated_tokens_per_s"];
      best_rank = p["rank"];
    }
  }
  EXPECT_EQ(v["chosen_rank"].get<int>(), best_rank);
  // The returned plan is the chosen one: its estimate is that plan's (verify_test.cpp
  // checks a runner-up taking the place of the closed form's best).
  EXPECT_DOUBLE_EQ(j["estimate"]["tokens_per_s"].get<double>(),
                   v["plans"][best_rank]["estimate_tokens_per_s"].get<double>());
  // The simulation of the returned plan (stage fidelity) gives the figure verify chose on.
  auto dir = scratch_dir("plan-verify");
  const auto plan = dir / "plan.json";
  ASSERT_EQ(run_cli("plan tiny-llama-cpu --verify 5 --out " + plan.string()).code, 0);
  auto s = run_cli("simulate tiny-llama-cpu --plan " + plan.string() +
                   " --fidelity stage --no-trace --json");
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_NEAR(json::parse(s.out)["tokens_per_s"].get<double>(), best_sim, 1e-6 * best_sim);
  // simulate searching with the same scheduler and verify count simulates the same plan.
  auto t = run_cli("simulate tiny-llama-cpu --scheduler hexiscale --verify 5 --no-trace --json");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_DOUBLE_EQ(json::parse(t.out)["estimate"]["tokens_per_s"].get<double>(),
                   j["estimate"]["tokens_per_s"].get<double>());
  // --verify 0: the closed form's best, nothing simulated.
  auto z = run_cli("plan tiny-llama-cpu --verify 0 --json");
  ASSERT_EQ(z.code, 0) << z.err;
  json jz = json::parse(z.out);
  EXPECT_FALSE(jz.contains("verify"));
  EXPECT_DOUBLE_EQ(jz["estimate"]["tokens_per_s"].get<double>(),
                   v["plans"][0]["estimate_tokens_per_s"].get<double>());
  EXPECT_EQ(run_cli("plan tiny-llama-cpu --verify -1").code, 2);
  std::filesystem::remove_all(dir);
}

TEST(CliPlan, OutWritesTheSamePlanBytesForTheSameSeed) {
  auto dir = scratch_dir("plan-out");
  const auto a = dir / "a.json", b = dir / "b.json";
  auto r1 = run_cli("plan hexiscale-setting2-llama2-7b --seed 3 --out " + a.string());
  auto r2 = run_cli("plan hexiscale-setting2-llama2-7b --seed 3 --out " + b.string());
  ASSERT_EQ(r1.code, 0) << r1.err;
  ASSERT_EQ(r2.code, 0) << r2.err;
  EXPECT_FALSE(read_text(a).empty());
  EXPECT_EQ(read_text(a), read_text(b));
  // The written plan is accepted by `estimate`.
  auto e = run_cli("estimate hexiscale-setting2-llama2-7b --plan " + a.string() + " --json");
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_TRUE(json::parse(e.out)["feasible"].get<bool>());
  std::filesystem::remove_all(dir);
}

TEST(CliPlan, ExplainShowsEveryPipeline) {
  auto r = run_cli("plan a800-2x8-llama2-7b --scheduler uniform --explain");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* text : {"pipeline 0", "TP", "layers", "free GiB", "batch"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
  }
  // The answer is the last line: time, tokens/s, MFU and its convention, GPUs, the plan.
  const std::string last = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  EXPECT_EQ(last.rfind("answer: ", 0), 0u) << last;
  for (const char* text : {" s per iteration, ", " tokens/s", "MFU ", "model FLOPs", " of 16 GPUs",
                           "plan: uniform's"}) {
    EXPECT_NE(last.find(text), std::string::npos) << text << "\n" << last;
  }
}

// A mixture of experts whose plan runs whole experts per GPU: the note says which placement
// won, --explain shows each stage's experts per TP rank.
TEST(CliPlan, ExplainShowsTheExpertsOfAMixtureOfExperts) {
  auto r = run_cli("plan mix-32-mixtral-8x7b --verify 0 --explain");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE((r.out + r.err).find("the plan returned runs whole experts"), std::string::npos)
      << r.out << r.err;
  const auto header = r.out.find("  TP  experts  layers");
  ASSERT_NE(header, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  2   4,4      ["), std::string::npos) << r.out;
}

// A question without files: the cluster from a mix, the model and batch from flags; the
// scenario the flags made, saved, gives the same plan bytes; estimate, simulate and seq take
// the same flags; a missing part is bad input naming it.
// A machine-level HexiScale search (above 512 GPUs) says first how long it is expected to take
// and what stops it sooner.
TEST(CliPlan, SaysWhatALongSearchIsExpectedToCost) {
  auto r = run_cli(
      "plan --mix H100:32x8,A100:32x8,L40S:32x8,RTX4090:32x8 --model llama3-70b --global-batch "
      "1024 --scheduler hexiscale --time-budget 0.5 --verify 0 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("hexiscale: 1024 GPUs: about 23 s of search expected"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("--time-budget stops it at 0.5 s"), std::string::npos) << r.err;
  EXPECT_EQ(json::parse(r.out)["search"]["stopped"], "budget");
}

TEST(CliPlan, AsksWithoutFiles) {
  auto dir = scratch_dir("plan-asked");
  const auto saved = dir / "asked.json", a = dir / "a.json", b = dir / "b.json";
  const std::string parts =
      " --mix A100:1x4,RTX4090:1x4 --nic-GBps 1.25 --transport tcp --model llama2-7b"
      " --global-batch 16 --seq-len 2048";
  auto r = run_cli("plan" + parts + " --scheduler uniform --json --save-scenario " +
                   saved.string() + " --out " + a.string());
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["scenario"], "mix-8-A100-SXM-80GBx4-RTX4090x4-llama2-7b");
  auto again = run_cli("plan " + saved.string() + " --scheduler uniform --out " + b.string());
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(read_text(a), read_text(b));
  auto e = run_cli("estimate" + parts + " --plan " + a.string() + " --json");
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_TRUE(json::parse(e.out)["feasible"].get<bool>());
  auto s = run_cli("simulate" + parts + " --plan " + a.string() + " --json");
  ASSERT_EQ(s.code, 0) << s.err;
  // A shipped scenario with a part replaced.
  auto q = run_cli("seq tiny-seq-cpu --seq-len 48 --scheduler ring --json");
  ASSERT_EQ(q.code, 0) << q.err;
  EXPECT_EQ(json::parse(q.out)["scenario"], "tiny-seq-cpu-asked");
  auto none = run_cli("plan --mix A100:1x8");
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("--model"), std::string::npos) << none.err;
  auto clash = run_cli("plan --cluster hexiscale-setting1 --nic-GBps 5 --model llama2-7b");
  EXPECT_EQ(clash.code, 2);
  EXPECT_NE(clash.err.find("--nic-GBps describes"), std::string::npos) << clash.err;
  auto bad = run_cli("plan --mix A100:1x8 --model llama2-13x");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("error: --model: expected a model from the catalog"), std::string::npos)
      << bad.err;
  auto empty = run_cli("plan");
  EXPECT_EQ(empty.code, 2);
  EXPECT_NE(empty.err.find("no scenario"), std::string::npos) << empty.err;
}

// A uniform plan exported to Megatron-LM: its degrees and arguments, the launch script; the
// shipped hand plan of setting 1 (two TP degrees, uneven batches) refused, with hexisim's own
// launch.
TEST(CliExport, MegatronRunsAUniformPlanAndRefusesAnAsymmetricOne) {
  auto dir = scratch_dir("export");
  const auto plan = dir / "plan.json", script = dir / "launch.sh";
  auto p = run_cli("plan a800-2x8-llama2-7b --scheduler uniform --verify 0 --out " + plan.string());
  ASSERT_EQ(p.code, 0) << p.err;
  auto r = run_cli("export megatron a800-2x8-llama2-7b --plan " + plan.string() + " --json --out " +
                   script.string());
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_TRUE(j["runs"].get<bool>());
  EXPECT_EQ(j["tp"].get<int>() * j["pp"].get<int>() * j["dp"].get<int>(), 16);
  EXPECT_NE(read_text(script).find("torchrun --nnodes"), std::string::npos) << read_text(script);
  EXPECT_NE(read_text(script).find("--tensor-model-parallel-size"), std::string::npos);
  auto a = run_cli("export megatron hexiscale-setting1-llama2-7b");
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_NE(a.out.find("cannot run this plan as planned"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("mpirun -np 40 --rankfile rankfile.txt hexisim train"), std::string::npos)
      << a.out;
  auto none = run_cli("export megatron a800-2x8-llama2-7b");
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("--plan"), std::string::npos) << none.err;
}

// A mistyped flag or subcommand: CLI11's error, then the nearest name; nothing when none is
// near.
TEST(CliPlan, AMistypedFlagOrCommandSuggestsTheNearest) {
  const std::pair<const char*, const char*> cases[] = {
      {"plan tiny-llama-cpu --scheduer uniform",
       "hexisim: plan has no option --scheduer: did you mean --scheduler?"},
      {"plna tiny-llama-cpu", "hexisim: unknown command plna: did you mean plan?"},
      {"testbed stauts testbed-cpu-3m",
       "hexisim: unknown command stauts of testbed: did you mean status?"},
      {"seq tiny-seq-cpu --global-bach=4",
       "hexisim: seq has no option --global-bach: did you mean --global-batch?"},
      {"plan tiny-llama-cpu --qqqqqqqq", nullptr},  // nothing near
  };
  for (const auto& [args, hint] : cases) {
    auto r = run_cli(args);
    EXPECT_EQ(r.code, 2) << args;
    if (hint) {
      EXPECT_NE(r.err.find(hint), std::string::npos) << args << "\n" << r.err;
    } else {
      EXPECT_EQ(r.err.find("did you mean"), std::string::npos) << args << "\n" << r.err;
    }
  }
}

TEST(CliPlan, BadInputExitsWithTwo) {
  auto r = run_cli("plan testbed-h100-a100-llama2-13b --scheduler nonsense");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown scheduler"), std::string::npos) << r.err;
  r = run_cli("plan testbed-h100-a100-llama2-13b --options '{\"tua\": 1}'");
  EXPECT_EQ(r.code, 2);
  // Errors in --options name --options, not the scenario file.
  r = run_cli(
      "plan testbed-h100-a100-llama2-13b --scheduler random --options '{\"iterations\": 0}'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--options: /iterations: expected an integer"), std::string::npos) << r.err;
  r = run_cli("plan testbed-h100-a100-llama2-13b --time-budget -1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--time-budget"), std::string::npos) << r.err;
  r = run_cli("plan testbed-h100-a100-llama2-13b --options '[1]'");
  EXPECT_EQ(r.code, 2);
  r = run_cli("plan no-such-scenario");
  EXPECT_EQ(r.code, 2);
  // A model that fits nowhere: the message gives memory needed and available.
  auto dir = scratch_dir("plan-nofit");
  const auto sc = dir / "nofit.json";
  write_text(sc, R"({"version": 1, "name": "nofit",
    "cluster": {"version": 1, "name": "t4s", "network": {"nic_GBps": 12.5},
                "machines": [{"name": "m", "gpu": "T4", "gpus": 2}]},
    "model": "llama2-70b", "training": {"global_batch": 8}})");
  r = run_cli("plan " + sc.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("needs at least"), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hexi::testing
