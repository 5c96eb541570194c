// SpecEvaluator's plan-level layer moves: align_layers (pipelines split differently put a
// layer's DP replicas on different machines; imposing one split keeps them on one machine),
// compute_balanced and polish_layers.
#include "scheduler/search/plan_space.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "scheduler/search/random.hpp"

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
  auto scored = [&](Plan plan) { return score_plan(cm, std::move(plan)); };
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

// Pipelines of stages on A100s then RTX 3090s (24 GiB: memory binds) over a 1.25 GB/s
// network, each pipeline one GPU of each of four 2-GPU machines.
class MixedPipelines : public ::testing::Test {
 protected:
  void SetUp() override {
    auto made = make_scenario(
        cluster_json("mixed",
                     {{"A100-SXM-80GB", 2}, {"A100-SXM-80GB", 2}, {"RTX3090", 2}, {"RTX3090", 2}},
                     1.25),
        small_model(2048), {{"global_batch", 16}, {"seq_len", 2048}});
    ASSERT_TRUE(made.ok()) << made.error().message;
    sc = std::make_unique<Scenario>(std::move(*made));
    cm = std::make_unique<CostModel>(sc->cluster, sc->model, sc->training, sc->profile);
    ev = std::make_unique<SpecEvaluator>(*cm);
  }

  // `pipelines` pipelines of `split` layers per stage.
  Plan plan(const std::vector<int>& split, int pipelines) const {
    Plan out;
    for (int p = 0; p < pipelines; ++p) {
      Pipeline pipe;
      pipe.micro_batch = 1;
      pipe.batch = 16 / pipelines;
      int begin = 0;
      for (std::size_t s = 0; s < split.size(); ++s) {
        pipe.stages.push_back({{static_cast<int>(2 * s) + p}, begin, begin + split[s], {}, {}, {}});
        begin += split[s];
      }
      out.pipelines.push_back(std::move(pipe));
    }
    return out;
  }

  std::unique_ptr<Scenario> sc;
  std::unique_ptr<CostModel> cm;
  std::unique_ptr<SpecEvaluator> ev;
};

TEST_F(MixedPipelines, ComputeBalancedIsTheLeastSlowestStageComputeThatFits) {
  // Every split of the 12 layers over the 4 stages: the least slowest stage among those that
  // fit, by the stages' own terms, a stage's time its compute plus the weighted sends over
  // both of its boundaries.
  const Plan start = plan({3, 3, 3, 3}, 1);
  const Pipeline& pipe = start.pipelines[0];
  const int k = 4, m = pipe.micro_batches();
  std::vector<StageTerms> terms;
  for (int i = 0; i < k; ++i) {
    terms.push_back(stage_terms(*cm, pipe.stages[i].devices, i == 0, i + 1 == k,
                                i + 1 < k ? &pipe.stages[i + 1].devices : nullptr, 1, 1));
  }
  ASSERT_GT(terms[1].send_s, 0.01 * terms[1].per_layer_s);  // the machine boundary weighs
  for (const double w : {0.0, 0.5, 1.0}) {
    const auto balanced = ev->compute_balanced(score_plan(*cm, start), w);
    ASSERT_TRUE(balanced.has_value()) << "weight " << w;
    ASSERT_TRUE(balanced->estimate.feasible);
    EXPECT_EQ(balanced->estimate.iteration_time_s, cm->estimate(balanced->plan).iteration_time_s);
    auto slowest = [&](const std::vector<int>& l) {
      double worst = 0;
      for (int i = 0; i < k; ++i) {
        const double sends = terms[i].send_s + (i > 0 ? terms[i - 1].send_s : 0.0);
        worst = std::max(worst, terms[i].fixed_s + w * sends + l[i] * terms[i].per_layer_s);
      }
      return worst;
    };
    double least = kInfeasible;
    std::vector<int> cur;
    testing::compositions(12, k, cur, [&]() {
      const std::vector<int>& l = cur;
      for (int i = 0; i < k; ++i) {
        const int in_flight = in_flight_micro_batches(sc->training.schedule, i, k, m);
        if (terms[i].memory(l[i], in_flight) > terms[i].capacity_bytes) return;
      }
      least = std::min(least, slowest(l));
    });
    ASSERT_NE(least, kInfeasible);
    std::vector<int> got;
    for (const Stage& s : balanced->plan.pipelines[0].stages) got.push_back(s.layers());
    EXPECT_NEAR(slowest(got), least, 1e-12 * least)
        << "weight " << w << " split " << ::testing::PrintToString(got);
    // The RTX 3090s, slower, hold fewer layers.
    EXPECT_GT(got[0] + got[1], got[2] + got[3]);
  }
}

