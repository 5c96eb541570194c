// Parameter counts against the published figures.
#include "scenarios/model.hpp"

#include <gtest/gtest.h>

#include <cstdio>

namespace hexi {
namespace {

const ModelCatalog& models() {
  static const ModelCatalog c = [] {
    auto r = ModelCatalog::load_shipped();
    EXPECT_TRUE(r.ok()) << r.error().message;
    return *r;
  }();
  return c;
}

TEST(Model, PublishedParameterCounts) {
  // name, published parameters, tolerance (relative)
  const std::vector<std::tuple<std::string, double, double>> expected = {
      {"llama2-7b", 6.74e9, 0.005},    // Llama 2 paper: 6.74B (exactly 6 738 415 616)
      {"llama2-13b", 13.02e9, 0.005},  // 13 015 864 320
      {"llama2-70b", 68.98e9, 0.005},  // 68 976 648 192
      {"llama-30b", 32.53e9, 0.005},   // LLaMA "33B": 32 528 943 616
      {"llama3-8b", 8.03e9, 0.005},    // 8 030 261 248
      {"llama3-70b", 70.55e9, 0.005},  // 70 553 706 496
      {"gpt3-175b", 174.6e9, 0.005},   // GPT-3 paper: 175.0B (174.6B with its shapes)
  };
  for (const auto& [name, params, tol] : expected) {
    const Model* m = models().find(name);
    ASSERT_NE(m, nullptr) << name;
    std::printf("%-11s %15.0f parameters, published %.2fB, ratio %.5f\n", name.c_str(), m->params(),
                params / 1e9, m->params() / params);
    EXPECT_NEAR(m->params() / params, 1.0, tol) << name << ": " << m->params();
  }
  EXPECT_DOUBLE_EQ(models().find("llama2-7b")->params(), 6738415616.0);
}

TEST(Model, GroupedQueryAttentionShapes) {
  const Model* m = models().find("llama2-70b");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->head_dim(), 128);
  EXPECT_EQ(m->kv_dim(), 1024);
  // q and o are h x h, k and v are h x kv_dim.
  EXPECT_DOUBLE_EQ(m->attention_params(), 2.0 * 8192 * 8192 + 2.0 * 8192 * 1024);
}

TEST(Model, TinyModelForEngineTests) {
  const Model* m = models().find("tiny-llama");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->layers, 4);
  EXPECT_EQ(m->hidden, 64);
  EXPECT_EQ(m->heads, 4);
  EXPECT_EQ(m->kv_heads, 2);
  EXPECT_EQ(m->vocab, 256);
}

TEST(Model, BadModelsAreRejected) {
  for (
      auto [text, expected] : std::vector<std::pair<std::string, std::string>>{
          {R"({"name": "x", "layers": 2, "hidden": 10, "ffn": 4, "heads": 3, "vocab": 5, "max_seq": 8})",
           "m.json: /heads: expected a divisor of hidden (10), got 3"},
          {R"({"name": "x", "layers": 2, "hidden": 12, "ffn": 4, "heads": 4, "kv_heads": 3, "vocab": 5, "max_seq": 8})",
           "m.json: /kv_heads: expected a divisor of heads (4), got 3"},
          {R"({"name": "x", "layers": 0, "hidden": 12, "ffn": 4, "heads": 4, "vocab": 5, "max_seq": 8})",
           "m.json: /layers: expected an integer in [1, 100000], got 0"},
          {R"({"name": "x", "layers": 2, "hidden": 12, "ffn": 4, "heads": 4, "vocab": 5, "max_seq": 8, "mlp": "relu"})",
           "m.json: /mlp: expected \"swiglu\" or \"gelu\""}}) {
    Json j = Json::parse(text);
    auto r = load_with([&] { return read_model(JsonNode(j, "m.json")); });
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.error().message.find(expected), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace hexi
