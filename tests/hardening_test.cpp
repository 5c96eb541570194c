// Bad input through the whole command line: every case once crashed, hung, lost a file or
// printed a silently wrong number; now each ends with exit 2 and one message
// naming the input, and nothing the command read is overwritten.
#include <sys/stat.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli_runner.hpp"

namespace hexi {
namespace {

using nlohmann::json;
using testing::read_text;
using testing::run_cli;
using testing::scratch_dir;
using testing::write_text;

// Exit 2 with one line on stderr that contains `expected`, nothing on stdout.
void expect_refused(const testing::CliResult& r, const std::string& expected,
                    const std::string& what) {
  EXPECT_EQ(r.code, 2) << what << ": " << r.err;
  EXPECT_NE(r.err.find(expected), std::string::npos) << what << ": " << r.err;
  EXPECT_TRUE(r.out.empty()) << what << ": " << r.out;
}

TEST(Hardening, NumbersThatOverflowADouble) {
  auto dir = scratch_dir("overflow");
  write_text(dir / "s.json", R"({"version": 1e400})");
  expect_refused(run_cli("estimate " + (dir / "s.json").string()),
                 (dir / "s.json").string() + ": invalid JSON: number overflow", "file");
  expect_refused(run_cli("plan tiny-llama-cpu --options '{\"seeds\": 1e400}'"),
                 "--options: invalid JSON: number overflow", "--options");
}

TEST(Hardening, DeepNestingIsRefusedNotAStackOverflow) {
  auto dir = scratch_dir("deep");
  write_text(dir / "deep.json", std::string(100000, '[') + std::string(100000, ']'));
  expect_refused(run_cli("cluster show " + (dir / "deep.json").string()),
                 "nested deeper than 256 levels", "deep");
}

TEST(Hardening, FifosAndFoldersAreNotRead) {
  auto dir = scratch_dir("fifo");
  const auto fifo = dir / "f.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Without the check this blocks forever in open(); the test's timeout would catch it.
  expect_refused(run_cli("cluster show " + fifo.string()), "not a regular file", "fifo");
  std::filesystem::create_directories(dir / "d.json");
  expect_refused(run_cli("cluster show " + (dir / "d.json").string()), "is a folder", "folder");
}

TEST(Hardening, NonUtf8NamesNeverReachJsonOutput) {
  auto dir = scratch_dir("utf8");
  const auto out = dir / "c.json";
  // (printf: the tests' shell is sh, which has no $'\xff'.)
  auto r = run_cli("cluster gen --mix A100:1x8 --out " + out.string() +
                   " --name \"$(printf 'n\\377')\"");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--name: expected UTF-8 text"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  // A path with such a byte is only echoed: replaced by U+FFFD, the JSON stays valid.
  const auto odd = dir / "p\xff.json";
  r = run_cli("plan tiny-llama-cpu --out \"" + dir.string() + "/$(printf 'p\\377').json\" --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(json::accept(r.out)) << r.out;
  EXPECT_TRUE(std::filesystem::exists(odd));
}

TEST(Hardening, NumericFlagsRejectNanInfinityAndWrappedIntegers) {
  const std::pair<std::string, std::string> cases[] = {
      {"plan tiny-llama-cpu --time-budget nan", "--time-budget: expected a finite number"},
      {"plan tiny-llama-cpu --time-budget inf", "--time-budget: expected a finite number"},
      {"plan tiny-llama-cpu --seed 1180591620717411303424", "--seed: expected an integer"},
      {"plan tiny-llama-cpu --seed -1", "--seed: expected an integer"},
      {"simulate tiny-llama-cpu --seed 18446744073709551616", "--seed: expected an integer"},
      {"train tiny-llama-cpu --lr nan", "--lr: expected a finite number"},
      {"train tiny-llama-cpu --eps 0", "--eps: expected a finite number > 0"},
      {"train tiny-llama-cpu --init-seed 99999999999999999999999", "--init-seed: expected"},
      {"cluster gen --mix A100:1x8 --out /tmp/x.json --nic-GBps inf", "--nic-GBps: expected"},
  };
  for (const auto& [args, expected] : cases) {
    auto r = run_cli(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << args << ": " << r.err;
  }
}

TEST(Hardening, OutputNeverReplacesAnInput) {
  auto dir = scratch_dir("overwrite");
  const std::string scenario =
      read_text(HEXISIM_SOURCE_ROOT "/scenarios/shipped/tiny-llama-cpu.json");
  write_text(dir / "s.json", scenario);
  const std::string s = (dir / "s.json").string();
  expect_refused(run_cli("plan " + s + " --out " + s), "is an input of this command", "plan");
  EXPECT_EQ(read_text(dir / "s.json"), scenario);
  // Through another spelling of the same file, and for the other commands' outputs.
  expect_refused(run_cli("plan " + s + " --out " + dir.string() + "/./s.json"),
                 "is an input of this command", "plan ./");
  ASSERT_EQ(run_cli("plan " + s + " --out " + (dir / "p.json").string()).code, 0);
  const std::string plan = read_text(dir / "p.json");
  expect_refused(run_cli("lower " + s + " --plan " + (dir / "p.json").string() + " --out " +
                         (dir / "p.json").string()),
                 "is an input of this command", "lower");
  EXPECT_EQ(read_text(dir / "p.json"), plan);
  expect_refused(run_cli("simulate " + s + " --plan " + (dir / "report.json").string() + " --out " +
                         dir.string()),
                 "is an input of this command", "simulate");
}

TEST(Hardening, OutputPathsAreCheckedBeforeTheWork) {
  auto dir = scratch_dir("unwritable");
  // A file where a folder should be: nothing can be created below it.
  write_text(dir / "file", "x");
  const std::string bad = (dir / "file" / "out.json").string();
  auto r = run_cli("plan tiny-llama-cpu --out " + bad);
  expect_refused(r, "--out " + bad + ": ", "plan");
  EXPECT_EQ(r.err.find("candidates"), std::string::npos) << "refused before the search";
  expect_refused(run_cli("plan tiny-llama-cpu --out " + dir.string()), "is a folder", "folder");
  expect_refused(run_cli("cluster gen --mix A100:1x8 --out " + bad), "--out " + bad, "gen");
  expect_refused(run_cli("simulate tiny-llama-cpu --out " + (dir / "file").string()),
                 "--out " + (dir / "file").string() + "/report.json", "simulate");
}

TEST(Hardening, ReplacingAnOutputIsSaid) {
  auto dir = scratch_dir("replace");
  const std::string out = (dir / "p.json").string();
  auto first = run_cli("plan tiny-llama-cpu --out " + out);
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_EQ(first.err.find("replaced"), std::string::npos);
  auto second = run_cli("plan tiny-llama-cpu --out " + out);
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_NE(second.err.find("replaced the existing " + out), std::string::npos) << second.err;
  // No temporary file is left beside it.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST(Hardening, ClusterPathIsRelativeToTheScenarioNotTheCurrentFolder) {
  auto dir = scratch_dir("relative");
  write_text(dir / "scen" / "c.json", R"({"version": 1, "name": "beside", "network":
    {"nic_GBps": 12.5}, "machines": [{"gpu": "A100", "gpus": 4}]})");
  // A file of the same name in the current folder must not be taken instead.
  write_text(dir / "c.json", "not the cluster");
  write_text(dir / "scen" / "s.json", R"({"version": 1, "name": "s", "cluster": "c.json",
    "model": "tiny-llama", "training": {"global_batch": 4, "seq_len": 32}})");
  auto r = testing::run_cli_in(dir, "plan scen/s.json --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["scenario"], "s");
}

TEST(Hardening, SequenceLongerThanTheModelIsRefused) {
  auto dir = scratch_dir("maxseq");
  write_text(dir / "s.json", R"({"version": 1, "name": "s", "cluster": "tiny-cpu-2x4",
    "model": "tiny-llama", "training": {"global_batch": 4, "seq_len": 100000}})");
  auto r = run_cli("estimate " + (dir / "s.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/training/seq_len"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("longer than the model's max_seq"), std::string::npos) << r.err;
}

TEST(Hardening, ImpossibleLinksAndDisconnectedClustersGiveNoInfiniteEstimate) {
  auto dir = scratch_dir("links");
  write_text(dir / "slow.json", R"({"version": 1, "name": "slow", "network": {"nic_GBps": 1e-320},
    "machines": [{"gpu": "A100", "gpus": 4, "repeat": 2}]})");
  expect_refused(run_cli("cluster show " + (dir / "slow.json").string()),
                 "/network/nic_GBps: expected a number in [1e-06, 1e+06]", "slow link");
  // Two leaves, no spine: the halves cannot talk, so no plan across them is valid.
  write_text(dir / "split.json", R"({"version": 1, "name": "split",
    "network": {"nic_GBps": 12.5, "machines_per_leaf": 1, "spine": false},
    "machines": [{"gpu": "A100", "gpus": 2, "repeat": 2}]})");
  write_text(dir / "s.json", R"({"version": 1, "name": "s", "cluster": "split.json",
    "model": "tiny-llama", "training": {"global_batch": 4, "seq_len": 32}})");
  write_text(dir / "p.json", R"({"version": 1, "pipelines": [
    {"batch": 4, "stages": [{"devices": [0, 1], "layers": [0, 2]}, {"devices": [2, 3], "layers": [2, 4]}]}]})");
  expect_refused(
      run_cli("estimate " + (dir / "s.json").string() + " --plan " + (dir / "p.json").string()),
      "has no spine between their leaves", "disconnected");
}

