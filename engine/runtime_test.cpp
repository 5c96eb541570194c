// The engine in one process on the fake communicator (one thread per rank): every
// shipped tiny plan against the single-process reference (kernels::LlamaModel over the
// whole global batch) and against the PyTorch oracle; checkpoint/resume; determinism.
// The same comparisons under real MPI ranks: runtime_mpi_test.cpp.
//
// Tolerances (|got - ref| <= atol_fraction * max|ref| + rtol * |ref| per element; the
// kernels/ oracle test's convention):
// - first-step gradients: atol_fraction 1e-5, rtol 1e-4. Both sides are float32 and
//   differ only in summation order: micro-batches accumulated one by one instead of one
//   batch, partial sums over TP shards and pipelines, loss statistics combined across a
//   vocab split. Observed errors are <= ~1e-6 of each tensor's scale.
// - losses: relative 1e-5 for all ten steps (float32 loss of ~5, observed ~1e-7).
// - after ten AdamW steps: gradients and parameters within atol_fraction 1e-4, rtol 1e-3.
//   AdamW's update is ~lr * m/sqrt(v): for elements whose gradient is 0 up to rounding
//   it amplifies rounding, so ten steps need a looser bound than one.

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "engine/engine_testing.hpp"
#include "engine/watchdog.hpp"

namespace hexi::engine {
namespace {

using Case = PlanCase;

std::string name_of(const ::testing::TestParamInfo<Case>& info) {
  return plan_case_name(info.param);
}

class PlanTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    auto program = lower_shipped(GetParam().scenario, GetParam().plan, &scenario_);
    ASSERT_TRUE(program.ok()) << program.error().message;
    program_ = std::move(*program);
  }
  Scenario scenario_;
  Program program_;
};

// Losses, gradients and parameters of ten steps on the corpus against the single-process
// reference (pipeline plans and sequence meshes alike).
void check_single_process(const Program& program, const Scenario& scenario, const Case& c) {
  auto corpus = CorpusSource::load(default_corpus(), scenario.training.seq_len, 7);
  ASSERT_TRUE(corpus.ok()) << corpus.error().message;
  RuntimeOptions opt;
  const int steps = 10;
  auto got = run_fake(program, scenario.model, *corpus, opt, steps);
  ASSERT_TRUE(got.ok()) << got.error().message;
  Trajectory ref =
      run_reference(scenario.model, scenario.training.global_batch, *corpus, opt, steps);
  for (int k = 0; k < steps; ++k)
    EXPECT_NEAR(got->losses[k], ref.losses[k], 1e-5 * ref.losses[k]) << "step " << k;
  EXPECT_LT(got->losses.back(), got->losses.front());
  const auto first = compare(ref.grads_first, got->grads_first, 1e-5, 1e-4);
  const auto last = compare(ref.grads_last, got->grads_last, 1e-4, 1e-3);
  const auto params = compare(ref.params_last, got->params_last, 1e-4, 1e-3);
  for (const auto* es : {&first, &last, &params}) {
    for (const auto& e : *es) EXPECT_TRUE(e.ok) << e.name << ": " << format_errors({e});
  }
  const TensorError a = worst(first), b = worst(last), p = worst(params);
  std::printf(
      "%s on %s: loss step 0 %.6f / step 9 %.6f; max rel err: grads step 1 %.1e, step 10 %.1e, "
      "params %.1e\n",
      c.plan, c.scenario, got->losses[0], got->losses[9], a.max_rel, b.max_rel, p.max_rel);
}

TEST_P(PlanTest, MatchesSingleProcessAfterOneAndTenSteps) {
  check_single_process(program_, scenario_, GetParam());
}

// The PyTorch oracle's loss and every gradient (its 2 sequences repeated to fill the
// global batch leave both unchanged), and its losses after one and two AdamW steps.
TEST_P(PlanTest, MatchesPyTorchOracle) {
  auto oracle = load_oracle_inputs("fp32", scenario_.model.name);  // one per tiny model
  ASSERT_TRUE(oracle.ok()) << oracle.error().message;
  ASSERT_EQ(scenario_.model.layers, oracle->dims.layers) << scenario_.model.name;
  ASSERT_EQ(scenario_.training.seq_len, oracle->data->seq_len()) << scenario_.model.name;
  ASSERT_EQ(scenario_.training.global_batch % oracle->batch, 0);
  auto got = run_fake(program_, scenario_.model, *oracle->data, oracle->options, 3);
  ASSERT_TRUE(got.ok()) << got.error().message;
  auto cmp = compare_with_oracle(*oracle, got->losses, got->grads_first, "fp32");
  ASSERT_TRUE(cmp.ok()) << cmp.error().message;
  for (const std::string& f : cmp->failures) ADD_FAILURE() << f;
  std::printf("%s on %s vs torch: loss %.7f (torch %.7f), first-step gradients max rel err %.1e\n",
              GetParam().plan, GetParam().scenario, got->losses[0], oracle->loss,
              worst(cmp->grads).max_rel);
}

