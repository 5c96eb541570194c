// `hexisim train` end to end under mpirun: output, trace, checkpoint/resume, learning,
// and the robustness contract (one message, no hang): a plan whose device count differs from the
// number of ranks, a missing file, a rank that fails, dies or hangs mid-step -> every
// rank exits non-zero within 30 s with one clear message, no hang. Unwritable outputs and
// plans that do not fit are refused before the first step; a save killed at any point
// leaves the previous or the new checkpoint; damaged checkpoints are refused.

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

struct Outcome {
  int code = -1;
  std::string output;  // stdout + stderr
  double seconds = 0;
};

// $HEXISIM_ROOT / $HEXISIM_BIN when set, else the paths this test was built with.
std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}
std::string root() {
  return env_or("HEXISIM_ROOT", HEXISIM_TEST_ROOT);
}
std::string bin() {
  return env_or("HEXISIM_BIN", HEXISIM_TEST_BIN);
}
std::string plan(const std::string& name) {
  return root() + "/scenarios/plans/" + name + ".json";
}

// Runs `mpirun -np N hexisim train ARGS` (env: extra variables; np 0: without mpirun) and
// waits for it.
Outcome train(int np, const std::string& args, const std::string& env = "",
              const std::string& stdout_file = "") {
  const std::string launcher =
      np > 0 ? " mpirun -np " + std::to_string(np) + " --oversubscribe " : " ";
  const std::string cmd = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " + env +
                          launcher + bin() + " train " + args +
                          (stdout_file.empty() ? " 2>&1" : " 2>&1 >" + stdout_file);
  const auto t0 = std::chrono::steady_clock::now();
  FILE* pipe = popen(cmd.c_str(), "r");
  Outcome o;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) o.output.append(buf, n);
  const int status = pclose(pipe);
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return o;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// This process's scratch folder (each ctest entry is one process).
std::filesystem::path temp_dir() {
  return std::filesystem::temp_directory_path() /
         ("hexisim-train-test-" + std::to_string(getpid()));
}

std::string temp(const std::string& name) {
  std::filesystem::create_directories(temp_dir());
  return (temp_dir() / name).string();
}

// Writes `text` to `path` (a scenario or plan made for one test).
void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// The shipped scenario `name` with `from` replaced by `to`, written to a file made for one
// test (named after `tag`).
std::string edited_scenario(const std::string& name, const std::string& from, const std::string& to,
                            const std::string& tag) {
  std::string text = read_text(root() + "/scenarios/shipped/" + name + ".json");
  EXPECT_NE(text.find(from), std::string::npos) << name << " has no " << from;
  if (text.find(from) != std::string::npos) text.replace(text.find(from), from.size(), to);
  const std::string scenario = temp(tag + ".json");
  write_file(scenario, text);
  return scenario;
}

// Removes the scratch folder when the tests are over, unless one failed (then it says where
// it is) or HEXISIM_KEEP_TEST_DIRS is set, as tests/cli_runner.hpp's scratch folders do.
class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    if (std::getenv("HEXISIM_KEEP_TEST_DIRS") != nullptr) return;
    if (::testing::UnitTest::GetInstance()->Failed()) {
      if (std::filesystem::exists(temp_dir()))
        std::fprintf(stderr, "kept the failed tests' folder %s\n", temp_dir().c_str());
      return;
    }
    std::error_code ec;
    std::filesystem::remove_all(temp_dir(), ec);
  }
};
[[maybe_unused]] const ::testing::Environment* const kScratchCleanup =
    ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

// One message, from hexisim, naming the problem; every rank gone within 30 s.
void expect_clean_failure(const Outcome& o, const std::string& message) {
  EXPECT_NE(o.code, 0) << o.output;
  EXPECT_LT(o.seconds, 30.0) << o.output;
  EXPECT_EQ(count(o.output, "hexisim: error:"), 1) << o.output;
  EXPECT_NE(o.output.find(message), std::string::npos) << o.output;
}

TEST(TrainRobustness, PlanDeviceCountDiffersFromRanks) {
  Outcome o = train(2, "tiny-llama-cpu --plan " + plan("tiny-pp2-tp2-tp1") + " --steps 2");
  expect_clean_failure(o, "the plan uses 3 devices but the job has 2 MPI ranks");
  EXPECT_EQ(o.code, 2);
}