TEST(Hardening, HugeClustersAndProgramsAreRefusedUpFront) {
  auto dir = scratch_dir("huge");
  write_text(dir / "c.json", R"({"version": 1, "name": "huge", "network": {"nic_GBps": 12.5},
    "machines": [{"gpu": "A100", "gpus": 1024, "repeat": 1048576}]})");
  expect_refused(run_cli("cluster show " + (dir / "c.json").string()), "hexisim models at most",
                 "2^30 GPUs");
  write_text(dir / "s.json", R"({"version": 1, "name": "s", "cluster": "tiny-cpu-2x4",
    "model": "tiny-llama", "training": {"global_batch": 16777216, "micro_batch": 1, "seq_len": 32}})");
  write_text(dir / "p.json", R"({"version": 1, "pipelines": [
    {"batch": 16777216, "stages": [{"devices": [0], "layers": [0, 4]}]}]})");
  const std::string args = (dir / "s.json").string() + " --plan " + (dir / "p.json").string();
  expect_refused(run_cli("lower " + args + " --out " + (dir / "prog.json").string()),
                 "the program would hold at least", "lower");
  expect_refused(run_cli("simulate " + args), "use a larger micro_batch", "simulate");
}

// Llama-2 7B on 4 A100s and 4 RTX 4090s with 2^24 sequences in micro-batches of 1: the
// largest batch a scenario takes, more micro-batches than any program may hold.
void write_huge_batch(const std::filesystem::path& dir) {
  write_text(dir / "c.json", R"({"version": 1, "name": "c8", "network": {"nic_GBps": 25},
    "machines": [{"gpu": "A100-SXM-80GB", "gpus": 4}, {"gpu": "RTX4090", "gpus": 4}]})");
  write_text(dir / "s.json", R"({"version": 1, "name": "s", "cluster": "c.json",
    "model": "llama2-7b", "scheduler": "hexiscale",
    "training": {"global_batch": 16777216, "micro_batch": 1, "seq_len": 4096}})");
}

