// `hexisim calibrate` and `hexisim validate` end to end: a profile fitted to traces of
// `hexisim train` and used by `hexisim simulate --profile`; refusals of input they cannot
// use. `hexisim validate --quick` on the testbed where this machine can build one
// (root, namespaces, cgroups) is validate_testbed_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli_runner.hpp"

namespace hexi::testing {
namespace {

using nlohmann::json;

// Three stages of tiny-llama-8l over devices 0 -> 1 (one machine) -> 4 (the other).
std::string three_stages(int micro_batch) {
  return R"({"version": 1, "pipelines": [{"batch": 8, "micro_batch": )" +
         std::to_string(micro_batch) +
         R"(, "stages": [{"devices": [0], "layers": [0, 3]}, {"devices": [1], "layers": [3, 5]},
                         {"devices": [4], "layers": [5, 8]}]}]})";
}

// One device running layers [0, layers) of tiny-llama(-8l), batch 8.
std::string one_stage(int micro_batch, int layers) {
  return R"({"version": 1, "pipelines": [{"batch": 8, "micro_batch": )" +
         std::to_string(micro_batch) + R"(, "stages": [{"devices": [0], "layers": [0, )" +
         std::to_string(layers) + "]}]}]}";
}

TEST(CliCalibrate, FitsTracesOfTrainAndSimulateReadsTheProfile) {
  const auto dir = scratch_dir("calibrate");
  std::string traces;
  for (int mb : {1, 2}) {
    const auto plan = dir / ("plan" + std::to_string(mb) + ".json");
    write_text(plan, three_stages(mb));
    const auto trace = dir / ("trace" + std::to_string(mb) + ".json");
    const std::string cmd =
        "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 3 "
        "--oversubscribe " +
        std::string(std::getenv("HEXISIM_BIN")) + " train tiny-llama-8l-cpu --plan " +
        plan.string() + " --steps 4 --trace " + trace.string() + " > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    traces += " " + trace.string();
  }
  const auto profile = dir / "profile.json";
  auto c = run_cli("calibrate" + traces + " --out " + profile.string() + " --json");
  ASSERT_EQ(c.code, 0) << c.err;
  const json fit = json::parse(c.out);
  std::set<std::string> terms;
  for (const auto& t : fit["terms"]) terms.insert(t["term"].get<std::string>());
  EXPECT_EQ(terms, (std::set<std::string>{"compute CPU-core", "link host", "link rdma"}));
  const json p = json::parse(read_text(profile));
  EXPECT_EQ(p["version"], 2);
  EXPECT_TRUE(p["devices"].contains("CPU-core"));
  EXPECT_TRUE(p["transports"].contains("host"));
  // --base: the fit starts from that profile and keeps what the traces say nothing of (a
  // hopper GEMM ceiling here; the traces are of CPU-core ranks), and fits the rest.
  const auto base = dir / "base.json";
  write_text(base, R"({"version": 2, "architectures": {"hopper": {"gemm_ceiling":
                   {"value": 0.123, "source": "the base of this test"}}}})");
  const auto rebased = dir / "rebased.json";
  auto b = run_cli("calibrate" + traces + " --base " + base.string() + " --out " +
                   rebased.string() + " --json");
  ASSERT_EQ(b.code, 0) << b.err;
  const json q = json::parse(read_text(rebased));
  EXPECT_EQ(q["architectures"]["hopper"]["gemm_ceiling"]["value"], 0.123) << q.dump();
  ASSERT_TRUE(p["architectures"]["hopper"].contains("gemm_ceiling")) << p.dump();
  EXPECT_NE(p["architectures"]["hopper"]["gemm_ceiling"]["value"], 0.123);
  EXPECT_EQ(q["devices"]["CPU-core"], p["devices"]["CPU-core"]);  // the same fit
  // The profile changes what the simulator says of the same plan.
  const std::string sim =
      "simulate tiny-llama-8l-cpu --plan " + (dir / "plan1.json").string() + " --no-trace --json";
  auto before = run_cli(sim);
  auto after = run_cli(sim + " --profile " + profile.string());
  ASSERT_EQ(before.code, 0) << before.err;
  ASSERT_EQ(after.code, 0) << after.err;
  EXPECT_NE(json::parse(before.out)["iteration_time_s"],
            json::parse(after.out)["iteration_time_s"]);
  // A trace that does not name its files (the simulator's) is refused, saying why.
  auto sim_trace = run_cli("simulate tiny-llama-8l-cpu --plan " + (dir / "plan1.json").string() +
                           " --out " + (dir / "sim").string());
  ASSERT_EQ(sim_trace.code, 0) << sim_trace.err;
  auto bad = run_cli("calibrate " + (dir / "sim" / "trace.json").string() + " --out " +
                     (dir / "p2.json").string());
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("otherData.scenario_file is missing"), std::string::npos) << bad.err;
}

