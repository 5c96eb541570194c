// End-to-end tests of `hexisim lower` and `hexisim simulate` (the contract: README command table):
// JSON keys, byte-identical outputs, exit code 2 naming op ids for bad programs.

#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "tests/cli_runner.hpp"

namespace hexi::testing {
namespace {

using json = nlohmann::json;

// Two 4-GPU A100 machines, tiny-llama-8l, a 2-pipeline plan with TP, PP and DP.
std::string write_scenario(const std::filesystem::path& dir) {
  write_text(dir / "cluster.json", R"({"version": 1, "name": "c", "network": {"nic_GBps": 12.5},
    "machines": [{"name": "m", "gpu": "A100", "gpus": 4, "repeat": 2}]})");
  write_text(dir / "plan.json", R"({"version": 1, "pipelines": [
    {"batch": 4, "stages": [{"devices": [0, 1], "layers": [0, 4]}, {"devices": [2], "layers": [4, 8]}]},
    {"batch": 4, "stages": [{"devices": [4], "layers": [0, 3]}, {"devices": [5, 6, 7, 3], "layers": [3, 8]}]}]})");
  write_text(dir / "scenario.json", R"({"version": 1, "name": "s", "cluster": "cluster.json",
    "model": "tiny-llama-8l", "training": {"global_batch": 8, "seq_len": 64}, "plan": "plan.json"})");
  return (dir / "scenario.json").string();
}

json parse(const CliResult& r) {
  EXPECT_EQ(r.code, 0) << r.err;
  return json::parse(r.out);
}

TEST(SimCli, LowerWritesAProgramAndCountsOps) {
  auto dir = scratch_dir("lower");
  const std::string scenario = write_scenario(dir);
  json j =
      parse(run_cli("lower " + scenario + " --out " + (dir / "program.json").string() + " --json"));
  EXPECT_GT(j["ops"].get<int>(), 0);
  EXPECT_EQ(j["devices"], 8);
  EXPECT_EQ(j["granularity"], "layer");
  EXPECT_GT(j["op_counts"]["attn.fwd"].get<int>(), 0);
  json program = json::parse(read_text(dir / "program.json"));
  EXPECT_EQ(program["version"], 1);
  EXPECT_EQ(program["num_ops"], j["ops"]);
}

TEST(SimCli, SimulateJsonHasTheContractKeys) {
  auto dir = scratch_dir("simjson");
  const std::string scenario = write_scenario(dir);
  json j = parse(run_cli("simulate " + scenario + " --json"));
  for (const char* key : {"iteration_time_s", "tokens_per_s", "mfu", "fidelity", "activities",
                          "wall_time_s", "devices", "links", "estimate"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["fidelity"], "layer");
  EXPECT_EQ(j["devices"].size(), 8u);
  EXPECT_GT(j["iteration_time_s"].get<double>(), 0);
  json stage = parse(run_cli("simulate " + scenario + " --fidelity stage --json"));
  EXPECT_EQ(stage["fidelity"], "stage");
  EXPECT_LT(stage["ops"].get<int>(), j["ops"].get<int>());
}

// Identical pipelines on machines the shift maps onto each other: one of four simulated, the
// same iteration as all four (--no-fold); the text says which, and why a plan does not fold.
TEST(SimCli, IdenticalPipelinesFoldAndNoFoldSimulatesThemAll) {
  auto dir = scratch_dir("simfold");
  write_text(dir / "cluster.json", R"({"version": 1, "name": "c", "network": {"nic_GBps": 12.5},
    "machines": [{"name": "m", "gpu": "A100", "gpus": 4, "repeat": 4}]})");
  std::string pipes;
  for (int p = 0; p < 4; ++p) {
    const std::string d = std::to_string(4 * p);
    pipes += std::string(p ? "," : "") + R"({"batch": 2, "stages": [{"devices": [)" + d + ", " +
             std::to_string(4 * p + 1) + R"(], "layers": [0, 4]}, {"devices": [)" +
             std::to_string(4 * p + 2) + ", " + std::to_string(4 * p + 3) +
             R"(], "layers": [4, 8]}]})";
  }
  write_text(dir / "plan.json", R"({"version": 1, "pipelines": [)" + pipes + "]}");
  write_text(dir / "scenario.json", R"({"version": 1, "name": "s", "cluster": "cluster.json",
    "model": "tiny-llama-8l", "training": {"global_batch": 8, "seq_len": 64}, "plan": "plan.json"})");
  const std::string scenario = (dir / "scenario.json").string();
  json folded = parse(run_cli("simulate " + scenario + " --json"));
  json whole = parse(run_cli("simulate " + scenario + " --no-fold --json"));
  EXPECT_EQ(folded["replicas"], json({{"pipelines", 4}, {"simulated", 1}}));
  EXPECT_FALSE(whole.contains("replicas"));
  EXPECT_NEAR(folded["iteration_time_s"].get<double>(), whole["iteration_time_s"].get<double>(),
              1e-9 * whole["iteration_time_s"].get<double>());
  EXPECT_EQ(folded["devices_used"], whole["devices_used"]);
  EXPECT_EQ(folded["devices"].size(), 4u);
  EXPECT_EQ(whole["devices"].size(), 16u);
  EXPECT_EQ(folded["ops"].get<int>() * 4, whole["ops"].get<int>());
  auto text = run_cli("simulate " + scenario);
  EXPECT_NE(text.out.find("folded: 1 of 4 identical pipelines simulated"), std::string::npos)
      << text.out;
  // The two-pipeline plan of write_scenario differs pipeline to pipeline.
  auto other = run_cli("simulate " + write_scenario(scratch_dir("simnofold")));
  EXPECT_NE(other.out.find("not folded: pipeline 1 differs from pipeline 0"), std::string::npos)
      << other.out;
}