TEST(TrainRobustness, MissingPlanFile) {
  Outcome o = train(3, "tiny-llama-cpu --plan /nonexistent/plan.json --steps 2");
  expect_clean_failure(o, "/nonexistent/plan.json: cannot open file");
  EXPECT_EQ(o.code, 2);
}

TEST(TrainRobustness, MissingCorpus) {
  Outcome o = train(3, "tiny-llama-cpu --plan " + plan("tiny-pp2-tp2-tp1") +
                           " --corpus /nonexistent/text --steps 2");
  expect_clean_failure(o, "/nonexistent/text: cannot open the corpus");
}

// fp16 needs loss scaling, which the engine does not implement: refused by name, not run
// as bf16 (both count 2 bytes per element).
TEST(TrainRobustness, Fp16IsRefused) {
  const std::string scenario = edited_scenario("tiny-llama-cpu", "\"precision\": \"fp32\"",
                                               "\"precision\": \"fp16\"", "tiny-fp16");
  Outcome o = train(3, scenario + " --plan " + plan("tiny-pp2-tp2-tp1") + " --steps 2");
  expect_clean_failure(o, "training.precision \"fp16\" is not trained by the engine");
}

// Sequence parallelism with TP is simulated, not run: refused by name on every rank.
TEST(TrainRobustness, SequenceParallelWithTensorParallelismIsRefused) {
  const std::string scenario =
      edited_scenario("tiny-llama-cpu", "\"precision\": \"fp32\"",
                      "\"precision\": \"fp32\", \"sequence_parallel\": true", "tiny-sp");
  Outcome o = train(3, scenario + " --plan " + plan("tiny-pp2-tp2-tp1") + " --steps 2");
  expect_clean_failure(o, "training.sequence_parallel with tensor parallelism is simulated");
}

TEST(TrainRobustness, RankFailsMidStep) {
  Outcome o = train(3, "tiny-llama-cpu --plan " + plan("tiny-pp2-tp2-tp1") + " --steps 3",
                    "HEXISIM_FAULT=rank=1,step=1,op=40,mode=error");
  expect_clean_failure(o, "rank 1: device 1, step 1, op");
  EXPECT_NE(o.output.find("injected fault"), std::string::npos) << o.output;
}

TEST(TrainRobustness, RankDiesMidStep) {
  Outcome o = train(3, "tiny-llama-cpu --plan " + plan("tiny-pp2-tp2-tp1") + " --steps 3",
                    "HEXISIM_FAULT=rank=2,step=1,op=20,mode=crash");
  // A killed process cannot speak for itself: mpirun names it, and ends the others.
  EXPECT_NE(o.code, 0) << o.output;
  EXPECT_LT(o.seconds, 30.0) << o.output;
  EXPECT_NE(o.output.find("rank 2"), std::string::npos) << o.output;
}

TEST(TrainRobustness, RankHangsMidStep) {
  Outcome o =
      train(3, "tiny-llama-cpu --plan " + plan("tiny-pp2-tp2-tp1") + " --steps 3 --watchdog 3",
            "HEXISIM_FAULT=rank=0,step=1,op=30,mode=hang");
  expect_clean_failure(o, "rank 0: no progress for");
}

TEST(Train, PrintsLossesAndWritesATraceWithEveryOp) {
  const std::string trace = temp("trace.json"), out = temp("out.json");
  Outcome o = train(
      4,
      "tiny-llama-cpu --plan " + plan("tiny-dp2-tp2-vs-pp2") + " --steps 3 --json --trace " + trace,
      "", out);
  ASSERT_EQ(o.code, 0) << o.output;
  auto j = read_json(out);
  ASSERT_EQ(j["losses"].size(), 3u);
  EXPECT_GT(j["iteration_time_s"].get<double>(), 0);
  EXPECT_TRUE(j["op_classes"].contains("attn.fwd"));
  const int ops = j["ops_per_step"];
  auto t = read_json(trace);
  std::set<std::pair<int, int>> seen;  // (op id, step)
  std::set<int> pids;
  int events = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "M" || e["ph"] == "e") continue;
    ++events;
    pids.insert(e["pid"].get<int>());
    seen.insert({e["args"]["op"].get<int>(), e["args"]["step"].get<int>()});
    // The cpu backend times every op's CPU too (calibrate reads it for quota devices).
    ASSERT_TRUE(e["args"].contains("cpu_us")) << e.dump();
    EXPECT_GE(e["args"]["cpu_us"].get<double>(), 0) << e.dump();
  }
  EXPECT_EQ(events, 3 * ops);  // every op of every device, once per step
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(3 * ops));
  EXPECT_EQ(pids, (std::set<int>{0, 1, 2, 3}));
}