TEST(CliValidate, RefusesASuiteThatValidatesOnWhatItFitted) {
  const auto dir = scratch_dir("validate-bad");
  write_text(dir / "plan.json", three_stages(1));
  write_text(dir / "suite.json", R"({"version": 1, "name": "s", "cluster": "tiny-cpu-2x4",
    "calibration": [{"name": "a", "scenario": "tiny-llama-8l-cpu", "plan": "plan.json"}],
    "validation": [{"name": "b", "scenario": "tiny-llama-8l-cpu", "plan": "plan.json"}]})");
  auto r = run_cli("validate " + (dir / "suite.json").string() + " --out " + (dir / "o").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("validate on what was not fitted"), std::string::npos) << r.err;
  write_text(dir / "suite.json", R"({"version": 1, "name": "s", "cluster": "testbed-cpu-3m",
    "calibration": [{"name": "a", "scenario": "tiny-llama-8l-cpu", "plan": "plan.json"}],
    "validation": []})");
  r = run_cli("validate " + (dir / "suite.json").string() + " --out " + (dir / "o").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("not the suite's cluster"), std::string::npos) << r.err;
  // A run's name names its files in --out: a path would write outside it.
  for (const char* name : {"../escape", "/tmp/abs", "..", ""}) {
    write_text(dir / "suite.json",
               std::string(R"({"version": 1, "name": "s", "cluster": "tiny-cpu-2x4",
      "calibration": [{"name": ")") +
                   name + R"(", "scenario": "tiny-llama-8l-cpu", "plan": "plan.json"}],
      "validation": [{"name": "b", "scenario": "tiny-llama-8l-cpu", "plan": "plan.json"}]})");
    r = run_cli("validate " + (dir / "suite.json").string() + " --out " + (dir / "o").string());
    EXPECT_EQ(r.code, 2) << name;
    EXPECT_NE(r.err.find("/calibration/0/name"), std::string::npos) << name << ": " << r.err;
    EXPECT_NE(r.err.find("a file name"), std::string::npos) << name << ": " << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "escape"));
  // A quick list naming a run twice would run it twice under one name (its files in --out
  // overwritten): refused.
  write_text(dir / "plan2.json", three_stages(2));
  write_text(dir / "suite.json", R"({"version": 1, "name": "s", "cluster": "tiny-cpu-2x4",
    "calibration": [{"name": "a", "scenario": "tiny-llama-8l-cpu", "plan": "plan.json"}],
    "validation": [{"name": "b", "scenario": "tiny-llama-8l-cpu", "plan": "plan2.json"}],
    "quick": {"calibration": ["a", "a"], "validation": ["b"]}})");
  r = run_cli("validate " + (dir / "suite.json").string() + " --quick --out " +
              (dir / "o").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/quick/calibration/1: run \"a\" is listed twice"), std::string::npos)
      << r.err;
}

