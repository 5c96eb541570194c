// SpecEvaluator::align_layers: pipelines split differently put a layer's DP replicas on
// different machines; imposing one split keeps them on one machine.
#include "scheduler/search/plan_space.hpp"

#include <gtest/gtest.h>

#include "scheduler/search/testing.hpp"

namespace hexi {
namespace {

using testing::cluster_json;
using testing::make_scenario;
using testing::small_model;

// Two pipelines over two 2-GPU machines on a slow network, one GPU of each machine per
// pipeline: stage s of both pipelines on machine s.
Plan two_pipelines(int first_cut, int second_cut) {
  Plan plan;
  for (int p = 0; p < 2; ++p) {
    Pipeline pipe;
    pipe.micro_batch = 1;
    pipe.batch = 4;
    const int cut = p == 0 ? first_cut : second_cut;
    pipe.stages.push_back({{p}, 0, cut, {}, {}, {}});
    pipe.stages.push_back({{2 + p}, cut, 12, {}, {}, {}});
    plan.pipelines.push_back(std::move(pipe));
  }
  return plan;
}

TEST(SpecEvaluator, AlignLayersKeepsEachLayersReplicasOnOneMachine) {
  auto sc = make_scenario(cluster_json("align", {{"A100-SXM-80GB", 2}, {"A100-SXM-80GB", 2}}, 1.0),
                          small_model(2048), {{"global_batch", 8}, {"seq_len", 2048}});
  ASSERT_TRUE(sc.ok()) << sc.error().message;
  CostModel cm(sc->cluster, sc->model, sc->training, sc->profile);
  const SpecEvaluator ev(cm);
  auto scored = [&](Plan plan) {
    Estimate e = cm.estimate(plan);
    const double pipelines = e.pipeline_s;
    return ScoredPlan{std::move(plan), std::move(e), pipelines};
  };
  // Layer 6 on machine 0 in one pipeline and on machine 1 in the other: its gradients
  // cross the 1 GB/s network.
  const ScoredPlan apart = scored(two_pipelines(6, 7));
  ASSERT_TRUE(apart.estimate.feasible);
  ASSERT_GT(apart.estimate.dp_sync_s, SpecEvaluator::kAlignShare * apart.estimate.iteration_time_s);
  const auto aligned = ev.align_layers(apart);
  ASSERT_TRUE(aligned.has_value());
  const auto& pipes = aligned->plan.pipelines;
  ASSERT_EQ(pipes.size(), 2u);
  for (std::size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(pipes[0].stages[s].layer_begin, pipes[1].stages[s].layer_begin);
    EXPECT_EQ(pipes[0].stages[s].layer_end, pipes[1].stages[s].layer_end);
    EXPECT_EQ(pipes[0].stages[s].devices, apart.plan.pipelines[0].stages[s].devices);
  }
  EXPECT_LT(aligned->objective(), apart.objective());
  EXPECT_LT(aligned->estimate.dp_sync_s, apart.estimate.dp_sync_s);
  EXPECT_EQ(aligned->estimate.iteration_time_s, cm.estimate(aligned->plan).iteration_time_s);
  // Nothing to align: equal splits, or one pipeline.
  EXPECT_FALSE(ev.align_layers(scored(two_pipelines(6, 6))).has_value());
  Plan one = two_pipelines(6, 7);
  one.pipelines.pop_back();
  one.pipelines[0].batch = 8;
  EXPECT_FALSE(ev.align_layers(scored(one)).has_value());
}

}  // namespace
}  // namespace hexi
