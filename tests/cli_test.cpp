// End-to-end tests of the hexisim command line: the JSON contract (README command table) and
// bad input (exit code 2, one message naming the file, the JSON path, the expectation).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli_runner.hpp"

namespace hexi {
namespace {

using nlohmann::json;
using testing::run_cli;
using testing::scratch_dir;
using testing::write_text;

json parse_out(const testing::CliResult& r) {
  EXPECT_EQ(r.code, 0) << r.err;
  return json::parse(r.out);
}

TEST(Cli, InfoJson) {
  json j = parse_out(run_cli("info --json"));
  ASSERT_GE(j["gpus"].size(), 20u);
  for (const auto& g : j["gpus"]) {
    EXPECT_TRUE(g.contains("name") && g.contains("tflops") && g.contains("memory_gib"));
  }
  bool found = false;
  for (const auto& m : j["models"]) {
    if (m["name"] == "llama2-7b") {
      found = true;
      EXPECT_NEAR(m["params"].get<double>(), 6.74e9, 0.01e9);
    }
  }
  EXPECT_TRUE(found);
  EXPECT_NE(std::find(j["clusters"].begin(), j["clusters"].end(), "hexiscale-setting1"),
            j["clusters"].end());
  EXPECT_NE(std::find(j["scenarios"].begin(), j["scenarios"].end(), "hexiscale-setting1-llama2-7b"),
            j["scenarios"].end());
}

// The shipped compute model with a source for every value of every family, and the
// family of every GPU type: no unsourced number.
TEST(Cli, InfoProfileHasEverySource) {
  json j = parse_out(run_cli("info --profile --json"));
  ASSERT_EQ(j["profile"]["version"], 2);
  const json& archs = j["profile"]["architectures"];
  for (const char* family : {"volta", "turing", "ampere", "ampere-ga10x", "ada", "hopper",
                             "blackwell", "cpu", "other"}) {
    ASSERT_TRUE(archs.contains(family)) << family;
    EXPECT_EQ(archs[family].size(), 20u) << family;
    for (const auto& [name, p] : archs[family].items()) {
      EXPECT_TRUE(p["value"].is_number()) << family << " " << name;
      EXPECT_FALSE(p["source"].get<std::string>().empty()) << family << " " << name;
    }
  }
  EXPECT_NE(std::find(j["gpu_types"]["hopper"].begin(), j["gpu_types"]["hopper"].end(), "H100-SXM"),
            j["gpu_types"]["hopper"].end());
  EXPECT_TRUE(j["gpu_types"]["other"].empty());
  const auto text = run_cli("info --profile");
  EXPECT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("gemm_ceiling"), std::string::npos);
  EXPECT_NE(text.out.find("Sources"), std::string::npos);
}

TEST(Cli, ClusterShowPaperSettings) {
  struct Expect {
    const char* name;
    int gpus;
    double pflops;
  };
  for (auto e : {Expect{"hexiscale-setting1", 40, 5.0784}, Expect{"hexiscale-setting2", 32, 4.9312},
                 Expect{"hexiscale-setting3", 56, 8.9184}}) {
    json j = parse_out(run_cli(std::string("cluster show ") + e.name + " --json"));
    EXPECT_EQ(j["num_gpus"], e.gpus);
    EXPECT_NEAR(j["peak_pflops"].get<double>(), e.pflops, 1e-9);
    EXPECT_EQ(j["connected_parts"], 1);
    EXPECT_TRUE(j["machines"].is_array());
  }
  json s1 = parse_out(run_cli("cluster show hexiscale-setting1 --json"));
  EXPECT_EQ(s1["gpu_types"]["RTX4090"], 24);
  EXPECT_EQ(s1["gpu_types"]["RTX3080Ti"], 8);
  EXPECT_NEAR(s1["memory_gib"].get<double>(), 8 * 12 + 32 * 24, 1e-9);
  auto text = run_cli("cluster show hexiscale-setting2");
  EXPECT_EQ(text.code, 0);
  EXPECT_NE(text.out.find("A800-SXM-80GB"), std::string::npos);
}

TEST(Cli, ClusterGenWritesALoadableFile) {
  auto dir = scratch_dir("gen");
  auto file = (dir / "mix.json").string();
  json j = parse_out(run_cli(
      "cluster gen --mix A100:4x8,RTX4090:12x8 --machines-per-leaf 8 --out " + file + " --json"));
  EXPECT_EQ(j["num_gpus"], 128);
  EXPECT_EQ(j["num_leaves"], 2);
  json again = parse_out(run_cli("cluster show " + file + " --json"));
  EXPECT_EQ(again["num_gpus"], 128);
  EXPECT_EQ(again["gpu_types"]["A100-SXM-80GB"], 32);
  auto bad = run_cli("cluster gen --mix A100:4y8 --out " + file);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("expected TYPE:MACHINESxGPUS"), std::string::npos) << bad.err;
}