TEST(Hardening, AHugeBatchIsSearchedInMemoryThatDoesNotGrowWithIt) {
  // The search's timelines and batch split cost what a few thousand micro-batches cost: under
  // a 1 GiB address space the plan is found (the timelines of 2^24 micro-batches alone would
  // take gigabytes). `timeout` only ends a run that would otherwise outlive the test.
  auto dir = scratch_dir("hugebatch");
  write_huge_batch(dir);
  auto r = testing::run_cli_in({}, "plan " + (dir / "s.json").string() + " --verify 0 --json",
                               "ulimit -v 1048576; OPENBLAS_NUM_THREADS=1 timeout 300 ");
  ASSERT_EQ(r.code, 0) << r.err;
  const json out = json::parse(r.out);
  long long batch = 0;
  for (const auto& p : out["plan"]["pipelines"]) batch += p["batch"].get<long long>();
  EXPECT_EQ(batch, 16777216);
  EXPECT_TRUE(out["estimate"]["feasible"].get<bool>());
}

TEST(Hardening, SimulatingMoreMicroBatchesThanAProgramHoldsIsRefusedBeforeTheSearch) {
  auto dir = scratch_dir("hugebatch-verify");
  write_huge_batch(dir);
  const std::string s = (dir / "s.json").string();
  // Asked for: refused before the search (no search line on stderr).
  auto r = run_cli("plan " + s + " --verify 2");
  expect_refused(r,
                 "--verify 2: training.global_batch 16777216 / micro_batch 1 micro-batches "
                 "lower to at least 3.36e+07 compute ops whatever the plan; hexisim "
                 "materialises at most 1.68e+07: use a larger micro_batch",
                 "plan --verify 2");
  EXPECT_EQ(r.err.find("candidates"), std::string::npos) << r.err;
  r = run_cli("simulate " + s);
  expect_refused(r, "simulate: training.global_batch 16777216 / micro_batch 1", "simulate");
  EXPECT_NE(r.err.find("at layer fidelity whatever the plan"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("candidates"), std::string::npos) << r.err;
  // By default: the plan, verified by nobody, and a note saying why.
  r = run_cli("plan " + s);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("note: verify: not run: training.global_batch 16777216"), std::string::npos)
      << r.out;
}

