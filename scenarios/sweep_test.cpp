#include "scenarios/sweep.hpp"

#include <gtest/gtest.h>

#include "scenarios/testing.hpp"

namespace hexi {
namespace {

const SweepVocabulary kVocabulary{{"hexiscale", "uniform", "random"}, {"tokens_per_s", "mfu"}};

Result<Sweep> parse_sweep(const std::string& text) {
  auto json = parse_json_text(text, "s.json");
  if (!json) return json.error();
  return sweep_from_json(*json, "s.json", testing::shipped_gpus(), testing::shipped_models(),
                         kVocabulary);
}

// Axes cross in kSweepAxes order, the last varying fastest; absent axes take the base
// training config's seq_len / global batch, hexiscale, closed_form and seed 1.
TEST(Sweep, AxesCrossInOrderWithDefaults) {
  auto s =
      parse_sweep(R"({"version": 1, "name": "x", "training": {"seq_len": 1024, "micro_batch": 2},
    "axes": {"cluster": [{"mix": "A100:1x4"}, {"mix": "RTX4090:2x4", "label": "4090s"}],
             "model": ["llama2-7b"], "global_batch": [8, 16],
             "scheduler": ["uniform", {"name": "random", "seeds": 2}]}})");
  ASSERT_TRUE(s.ok()) << s.error().message;
  ASSERT_EQ(s->points.size(), 8u);
  EXPECT_EQ(s->metrics, kVocabulary.metrics);  // every metric by default
  const SweepPoint& p = s->points[3];
  EXPECT_EQ(p.index, 3);
  EXPECT_EQ(s->clusters[p.cluster].label, "A100:1x4");  // the mix as written
  EXPECT_EQ(p.global_batch, 16);
  EXPECT_EQ(p.seq_len, 1024);
  EXPECT_EQ(p.fidelity, Fidelity::kClosedForm);
  EXPECT_EQ(p.seed, 1u);
  EXPECT_EQ(s->schedulers[p.scheduler].name, "random");
  EXPECT_EQ(s->schedulers[p.scheduler].options, Json({{"seeds", 2}}));
  EXPECT_EQ(p.key,
            "cluster=A100:1x4;model=llama2-7b;seq_len=1024;global_batch=16;"
            "scheduler=random{\"seeds\":2};fidelity=closed_form;seed=1");
  EXPECT_EQ(s->clusters[s->points[4].cluster].label, "4090s");
  EXPECT_EQ(s->clusters[1].cluster.num_devices(), 8);
  EXPECT_EQ(s->training_of(p).global_batch, 16);
  EXPECT_EQ(s->training_of(p).micro_batch, 2);
  EXPECT_EQ(s->point_json(p)["scheduler"], "random{\"seeds\":2}");
}

// A "prices" axis crosses like the others and joins the keys; without one, keys and rows
// have no prices part.
TEST(Sweep, PricesAxisJoinsKeysOnlyWhenGiven) {
  auto s = parse_sweep(R"({"version": 1, "name": "x",
    "axes": {"cluster": [{"mix": "A100:1x4"}], "model": ["llama2-7b"],
             "prices": ["public-2026-11"]}})");
  ASSERT_TRUE(s.ok()) << s.error().message;
  ASSERT_EQ(s->points.size(), 1u);
  ASSERT_EQ(s->prices.size(), 1u);
  EXPECT_EQ(s->prices[0].book.name, "public-2026-11");
  EXPECT_EQ(s->points[0].key.substr(s->points[0].key.rfind(';')), ";prices=public-2026-11");
  EXPECT_EQ(s->point_json(s->points[0])["prices"], "public-2026-11");
  auto plain = parse_sweep(R"({"version": 1, "name": "x",
    "axes": {"cluster": [{"mix": "A100:1x4"}], "model": ["llama2-7b"]}})");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->points[0].prices, -1);
  EXPECT_EQ(plain->points[0].key.find("prices"), std::string::npos);
  EXPECT_FALSE(plain->point_json(plain->points[0]).contains("prices"));
}

// An explicit list: each distinct value is read once (one cluster for three points).
TEST(Sweep, ExplicitPointsShareValues) {
  auto s = parse_sweep(R"({"version": 1, "name": "x", "metrics": ["mfu"], "points": [
    {"cluster": "tiny-cpu-2x4", "model": "tiny-llama", "global_batch": 8, "seq_len": 64},
    {"cluster": "tiny-cpu-2x4", "model": "tiny-llama", "global_batch": 16, "seq_len": 64},
    {"cluster": "tiny-cpu-2x4", "model": "tiny-llama", "fidelity": "stage", "seed": 7,
     "seq_len": 64}]})");
  ASSERT_TRUE(s.ok()) << s.error().message;
  ASSERT_EQ(s->points.size(), 3u);
  EXPECT_EQ(s->clusters.size(), 1u);
  EXPECT_EQ(s->metrics, std::vector<std::string>{"mfu"});
  EXPECT_EQ(s->points[2].fidelity, Fidelity::kStage);
  EXPECT_EQ(s->points[2].seed, 7u);
  EXPECT_EQ(s->points[2].global_batch, 64);  // the default training config's
  EXPECT_EQ(s->schedulers[s->points[2].scheduler].name, "hexiscale");
}