INSTANTIATE_TEST_SUITE_P(Plans, PlanTest, ::testing::ValuesIn(shipped_tiny_plans()), name_of);

// Sequence meshes (scenarios/plans/tiny-seq-*.json): ring, ragged Ulysses with GQA kv heads
// split and replicated, two groups on sub-rings, ZeRO-1 and ZeRO-3 over the mesh, a mixture
// of experts, against the PyTorch oracle of their model (tiny-llama-seq: 40 tokens; tiny-moe)
// and the single-process reference. Same
// tolerances as the pipeline plans, and the initial loss within 1e-6 relative of torch's.
class SequencePlanTest : public PlanTest {};

TEST_P(SequencePlanTest, MatchesPyTorchOracle) {
  auto oracle = load_oracle_inputs("fp32", scenario_.model.name);  // tiny-llama-seq, tiny-moe
  ASSERT_TRUE(oracle.ok()) << oracle.error().message;
  ASSERT_EQ(scenario_.training.seq_len, oracle->data->seq_len());
  ASSERT_EQ(scenario_.training.global_batch % oracle->batch, 0);
  auto got = run_fake(program_, scenario_.model, *oracle->data, oracle->options, 3);
  ASSERT_TRUE(got.ok()) << got.error().message;
  auto cmp = compare_with_oracle(*oracle, got->losses, got->grads_first, "fp32");
  ASSERT_TRUE(cmp.ok()) << cmp.error().message;
  for (const std::string& f : cmp->failures) ADD_FAILURE() << f;
  const double loss_rel = std::abs(got->losses[0] - oracle->loss) / oracle->loss;
  EXPECT_LE(loss_rel, 1e-6);
  std::printf(
      "%s on %s vs torch: loss %.7f (torch %.7f, rel %.1e), after 2 AdamW steps rel %.1e; "
      "first-step gradients max rel err %.1e\n",
      GetParam().plan, GetParam().scenario, got->losses[0], oracle->loss, loss_rel,
      std::abs(got->losses[2] - oracle->loss_after_2) / oracle->loss_after_2,
      worst(cmp->grads).max_rel);
}

TEST_P(SequencePlanTest, MatchesSingleProcessAfterOneAndTenSteps) {
  check_single_process(program_, scenario_, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Sequence, SequencePlanTest, ::testing::ValuesIn(shipped_sequence_plans()),
                         name_of);

// Two 3-step runs of `plan` on `scenario` give identical losses and parameters.
void expect_two_runs_bit_identical(const char* scenario, const char* plan) {
  Scenario sc;
  auto program = lower_shipped(scenario, plan, &sc);
  ASSERT_TRUE(program.ok()) << program.error().message;
  auto corpus = CorpusSource::load(default_corpus(), sc.training.seq_len, 3);
  ASSERT_TRUE(corpus.ok());
  auto a = run_fake(*program, sc.model, *corpus, RuntimeOptions{}, 3);
  auto b = run_fake(*program, sc.model, *corpus, RuntimeOptions{}, 3);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->losses, b->losses);
  EXPECT_EQ(a->params_last.data, b->params_last.data);
}

// The cpu backend keeps what the process frees (backend_cpu.cpp): a 40 MiB block, above
// glibc's largest mmap threshold (32 MiB), allocated, written and freed ten times faults its
// pages in once. glibc alone maps and unmaps it every time: ten times the pages.
#if defined(__SANITIZE_ADDRESS__)
#define HEXI_UNDER_ASAN
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HEXI_UNDER_ASAN
#endif
#endif
TEST(CpuBackend, KeepsTheMemoryItsKernelsFree) {
#ifdef HEXI_UNDER_ASAN
  GTEST_SKIP() << "AddressSanitizer replaces glibc's malloc (its own allocator, mallopt unused)";
#endif
  auto backend = make_cpu_backend();
  auto faults = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
  };
  constexpr std::size_t kBytes = std::size_t{40} << 20;
  const long pages = static_cast<long>(kBytes) / sysconf(_SC_PAGESIZE);
  const long before = faults();
  for (int i = 0; i < 10; ++i) {
    void* p = std::malloc(kBytes);
    ASSERT_NE(p, nullptr);
    std::memset(p, i, kBytes);
    asm volatile("" : : "g"(p) : "memory");  // the block is used: no elision
    std::free(p);
  }
  const long got = faults() - before;
  EXPECT_LT(got, 3 * pages) << got << " minor page faults for 10 x " << pages << " pages";
}

