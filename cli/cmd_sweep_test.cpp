// `hexisim sweep` and `hexisim plot` end to end: results and CSV of the tiny sweep
// (scenarios/sweeps/tiny.json), resuming after a torn row, five `kill -9`s at random
// moments with no row lost or duplicated, the same metrics whatever --jobs or MPI ranks,
// bad input, and figures.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/cli_runner.hpp"

namespace hexi::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kTiny = std::string(HEXISIM_TEST_ROOT) + "/scenarios/sweeps/tiny.json";

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::size_t at = 0;
  for (auto nl = text.find('\n'); nl != std::string::npos; nl = text.find('\n', at)) {
    out.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  return out;
}

std::vector<json> rows_of(const fs::path& dir) {
  std::vector<json> rows;
  for (const auto& line : lines_of(read_text(dir / "results.jsonl")))
    rows.push_back(json::parse(line));
  return rows;
}

bool have_matplotlib() {
  return std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") == 0;
}

// Per point key: what must not depend on how the sweep ran (metrics, plan, error).
std::map<std::string, json> outcomes(const fs::path& dir) {
  std::map<std::string, json> out;
  for (const json& r : rows_of(dir)) {
    json o = {{"metrics", r.value("metrics", json())},
              {"plan_digest", r.value("plan_digest", json())},
              {"error", r.value("error", json())},
              {"digests", r["digests"]}};
    EXPECT_TRUE(out.emplace(r["key"].get<std::string>(), o).second) << "duplicate " << r["key"];
  }
  return out;
}

// The CSV without its last two columns (wall and search times differ between runs).
std::string csv_without_times(const fs::path& dir) {
  std::string out;
  for (const auto& line : lines_of(read_text(dir / "results.csv"))) {
    const auto last = line.rfind(',');
    out += line.substr(0, line.rfind(',', last - 1)) + "\n";
  }
  return out;
}