// The same cluster file digests the same, whether named or generated twice.
TEST(Sweep, DigestsAreStable) {
  const std::string text = R"({"version": 1, "name": "x",
    "axes": {"cluster": [{"mix": "A100:1x4"}, "tiny-cpu-2x4"], "model": ["tiny-llama"]}})";
  auto a = parse_sweep(text), b = parse_sweep(text);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->clusters[0].digest, b->clusters[0].digest);
  EXPECT_EQ(a->clusters[1].digest, b->clusters[1].digest);
  EXPECT_NE(a->clusters[0].digest, a->clusters[1].digest);
  EXPECT_EQ(a->clusters[0].digest.size(), 16u);
}

TEST(Sweep, BadInputNamesFilePathAndExpectation) {
  const std::string head = R"({"version": 1, "name": "x", )";
  for (auto [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {head + R"("axes": {"cluster": [{"mix": "A100:1y4"}], "model": ["llama2-7b"]}})",
            "s.json: /axes/cluster/0/mix: --mix \"A100:1y4\""},
           {head + R"("axes": {"cluster": [{"mix": "Z9:1x4"}], "model": ["llama2-7b"]}})",
            "unknown GPU type \"Z9\""},
           {head + R"("axes": {"cluster": ["nowhere"], "model": ["llama2-7b"]}})",
            "s.json: /axes/cluster/0: unknown cluster \"nowhere\""},
           {head + R"("axes": {"cluster": ["tiny-cpu-2x4"], "model": ["llama9"]}})",
            "s.json: /axes/model/0: expected a model from the catalog"},
           {head + R"("axes": {"cluster": ["tiny-cpu-2x4"], "model": ["tiny-llama"],
                      "scheduler": ["fast"]}})",
            "s.json: /axes/scheduler/0: expected a scheduler (hexiscale, uniform, random)"},
           {head + R"("axes": {"cluster": ["tiny-cpu-2x4"], "model": ["tiny-llama"],
                      "prices": ["no-such-book"]}})",
            "s.json: /axes/prices/0: "},
           {head + R"("axes": {"cluster": ["tiny-cpu-2x4"], "model": ["tiny-llama"],
                      "fidelity": ["exact"]}})",
            "s.json: /axes/fidelity/0: expected \"closed_form\", \"layer\" or \"stage\""},
           {head + R"("axes": {"cluster": ["tiny-cpu-2x4"], "model": ["tiny-llama"],
                      "seq_len": [64, 64]}})",
            "s.json: /axes/seq_len/1: expected a value not listed before"},
           {head + R"("axes": {"cluster": ["tiny-cpu-2x4"], "model": ["tiny-llama"],
                      "global_batch": []}})",
            "s.json: /axes/global_batch: expected a non-empty array"},
           {head + R"("training": {"micro_batch": 4}, "axes": {"cluster": ["tiny-cpu-2x4"],
                      "model": ["tiny-llama"], "global_batch": [6]}})",
            "s.json: /axes/global_batch/0: expected a multiple of training.micro_batch (4)"},
           {head + R"("axes": {"cluster": ["tiny-cpu-2x4"], "model": ["tiny-llama"], "gpu": [1]}})",
            "s.json: /axes: unknown field \"gpu\""},
           {head + R"("axes": {"model": ["tiny-llama"]}})", "s.json: /axes"},
           {head + R"("metrics": ["speed"], "axes": {"cluster": ["tiny-cpu-2x4"],
                      "model": ["tiny-llama"]}})",
            "s.json: /metrics/0: expected a metric (tokens_per_s, mfu)"},
           {head + R"("axes": {"cluster": [{"mix": "A100:1x4", "label": "a"},
                      {"mix": "A100:1x8", "label": "a"}], "model": ["tiny-llama"]}})",
            "s.json: /axes/cluster/1: a second cluster labelled \"a\""},
           {head + R"("points": [{"cluster": "tiny-cpu-2x4", "model": "tiny-llama"},
                      {"cluster": "tiny-cpu-2x4", "model": "tiny-llama", "seed": 1}]})",
            "s.json: /points/1: the same point as /points/0"},
           {head + R"("points": [], "axes": {}})", "not both"},
           {head + R"("description": "none"})", "expected \"axes\""},
           {R"({"version": 2, "name": "x", "points": []})", "s.json: /version"},
           {R"({"version": 1, "name": "a/b", "points": []})", "s.json: /name"},
       }) {
    auto s = parse_sweep(text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.error().kind, ErrorKind::kBadInput);
    EXPECT_NE(s.error().message.find(expected), std::string::npos)
        << s.error().message << "\n  expected: " << expected;
  }
}

}  // namespace
}  // namespace hexi