TEST(SimCli, SameInputsWriteByteIdenticalReportAndTrace) {
  auto dir = scratch_dir("simout");
  const std::string scenario = write_scenario(dir);
  for (const char* run : {"a", "b"}) {
    auto r = run_cli("simulate " + scenario + " --out " + (dir / run).string());
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("iteration s"), std::string::npos);
  }
  EXPECT_EQ(read_text(dir / "a/report.json"), read_text(dir / "b/report.json"));
  EXPECT_EQ(read_text(dir / "a/trace.json"), read_text(dir / "b/trace.json"));
  json trace = json::parse(read_text(dir / "a/trace.json"));
  EXPECT_GT(trace["traceEvents"].size(), 100u);
  // The report names the plan it simulated, with a digest of the plan's JSON that changes
  // with the plan.
  json report = json::parse(read_text(dir / "a/report.json"));
  const std::string plan = (dir / "plan.json").lexically_normal().string();
  EXPECT_EQ(report["plan"], plan + " (from the scenario)");
  const std::string digest = report["plan_digest"];
  EXPECT_EQ(digest.size(), 16u);
  write_text(dir / "other.json", R"({"version": 1, "pipelines": [
    {"batch": 8, "stages": [{"devices": [0, 1, 2, 3], "layers": [0, 8]}]}]})");
  ASSERT_EQ(run_cli("simulate " + scenario + " --plan " + (dir / "other.json").string() +
                    " --out " + (dir / "c").string())
                .code,
            0);
  report = json::parse(read_text(dir / "c/report.json"));
  EXPECT_EQ(report["plan"], (dir / "other.json").string() + " (--plan)");
  EXPECT_NE(report["plan_digest"], digest);
}

// The answer first: the headline and the answer line by default; the FLOP conventions, every
// stage and the busiest links under --explain; the answer line last either way.
TEST(SimCli, LongTablesComeWithExplain) {
  auto dir = scratch_dir("explain");
  const std::string scenario = write_scenario(dir);
  auto last_line = [](std::string out) {
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out.substr(out.rfind('\n') + 1);  // npos + 1 == 0: a single line
  };
  for (const char* cmd : {"simulate", "estimate"}) {
    auto brief = run_cli(std::string(cmd) + " " + scenario);
    auto full = run_cli(std::string(cmd) + " " + scenario + " --explain");
    ASSERT_EQ(brief.code, 0) << brief.err;
    ASSERT_EQ(full.code, 0) << full.err;
    EXPECT_EQ(last_line(brief.out).rfind("answer: ", 0), 0u) << cmd << "\n" << brief.out;
    EXPECT_EQ(last_line(brief.out), last_line(full.out)) << cmd;
    EXPECT_NE(brief.out.find("(--explain shows"), std::string::npos) << cmd << "\n" << brief.out;
    for (const char* table : {"HFU (hardware FLOPs, recompute included)", "Megatron-LM formula"}) {
      EXPECT_EQ(brief.out.find(table), std::string::npos) << cmd << ": " << table;
      EXPECT_NE(full.out.find(table), std::string::npos) << cmd << ": " << table;
    }
    EXPECT_LT(std::count(brief.out.begin(), brief.out.end(), '\n'),
              std::count(full.out.begin(), full.out.end(), '\n'))
        << cmd;
  }
  auto full = run_cli("simulate " + scenario + " --explain");
  for (const char* table : {"per stage (slowest device", "busiest links:"}) {
    EXPECT_NE(full.out.find(table), std::string::npos) << table;
  }
  EXPECT_NE(run_cli("estimate " + scenario + " --explain").out.find("TP comm ms"),
            std::string::npos);
  EXPECT_NE(run_cli("estimate " + scenario).out.find("  pipeline 1: 5 GPUs, 2 stages (TP 1,4)"),
            std::string::npos);
}