TEST(Hardening, TransfersLateInAThousandSecondIterationEnd) {
  // 12 000 micro-batches through one pipeline of 4 x 8 H100s: an iteration of 1 251 s, whose
  // NVLink transfers' last bytes take less than one ulp of the clock. The shared timeline
  // once waited for them forever; the search now takes about a second (a CPU-time limit, not
  // wall-clock time, ends a run that hangs).
  auto r = testing::run_cli_in({},
                               "plan --scheduler uniform --mix H100-SXM:4x8 --transport rdma "
                               "--model llama3-70b --global-batch 12000 --seq-len 4096 "
                               "--verify 0 --json",
                               "ulimit -t 60; OPENBLAS_NUM_THREADS=1 ");
  ASSERT_EQ(r.code, 0) << r.err;
  const json out = json::parse(r.out);
  EXPECT_TRUE(out["estimate"]["feasible"].get<bool>());
  EXPECT_GT(out["estimate"]["iteration_time_s"].get<double>(), 1000.0);
}

TEST(Hardening, UniformGridsOfTensOfThousandsOfPipelinesAreEstimatedInLinearTime) {
  // 32 768 A100s, 2^15 sequences: uniform's grids reach 32 768 one-GPU pipelines, each GPU
  // syncing with one holder in every other pipeline. A device's links to the holders on other
  // machines come from the machines' set at once, and a ring's hierarchical all-reduce (ZeRO
  // 0) is timed once for its members, so each estimate is linear in the GPUs, the whole search
  // a few CPU seconds where a loop over the holders per device takes minutes: a CPU-time limit
  // (ulimit -t, not wall-clock time) of 60 s tells them apart.
  auto dir = scratch_dir("uniform32k");
  write_text(dir / "c.json", R"({"version": 1, "name": "a100-32k", "network": {"nic_GBps": 25},
    "machines": [{"gpu": "A100-SXM-80GB", "gpus": 8, "repeat": 4096}]})");
  for (int zero : {1, 0}) {
    write_text(dir / "s.json", R"({"version": 1, "name": "s", "cluster": "c.json",
      "model": "llama2-7b", "scheduler": "uniform", "training": {"global_batch": 32768,
      "micro_batch": 1, "seq_len": 4096, "zero_stage": )" +
                                   std::to_string(zero) + "}}");
    auto r =
        testing::run_cli_in({}, "plan " + (dir / "s.json").string() + " --scheduler uniform --json",
                            "ulimit -t 60; OPENBLAS_NUM_THREADS=1 ");
    ASSERT_EQ(r.code, 0) << "zero " << zero << ": " << r.err;
    const json out = json::parse(r.out);
    EXPECT_EQ(out["search"]["candidates"].get<int>(), 288) << "every valid grid estimated";
    EXPECT_TRUE(out["estimate"]["feasible"].get<bool>()) << "zero " << zero;
  }
}

TEST(Hardening, ProgramsOnlySimulateWithTheirOwnModelAndBatch) {
  auto dir = scratch_dir("digest");
  const std::string prog = (dir / "prog.json").string();
  auto r = run_cli("lower tiny-llama-cpu --plan " HEXISIM_SOURCE_ROOT
                   "/scenarios/plans/tiny-pp2-tp2-tp1.json --out " +
                   prog);
  ASSERT_EQ(r.code, 0) << r.err;
  std::string scenario = read_text(HEXISIM_SOURCE_ROOT "/scenarios/shipped/tiny-llama-cpu.json");
  scenario.replace(scenario.find("\"global_batch\": 8"), 17, "\"global_batch\": 16");
  write_text(dir / "s.json", scenario);
  expect_refused(run_cli("simulate " + (dir / "s.json").string() + " --program " + prog),
                 "lowered for another training config (global batch 8", "batch");
  EXPECT_EQ(run_cli("simulate tiny-llama-cpu --program " + prog).code, 0);
}

}  // namespace
}  // namespace hexi
