// The single-process model: every gradient against finite differences (double), the
// micro-batch accumulation contract, and bitwise determinism.
#include "kernels/llama_model.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/test_util.hpp"

namespace hexi::kernels {
namespace {

using testing::expect_gradient;
using testing::random_tokens;

// 2 layers, GQA (4 query heads on 2 KV heads), uneven FFN: every kind of tensor.
LlamaDims small() {
  return {2, 8, 12, 4, 2, 16};
}

TEST(LlamaModel, EveryGradientMatchesFiniteDifferences) {
  const LlamaDims d = small();
  const int b = 2, s = 5;
  Params<double> p(model_layout(d)), g(p.layout);
  init_params(p, d, {11, 0.25});
  // Larger weights than the default init so that every path carries signal.
  for (double& w : p.data) w *= 4;
  const std::vector<int> tokens = random_tokens(b * s, d.vocab, 50);
  const std::vector<int> targets = random_tokens(b * s, d.vocab, 51);
  LlamaModel<double> model(d, b, s);
  model.forward_backward(p, tokens.data(), targets.data(), g);
  auto loss = [&] { return static_cast<double>(model.forward(p, tokens.data(), targets.data())); };
  expect_gradient(loss, p.data, g.data, "all parameters");
}

TEST(LlamaModel, LossScaleAccumulatesMicroBatches) {
  // Two micro-batches of 1 sequence with loss_scale 1/(2s) sum to the gradient of the
  // mean over the batch of 2.
  const LlamaDims d = small();
  const int s = 6;
  Params<double> p(model_layout(d)), whole(p.layout), parts(p.layout);
  init_params(p, d, {12, 0.0});
  const std::vector<int> tokens = random_tokens(2 * s, d.vocab, 52);
  const std::vector<int> targets = random_tokens(2 * s, d.vocab, 53);
  LlamaModel<double> batch2(d, 2, s), batch1(d, 1, s);
  const double mean = batch2.forward_backward(p, tokens.data(), targets.data(), whole);
  double sum = 0;
  for (int m = 0; m < 2; ++m)
    sum += batch1.forward_backward(p, tokens.data() + m * s, targets.data() + m * s, parts,
                                   1.0 / (2 * s));
  EXPECT_NEAR(sum / 2, mean, 1e-14);
  for (std::size_t i = 0; i < p.data.size(); ++i) ASSERT_NEAR(parts.data[i], whole.data[i], 1e-15);
}

TEST(LlamaModel, RunsAreBitwiseIdentical) {
  const LlamaDims d{4, 64, 172, 4, 2, 256};  // tiny-llama, float
  Params<float> p(model_layout(d)), g1(p.layout), g2(p.layout);
  init_params(p, d, {1, 0.0});
  const std::vector<int> tokens = random_tokens(64, d.vocab, 54);
  const std::vector<int> targets = random_tokens(64, d.vocab, 55);
  LlamaModel<float> a(d, 2, 32), b(d, 2, 32);
  const float l1 = a.forward_backward(p, tokens.data(), targets.data(), g1);
  const float l2 = b.forward_backward(p, tokens.data(), targets.data(), g2);
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(g1.data, g2.data);
  EXPECT_NEAR(l1, std::log(256.0), 0.1);  // small init: nearly uniform predictions
}

}  // namespace
}  // namespace hexi::kernels