// Started without mpirun, a one-device plan runs in one process (its world in memory, no MPI):
// the same losses, bit for bit, as one rank under mpirun, and a trace of every op; a larger
// plan is refused naming the mpirun command.
TEST(Train, OneDevicePlanRunsWithoutMpirun) {
  const std::string args = "tiny-llama-cpu --plan " + plan("tiny-single") + " --steps 3 --json";
  const std::string alone = temp("alone.json"), under = temp("under.json");
  const std::string trace = temp("alone-trace.json");
  Outcome a = train(0, args + " --trace " + trace, "", alone);
  ASSERT_EQ(a.code, 0) << a.output;
  Outcome m = train(1, args, "", under);
  ASSERT_EQ(m.code, 0) << m.output;
  const auto ja = read_json(alone), jm = read_json(under);
  EXPECT_EQ(ja["losses"], jm["losses"]);
  int events = 0;
  const auto events_json = read_json(trace)["traceEvents"];
  for (const auto& e : events_json) events += e["ph"] != "M" && e["ph"] != "e";
  EXPECT_EQ(events, 3 * ja["ops_per_step"].get<int>());
  Outcome big = train(0, "tiny-llama-cpu --plan " + plan("tiny-pp2-tp2-tp1") + " --steps 2");
  expect_clean_failure(big,
                       "the plan uses 3 devices but the job has 1 rank; the engine runs "
                       "one rank per device: mpirun -np 3");
  EXPECT_EQ(big.code, 2);
}

// training.precision "bf16" (tiny-llama-cpu-bf16: tiny-llama-cpu in bf16 mixed precision):
// the same ops as the float32 run, every communication op's traced bytes half the float32
// run's (2-byte elements on the wire) except the float32 loss statistics, and losses within
// bf16 rounding of the float32 ones.
TEST(Train, Bf16TraceCountsTwoBytesPerElement) {
  std::map<std::string, std::map<std::pair<int, int>, std::pair<std::string, double>>> bytes;
  std::map<std::string, std::vector<double>> losses;
  for (const std::string sc : {"tiny-llama-cpu", "tiny-llama-cpu-bf16"}) {
    const std::string trace = temp(sc + "-trace.json"), out = temp(sc + "-out.json");
    Outcome o =
        train(3, sc + " --plan " + plan("tiny-pp2-tp2-tp1") + " --steps 2 --json --trace " + trace,
              "", out);
    ASSERT_EQ(o.code, 0) << o.output;
    losses[sc] = read_json(out)["losses"].get<std::vector<double>>();
    const auto t = read_json(trace);
    for (const auto& e : t["traceEvents"]) {
      if (e["ph"] != "X" || !e["args"].contains("bytes")) continue;
      bytes[sc][{e["args"]["op"].get<int>(), e["args"]["step"].get<int>()}] = {
          e["name"].get<std::string>(), e["args"]["bytes"].get<double>()};
    }
  }
  const auto& f32 = bytes["tiny-llama-cpu"];
  const auto& b16 = bytes["tiny-llama-cpu-bf16"];
  ASSERT_EQ(f32.size(), b16.size());
  ASSERT_GT(f32.size(), 0u);
  int halved = 0;
  for (const auto& [key, event] : f32) {
    const auto it = b16.find(key);
    ASSERT_NE(it, b16.end()) << "op " << key.first;
    const bool loss_stats = event.first.find("loss") != std::string::npos;
    EXPECT_EQ(it->second.second, loss_stats ? event.second : event.second / 2)
        << event.first << " (op " << key.first << ")";
    halved += loss_stats ? 0 : 1;
  }
  EXPECT_GT(halved, 0);
  for (int k = 0; k < 2; ++k) {
    EXPECT_NEAR(losses["tiny-llama-cpu-bf16"][k], losses["tiny-llama-cpu"][k],
                2e-3 * losses["tiny-llama-cpu"][k]);
  }
}

