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

// Mixtures of experts against their model cards (which round): Mixtral 8x7B 46.7B with 12.9B
// active, Qwen1.5-MoE-A2.7B 14.3B with 2.7B active. Exactly: Mixtral is 32 layers of q, o
// (h^2 each), k, v (h x 1024 each), 8 experts of 3hf, a router h x 8 and two norms, plus two
// 32000 x h tables and the final norm; 2 of the 8 experts are active.
TEST(Model, MixtureOfExpertsParameterCounts) {
  const Model* mixtral = models().find("mixtral-8x7b");
  ASSERT_NE(mixtral, nullptr);
  ASSERT_TRUE(mixtral->is_moe());
  const double h = 4096, f = 14336;
  const double layer = 2 * h * h + 2 * h * 1024 + 8 * 3 * h * f + 8 * h + 2 * h;
  EXPECT_DOUBLE_EQ(mixtral->params(), 32 * layer + 2 * 32000 * h + h);
  EXPECT_DOUBLE_EQ(mixtral->active_params(), mixtral->params() - 32 * 6 * 3 * h * f);
  EXPECT_NEAR(mixtral->params() / 1e9, 46.7, 0.05);
  EXPECT_NEAR(mixtral->active_params() / 1e9, 12.9, 0.05);
  const Model* qwen = models().find("qwen1.5-moe-a2.7b");
  ASSERT_NE(qwen, nullptr);
  EXPECT_NEAR(qwen->params() / 1e9, 14.3, 0.05);
  EXPECT_NEAR(qwen->active_params() / 1e9, 2.7, 0.05);
  // A dense model's active parameters are all of them; it has no router.
  const Model* dense = models().find("llama2-7b");
  EXPECT_DOUBLE_EQ(dense->active_params(), dense->params());
  EXPECT_DOUBLE_EQ(dense->router_params(), 0);
  // The MoE fields survive writing and reading back.
  const Model back = read_model(JsonNode(to_json(*qwen), "q.json"));
  EXPECT_EQ(back.moe.experts, 60);
  EXPECT_EQ(back.moe.top_k, 4);
  EXPECT_EQ(back.moe.shared_ffn, 5632);
  EXPECT_DOUBLE_EQ(back.params(), qwen->params());
  // The router's load, stated, is written back.
  Json j = to_json(*qwen);
  j["moe"]["imbalance"] = 1.5;
  j["moe"]["capacity_factor"] = 1.25;
  const Model loaded = read_model(JsonNode(to_json(read_model(JsonNode(j, "q.json"))), "q.json"));
  EXPECT_DOUBLE_EQ(loaded.moe.imbalance, 1.5);
  EXPECT_DOUBLE_EQ(loaded.moe.capacity_factor, 1.25);
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
           "m.json: /mlp: expected \"swiglu\" or \"gelu\""},
          {R"({"name": "x", "layers": 2, "hidden": 12, "ffn": 4, "heads": 4, "vocab": 5, "max_seq": 8, "moe": {"experts": 4, "top_k": 5}})",
           "m.json: /moe/top_k: expected an integer in [1, 4], got 5"},
          {R"({"name": "x", "layers": 2, "hidden": 12, "ffn": 4, "heads": 4, "vocab": 5, "max_seq": 8, "moe": {"experts": 4}})",
           "m.json: /moe: missing required field \"top_k\""},
          {R"({"name": "x", "layers": 2, "hidden": 12, "ffn": 4, "heads": 4, "vocab": 5, "max_seq": 8, "mlp": "gelu", "moe": {"experts": 4, "top_k": 1}})",
           "m.json: /moe: mixture-of-experts layers are SwiGLU experts without biases"},
          {R"({"name": "x", "layers": 2, "hidden": 12, "ffn": 4, "heads": 4, "vocab": 5, "max_seq": 8, "moe": {"experts": 4, "top_k": 1, "capacity": 2}})",
           "m.json: /moe: unknown field \"capacity\" (allowed: experts, top_k, shared_ffn, "
           "imbalance, capacity_factor)"},
          // The busiest expert takes at most every token: E / top_k = 2 times the mean.
          {R"({"name": "x", "layers": 2, "hidden": 12, "ffn": 4, "heads": 4, "vocab": 5, "max_seq": 8, "moe": {"experts": 4, "top_k": 2, "imbalance": 3}})",
           "m.json: /moe/imbalance: expected"}}) {
    Json j = Json::parse(text);
    auto r = load_with([&] { return read_model(JsonNode(j, "m.json")); });
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.error().message.find(expected), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace hexi