// A suite of one-device runs with --local: each run is one `hexisim train` process (no
// mpirun), calibrated and validated end to end. A suite's "backend" is cpu or cuda; a cuda
// suite is refused without --local (the testbed realises CPU clusters only).
TEST(CliValidate, OneDeviceRunsLocallyAndTheBackendIsChecked) {
  const auto dir = scratch_dir("validate-local");
  write_text(dir / "one4.json", one_stage(1, 4));
  write_text(dir / "one8.json", one_stage(2, 8));
  const std::string runs = R"("steps": 3,
    "calibration": [{"name": "a", "scenario": "tiny-llama-cpu", "plan": "one4.json"},
                    {"name": "b", "scenario": "tiny-llama-8l-cpu", "plan": "one8.json"}],
    "validation": [{"name": "c", "scenario": "tiny-llama-cpu-zero1", "plan": "one4.json"}]})";
  write_text(dir / "suite.json",
             R"({"version": 1, "name": "s", "cluster": "tiny-cpu-2x4", "backend": "cpu", )" + runs);
  auto r = run_cli("validate " + (dir / "suite.json").string() +
                   " --local --no-plot --json --out " + (dir / "o").string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto report = json::parse(r.out);
  ASSERT_EQ(report["plans"].size(), 1u);
  EXPECT_GT(report["plans"][0]["measured_s"].get<double>(), 0);
  EXPECT_GT(report["plans"][0]["simulated_s"].get<double>(), 0);
  for (const char* name : {"a", "b", "c"}) {
    const auto log = read_text(dir / "o" / (std::string(name) + ".log"));
    EXPECT_NE(log.find("\"losses\""), std::string::npos) << log;
  }
  // --rescore runs nothing: the same traces give the same report; without them, exit 2.
  const std::string before = read_text(dir / "o" / "report.json");
  for (const char* name : {"a", "b", "c"})
    std::filesystem::remove(dir / "o" / (std::string(name) + ".log"));
  r = run_cli("validate " + (dir / "suite.json").string() + " --rescore --no-plot --out " +
              (dir / "o").string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_text(dir / "o" / "report.json"), before);
  EXPECT_FALSE(std::filesystem::exists(dir / "o" / "a.log")) << "--rescore ran hexisim train";
  r = run_cli("validate " + (dir / "suite.json").string() + " --rescore --out " +
              (dir / "empty").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("no trace of run \"a\""), std::string::npos) << r.err;
  write_text(dir / "suite.json",
             R"({"version": 1, "name": "s", "cluster": "tiny-cpu-2x4", "backend": "tpu", )" + runs);
  r = run_cli("validate " + (dir / "suite.json").string() + " --local --out " +
              (dir / "o2").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/backend"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("\"cpu\" or \"cuda\""), std::string::npos) << r.err;
  write_text(
      dir / "suite.json",
      R"({"version": 1, "name": "s", "cluster": "tiny-cpu-2x4", "backend": "cuda", )" + runs);
  r = run_cli("validate " + (dir / "suite.json").string() + " --out " + (dir / "o3").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("run it with --local"), std::string::npos) << r.err;
}

// "rounds": every run executed twice, interleaved, each run's rounds joined into one
// measurement (each round's first step left out), the rounds' medians in the report; a
// --rescore with more rounds than the folder holds names the missing trace.
TEST(CliValidate, RoundsAreInterleavedAndJoined) {
  const auto dir = scratch_dir("validate-rounds");
  write_text(dir / "one4.json", one_stage(1, 4));
  write_text(dir / "one2.json", one_stage(2, 4));
  write_text(dir / "suite.json", R"({"version": 1, "name": "s", "cluster": "tiny-cpu-2x4",
    "steps": 3, "rounds": 2,
    "calibration": [{"name": "a", "scenario": "tiny-llama-cpu", "plan": "one4.json"},
                    {"name": "b", "scenario": "tiny-llama-cpu", "plan": "one2.json"}],
    "validation": [{"name": "c", "scenario": "tiny-llama-cpu-zero1", "plan": "one4.json"}]})");
  const auto out = dir / "o";
  auto r = run_cli("validate " + (dir / "suite.json").string() +
                   " --local --no-plot --json --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("[6/6] c (round 2 of 2)"), std::string::npos) << r.err;
  for (const char* name : {"a", "b", "c"}) {
    EXPECT_TRUE(std::filesystem::exists(out / (std::string(name) + ".trace.json")));
    EXPECT_TRUE(std::filesystem::exists(out / (std::string(name) + ".round2.trace.json")));
  }
  const auto report = json::parse(r.out);
  EXPECT_EQ(report["rounds"], 2);
  const auto& plan = report["plans"][0];
  EXPECT_EQ(plan["steps_used"], 4);  // 2 of 3 steps per round
  ASSERT_EQ(plan["round_measured_s"].size(), 2u);
  const double lo = std::min(plan["round_measured_s"][0].get<double>(),
                             plan["round_measured_s"][1].get<double>());
  const double hi = std::max(plan["round_measured_s"][0].get<double>(),
                             plan["round_measured_s"][1].get<double>());
  EXPECT_LE(plan["measured_min_s"].get<double>(), lo);
  EXPECT_GE(plan["measured_max_s"].get<double>(), hi);
  EXPECT_NE(read_text(out / "report.md").find("Each round's median"), std::string::npos);
  // The rounds against each other: one plan, two ordered pairs, the same error both ways up
  // to the ratio's direction.
  const auto& repro = report["reproducibility"];
  EXPECT_EQ(repro["round_pairs"], 2);
  const double x = hi / lo;
  EXPECT_NEAR(repro["mape"].get<double>(), ((x - 1) + (1 - 1 / x)) / 2, 1e-12);
  EXPECT_NEAR(repro["max_error"].get<double>(), x - 1, 1e-12);
  EXPECT_EQ(repro["kendall_tau"], 1.0);  // one plan: no pair to swap
  r = run_cli("validate " + (dir / "suite.json").string() +
              " --rescore --rounds 3 --no-plot --out " + out.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("a.round3.trace.json"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace hexi::testing