// 6 steps of `scenario` on `p` in one go, then 3 saving a checkpoint and 3 resuming from it:
// the resumed losses equal steps 3-5 bit for bit. Returns the checkpoint folder.
std::string expect_resume_matches_one_run(int np, const std::string& scenario, const std::string& p,
                                          const std::string& tag) {
  const std::string ckpt = temp(tag + "-ckpt"), a = temp(tag + "-a.json"),
                    b = temp(tag + "-b.json"), c = temp(tag + "-c.json");
  const std::string run = scenario + " --plan " + p;
  EXPECT_EQ(train(np, run + " --steps 6 --json", "", a).code, 0);
  EXPECT_EQ(train(np, run + " --steps 3 --json --save " + ckpt, "", b).code, 0);
  Outcome o = train(np, run + " --steps 3 --json --resume " + ckpt, "", c);
  EXPECT_EQ(o.code, 0) << o.output;
  if (o.code != 0) return ckpt;
  auto full = read_json(a)["losses"], resumed = read_json(c)["losses"];
  EXPECT_EQ(read_json(c)["first_step"], 3);
  for (int k = 0; k < 3; ++k)
    EXPECT_EQ(resumed[k].get<double>(), full[k + 3].get<double>()) << "step " << k + 3;
  return ckpt;
}

// Checkpoint after 3 steps, resume for 3 more: the same losses, bit for bit, as 6 steps
// in one go (ZeRO-1: sharded AdamW moments are part of the checkpoint).
TEST(Train, CheckpointResumeGivesIdenticalLosses) {
  const std::string p = plan("tiny-dp2-tp2-vs-pp2");
  const std::string ckpt = expect_resume_matches_one_run(4, "tiny-llama-cpu-zero1", p, "dp");
  // A checkpoint of another plan is refused with a message, not loaded.
  Outcome other = train(
      3, "tiny-llama-cpu-zero1 --plan " + plan("tiny-pp2-tp2-tp1") + " --steps 1 --resume " + ckpt);
  expect_clean_failure(other, "written for another plan");
  // A folder without a manifest (a format-1 checkpoint, or none) is refused.
  Outcome none =
      train(4, "tiny-llama-cpu-zero1 --plan " + p + " --steps 1 --resume " + temp("none"));
  expect_clean_failure(none, temp("none") + "/manifest.json: not found");
}

// A mixture of experts in bf16 is refused by name (float32 only so far).
TEST(TrainRobustness, MixtureOfExpertsInBf16IsRefused) {
  const std::string scenario = edited_scenario("tiny-moe-cpu", "\"precision\": \"fp32\"",
                                               "\"precision\": \"bf16\"", "tiny-moe-bf16");
  Outcome o = train(5, scenario + " --plan " + plan("tiny-moe-experts-3-1") + " --steps 2");
  expect_clean_failure(o, "model tiny-moe: the engine trains mixtures of experts in float32");
}

// A capacity factor (tokens dropped) is planned, not trained: the engine routes dropless.
TEST(TrainRobustness, MixtureOfExpertsWithACapacityFactorIsRefused) {
  const std::string scenario = edited_scenario("tiny-moe-cpu", "\"model\": \"tiny-moe\"",
                                               R"("model": {"name": "tiny-moe", "layers": 2,
          "hidden": 64, "ffn": 48, "heads": 4, "kv_heads": 2, "vocab": 256, "max_seq": 32,
          "moe": {"experts": 4, "top_k": 2, "shared_ffn": 32, "capacity_factor": 1.25}})",
                                               "tiny-moe-capacity");
  Outcome o = train(5, scenario + " --plan " + plan("tiny-moe-experts-3-1") + " --steps 2");
  expect_clean_failure(o, "moe.capacity_factor is planned and simulated");
}