TEST_F(MixedPipelines, PolishLayersEndsWhereNoOneLayerMoveHelps) {
  // Two pipelines split alike, too many layers on the RTX 3090s.
  const ScoredPlan start = score_plan(*cm, plan({2, 2, 4, 4}, 2));
  ASSERT_TRUE(start.estimate.feasible);
  long budget = 1000;
  const auto polished = ev->polish_layers(start, budget);
  ASSERT_TRUE(polished.has_value());
  EXPECT_LT(polished->objective(), start.objective());
  EXPECT_EQ(polished->estimate.iteration_time_s, cm->estimate(polished->plan).iteration_time_s);
  EXPECT_GT(budget, 0) << "ended by finding nothing more, not by the budget";
  EXPECT_LT(budget, 1000);
  // The pipelines moved together: still split alike.
  const auto& pipes = polished->plan.pipelines;
  for (std::size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(pipes[0].stages[s].layer_begin, pipes[1].stages[s].layer_begin);
    EXPECT_EQ(pipes[0].stages[s].layer_end, pipes[1].stages[s].layer_end);
  }
  // No single move of one boundary by one layer (in both pipelines) is faster and fits.
  for (std::size_t b = 0; b + 1 < 4; ++b) {
    for (int shift : {-1, 1}) {
      Plan trial = polished->plan;
      const int at = trial.pipelines[0].stages[b].layer_end + shift;
      if (at <= trial.pipelines[0].stages[b].layer_begin ||
          at >= trial.pipelines[0].stages[b + 1].layer_end)
        continue;
      for (Pipeline& p : trial.pipelines) {
        p.stages[b].layer_end = at;
        p.stages[b + 1].layer_begin = at;
      }
      const Estimate e = cm->estimate(trial);
      EXPECT_FALSE(e.feasible && e.iteration_time_s < polished->objective() * (1 - 1e-12))
          << "boundary " << b << " by " << shift;
    }
  }
  // A budget of one estimate: at most one tried; none: nothing.
  budget = 1;
  ev->polish_layers(start, budget);
  EXPECT_EQ(budget, 0);
  budget = 0;
  EXPECT_FALSE(ev->polish_layers(start, budget).has_value());
}

// The lower bound the exact search cuts on: on random plans over random clusters (RDMA and a
// slow TCP network, ZeRO 0 and 1) the floor stays below the full estimate, each stage's
// finish floor below the stage's end in the estimate's timeline, and the DP sync's NIC floor
// decides the bound on some of them (it is not vacuous).
TEST(SpecEvaluator, IterationFloorStaysBelowTheEstimateOfRandomPlans) {
  std::uint64_t state = 20261130;
  int checked = 0, by_nics = 0;
  for (int i = 0; i < 24; ++i) {
    Json cluster = testing::random_cluster(4242, i);
    if (i % 2) cluster["network"] = {{"nic_GBps", 1.0}, {"transport", "tcp"}};
    for (int zero : {0, 1}) {
      auto sc = make_scenario(cluster, small_model(2048),
                              {{"global_batch", 16}, {"seq_len", 2048}, {"zero_stage", zero}});
      ASSERT_TRUE(sc.ok()) << sc.error().message;
      CostModel cm(sc->cluster, sc->model, sc->training, sc->profile);
      SpecEvaluator ev(cm);
      const auto& machines = sc->cluster.machines();
      for (int draw = 0; draw < 30; ++draw) {
        // D pipelines; each machine's GPUs dealt to them (or left idle), each share one
        // segment at a TP degree that divides it, the segments of a pipeline shuffled.
        const int d = 1 + static_cast<int>(next_random(state) % 4);
        PlanSpec spec;
        spec.pipelines.resize(static_cast<std::size_t>(d));
        for (std::size_t m = 0; m < machines.size(); ++m) {
          std::vector<int> count(static_cast<std::size_t>(d) + 1, 0);  // the last: idle
          for (int g = 0; g < machines[m].num_gpus; ++g) ++count[next_random(state) % (d + 1)];
          for (int p = 0; p < d; ++p) {
            if (count[p] == 0) continue;
            std::vector<int> degrees;
            for (int tp : tp_degrees(sc->model, count[p])) {
              if (count[p] % tp == 0) degrees.push_back(tp);
            }
            spec.pipelines[p].segments.push_back(
                {static_cast<int>(m), count[p], degrees[next_random(state) % degrees.size()]});
          }
        }
        if (std::ranges::any_of(spec.pipelines,
                                [](const PipelineSpec& p) { return p.segments.empty(); }))
          continue;
        for (auto& p : spec.pipelines) {
          for (std::size_t k = p.segments.size(); k > 1; --k)
            std::swap(p.segments[k - 1], p.segments[next_random(state) % k]);
        }
        auto scored = ev.evaluate(spec, "test");
        if (!scored || !scored->estimate.feasible) continue;
        const Estimate& est = scored->estimate;
        const double floor = ev.iteration_floor_s(spec);
        EXPECT_LE(floor, est.iteration_time_s * (1 + 1e-9))
            << describe(spec, sc->cluster) << " zero " << zero;
        double timeline = 0;
        for (int p = 0; p < d; ++p) {
          const auto curve = ev.curve(spec, p, d);
          const auto finish = curve->finish_floors(scored->plan.pipelines[p].micro_batches());
          ASSERT_EQ(finish.size(), est.pipelines[p].finish_s.size());
          for (std::size_t s = 0; s < finish.size(); ++s) {
            EXPECT_LE(finish[s], est.pipelines[p].finish_s[s] * (1 + 1e-9))
                << describe(spec, sc->cluster) << " pipeline " << p << " stage " << s;
          }
          timeline = std::max(timeline, finish.front());
        }
        ++checked;
        by_nics += floor > timeline;
      }
    }
  }
  std::printf("  %d random plans checked, %d bounded by the DP sync's NICs\n", checked, by_nics);
  EXPECT_GE(checked, 100);
  EXPECT_GE(by_nics, 10);
}

}  // namespace
}  // namespace hexi