TEST(CliSweep, TinySweepEndToEnd) {
  const auto dir = scratch_dir("sweep-e2e");
  auto r = run_cli("sweep " + kTiny + " --out " + dir.string() + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  json s = json::parse(r.out);
  EXPECT_EQ(s["points"], 16);
  EXPECT_EQ(s["done"], 16);
  EXPECT_EQ(s["computed"], 16);
  EXPECT_EQ(s["failed"], 8);  // llama2-70b fits on neither 4-GPU mix
  const auto rows = rows_of(dir);
  ASSERT_EQ(rows.size(), 16u);
  for (const json& row : rows) {
    EXPECT_EQ(row["version"], 1);
    for (const char* k : {"cluster", "model", "training", "scheduler", "gpus"})
      EXPECT_EQ(row["digests"][k].get<std::string>().size(), 16u) << k;
    EXPECT_GE(row["wall_time_s"].get<double>(), 0);
    if (row["point"]["model"] == "llama2-70b") {
      EXPECT_EQ(row["error"]["kind"], "bad_input") << row.dump();
      EXPECT_NE(row["error"]["message"].get<std::string>().find("needs at least"),
                std::string::npos);
    } else {
      ASSERT_TRUE(row.contains("metrics")) << row.dump();
      EXPECT_GT(row["metrics"]["tokens_per_s"].get<double>(), 0);
      EXPECT_EQ(row["metrics"].size(), 7u);  // exactly the metrics the sweep keeps
      EXPECT_EQ(row["metrics"]["num_gpus"], 4);
    }
  }
  const auto csv = lines_of(read_text(dir / "results.csv"));
  ASSERT_EQ(csv.size(), 17u);
  EXPECT_EQ(csv[0].rfind("index,cluster,model,seq_len,global_batch,scheduler,fidelity,seed,status,"
                         "tokens_per_s,",
                         0),
            0u)
      << csv[0];
  for (int i = 1; i <= 16; ++i) EXPECT_EQ(csv[i].rfind(std::to_string(i - 1) + ",", 0), 0u);
  // A second run finds every point done and computes nothing.
  const std::string before = read_text(dir / "results.jsonl");
  r = run_cli("sweep " + kTiny + " --out " + dir.string() + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["computed"], 0);
  EXPECT_EQ(read_text(dir / "results.jsonl"), before);
  fs::remove_all(dir);
}

TEST(CliSweep, ResumesAfterATornRow) {
  const auto dir = scratch_dir("sweep-torn");
  ASSERT_EQ(run_cli("sweep " + kTiny + " --out " + dir.string()).code, 0);
  const std::string full = read_text(dir / "results.jsonl");
  const auto lines = lines_of(full);
  // Three whole rows and half of the fourth: a write cut short.
  const std::string kept = lines[0] + "\n" + lines[1] + "\n" + lines[2] + "\n";
  write_text(dir / "results.jsonl", kept + lines[3].substr(0, lines[3].size() / 2));
  auto r = run_cli("sweep " + kTiny + " --out " + dir.string() + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("ended in a partial row"), std::string::npos) << r.err;
  EXPECT_EQ(json::parse(r.out)["computed"], 13);
  const std::string after = read_text(dir / "results.jsonl");
  EXPECT_EQ(after.substr(0, kept.size()), kept);  // the whole rows are kept as they were
  EXPECT_EQ(outcomes(dir).size(), 16u);
  EXPECT_EQ(rows_of(dir).size(), 16u);
  fs::remove_all(dir);
}

// --list names every point by the key its row will carry and computes nothing; after the
// sweep, --retry-failed computes exactly the failed points again (llama2-70b fits on neither
// mix, so they fail again) and leaves every successful row's bytes as they were.
TEST(CliSweep, ListComputesNothingAndRetryFailedRedoesOnlyTheFailures) {
  const auto dir = scratch_dir("sweep-list-retry");
  const auto out = dir / "out";
  auto r = run_cli("sweep " + kTiny + " --list --json --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(fs::exists(out));
  const json list = json::parse(r.out);
  std::set<std::string> listed;
  for (const json& p : list["points"]) listed.insert(p["key"].get<std::string>());
  EXPECT_EQ(listed.size(), 16u);
  ASSERT_EQ(run_cli("sweep " + kTiny + " --out " + out.string()).code, 0);
  std::set<std::string> keys;
  std::string succeeded;
  for (const auto& line : lines_of(read_text(out / "results.jsonl"))) {
    const json row = json::parse(line);
    keys.insert(row["key"].get<std::string>());
    if (!row.contains("error")) succeeded += line + "\n";
  }
  EXPECT_EQ(keys, listed);
  r = run_cli("sweep " + kTiny + " --retry-failed --json --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const json summary = json::parse(r.out);
  EXPECT_EQ(summary["computed"], 8);
  EXPECT_EQ(summary["failed"], 8);
  EXPECT_EQ(summary["done"], 16);
  std::string kept;
  int rows = 0;
  for (const auto& line : lines_of(read_text(out / "results.jsonl"))) {
    ++rows;
    if (!json::parse(line).contains("error")) kept += line + "\n";
  }
  EXPECT_EQ(rows, 16);
  EXPECT_EQ(kept, succeeded);
  r = run_cli("sweep " + kTiny + " --json --out " + out.string());
  EXPECT_EQ(json::parse(r.out)["computed"], 0);  // without the flag, failures stay done
  fs::remove_all(dir);
}

// A results.jsonl that is no regular file (a FIFO would block the resume's read forever, a
// link send the rows elsewhere) is refused at once, and left as it is.
TEST(CliSweep, ResultsThatAreNoRegularFileAreRefused) {
  const auto dir = scratch_dir("sweep-fifo");
  ASSERT_EQ(::mkfifo((dir / "results.jsonl").c_str(), 0600), 0);
  auto r = run_cli("sweep " + kTiny + " --out " + dir.string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find((dir / "results.jsonl").string() + ": is no regular file"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(fs::is_fifo(dir / "results.jsonl"));
  fs::remove(dir / "results.jsonl");
  write_text(dir / "elsewhere.jsonl", "");
  fs::create_symlink("elsewhere.jsonl", dir / "results.jsonl");
  r = run_cli("sweep " + kTiny + " --out " + dir.string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("results.jsonl: is a link"), std::string::npos) << r.err;
  EXPECT_EQ(read_text(dir / "elsewhere.jsonl"), "");
  fs::remove_all(dir);
}

// A sweep long enough to be killed in the middle: 48 points of 0.05-0.3 s each (two
// quick schedulers on 48 GPUs of two types), 3-4 s on two workers.
std::string long_sweep(const fs::path& dir) {
  const auto file = dir / "long.json";
  write_text(file, R"({"version": 1, "name": "long",
    "axes": {"cluster": [{"mix": "A100:2x8,RTX4090:4x8"}], "model": ["llama2-7b", "llama2-13b"],
             "global_batch": [16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192],
             "scheduler": ["flashflex", "metis-like"]},
    "metrics": ["tokens_per_s", "mfu"]})");
  return file.string();
}

// Starts `hexisim ARGS...` as a child process (no shell: the pid is hexisim's), with `env`
// (NAME=VALUE) added to its environment.
pid_t spawn(const std::vector<std::string>& args, const std::string& env = "") {
  const pid_t pid = fork();
  if (pid == 0) {
    if (!env.empty()) putenv(const_cast<char*>(env.c_str()));
    const char* bin = std::getenv("HEXISIM_BIN");
    std::vector<char*> argv{const_cast<char*>(bin)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    freopen("/dev/null", "w", stdout);
    freopen("/dev/null", "w", stderr);
    execv(bin, argv.data());
    _exit(127);
  }
  return pid;
}

// Processes alive (not zombies) whose command line contains `text`.
int live_processes_naming(const std::string& text) {
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = read_text(e.path() / "cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    const std::string stat = read_text(e.path() / "stat");
    const auto paren = stat.rfind(')');
    const bool zombie =
        paren != std::string::npos && stat.size() > paren + 2 && stat[paren + 2] == 'Z';
    if (!zombie && cmd.find(text) != std::string::npos) ++n;
  }
  return n;
}

// Five runs killed (SIGKILL, HEXISIM_SWEEP_FAULT) right after a durable row or in the middle
// of writing one, at rows drawn from a fixed seed: each kill leaves exactly the rows written
// before it (a torn row dropped by the next run), no worker outlives its parent, and the
// resumed sweep ends with the rows of an uninterrupted one.
TEST(CliSweep, FiveKillNinesLoseAndDuplicateNothing) {
  const auto dir = scratch_dir("sweep-kill");
  const std::string sweep = long_sweep(dir);
  const auto ref = dir / "ref";
  ASSERT_EQ(run_cli("sweep " + sweep + " --out " + ref.string() + " --jobs 2").code, 0);
  const auto out = dir / "out";
  std::mt19937 rng(16);  // fixed: the same kills every run
  std::uniform_int_distribution<int> kill_row(1, 6);
  auto newlines = [&] {
    const std::string text = read_text(out / "results.jsonl");
    return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
  };
  int whole = 0;  // whole rows in results.jsonl
  for (int k = 0; k < 5; ++k) {
    const bool mid = k % 2 == 1;
    const int n = kill_row(rng);
    const std::string fault = std::string(mid ? "mid-row=" : "after-row=") + std::to_string(n);
    const pid_t pid = spawn({"sweep", sweep, "--out", out.string(), "--jobs", "2"},
                            "HEXISIM_SWEEP_FAULT=" + fault);
    ASSERT_GT(pid, 0);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << fault << ": " << status;
    // Its workers die with it (PR_SET_PDEATHSIG).
    for (int wait = 0; wait < 50 && live_processes_naming(out.string()) > 0; ++wait)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(live_processes_naming(out.string()), 0) << "a worker outlived its killed sweep";
    whole += mid ? n - 1 : n;
    EXPECT_EQ(newlines(), whole) << fault;
  }
  auto r = run_cli("sweep " + sweep + " --out " + out.string() + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["done"], 48);
  const std::string text = read_text(out / "results.jsonl");
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  std::set<std::string> keys;
  for (const json& row : rows_of(out)) EXPECT_TRUE(keys.insert(row["key"]).second) << row["key"];
  EXPECT_EQ(keys.size(), 48u);
  EXPECT_EQ(outcomes(out), outcomes(ref));  // killed and resumed: the same rows
  EXPECT_EQ(csv_without_times(out), csv_without_times(ref));
  fs::remove_all(dir);
}

TEST(CliSweep, TwoJobsGiveTheSameMetricsAsOne) {
  const auto a = scratch_dir("sweep-jobs1"), b = scratch_dir("sweep-jobs2");
  ASSERT_EQ(run_cli("sweep " + kTiny + " --out " + a.string() + " --jobs 1").code, 0);
  auto r = run_cli("sweep " + kTiny + " --out " + b.string() + " --jobs 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("on 2 local workers"), std::string::npos) << r.out;
  EXPECT_EQ(outcomes(a), outcomes(b));
  EXPECT_EQ(csv_without_times(a), csv_without_times(b));  // sorted by point, whatever the order
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(CliSweep, TwoMpiRanksGiveTheSameMetricsAsOneJob) {
  const auto a = scratch_dir("sweep-mpi1"), b = scratch_dir("sweep-mpi2");
  ASSERT_EQ(run_cli("sweep " + kTiny + " --out " + a.string()).code, 0);
  const std::string cmd =
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --oversubscribe " +
      std::string(std::getenv("HEXISIM_BIN")) + " sweep " + kTiny + " --out " + b.string() + " >" +
      (b / "stdout").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_text(b / "stdout");
  EXPECT_NE(read_text(b / "stdout").find("2 MPI ranks"), std::string::npos)
      << read_text(b / "stdout");
  EXPECT_EQ(outcomes(a), outcomes(b));
  EXPECT_EQ(csv_without_times(a), csv_without_times(b));
  fs::remove_all(a);
  fs::remove_all(b);
}

// Layer and stage fidelity simulate the searched plan as well (sim_* metrics).
TEST(CliSweep, SimulatedPointsCarryTheSimulatorsMetrics) {
  const auto dir = scratch_dir("sweep-sim");
  write_text(dir / "sim.json", R"({"version": 1, "name": "sim", "training": {"seq_len": 1024},
    "points": [{"cluster": {"mix": "A100:1x4"}, "model": "llama2-7b", "global_batch": 8,
                "fidelity": "stage"},
               {"cluster": {"mix": "A100:1x4"}, "model": "llama2-7b", "global_batch": 8}],
    "metrics": ["tokens_per_s", "sim_tokens_per_s", "sim_vs_estimate"]})");
  auto r = run_cli("sweep " + (dir / "sim.json").string() + " --out " + (dir / "out").string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = rows_of(dir / "out");
  ASSERT_EQ(rows.size(), 2u);
  for (const json& row : rows) {
    const bool simulated = row["point"]["fidelity"] == "stage";
    EXPECT_EQ(row["metrics"].contains("sim_tokens_per_s"), simulated) << row.dump();
    if (simulated) {
      // sim_vs_estimate is the closed form's tokens/s over the simulated one; the two agree
      // within 2x the observed 8.1e-6.
      const json& m = row["metrics"];
      const double ratio = m["sim_vs_estimate"].get<double>();
      EXPECT_NEAR(ratio, m["tokens_per_s"].get<double>() / m["sim_tokens_per_s"].get<double>(),
                  1e-12);
      EXPECT_NEAR(ratio, 1.0, 1.6e-5) << row.dump();
    }
  }
  fs::remove_all(dir);
}

// Sequence schedulers (HexiSeq and its baselines) in a sweep: a layout's metrics, its
// simulation at stage fidelity, and HexiSeq options read from the scheduler entry.
TEST(CliSweep, SequenceSchedulersPlanLayouts) {
  const auto dir = scratch_dir("sweep-seq");
  write_text(dir / "seq.json", R"({"version": 1, "name": "seq",
    "training": {"global_batch": 1, "micro_batch": 1, "seq_len": 65536, "zero_stage": 3,
                 "recompute": "full"},
    "points": [
      {"cluster": "hexiseq-testbed-h100-a100", "model": "llama-13b-1m",
       "scheduler": {"name": "hexiseq", "solver": "glpk", "label": "hexiseq"}},
      {"cluster": "hexiseq-testbed-h100-a100", "model": "llama-13b-1m",
       "scheduler": {"name": "ring", "idle_slow_types": false, "label": "ring"},
       "fidelity": "stage"},
      {"cluster": "hexiseq-testbed-h100-a100", "model": "llama-13b-1m",
       "scheduler": {"name": "hexiseq", "rounds": 0, "label": "bad"}}]})");
  auto r = run_cli("sweep " + (dir / "seq.json").string() + " --out " + (dir / "out").string());
  ASSERT_EQ(r.code, 0) << r.err;
  std::map<std::string, json> by;
  for (const json& row : rows_of(dir / "out")) by[row["point"]["scheduler"]] = row;
  ASSERT_EQ(by.size(), 3u);
  const json& hq = by["hexiseq"]["metrics"];
  const json& ring = by["ring"]["metrics"];
  EXPECT_EQ(hq["gpus_used"], 8);  // the H100s: the A100s behind 25 GB/s only slow it down
  EXPECT_GE(hq["sequence_groups"].get<int>(), 1);
  EXPECT_FALSE(hq.contains("pipelines")) << hq.dump();  // a pipeline plan's metric
  EXPECT_EQ(ring["sequence_groups"], 16);               // one device per ring group
  EXPECT_GT(hq["tokens_per_s"].get<double>(), ring["tokens_per_s"].get<double>());
  EXPECT_FALSE(hq.contains("sim_tokens_per_s"));
  // The closed form and the stage-fidelity simulation of the ring layout: 1.0073 observed,
  // held within 2x that.
  EXPECT_NEAR(ring["sim_vs_estimate"].get<double>(),
              ring["tokens_per_s"].get<double>() / ring["sim_tokens_per_s"].get<double>(), 1e-12);
  EXPECT_NEAR(ring["sim_vs_estimate"].get<double>(), 1.0, 0.015) << ring.dump();
  EXPECT_NE(by["bad"]["error"]["message"].get<std::string>().find("/rounds: expected an integer"),
            std::string::npos)
      << by["bad"].dump();
  fs::remove_all(dir);
}

// A "prices" axis: the cluster's cost under a price book beside its tokens/s, by the book's
// arithmetic (here by hand); a GPU type the book lacks fails the point, not the sweep; the
// Pareto plot of cost against throughput.
TEST(CliSweep, PricesAxisAddsTheClustersCost) {
  const auto dir = scratch_dir("sweep-prices");
  write_text(dir / "p.json", R"({"version": 1, "name": "p", "training": {"seq_len": 1024},
    "axes": {"cluster": [{"mix": "A100-SXM-80GB:1x4"}, {"mix": "RTX4090:2x4"},
                         {"mix": "V100:1x4"}],
             "model": ["llama2-7b"], "global_batch": [8], "prices": ["public-2026-11"]}})");
  auto r = run_cli("sweep " + (dir / "p.json").string() + " --out " + (dir / "out").string());
  ASSERT_EQ(r.code, 0) << r.err;
  const json book = json::parse(
      read_text(std::string(HEXISIM_TEST_ROOT) + "/scenarios/prices/public-2026-11.json"));
  auto priced = [&](const std::string& gpu, const char* what) {
    for (const json& g : book["gpus"]) {
      if (g["gpu"] == gpu && g.contains(what)) return g[what]["value"].get<double>();
    }
    return book["machine"][what]["value"].get<double>();  // server_usd: the machine's
  };
  const double network = book["machine"]["network_usd"]["value"];
  std::map<std::string, json> by;
  for (const json& row : rows_of(dir / "out")) by[row["point"]["cluster"]] = row;
  ASSERT_EQ(by.size(), 3u);
  const json& a100 = by["A100-SXM-80GB:1x4"];
  EXPECT_NE(a100["key"].get<std::string>().find(";prices=public-2026-11"), std::string::npos);
  EXPECT_EQ(a100["point"]["prices"], "public-2026-11");
  EXPECT_TRUE(a100["digests"].contains("prices"));
  const json& m = a100["metrics"];
  const double capex =
      4 * priced("A100-SXM-80GB", "purchase_usd") + priced("A100-SXM-80GB", "server_usd") + network;
  EXPECT_NEAR(m["capex_usd"].get<double>(), capex, 1e-6);
  EXPECT_NEAR(m["cloud_usd_per_hour"].get<double>(),
              4 * priced("A100-SXM-80GB", "cloud_usd_per_hour"), 1e-9);
  // Two machines of 4090s cost twice one.
  const double one4090 =
      4 * priced("RTX4090", "purchase_usd") + priced("RTX4090", "server_usd") + network;
  EXPECT_NEAR(by["RTX4090:2x4"]["metrics"]["capex_usd"].get<double>(), 2 * one4090, 1e-6);
  // $/M tokens from $/h and tokens/s.
  EXPECT_NEAR(m["usd_per_m_tokens"].get<double>(),
              m["usd_per_hour"].get<double>() / (m["tokens_per_s"].get<double>() * 3600 / 1e6),
              1e-12);
  EXPECT_NE(by["V100:1x4"]["error"]["message"].get<std::string>().find(
                "GPU type V100 (machine V100) is not in price book \"public-2026-11\""),
            std::string::npos)
      << by["V100:1x4"].dump();
  r = run_cli("plot " + (dir / "out").string() +
              " --kind pareto --x usd_per_hour --y tokens_per_s --out " +
              (dir / "front.png").string());
  if (!have_matplotlib()) {
    EXPECT_EQ(r.code, 1) << r.err;  // plot's exit code for a missing matplotlib
    EXPECT_NE(r.err.find("matplotlib is not installed"), std::string::npos) << r.err;
    fs::remove_all(dir);
    GTEST_SKIP() << "the Pareto figure: python3-matplotlib is not installed (scripts/setup.sh)";
  }
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_text(dir / "front.png").substr(1, 3), "PNG");
  fs::remove_all(dir);
}

// `hexisim reproduce hexiseq --quick`: the sweep, the report with the paper's figures beside
// hexisim's, the figure; a rerun computes nothing and writes the same report.
TEST(CliReproduce, HexiSeqQuickWritesTheReportAndResumes) {
  const auto dir = scratch_dir("reproduce");
  auto r = run_cli("reproduce hexiseq --quick --jobs 2 --out " + dir.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string report = read_text(dir / "report.md");
  EXPECT_NE(r.out.find(report), std::string::npos);  // printed as written
  for (const char* text :
       {"# HexiSeq (arXiv 2605.07569), reproduced with hexisim", "1.36× on average",
        "| hexiseq-testbed-h100-a100 (8 H100 + 8 A100, one NIC per machine) | llama-13b-1m, 64K |",
        "| hexiseq-paper-testbed-h100-a100 (8 H100 + 8 A100, a NIC per GPU) | llama-13b-1m, 64K | "
        "8 |",
        "## 2. FLOP-comparable pairs", "| hexiseq-56-h100-a100 |", "## What differs"}) {
    EXPECT_NE(report.find(text), std::string::npos) << text;
  }
  EXPECT_EQ(report.find("Failed points"), std::string::npos) << report;
  const bool figures = have_matplotlib();
  if (figures) {
    EXPECT_TRUE(fs::exists(dir / "schedulers.png"));
    EXPECT_NE(report.find("![Closed-form tokens/s"), std::string::npos);
  } else {  // the report without figures, and a warning saying so
    EXPECT_FALSE(fs::exists(dir / "schedulers.png"));
    EXPECT_NE(r.err.find("not drawn"), std::string::npos) << r.err;
  }
  r = run_cli("reproduce hexiseq --quick --no-figures --out " + dir.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("66 already in"), std::string::npos) << r.out;
  const std::string again = read_text(dir / "report.md");
  EXPECT_EQ(again, report.substr(0, report.find("\n## Figures")));  // without its figures
  EXPECT_EQ(run_cli("reproduce hexiscale-v2").code, 2);
  fs::remove_all(dir);
  if (!figures)
    GTEST_SKIP() << "the figures: python3-matplotlib is not installed (scripts/setup.sh)";
}

// `hexisim reproduce hexiscale --quick` end to end: every scheduler searched on the papers'
// settings (46 points), the report's four sections and its notes, the two failures it
// explains (uniform finds no 13B plan that fits setting 1 or 2: every stage of a uniform plan
// holds an equal layer share), and a rerun that computes nothing and writes the same report.
TEST(CliReproduce, HexiScaleQuickEndToEnd) {
  const auto dir = scratch_dir("reproduce-hexiscale");
  auto r = run_cli("reproduce hexiscale --quick --no-figures --jobs 2 --out " + dir.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string report = read_text(dir / "report.md");
  for (const char* text :
       {"# HexiScale (arXiv 2409.01143), reproduced with hexisim",
        "46 points of `scenarios/sweeps/reproduce-hexiscale-quick.json` (2 failed",
        "## 1. HexiScale against the heterogeneity-aware baselines, same clusters",
        "## 2. Heterogeneous clusters against homogeneous ones of about the same FLOPS",
        "## 3. HexiScale's search against random graph partitioning", "## 4. The search at scale",
        "## What differs from the paper, and why", "## Failed points"}) {
    EXPECT_NE(report.find(text), std::string::npos) << text;
  }
  EXPECT_EQ(lines_of(read_text(dir / "results.jsonl")).size(), 46u);
  int failed = 0;
  for (const json& row : rows_of(dir)) {
    if (!row.contains("error")) continue;
    ++failed;
    EXPECT_EQ(row["point"]["scheduler"], "uniform") << row.dump();
    EXPECT_EQ(row["point"]["model"], "llama2-13b") << row.dump();
  }
  EXPECT_EQ(failed, 2);
  r = run_cli("reproduce hexiscale --quick --no-figures --out " + dir.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("46 already in"), std::string::npos) << r.out;
  EXPECT_EQ(read_text(dir / "report.md"), report);
  fs::remove_all(dir);
}

TEST(CliSweep, BadInputExitsWithTwoNamingFileAndPath) {
  const auto dir = scratch_dir("sweep-bad");
  auto r = run_cli("sweep " + (dir / "none.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("none.json"), std::string::npos) << r.err;
  write_text(dir / "syntax.json", "{\"version\": 1,");
  r = run_cli("sweep " + (dir / "syntax.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("syntax.json"), std::string::npos) << r.err;
  write_text(dir / "mix.json", R"({"version": 1, "name": "m",
    "axes": {"cluster": [{"mix": "A100:1x4"}, {"mix": "H100:0x8"}], "model": ["llama2-7b"]}})");
  r = run_cli("sweep " + (dir / "mix.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("mix.json: /axes/cluster/1/mix: "), std::string::npos) << r.err;
  write_text(dir / "sched.json", R"({"version": 1, "name": "m",
    "axes": {"cluster": ["tiny-cpu-2x4"], "model": ["tiny-llama"], "scheduler": ["best"]}})");
  r = run_cli("sweep " + (dir / "sched.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("sched.json: /axes/scheduler/0: expected a scheduler (hexiscale"),
            std::string::npos)
      << r.err;
  r = run_cli("sweep " + kTiny + " --jobs 0");
  EXPECT_EQ(r.code, 2);
  // A folder holding another sweep's rows, or rows computed from other inputs, is refused.
  const auto out = dir / "out";
  ASSERT_EQ(run_cli("sweep " + kTiny + " --out " + out.string()).code, 0);
  r = run_cli("sweep " + (dir / "sched.json").string() + " --out " + out.string());
  EXPECT_EQ(r.code, 2);
  write_text(dir / "other.json", R"({"version": 1, "name": "m",
    "axes": {"cluster": ["tiny-cpu-2x4"], "model": ["tiny-llama"], "seq_len": [32]}})");
  r = run_cli("sweep " + (dir / "other.json").string() + " --out " + out.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("is not a point of"), std::string::npos) << r.err;
  std::string changed = read_text(kTiny);
  changed.replace(changed.find("\"micro_batch\": 1"), 16, "\"micro_batch\": 2");
  write_text(dir / "tiny.json", changed);
  r = run_cli("sweep " + (dir / "tiny.json").string() + " --out " + out.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("was computed from other inputs: its training"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(CliSweep, HelpListsOptionsAndMetrics) {
  auto r = run_cli("sweep --help");
  EXPECT_EQ(r.code, 0);
  for (const char* text : {"--jobs", "--out", "--retry-failed", "sim_tokens_per_s"})
    EXPECT_NE(r.out.find(text), std::string::npos) << text;
}

// --kind breakdown: a simulation report's devices as stacked bars per GPU type.
TEST(CliPlot, BreakdownOfASimulationReport) {
  if (!have_matplotlib()) GTEST_SKIP() << "python3-matplotlib is not installed (scripts/setup.sh)";
  const auto dir = scratch_dir("plot-breakdown");
  ASSERT_EQ(run_cli("simulate tiny-llama-cpu --plan " + std::string(HEXISIM_TEST_ROOT) +
                    "/scenarios/plans/tiny-pp2-tp2-tp1.json --fidelity stage --out " + dir.string())
                .code,
            0);
  auto r = run_cli("plot " + dir.string() + " --kind breakdown");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("breakdown-by-gpu.png"), std::string::npos) << r.out;
  EXPECT_EQ(read_text(dir / "breakdown-by-gpu.png").substr(1, 3), "PNG");
  r = run_cli("plot " + (dir / "report.json").string() + " --kind breakdown --by stage --out " +
              (dir / "s.svg").string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(read_text(dir / "s.svg").find("<svg"), std::string::npos);
  // Bad input: no --x/--y for other kinds, a grouping a report lacks, a results file.
  EXPECT_EQ(run_cli("plot " + dir.string() + " --kind bar").code, 2);
  r = run_cli("plot " + dir.string() + " --kind breakdown --by scheduler");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--by scheduler"), std::string::npos) << r.err;
  write_text(dir / "x.json", "[1, 2]");
  r = run_cli("plot " + (dir / "x.json").string() + " --kind breakdown --out " +
              (dir / "x.png").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("expected a simulation report"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(CliPlot, LinesAndGroupedBarsFromSweepResults) {
  if (!have_matplotlib()) GTEST_SKIP() << "python3-matplotlib is not installed (scripts/setup.sh)";
  const auto dir = scratch_dir("plot");
  ASSERT_EQ(run_cli("sweep " + kTiny + " --out " + dir.string()).code, 0);
  auto r = run_cli("plot " + dir.string() + " --x global_batch --y tokens_per_s --by scheduler");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("8 rows without tokens_per_s left out"), std::string::npos) << r.out;
  const std::string png = read_text(dir / "tokens_per_s-vs-global_batch-by-scheduler.png");
  ASSERT_GT(png.size(), 1000u);
  EXPECT_EQ(png.substr(1, 3), "PNG");
  const auto svg = dir / "bars.svg";
  r = run_cli("plot " + (dir / "results.jsonl").string() +
              " --x cluster --y mfu --by scheduler --json --out " + svg.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["files"][0], svg.string());
  EXPECT_NE(read_text(svg).find("<svg"), std::string::npos);
  // --where keeps the points of one value: 2 clusters x 2 batches of hexiscale's.
  r = run_cli("plot " + dir.string() +
              " --x global_batch --y mfu --by cluster --where scheduler=hexiscale --where "
              "model=llama2-7b --kind scatter --out " +
              (dir / "w.png").string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(": 4 points"), std::string::npos) << r.out;
  // Without --out, each --where goes into the file name; drawing it again replaces it, with a
  // note.
  const std::string sliced = "plot " + dir.string() +
                             " --x global_batch --y mfu --where scheduler=hexiscale --where "
                             "model=llama2-7b --kind scatter";
  const auto name = dir / "mfu-vs-global_batch-scheduler=hexiscale-model=llama2-7b.png";
  r = run_cli(sliced);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(name)) << r.out;
  EXPECT_EQ(r.err.find("replaced"), std::string::npos) << r.err;
  r = run_cli(sliced);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("hexisim: note: replaced the existing " + name.string()), std::string::npos)
      << r.err;
  r = run_cli("plot " + dir.string() + " --x global_batch --y mfu --where scheduler=best");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("no row has scheduler = best"), std::string::npos) << r.err;
  r = run_cli("plot " + dir.string() + " --x cluster --y speed");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--y speed: no row has it"), std::string::npos) << r.err;
  r = run_cli("plot " + (dir / "nothing").string() + " --x cluster --y mfu");
  EXPECT_EQ(r.code, 2);
  fs::remove_all(dir);
}

// A row that is not UTF-8 is bad input naming its line, never a Python traceback; a figure
// goes where --out leads (a link's file, the link kept), through a temporary.
TEST(CliPlot, DamagedRowsAndLinkedOutputs) {
  if (!have_matplotlib()) GTEST_SKIP() << "python3-matplotlib is not installed (scripts/setup.sh)";
  const auto dir = scratch_dir("plot-damaged");
  ASSERT_EQ(run_cli("sweep " + kTiny + " --out " + dir.string()).code, 0);
  std::string text = read_text(dir / "results.jsonl");
  text.insert(text.find('\n') + 5, "\xff");
  write_text(dir / "bad.jsonl", text);
  auto r = run_cli("plot " + (dir / "bad.jsonl").string() + " --x global_batch --y mfu --out " +
                   (dir / "b.png").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("bad.jsonl: line 2: byte 5 is not UTF-8 text"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("Traceback"), std::string::npos) << r.err;
  write_text(dir / "real.png", "");
  fs::create_symlink("real.png", dir / "fig.png");
  r = run_cli("plot " + dir.string() + " --x global_batch --y mfu --out " +
              (dir / "fig.png").string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(dir / "fig.png"));
  EXPECT_EQ(read_text(dir / "real.png").substr(1, 3), "PNG");
  for (const auto& e : fs::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hexi::testing