// Whole experts held unevenly, ZeRO-1: 3 steps, save, resume for 3 more = the 6-step run.
TEST(Train, MixtureOfExpertsCheckpointResumeGivesIdenticalLosses) {
  const std::string scenario =
      edited_scenario("tiny-moe-cpu", "\"zero_stage\": 0", "\"zero_stage\": 1", "tiny-moe-zero1");
  expect_resume_matches_one_run(5, scenario, plan("tiny-moe-experts-3-1"), "moe");
}

// Outputs that cannot be written are refused before any work, not after the last step.
TEST(TrainRobustness, UnwritableTraceFailsBeforeTheFirstStep) {
  Outcome o = train(
      3, "tiny-llama-cpu --plan " + plan("tiny-pp2-tp2-tp1") + " --steps 2 --trace /proc/x/t.json");
  expect_clean_failure(o, "--trace /proc/x/t.json: cannot create the folder /proc/x");
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.output.find("loss"), std::string::npos) << o.output;  // no step ran
}

TEST(TrainRobustness, UnwritableSaveFolderFailsBeforeTheFirstStep) {
  Outcome o = train(
      3, "tiny-llama-cpu --plan " + plan("tiny-pp2-tp2-tp1") + " --steps 2 --save /proc/x/ckpt");
  expect_clean_failure(o, "--save /proc/x/ckpt: cannot create the folder");
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.output.find("loss"), std::string::npos) << o.output;
}

// A second job saving to a folder another job holds fails before its first step, naming
// the holder, and leaves the folder as it was; once the holder ends, the same command runs.
TEST(TrainRobustness, ASecondJobOnACheckpointFolderIsRefused) {
  const std::string dir = temp("held"), args = "tiny-llama-cpu --plan " + plan("tiny-single") +
                                               " --steps 2 --save " + dir;
  ASSERT_EQ(train(0, args).code, 0);
  const std::string manifest = read_text(dir + "/manifest.json");
  const int fd = ::open((dir + "/.hexisim-lock").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);  // as the other job's rank 0 holds it
  ASSERT_EQ(::pwrite(fd, "4242", 4, 0), 4);
  for (const std::string& second : {args + " --resume " + dir, args}) {
    Outcome o = train(0, second);
    expect_clean_failure(o, "--save " + dir +
                                ": another job is using this checkpoint folder (hexisim "
                                "train, pid 4242)");
    EXPECT_EQ(o.code, 2);
    EXPECT_EQ(o.output.find("loss"), std::string::npos) << o.output;
    EXPECT_EQ(read_text(dir + "/manifest.json"), manifest);
  }
  Outcome reader = train(0, "tiny-llama-cpu --plan " + plan("tiny-single") +
                                " --steps 1 --resume " + dir + " --save " + temp("elsewhere"));
  expect_clean_failure(reader, "--resume " + dir + ": another job is using this checkpoint");
  ::close(fd);
  EXPECT_EQ(train(0, args + " --resume " + dir).code, 0);
}

// The tiny Llama with one micro-batch of 65 536 sequences: `hexisim estimate` puts device 0
// at 34.85 GiB (activations 30.75, logits 4.00, reserve 0.10) on a 4 GiB CPU-core. Refused
// with those numbers before anything is allocated.
TEST(TrainRobustness, PlanThatDoesNotFitIsRefused) {
  const std::string scenario = temp("too-big.json"), plan_file = temp("too-big-plan.json");
  write_file(scenario, R"({"version": 1, "name": "tiny-too-big", "cluster": "tiny-cpu-2x4",
    "model": "tiny-llama", "seed": 1,
    "training": {"global_batch": 65536, "micro_batch": 65536, "seq_len": 32,
                 "precision": "fp32", "recompute": "none", "reserve_gib": 0.1}})");
  write_file(plan_file, R"({"version": 1, "scheduler": "hand", "pipelines": [
    {"batch": 65536, "micro_batch": 65536, "stages": [{"devices": [0], "layers": [0, 4]}]}]})");
  Outcome o = train(1, scenario + " --plan " + plan_file + " --steps 1");
  expect_clean_failure(o, plan_file + ": does not fit: device 0 needs an estimated 34.85 GiB");
  EXPECT_NE(o.output.find("its CPU-core has 4.00 GiB"), std::string::npos) << o.output;
  EXPECT_EQ(o.code, 2);
}