// The network's transport is said by cluster gen, written into the file, shown by cluster
// show (text and JSON) and used by the cost model; a file of several machines that names
// none gets a note naming the default.
TEST(Cli, ClusterTransportIsSaidShownAndNoted) {
  auto dir = scratch_dir("gen-transport");
  const std::string tcp = (dir / "tcp.json").string(), rdma = (dir / "rdma.json").string();
  auto gen = run_cli(
      "cluster gen --mix A100:2x8,RTX4090:2x8 --nic-GBps 1.25 --transport tcp --out " + tcp);
  ASSERT_EQ(gen.code, 0) << gen.err;
  EXPECT_NE(gen.out.find("network: tcp (Ethernet without RDMA"), std::string::npos) << gen.out;
  EXPECT_NE(gen.out.find("network-leaf  tcp"), std::string::npos) << gen.out;
  ASSERT_EQ(run_cli("cluster gen --mix A100:2x8,RTX4090:2x8 --nic-GBps 1.25 --out " + rdma).code,
            0);
  json file = json::parse(testing::read_text(tcp));
  EXPECT_EQ(file["network"]["transport"], "tcp");
  json shown = parse_out(run_cli("cluster show " + tcp + " --json"));
  EXPECT_EQ(shown["transport"], "tcp");
  EXPECT_EQ(shown["transport_named"], true);
  EXPECT_EQ(parse_out(run_cli("cluster show " + rdma + " --json"))["transport"], "rdma");
  // The same question on either file: TCP's achieved rates are below RDMA's.
  const std::string ask =
      " --model llama2-7b --global-batch 32 --seq-len 2048 --scheduler uniform "
      "--verify 0 --json";
  const double on_tcp =
      parse_out(run_cli("plan --cluster " + tcp + ask))["estimate"]["tokens_per_s"];
  const double on_rdma =
      parse_out(run_cli("plan --cluster " + rdma + ask))["estimate"]["tokens_per_s"];
  EXPECT_LT(on_tcp, on_rdma);
  // Without a transport: rdma assumed, said once by cluster show and by plan.
  file["network"].erase("transport");
  const std::string unnamed = (dir / "unnamed.json").string();
  testing::write_text(unnamed, file.dump(2));
  auto show = run_cli("cluster show " + unnamed);
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_NE(show.out.find("the default: the file names none"), std::string::npos) << show.out;
  EXPECT_NE(show.err.find("names no network transport: rdma (InfiniBand/RoCE) assumed"),
            std::string::npos)
      << show.err;
  EXPECT_EQ(parse_out(run_cli("cluster show " + unnamed + " --json"))["transport_named"], false);
  auto plan = run_cli("plan --cluster " + unnamed + ask);
  ASSERT_EQ(plan.code, 0) << plan.err;
  EXPECT_NE(plan.err.find("names no network transport"), std::string::npos) << plan.err;
  // A question with --mix and no --transport: the same note; with it, none.
  const std::string mix = "plan --mix A100:2x8 --nic-GBps 1.25" + ask;
  auto asked = run_cli(mix);
  ASSERT_EQ(asked.code, 0) << asked.err;
  EXPECT_NE(asked.err.find("names no network transport"), std::string::npos) << asked.err;
  auto said = run_cli(mix + " --transport tcp");
  ASSERT_EQ(said.code, 0) << said.err;
  EXPECT_EQ(said.err.find("names no network transport"), std::string::npos) << said.err;
  // A shipped cluster names its transport: no note.
  auto shipped = run_cli("cluster show hexiscale-setting1");
  EXPECT_EQ(shipped.err.find("names no network transport"), std::string::npos) << shipped.err;
  auto wrong = run_cli("cluster gen --mix A100:1x8 --transport infiniband --out " + rdma);
  EXPECT_EQ(wrong.code, 2);
  EXPECT_NE(wrong.err.find("infiniband not in {rdma,efa,tcp,tcpxo}"), std::string::npos)
      << wrong.err;
}