TEST(SimCli, BadProgramsExitTwoNamingOpIds) {
  auto dir = scratch_dir("badprogram");
  const std::string scenario = write_scenario(dir);
  const auto program = dir / "program.json";
  ASSERT_EQ(run_cli("lower " + scenario + " --out " + program.string()).code, 0);
  json good = json::parse(read_text(program));
  // A cycle: device 0's first op waits for its last.
  json cycle = good;
  auto& ops = cycle["devices"][0]["ops"];
  ops[0]["deps"].push_back(ops.back()["id"]);
  write_text(dir / "cycle.json", cycle.dump());
  auto r = run_cli("simulate " + scenario + " --program " + (dir / "cycle.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("dependency cycle: op "), std::string::npos) << r.err;
  // An unmatched send: the first recv of device 2 gets another tag.
  json unmatched = good;
  int recv_id = -1;
  for (auto& op : unmatched["devices"][2]["ops"]) {
    if (op["op"] == "recv") {
      op["tag"] = 12345;
      recv_id = op["id"];
      break;
    }
  }
  ASSERT_GE(recv_id, 0);
  write_text(dir / "unmatched.json", unmatched.dump());
  r = run_cli("simulate " + scenario + " --program " + (dir / "unmatched.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unmatched send: op "), std::string::npos) << r.err;
  // A program for another cluster.
  json wrong = good;
  wrong["num_devices"] = 16;
  write_text(dir / "wrong.json", wrong.dump());
  r = run_cli("simulate " + scenario + " --program " + (dir / "wrong.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("lowered for 16 devices"), std::string::npos) << r.err;
  // Flops or bytes no training step has: a time beyond the simulator's limit (a trace's
  // nanoseconds would overflow 64 bits), refused before any output is written.
  for (const char* field : {"flops", "bytes"}) {
    json huge = good;
    if (std::string(field) == "flops") {
      for (auto& shape : huge["shapes"]) {
        for (auto& k : shape["kernels"]) k["flops"] = k["flops"].get<double>() > 0 ? 1e300 : 0.0;
      }
    } else {
      for (auto& device : huge["devices"]) {
        for (auto& op : device["ops"]) {
          if (op.contains("bytes")) op["bytes"] = 1e300;
        }
      }
    }
    const auto file = dir / (std::string("huge-") + field + ".json");
    write_text(file, huge.dump());
    r = run_cli("simulate " + scenario + " --program " + file.string() + " --out " +
                (dir / "huge-out").string());
    EXPECT_EQ(r.code, 2) << field;
    EXPECT_NE(r.err.find("beyond the simulator's limit of 1e+09 s"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "huge-out" / "trace.json")) << field;
  }
}

TEST(SimCli, PlansThatDoNotMatchAndUnknownSchedulersExitTwo) {
  auto dir = scratch_dir("badplan");
  const std::string scenario = write_scenario(dir);
  write_text(dir / "bad.json", R"({"version": 1, "pipelines": [
    {"batch": 8, "stages": [{"devices": [0, 9], "layers": [0, 8]}]}]})");
  for (const char* cmd : {"simulate", "lower"}) {
    auto r = run_cli(std::string(cmd) + " " + scenario + " --plan " + (dir / "bad.json").string() +
                     " --out " + (dir / (std::string(cmd) + "-out")).string());
    EXPECT_EQ(r.code, 2) << cmd;
    EXPECT_NE(r.err.find("device 9 does not exist"), std::string::npos) << r.err;
  }
  write_text(dir / "noplan.json", R"({"version": 1, "name": "s", "cluster": "cluster.json",
    "model": "tiny-llama-8l", "training": {"global_batch": 8, "seq_len": 64}})");
  // Without a plan, simulate plans first with the scenario's scheduler (hexiscale).
  auto r = run_cli("simulate " + (dir / "noplan.json").string() + " --json");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("planned with hexiscale"), std::string::npos) << r.err;
  r = run_cli("simulate " + (dir / "noplan.json").string() + " --scheduler nosuch");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("nosuch"), std::string::npos) << r.err;
}