// Resumes `ckpt` for one step; returns the step it resumed at (-1 on failure) and checks
// that its loss is the uninterrupted run's loss of that step.
int resumed_step(const std::string& args, const std::string& ckpt, const nlohmann::json& full,
                 const std::string& what) {
  const std::string out = temp("resumed.json");
  Outcome o = train(3, args + " --steps 1 --json --resume " + ckpt, "", out);
  EXPECT_EQ(o.code, 0) << what << ": " << o.output;
  if (o.code != 0) return -1;
  auto j = read_json(out);
  const int first = j["first_step"];
  EXPECT_EQ(j["losses"][0].get<double>(), full[first].get<double>()) << what;
  return first;
}

// A save killed after one of its durable steps (HEXISIM_FAULT kill-in-save) resumes with
// exactly the losses of the previous checkpoint (step 2) or of the new one (step 4): the
// previous one until rank 0 renames the new manifest into place, the new one from then on.
// Rank 0 writes its device's file in 7 steps (header, 3 sections, fsync, rename, folder
// fsync), then the manifest in 4 (write, fsync, rename, folder fsync), then removes the 3
// previous files: killed at steps of its file and at every later step; rank 2 at steps of
// its file. (checkpoint_test.cpp kills every step of every file, in one process.)
TEST(Train, KilledSaveResumesFromTheOldOrTheNewCheckpoint) {
  const std::string args = "tiny-llama-cpu --plan " + plan("tiny-pp2-tp2-tp1");
  const std::string full = temp("kill-full.json"), old = temp("kill-old"), ckpt = temp("kill");
  ASSERT_EQ(train(3, args + " --steps 5 --json", "", full).code, 0);
  ASSERT_EQ(train(3, args + " --steps 2 --save " + old).code, 0);
  const auto losses = read_json(full)["losses"];
  // Kills rank `rank` after its save step `point` and resumes: the step resumed at.
  auto resumed_after_kill = [&](int rank, int point) {
    std::filesystem::remove_all(ckpt);
    std::filesystem::copy(old, ckpt);
    const std::string what = "rank " + std::to_string(rank) + " killed at " + std::to_string(point);
    const Outcome o = train(3, args + " --steps 2 --resume " + ckpt + " --save " + ckpt,
                            "HEXISIM_FAULT=rank=" + std::to_string(rank) +
                                ",mode=kill-in-save,point=" + std::to_string(point));
    EXPECT_EQ(o.code, 137) << what << ": " << o.output;  // SIGKILL, reported by mpirun
    return resumed_step(args, ckpt, losses, what);
  };
  std::string outcomes;  // per point of rank 0: 'o' old, 'n' new
  for (int point : {1, 4, 7, 8, 9, 10, 11, 12, 13, 14}) {
    const int step = resumed_after_kill(0, point);
    outcomes += step == 2 ? 'o' : step == 4 ? 'n' : '?';
  }
  EXPECT_EQ(outcomes, "ooooonnnnn");  // old up to the manifest write and fsync (9)
  for (int point : {4, 7}) EXPECT_EQ(resumed_after_kill(2, point), 2) << point;
}