TEST(Cli, EstimateDefaultScenario) {
  json j = parse_out(run_cli("estimate hexiscale-setting1-llama2-7b --json"));
  EXPECT_GT(j["iteration_time_s"].get<double>(), 0);
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["mfu"].get<double>(), 0);
  EXPECT_LT(j["mfu"].get<double>(), 1);
  EXPECT_EQ(j["feasible"], true);
  ASSERT_EQ(j["devices"].size(), 40u);
  EXPECT_TRUE(j["devices"][0].contains("peak_memory_gib"));
  auto text = run_cli("estimate hexiscale-setting1-llama2-7b");
  EXPECT_EQ(text.code, 0);
  EXPECT_NE(text.out.find("tokens/s"), std::string::npos);
  EXPECT_NE(text.out.find("s per iteration with every kernel and transfer moved across"),
            std::string::npos)
      << text.out;
}

// estimate and simulate give the iteration time's range over the profile's and the links'
// uncertainties (the shipped GPU families and transports state them).
TEST(Cli, EstimateAndSimulateGiveTheRangeOfTheProfilesUncertainties) {
  const std::string ask = "hexiscale-setting3-llama-30b --plan " HEXISIM_TEST_ROOT
                          "/tests/golden/hexiscale-setting3-llama-30b--hexiscale/plan.json ";
  json e = parse_out(run_cli("estimate " + ask + "--json"));
  const double t = e["iteration_time_s"];
  const double low = e["iteration_time_s_range"][0], high = e["iteration_time_s_range"][1];
  EXPECT_LE(low, t);
  EXPECT_GE(high, t);
  EXPECT_GT(high - low, 0.02 * t);  // GeForce cards: GEMM uncertainties of 7-15 %
  EXPECT_LT(high - low, 0.5 * t);
  json s = parse_out(run_cli("simulate " + ask + "--fidelity stage --json"));
  const double sim = s["iteration_time_s"];
  EXPECT_NEAR(s["iteration_time_s_range"][0].get<double>(), low * sim / t, 1e-9 * sim);
  EXPECT_NEAR(s["iteration_time_s_range"][1].get<double>(), high * sim / t, 1e-9 * sim);
  EXPECT_EQ(s["estimate"]["iteration_time_s_range"], e["iteration_time_s_range"]);
  auto dir = scratch_dir("no-uncertainty");
  const std::string profile = (dir / "p.json").string();
  testing::write_text(profile, R"({"version": 2, "default": {"uncertainty_gemm": 0,
      "uncertainty_attention": 0, "uncertainty_memory": 0}})");
  // Kernels stated exact: only the transfers move (this setting is compute-bound).
  json none = parse_out(run_cli("estimate " + ask + "--profile " + profile + " --json"));
  EXPECT_DOUBLE_EQ(none["iteration_time_s"].get<double>(), t);
  const double narrow = none["iteration_time_s_range"][1].get<double>() -
                        none["iteration_time_s_range"][0].get<double>();
  EXPECT_LT(narrow, 0.5 * (high - low));
}