// The headline's "plan:" line and --json's plan_source name where the plan came from;
// when --scheduler hides the scenario's plan (or --plan hides --scheduler) stderr says so.
TEST(SimCli, HeadlineNamesWhereThePlanCameFrom) {
  auto dir = scratch_dir("plansource");
  const std::string scenario = write_scenario(dir);
  const std::string plan = (dir / "plan.json").lexically_normal().string();
  // The scenario's hand plan: no search, said in the headline and on stderr.
  auto r = run_cli("simulate " + scenario);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\nplan: " + plan + " (from the scenario)\n"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("simulating the scenario's plan " + plan + " (no search"), std::string::npos)
      << r.err;
  json j = parse(run_cli("simulate " + scenario + " --json"));
  EXPECT_EQ(j["plan_source"]["kind"], "scenario");
  EXPECT_EQ(j["plan_source"]["file"], plan);
  // --scheduler searches instead, and says the scenario's plan is not used.
  r = run_cli("simulate " + scenario + " --scheduler uniform");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\nplan: searched by uniform (--scheduler) in "), std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("the scenario's plan " + plan + " is not used"), std::string::npos) << r.err;
  j = parse(run_cli("simulate " + scenario + " --scheduler uniform --json"));
  EXPECT_EQ(j["plan_source"]["kind"], "search");
  EXPECT_EQ(j["plan_source"]["scheduler"], "uniform");
  EXPECT_EQ(j["plan_source"]["chosen_by"], "--scheduler");
  EXPECT_GE(j["plan_source"]["search_time_s"].get<double>(), 0);
  // --plan wins over --scheduler, with a note.
  r = run_cli("simulate " + scenario + " --plan " + plan + " --scheduler uniform --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["plan_source"]["kind"], "plan_file");
  EXPECT_NE(r.err.find("--scheduler uniform is ignored"), std::string::npos) << r.err;
  // No plan anywhere: the scenario's scheduler searches.
  write_text(dir / "noplan.json", R"({"version": 1, "name": "s", "cluster": "cluster.json",
    "model": "tiny-llama-8l", "training": {"global_batch": 8, "seq_len": 64}})");
  r = run_cli("simulate " + (dir / "noplan.json").string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\nplan: searched by hexiscale (the scenario's scheduler) in "),
            std::string::npos)
      << r.out;
}

// MFU, HFU and the Megatron-LM convention, in the text and in --json (report and estimate).
TEST(SimCli, ReportsTheFlopConventions) {
  auto dir = scratch_dir("conventions");
  const std::string scenario = write_scenario(dir);
  auto r = run_cli("simulate " + scenario + " --explain");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* row :
       {"MFU (model FLOPs, causal attention halved)", "HFU (hardware FLOPs, recompute included)",
        "Megatron-LM formula, not MFU (full recompute counted)", "the 8 GPUs used"}) {
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  }
  json j = parse(run_cli("simulate " + scenario + " --json"));
  for (const json& part : {j, j["estimate"]}) {
    for (const char* key : {"mfu", "hfu", "hardware_tflops_per_gpu", "model_tflops_per_gpu",
                            "megatron_tflops_per_gpu"}) {
      EXPECT_GT(part[key].get<double>(), 0) << key;
    }
  }
  EXPECT_EQ(j["mfu_convention"],
            "model FLOPs: 3x forward, no recompute, causal attention halved (flash kernel)");
  // The scenario's selective recompute with the flash kernel adds no FLOPs: HFU = MFU.
  EXPECT_NEAR(j["hfu"].get<double>(), j["mfu"].get<double>(), 1e-12);
  EXPECT_NEAR(j["hardware_tflops_per_gpu"].get<double>(), j["model_tflops_per_gpu"].get<double>(),
              1e-9);
  // estimate --explain prints the same rows.
  r = run_cli("estimate " + scenario + " --explain");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("HFU (hardware FLOPs, recompute included)"), std::string::npos) << r.out;
  json e = parse(run_cli("estimate " + scenario + " --json"));
  EXPECT_TRUE(e.contains("hfu"));
  EXPECT_TRUE(e.contains("mfu_convention"));
}

TEST(SimCli, HelpListsTheOptions) {
  auto r = run_cli("simulate --help");
  EXPECT_EQ(r.code, 0);
  for (const char* opt :
       {"--plan", "--program", "--scheduler", "--seed", "--fidelity", "--out", "--json"}) {
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
  }
  EXPECT_EQ(run_cli("lower --help").code, 0);
}

}  // namespace
}  // namespace hexi::testing
