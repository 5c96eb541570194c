// Parameter counts against the published figures.
#include "scenarios/model.hpp"

#include <gtest/gtest.h>

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

// Exact counts: a model that lost a tensor (its output head, a norm, a bias) fails. The Llama
// counts are those of the released checkpoints (the papers round them: 6.74B, 13.02B, 68.98B,
// 32.53B for LLaMA "33B", 8.03B, 70.55B). GPT-3 175B with its shapes (the paper rounds to
// 175.0B): 96 layers of 12h^2 + 13h (q, k, v, o and the 4h GELU MLP with their biases, two
// LayerNorms of 2h), h = 12288, plus 50257 x h token and 2048 x h position embeddings, tied
// head, final LayerNorm 2h: 173 961 510 912 + 642 723 840 + 24 576.
TEST(Model, PublishedParameterCounts) {
  const std::vector<std::pair<std::string, double>> expected = {
      {"llama2-7b", 6738415616.0},   {"llama2-13b", 13015864320.0}, {"llama2-70b", 68976648192.0},
      {"llama-30b", 32528943616.0},  {"llama3-8b", 8030261248.0},   {"llama3-70b", 70553706496.0},
      {"gpt3-175b", 174604259328.0},
  };
  for (const auto& [name, params] : expected) {
    const Model* m = models().find(name);
    ASSERT_NE(m, nullptr) << name;
    EXPECT_DOUBLE_EQ(m->params(), params) << name;
  }
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
