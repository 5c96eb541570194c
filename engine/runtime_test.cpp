// The engine against the single-process reference (kernels::LlamaModel over the whole
// global batch): every shipped tiny plan, in one process on the fake communicator.

#include <gtest/gtest.h>

#include "engine/engine_testing.hpp"

namespace hexi::engine {
namespace {

struct Case {
  const char* scenario;
  const char* plan;
};

class PlanTest : public ::testing::TestWithParam<Case> {};

TEST_P(PlanTest, MatchesReference) {
  Scenario sc;
  auto program = lower_shipped(GetParam().scenario, GetParam().plan, &sc);
  ASSERT_TRUE(program.ok()) << program.error().message;
  auto corpus = CorpusSource::load(default_corpus(), sc.training.seq_len, 7);
  ASSERT_TRUE(corpus.ok()) << corpus.error().message;
  RuntimeOptions opt;
  const int steps = 10;
  auto got = run_fake(*program, sc.model, *corpus, opt, steps);
  ASSERT_TRUE(got.ok()) << got.error().message;
  Trajectory ref = run_reference(sc.model, sc.training.global_batch, *corpus, opt, steps);
  for (int k = 0; k < steps; ++k) {
    EXPECT_NEAR(got->losses[k], ref.losses[k], 1e-5 * ref.losses[k]) << "step " << k;
  }
  auto e1 = compare(ref.grads_first, got->grads_first, 1e-6, 1e-4);
  std::cout << "first-step gradients:\n" << format_errors(e1);
  auto e2 = compare(ref.grads_last, got->grads_last, 1e-6, 1e-3);
  std::cout << "step-10 gradients:\n" << format_errors(e2);
  auto e3 = compare(ref.params_last, got->params_last, 1e-5, 1e-3);
  std::cout << "params after 10 steps:\n" << format_errors(e3);
  for (auto* es : {&e1, &e2, &e3}) {
    for (const auto& e : *es) EXPECT_TRUE(e.ok) << e.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Plans, PlanTest,
                         ::testing::Values(Case{"tiny-llama-cpu", "tiny-single.json"},
                                           Case{"tiny-llama-cpu", "tiny-pp2-tp2-tp1.json"},
                                           Case{"tiny-llama-cpu", "tiny-dp2-tp2-vs-pp2.json"},
                                           Case{"tiny-llama-8l-cpu", "tiny-pp3-uneven.json"},
                                           Case{"tiny-llama-cpu", "tiny-tp4-to-tp1.json"},
                                           Case{"tiny-llama-cpu", "tiny-dp3-mixed.json"},
                                           Case{"tiny-llama-cpu", "tiny-8rank.json"},
                                           Case{"tiny-llama-cpu-zero1", "tiny-dp3-mixed.json"},
                                           Case{"tiny-llama-cpu-gpipe", "tiny-pp2-tp2-tp1.json"}));

}  // namespace
}  // namespace hexi::engine