// Same inputs, same bits: two runs give identical losses and parameters.
TEST(Fault, ParsesEveryKeyAndRefusesUnknownOnes) {
  auto f = Fault::parse("rank=1,step=2,op=3,mode=hang");
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->mode, Fault::Mode::kHang);
  EXPECT_TRUE(f->hits(1, 2, 3));
  EXPECT_FALSE(f->hits(1, 2, 4));
  f = Fault::parse("rank=0,mode=kill-in-save,point=2");
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->save_kill_point(0), 2);
  EXPECT_EQ(f->save_kill_point(1), 0);
  EXPECT_FALSE(f->hits(0, 0, 0)) << "a kill in a save never fails an op";
  EXPECT_TRUE(Fault::parse("")->mode == Fault::Mode::kNone);
  for (const auto& [spec, why] : std::vector<std::pair<std::string, std::string>>{
           {"rank=0,mode=error,points=2", "unknown key \"points\""},
           {"rank=0,mode=explode", "unknown mode \"explode\""},
           {"rank=0,mode=error,step=x", "\"x\" is not an integer"},
           {"mode=error", "rank and mode are required"},
           {"rank=0,mode", "\"mode\" is not key=value"}}) {
    auto bad = Fault::parse(spec);
    ASSERT_FALSE(bad.ok()) << spec;
    EXPECT_NE(bad.error().message.find("HEXISIM_FAULT=\"" + spec + "\": " + why), std::string::npos)
        << bad.error().message;
  }
}

TEST(Determinism, TwoRunsAreBitIdentical) {
  expect_two_runs_bit_identical("tiny-llama-cpu-zero1", "tiny-dp3-mixed.json");
}

// A program the engine refuses at set-up as bad input, with `why` in the message.
void expect_setup_refused(const Program& program, const Scenario& sc, const std::string& why) {
  auto corpus = CorpusSource::load(default_corpus(), sc.training.seq_len, 3);
  ASSERT_TRUE(corpus.ok());
  auto got = run_fake(program, sc.model, *corpus, RuntimeOptions{}, 1);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(got.error().message.find(why), std::string::npos) << got.error().message;
}

// Sequence meshes run in float32: a bf16 one is refused at set-up, by name, on every rank.
TEST(SequenceMesh, Bf16IsRefusedWithAMessage) {
  Scenario sc;
  auto program = lower_shipped("tiny-seq-cpu", "tiny-seq-ring-5-3-2.json", &sc, "bf16");
  ASSERT_TRUE(program.ok()) << program.error().message;
  expect_setup_refused(*program, sc, "float32 only");
}

// A mesh with a tensor-parallel group is estimated and simulated, not run: refused by name.
TEST(SequenceMesh, TensorGroupsAreRefusedWithAMessage) {
  Scenario sc;
  auto program = lower_shipped("tiny-seq-cpu", "tiny-seq-ring-5-3-2.json", &sc);
  ASSERT_TRUE(program.ok()) << program.error().message;
  ASSERT_TRUE(program->sequence.has_value());
  program->sequence->groups[0].tensor = true;
  expect_setup_refused(*program, sc, "runs Ulysses groups only");
}

// A mixture of experts' device takes its experts from the program: a program without them
// (written before lowering recorded them) is refused by name, not trained on a guess.
TEST(MixtureOfExperts, AProgramWithoutExpertRangesIsRefusedWithAMessage) {
  Scenario sc;
  auto program = lower_shipped("tiny-moe-cpu", "tiny-moe-experts-3-1.json", &sc);
  ASSERT_TRUE(program.ok()) << program.error().message;
  ASSERT_TRUE(program->devices[0].routed_experts.has_value());
  program->devices[0].routed_experts.reset();
  expect_setup_refused(*program, sc, "no routed_experts and shared_ffn ranges");
}

// The same for a sequence mesh (ring steps, all-to-alls, sub-rings, ZeRO-3).
TEST(Determinism, SequenceMeshRunsAreBitIdentical) {
  expect_two_runs_bit_identical("tiny-seq-cpu-zero3", "tiny-seq-2groups-zero3.json");
}

}  // namespace
}  // namespace hexi::engine