// --profile replaces the device model in every command that models time, not only in
// simulate: a GEMM ceiling of 0.1 makes plan's, estimate's and seq's iterations slower (the
// same plan, estimated, by its GEMM-bound share); a bad profile is bad input naming the file.
TEST(Cli, ProfileFlagReachesPlanEstimateAndSeq) {
  auto dir = scratch_dir("profile-flag");
  const auto slow = dir / "slow.json", bad = dir / "bad.json", plan = dir / "plan.json";
  write_text(slow, R"({"version": 2, "default": {"gemm_ceiling": {"value": 0.1,
                     "source": "a slow GEMM for this test"}}})");
  write_text(bad, R"({"version": 2, "default": {"gemm_ceiling": {"value": 0.1}}})");
  const std::string sc = "testbed-h100-a100-llama2-13b";
  auto time_of = [](const testing::CliResult& r, const char* where) {
    EXPECT_EQ(r.code, 0) << r.err;
    const json j = json::parse(r.out);
    return where[0] ? j[where]["iteration_time_s"].get<double>()
                    : j["iteration_time_s"].get<double>();
  };
  const double planned =
      time_of(run_cli("plan " + sc + " --json --out " + plan.string()), "estimate");
  const double planned_slow =
      time_of(run_cli("plan " + sc + " --json --profile " + slow.string()), "estimate");
  EXPECT_GT(planned_slow, 2 * planned);
  const std::string est = "estimate " + sc + " --plan " + plan.string() + " --json";
  EXPECT_DOUBLE_EQ(time_of(run_cli(est), ""), planned);
  EXPECT_GT(time_of(run_cli(est + " --profile " + slow.string()), ""), 2 * planned);
  const std::string seq = "seq " + sc + " --scheduler ring --json";
  EXPECT_GT(time_of(run_cli(seq + " --profile " + slow.string()), ""),
            1.5 * time_of(run_cli(seq), ""));
  for (const std::string& command : {est, seq, "plan " + sc}) {
    auto r = run_cli(command + " --profile " + bad.string());
    EXPECT_EQ(r.code, 2) << command;
    EXPECT_NE(r.err.find(bad.string() + ": /default/gemm_ceiling: missing required field"),
              std::string::npos)
        << r.err;
  }
}

TEST(Cli, EveryCommandHasHelp) {
  for (const char* cmd : {"--help", "info --help", "cluster --help", "cluster show --help",
                          "cluster gen --help", "estimate --help"}) {
    auto r = run_cli(cmd);
    EXPECT_EQ(r.code, 0) << cmd;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << cmd;
  }
}

const char* kCluster = R"({"version": 1, "name": "c", "network": {"nic_GBps": 12.5},
  "machines": [{"name": "m", "gpu": "A100", "gpus": 4}]})";

// Each case writes a cluster (or plan) file with one fault and expects exit code 2 and
// a message naming the file and the JSON path.
TEST(Cli, BadClusterFiles) {
  auto dir = scratch_dir("badcluster");
  struct Case {
    const char* what;
    std::string text;
    std::string expected;
  };
  const std::string base = kCluster;
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string t = base;
    return t.replace(t.find(from), from.size(), to);
  };
  const Case cases[] = {
      {"malformed", edit("\"gpus\": 4}", "\"gpus\": 4"), "invalid JSON at line 2"},
      {"unknown gpu", edit("\"A100\"", "\"A100X\""),
       "/machines/0/gpu: expected a GPU type from the catalog"},
      {"negative bw", edit("12.5", "-12.5"),
       "/network/nic_GBps: expected a number in [1e-06, 1e+06], got -12.5"},
      {"zero bw", edit("12.5", "0"),
       "/network/nic_GBps: expected a number in [1e-06, 1e+06], got 0"},
      {"missing field", edit("\"gpus\": 4", "\"gpuz\": 4"), "/machines/0: unknown field \"gpuz\""},
      {"missing network", edit("\"network\"", "\"netwrk\""), "unknown field \"netwrk\""},
  };
  for (const auto& c : cases) {
    std::string stem = c.what;
    std::replace(stem.begin(), stem.end(), ' ', '_');
    auto file = dir / (stem + ".json");
    write_text(file, c.text);
    auto r = run_cli("cluster show " + file.string());
    EXPECT_EQ(r.code, 2) << c.what;
    EXPECT_NE(r.err.find(file.string() + ":"), std::string::npos) << c.what << ": " << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << c.what << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one message: " << r.err;
    EXPECT_TRUE(r.out.empty()) << c.what;
  }
}