// A damaged checkpoint folder is refused with one message naming the file, exit 2: a
// corrupt byte (digest), a truncated file (size), and a folder stitched from two saves
// (device 1's step-2 file, named with its own size and digest in the step-4 manifest).
TEST(Train, DamagedCheckpointsAreRefused) {
  const std::string args = "tiny-llama-cpu --plan " + plan("tiny-pp2-tp2-tp1");
  const std::string two = temp("damaged-2"), four = temp("damaged-4"), bad = temp("damaged");
  ASSERT_EQ(train(3, args + " --steps 2 --save " + two).code, 0);
  std::filesystem::copy(two, four);
  ASSERT_EQ(train(3, args + " --steps 2 --resume " + four + " --save " + four).code, 0);
  auto manifest = read_json(four + "/manifest.json");
  const auto step2 = read_json(two + "/manifest.json")["files"][1];
  const std::string file1 = manifest["files"][1]["file"];
  auto refused = [&](const std::string& message) {
    Outcome o = train(3, args + " --steps 1 --resume " + bad);
    expect_clean_failure(o, message);
    EXPECT_EQ(o.code, 2);
    std::filesystem::remove_all(bad);
  };
  std::filesystem::copy(four, bad);
  {
    std::fstream io(bad + "/" + file1, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(1000);
    io.put('\x55');
  }
  refused(bad + "/" + file1 + ": FNV-1a digest");
  std::filesystem::copy(four, bad);
  std::filesystem::resize_file(bad + "/" + file1, 1000);
  refused(bad + "/" + file1 + ": 1000 bytes, but " + bad + "/manifest.json says");
  std::filesystem::copy(four, bad);
  manifest["files"][1] = step2;
  write_file(bad + "/manifest.json", manifest.dump());
  std::filesystem::copy_file(two + "/" + step2["file"].get<std::string>(),
                             bad + "/" + step2["file"].get<std::string>());
  refused(": a checkpoint of step 2, but " + bad + "/manifest.json is of step 4");
}

// 200 steps of `plan_name` on `scenario` (3 ranks): the mean loss of the last 10 below 3 and
// at least `drop` below the mean of the first 10.
void expect_loss_falls_over_200_steps(const std::string& scenario, const std::string& plan_name,
                                      double drop) {
  const std::string out = temp(plan_name + "-long.json");
  Outcome o = train(3, scenario + " --plan " + plan(plan_name) + " --steps 200 --json", "", out);
  ASSERT_EQ(o.code, 0) << o.output;
  auto losses = read_json(out)["losses"].get<std::vector<double>>();
  ASSERT_EQ(losses.size(), 200u);
  double first = 0, last = 0;
  for (int k = 0; k < 10; ++k) {
    first += losses[k] / 10;
    last += losses[190 + k] / 10;
  }
  std::printf("%s on %s: mean loss of steps 0-9: %.4f, of steps 190-199: %.4f\n", plan_name.c_str(),
              scenario.c_str(), first, last);
  EXPECT_LT(last, 3.0);
  EXPECT_LT(last, first - drop);
}

// The tiny Llama learns the corpus: mean loss of the last 10 of 200 steps well below
// the first 10 (observed: 5.0 -> 2.4 with AdamW lr 1e-3; a byte-uniform model is 5.55).
TEST(Train, LossFallsOver200Steps) {
  expect_loss_falls_over_200_steps("tiny-llama-cpu", "tiny-pp2-tp2-tp1", 1.5);
}

// ---- sequence meshes (HexiSeq plans, scenarios/plans/tiny-seq-*.json) --------------------

// Every op of every rank and step in the trace, with the program's op ids (the ring steps,
// the all-to-all and ring messages included).
TEST(TrainSequence, WritesATraceWithEveryOp) {
  const std::string trace = temp("seq-trace.json"), out = temp("seq-out.json");
  Outcome o = train(
      5, "tiny-seq-cpu --plan " + plan("tiny-seq-2groups") + " --steps 3 --json --trace " + trace,
      "", out);
  ASSERT_EQ(o.code, 0) << o.output;
  auto j = read_json(out);
  ASSERT_EQ(j["losses"].size(), 3u);
  for (const char* cls : {"pre.fwd", "ring.fwd", "post.fwd", "post.bwd", "ring.bwd", "pre.bwd"})
    EXPECT_TRUE(j["op_classes"].contains(cls)) << cls;
  const int ops = j["ops_per_step"];
  auto t = read_json(trace);
  std::set<std::pair<int, int>> seen;  // (op id, step)
  std::set<int> pids;
  int events = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "M" || e["ph"] == "e") continue;
    ++events;
    pids.insert(e["pid"].get<int>());
    seen.insert({e["args"]["op"].get<int>(), e["args"]["step"].get<int>()});
    // The cpu backend times every op's CPU too (calibrate reads it for quota devices).
    ASSERT_TRUE(e["args"].contains("cpu_us")) << e.dump();
    EXPECT_GE(e["args"]["cpu_us"].get<double>(), 0) << e.dump();
  }
  EXPECT_EQ(events, 3 * ops);
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(3 * ops));
  EXPECT_EQ(pids, (std::set<int>{0, 1, 2, 3, 4}));
}

