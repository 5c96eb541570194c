// One plan under real MPI ranks (one process per device, OpenMPI), against the PyTorch
// oracle and the single-process reference; ctest runs it once per shipped tiny plan
// with HEXISIM_TEST_SCENARIO / HEXISIM_TEST_PLAN set (engine/CMakeLists.txt), and
// HEXISIM_TEST_PRECISION=bf16 for the bf16 variants (against the bf16 oracle; the
// single-process reference is float32 only). Rank 0 assembles full-model tensors from
// every rank and prints the per-tensor errors (the figures of the engine's report).
// Tolerances: oracle_tolerance (engine_testing.hpp) and runtime_test.cpp.

#include <mpi.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "engine/comm_mpi.hpp"
#include "engine/engine_testing.hpp"

namespace hexi::engine {
namespace {

class MpiPlan : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* sc = std::getenv("HEXISIM_TEST_SCENARIO");
    const char* plan = std::getenv("HEXISIM_TEST_PLAN");
    ASSERT_TRUE(sc != nullptr && plan != nullptr)
        << "set HEXISIM_TEST_SCENARIO and HEXISIM_TEST_PLAN";
    plan_ = plan;
    const char* precision = std::getenv("HEXISIM_TEST_PRECISION");
    precision_ = precision != nullptr ? precision : "";
    auto program = lower_shipped(sc, plan, &scenario_, precision_);
    ASSERT_TRUE(program.ok()) << program.error().message;
    program_ = std::move(*program);
    auto session = MpiSession::init(nullptr, nullptr);
    ASSERT_TRUE(session.ok());
    auto w = (*session)->world();
    ASSERT_TRUE(w.ok());
    world_ = std::move(*w);
    ASSERT_EQ(world_->size(), static_cast<int>(program_.devices.size()))
        << "run with mpirun -np <plan devices>";
  }

  // A failure on any rank ends the job (other ranks would wait for its results).
  Trajectory run(const DataSource& data, const RuntimeOptions& opt, int steps) {
    auto t = run_mpi(program_, scenario_.model, data, opt, steps, *world_);
    if (!t.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", world_->rank(), t.error().message.c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return std::move(*t);
  }

  std::string plan_;
  std::string precision_;  // empty: the scenario's
  Scenario scenario_;
  Program program_;
  std::unique_ptr<Communicator> world_;
};

TEST_F(MpiPlan, MatchesPyTorchOracle) {
  const std::string precision = scenario_.training.precision;
  // Every model a shipped tiny plan trains has its oracle (kernels/testdata, written by
  // scripts/make_oracle.py --model NAME): tiny-llama, tiny-llama-8l, tiny-llama-seq.
  auto oracle = load_oracle_inputs(precision, scenario_.model.name);
  ASSERT_TRUE(oracle.ok()) << oracle.error().message;
  ASSERT_EQ(scenario_.model.layers, oracle->dims.layers) << scenario_.model.name;
  ASSERT_EQ(scenario_.training.seq_len, oracle->data->seq_len()) << scenario_.model.name;
  Trajectory got = run(*oracle->data, oracle->options, 3);
  if (world_->rank() != 0) return;
  auto cmp = compare_with_oracle(*oracle, got.losses, got.grads_first, precision);
  ASSERT_TRUE(cmp.ok()) << cmp.error().message;
  std::printf(
      "%s oracle comparison, %s on %s (%zu MPI ranks): loss %.7f (torch %.7f), after 1 step %.7f "
      "(%.7f), "
      "after 2 %.7f (%.7f)\n%s",
      precision.c_str(), plan_.c_str(), scenario_.name.c_str(), program_.devices.size(),
      got.losses[0], oracle->loss, got.losses[1], oracle->loss_after_1, got.losses[2],
      oracle->loss_after_2, format_errors(cmp->grads).c_str());
  if (cmp->evidence) {
    std::printf("rms difference to torch bf16 %.2e, to torch fp32 %.2e\n", cmp->evidence->to_bf16,
                cmp->evidence->to_fp32);
  }
  for (const std::string& f : cmp->failures) ADD_FAILURE() << f;
  if (program_.sequence) {  // a mesh's initial loss: within 1e-6 relative of the oracle
    const double rel = std::abs(got.losses[0] - oracle->loss) / oracle->loss;
    std::printf("initial loss relative error %.1e\n", rel);
    EXPECT_LE(rel, 1e-6);
  }
}

TEST_F(MpiPlan, MatchesSingleProcessAfterOneAndTenSteps) {
  if (scenario_.training.precision != "fp32")
    GTEST_SKIP() << "the single-process reference computes in float32";
  auto corpus = CorpusSource::load(default_corpus(), scenario_.training.seq_len, 7);
  ASSERT_TRUE(corpus.ok()) << corpus.error().message;
  Trajectory got = run(*corpus, RuntimeOptions{}, 10);
  if (world_->rank() != 0) return;
  Trajectory ref = run_reference(scenario_.model, scenario_.training.global_batch, *corpus,
                                 RuntimeOptions{}, 10);
  double loss_err = 0;
  for (int k = 0; k < 10; ++k) {
    EXPECT_NEAR(got.losses[k], ref.losses[k], 1e-5 * ref.losses[k]) << "step " << k;
    loss_err = std::max(loss_err, std::abs(got.losses[k] - ref.losses[k]) / ref.losses[k]);
  }
  const TensorError a = worst(compare(ref.grads_first, got.grads_first, 1e-5, 1e-4));
  const TensorError b = worst(compare(ref.grads_last, got.grads_last, 1e-4, 1e-3));
  const TensorError c = worst(compare(ref.params_last, got.params_last, 1e-4, 1e-3));
  EXPECT_TRUE(a.ok && b.ok && c.ok);
  std::printf(
      "single-process comparison, %s on %s (%zu MPI ranks): losses %.6f -> %.6f (max rel err "
      "%.1e); "
      "max abs/rel err: grads step 1 %.1e/%.1e, step 10 %.1e/%.1e, params after 10 %.1e/%.1e\n",
      plan_.c_str(), scenario_.name.c_str(), program_.devices.size(), got.losses[0], got.losses[9],
      loss_err, a.max_abs, a.max_rel, b.max_abs, b.max_rel, c.max_abs, c.max_rel);
}

}  // namespace
}  // namespace hexi::engine
