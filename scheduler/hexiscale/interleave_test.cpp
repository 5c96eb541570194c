// Interleaved 1F1B on a found plan: the layer deal by hand, and the closed form keeping
// virtual stages where they shorten the iteration (and not where they do not fit).
#include <gtest/gtest.h>

#include "scheduler/hexiscale/hexiscale.hpp"
#include "scheduler/plan/testing.hpp"
#include "scheduler/search/testing.hpp"

namespace hexi {
namespace {

TEST(Interleave, DealsEachStagesLayersIntoItsChunksInLayerOrder) {
  Pipeline plain;
  plain.batch = 4;
  Stage a, b;
  a.devices = {0, 1};
  a.layer_end = 5;
  b.devices = {2};
  b.layer_begin = 5;
  b.layer_end = 9;
  b.recompute = Recompute::kFull;
  plain.stages = {a, b};
  const Pipeline p = interleaved(plain, 2);
  ASSERT_EQ(p.stages.size(), 4u);
  // Group 0 (5 layers): chunks of 3 and 2; group 1 (4 layers): 2 and 2.
  const int ranges[4][2] = {{0, 3}, {3, 5}, {5, 7}, {7, 9}};
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(p.stages[k].layer_begin, ranges[k][0]) << k;
    EXPECT_EQ(p.stages[k].layer_end, ranges[k][1]) << k;
    EXPECT_EQ(p.stages[k].devices, plain.stages[k % 2].devices) << k;
    EXPECT_EQ(p.stages[k].recompute, plain.stages[k % 2].recompute) << k;
  }
  EXPECT_EQ(p.groups(), 2);
  EXPECT_EQ(p.chunks(), 2);
}

TEST(Interleave, KeptWhereTheClosedFormIsFaster) {
  // Llama-2 7B on 8 A100, 4 stages of TP 2, 8 micro-batches: plain 1F1B's bubble is 3/11
  // of the iteration, interleaved v = 2 halves it.
  const Model& m = *testing::shipped_models().find("llama2-7b");
  Cluster c = testing::make_cluster(1, 8);
  TrainingConfig t = testing::tiny_training(8, 1, 4096);
  Json stages = Json::array();
  for (int g = 0; g < 4; ++g)
    stages.push_back({{"devices", {2 * g, 2 * g + 1}}, {"layers", {8 * g, 8 * (g + 1)}}});
  const Plan plain = testing::plan_from(
      {{"version", 1}, {"pipelines", Json::array({{{"batch", 8}, {"stages", stages}}})}});
  Profile prof;
  CostModel cm(c, m, t, prof);
  ScoredPlan best{plain, cm.estimate(plain)};
  const double before = best.estimate.iteration_time_s;
  const std::vector<int> v = interleave_pipelines(cm, best, 4);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_GE(v[0], 2);
  EXPECT_EQ(best.plan.pipelines[0].chunks(), v[0]);
  EXPECT_LT(best.estimate.iteration_time_s, before);
  EXPECT_DOUBLE_EQ(cm.estimate(best.plan).iteration_time_s, best.estimate.iteration_time_s);
  EXPECT_TRUE(validate_plan(best.plan, c, m, t, "interleaved").ok());
  std::printf("4 x TP 2, m = 8: plain %.4f s, interleaved v=%d %.4f s\n", before, v[0],
              best.estimate.iteration_time_s);
  // Not under GPipe (interleaving is a 1F1B schedule), nor with m not a multiple of p.
  t.schedule = PipelineSchedule::kGPipe;
  CostModel gpipe(c, m, t, prof);
  ScoredPlan g{plain, gpipe.estimate(plain)};
  EXPECT_EQ(interleave_pipelines(gpipe, g, 4), std::vector<int>{1});
  t.schedule = PipelineSchedule::k1F1B;
  t.global_batch = 6;
  CostModel six(c, m, t, prof);
  Plan odd = plain;
  odd.pipelines[0].batch = 6;
  ScoredPlan o{odd, six.estimate(odd)};
  EXPECT_EQ(interleave_pipelines(six, o, 4), std::vector<int>{1});
}

TEST(Interleave, OptionIsReadAndBounded) {
  Scenario sc = testing::shipped_scenario("hexiscale-setting1-llama2-7b");
  EXPECT_EQ(read_hexiscale_options(sc)->interleave, 1);  // off unless asked
  sc.scheduler_options = {{"interleave", 4}};
  EXPECT_EQ(read_hexiscale_options(sc)->interleave, 4);
  sc.scheduler_options = {{"interleave", 9}};
  auto bad = read_hexiscale_options(sc);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("interleave"), std::string::npos) << bad.error().message;
}

}  // namespace
}  // namespace hexi