// The trace against the simulation of the same plan, per op class (hexisim simulate
// --measured); a trace of another plan is refused naming the op.
TEST(TrainSequence, SimulateComparesWithTheMeasuredTrace) {
  const std::string trace = temp("seq-measured.json");
  Outcome o =
      train(5, "tiny-seq-cpu --plan " + plan("tiny-seq-2groups") + " --steps 3 --trace " + trace);
  ASSERT_EQ(o.code, 0) << o.output;
  auto simulate = [&](const std::string& plan_name, const std::string& out) {
    const std::string cmd = bin() + " simulate tiny-seq-cpu --plan " + plan(plan_name) +
                            " --measured " + trace + " --json >" + out + " 2>" + out + ".err";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  const std::string out = temp("seq-measured-sim.json");
  ASSERT_EQ(simulate("tiny-seq-2groups", out), 0) << std::ifstream(out + ".err").rdbuf();
  const auto m = read_json(out)["measured"];
  EXPECT_EQ(m["measured_steps"], 3);
  EXPECT_EQ(m["steps_used"], 2);
  EXPECT_GT(m["measured_iteration_s"].get<double>(), 0);
  EXPECT_GT(m["simulated_iteration_s"].get<double>(), 0);
  std::set<std::string> classes;
  for (const auto& c : m["classes"]) {
    classes.insert(c["class"].get<std::string>());
    EXPECT_GT(c["ops"].get<int>(), 0);
    EXPECT_GE(c["measured_s"].get<double>(), 0);
  }
  for (const char* cls : {"pre.fwd", "ring.fwd", "ring.bwd", "post.bwd", "send kv", "optimizer"})
    EXPECT_TRUE(classes.count(cls)) << cls;
  // The ring plan's program is another: its ops are not the trace's.
  const std::string other = temp("seq-measured-other.json");
  EXPECT_EQ(simulate("tiny-seq-ring-5-3-2", other), 2);
  std::stringstream err;
  err << std::ifstream(other + ".err").rdbuf();
  EXPECT_NE(err.str().find(trace + ": op "), std::string::npos) << err.str();
}

// ZeRO-3 over the mesh: 3 steps, save, resume for 3 more = the 6-step run, bit for bit.
TEST(TrainSequence, CheckpointResumeGivesIdenticalLosses) {
  expect_resume_matches_one_run(3, "tiny-seq-cpu-zero3", plan("tiny-seq-2groups-zero3"), "seq");
}

TEST(TrainSequence, LossFallsOver200Steps) {
  expect_loss_falls_over_200_steps("tiny-seq-cpu", "tiny-seq-ring-5-3-2", 1.0);
}

TEST(TrainSequence, PlanDeviceCountDiffersFromRanks) {
  Outcome o = train(2, "tiny-seq-cpu --plan " + plan("tiny-seq-ring-5-3-2") + " --steps 1");
  expect_clean_failure(o, "the plan uses 3 devices but the job has 2 MPI ranks");
  EXPECT_EQ(o.code, 2);
}

// The layout's tokens must be the scenario's sequence length (the corpus' sequences).
TEST(TrainSequence, ShardsNotMatchingTheSequenceLengthAreRefused) {
  std::ifstream in(root() + "/scenarios/shipped/tiny-seq-cpu.json");
  auto sc = nlohmann::json::parse(in);
  sc["training"]["seq_len"] = 48;
  const std::string file = temp("seq48.json");
  write_file(file, sc.dump());
  Outcome o = train(3, file + " --plan " + plan("tiny-seq-ring-5-3-2") + " --steps 1");
  expect_clean_failure(o,
                       "tiny-seq-ring-5-3-2.json: /sequence/groups: the groups' tokens sum to "
                       "40; expected the sequence length S = 48");
  EXPECT_EQ(o.code, 2);
}

}  // namespace