TEST(Cli, BadPlans) {
  auto dir = scratch_dir("badplan");
  write_text(dir / "cluster.json", kCluster);
  write_text(dir / "scenario.json", R"({"version": 1, "name": "s", "cluster": "cluster.json",
    "model": "tiny-llama-8l", "training": {"global_batch": 4, "seq_len": 64}})");
  const std::string good = R"({"version": 1, "pipelines": [
    {"batch": 2, "stages": [{"devices": [0], "layers": [0, 4]}, {"devices": [1], "layers": [4, 8]}]},
    {"batch": 2, "stages": [{"devices": [2, 3], "layers": [0, 8]}]}]})";
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    return t.replace(t.find(from), from.size(), to);
  };
  write_text(dir / "good.json", good);
  const std::string scenario = (dir / "scenario.json").string();
  json ok = parse_out(
      run_cli("estimate " + scenario + " --plan " + (dir / "good.json").string() + " --json"));
  EXPECT_EQ(ok["feasible"], true);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {edit("[2, 3]", "[2, 7]"), "/pipelines/1/stages/0/devices/1: device 7 does not exist"},
      {edit("[4, 8]}]}", "[5, 8]}]}"),
       "/pipelines/0/stages/1/layers: layers [4, 5) are not assigned"},
      {edit("[4, 8]}]}", "[3, 8]}]}"),
       "/pipelines/0/stages/1/layers: layers [3, 4) are assigned twice"},
      {edit("{\"batch\": 2, \"stages\": [{\"devices\": [2",
            "{\"batch\": 3, \"stages\": [{\"devices\": [2"),
       "/pipelines: batch shares sum to 5 sequences, expected the global batch 4"},
      {edit("\"pipelines\"", "\"pipeline\""), "unknown field \"pipeline\""},
  };
  int i = 0;
  for (const auto& [text, expected] : cases) {
    auto file = dir / ("plan" + std::to_string(i++) + ".json");
    write_text(file, text);
    auto r = run_cli("estimate " + scenario + " --plan " + file.string());
    EXPECT_EQ(r.code, 2) << expected;
    EXPECT_NE(r.err.find(file.string() + ": "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
  }
}

TEST(Cli, BadArgumentsAndNames) {
  EXPECT_EQ(run_cli("estimate").code, 2);                    // missing SCENARIO
  EXPECT_EQ(run_cli("frobnicate").code, 2);                  // unknown subcommand
  EXPECT_EQ(run_cli("cluster gen --mix A100:1x8").code, 2);  // missing --out
  auto r = run_cli("estimate no-such-scenario --plan x.json");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown scenario \"no-such-scenario\""), std::string::npos);
  r = run_cli("estimate hexiscale-setting1-llama2-7b --plan /nonexistent/plan.json");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/nonexistent/plan.json: cannot open file"), std::string::npos);
  r = run_cli("estimate hexiscale-setting2-llama2-7b");  // names no plan
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("no plan given"), std::string::npos);
}

}  // namespace
}  // namespace hexi
