#include "studies/plan_quality.hpp"

#include <gtest/gtest.h>

#include <iostream>

#include "scenarios/testing.hpp"
#include "scheduler/scheduler.hpp"
#include "studies/random_scenarios.hpp"
#include "topologies/text.hpp"

namespace hexi {
namespace {

PlannerOutcome outcome(const std::string& name, double tokens_per_s, bool fits = true) {
  PlannerOutcome o;
  o.scheduler = name;
  o.tokens_per_s = tokens_per_s;
  o.fits = fits;
  return o;
}

ClusterQuality cluster(const std::string& transport, double hexiscale,
                       std::vector<PlannerOutcome> baselines) {
  ClusterQuality q;
  q.transport = transport;
  q.hexiscale = outcome("hexiscale", hexiscale, hexiscale > 0);
  q.baselines = std::move(baselines);
  return q;
}

TEST(PlanQuality, RatiosAreAgainstTheBestBaselineWhosePlanFits) {
  // uniform's 1200 tokens/s plan does not fit: the best that fits is amp-like's 1000.
  ClusterQuality q =
      cluster("tcp", 990,
              {outcome("uniform", 1200, false), outcome("random", 800), outcome("amp-like", 1000)});
  ASSERT_NE(q.best_baseline(), nullptr);
  EXPECT_EQ(q.best_baseline()->scheduler, "amp-like");
  EXPECT_DOUBLE_EQ(*q.ratio_to_best_baseline(), 0.99);
  EXPECT_FALSE(q.ratio_to_exact());
  q.exact = outcome("exact", 1100);
  EXPECT_DOUBLE_EQ(*q.ratio_to_exact(), 0.9);
  // An error is no plan: it never counts.
  PlannerOutcome failed = outcome("metis-like", 5000);
  failed.error = "no plan";
  q.baselines.push_back(failed);
  EXPECT_EQ(q.best_baseline()->scheduler, "amp-like");
}

TEST(PlanQuality, SummaryCountsEachKindAndAll) {
  const std::vector<ClusterQuality> clusters = {
      cluster("tcp", 1000, {outcome("uniform", 1000)}),      // 1.0
      cluster("tcp", 940, {outcome("uniform", 1000)}),       // 0.94: below every
      cluster("tcp", 0, {outcome("uniform", 0, false)}),     // infeasible
      cluster("rdma", 1200, {outcome("uniform", 1000)}),     // 1.2
      cluster("rdma", 500, {outcome("uniform", 0, false)}),  // HexiScale alone fits
      cluster("rdma", 980, {outcome("uniform", 1000)}),      // 0.98: not >= 0.99
  };
  const QualitySummary s = summarize_plan_quality(clusters, {});
  ASSERT_EQ(s.groups.size(), 3u);
  const QualityGroup& rdma = s.groups[0];
  const QualityGroup& tcp = s.groups[1];
  const QualityGroup& all = s.groups[2];
  EXPECT_EQ(rdma.kind, "rdma");
  EXPECT_EQ(tcp.kind, "tcp");
  EXPECT_EQ(all.kind, "all");
  EXPECT_EQ(tcp.clusters, 3);
  EXPECT_EQ(tcp.infeasible, 1);
  EXPECT_EQ(tcp.below_every, 1);
  EXPECT_DOUBLE_EQ(tcp.min_ratio(), 0.94);
  EXPECT_DOUBLE_EQ(tcp.median_ratio(), 0.97);        // (0.94 + 1.0) / 2
  EXPECT_DOUBLE_EQ(tcp.share_at_least_most(), 0.5);  // 1 of 2 feasible
  EXPECT_EQ(rdma.only_hexiscale, 1);
  EXPECT_EQ(rdma.below_every, 0);
  EXPECT_DOUBLE_EQ(rdma.median_ratio(), 1.09);            // (0.98 + 1.2) / 2
  EXPECT_DOUBLE_EQ(rdma.share_at_least_most(), 2.0 / 3);  // 1.2 and HexiScale alone
  EXPECT_EQ(all.clusters, 6);
  EXPECT_EQ(all.ratios.size(), 4u);
  EXPECT_DOUBLE_EQ(all.median_ratio(), 0.99);  // (0.98 + 1.0) / 2
  EXPECT_FALSE(tcp.meets(s.targets));
  EXPECT_FALSE(rdma.meets(s.targets));
  EXPECT_FALSE(s.met);
}

TEST(PlanQuality, PlanShapeGroupsPipelinesByStageDegrees) {
  Plan plan;
  auto pipeline = [](std::vector<int> tps) {
    Pipeline p;
    for (int t : tps) {
      Stage s;
      s.devices.assign(t, 0);
      p.stages.push_back(s);
    }
    return p;
  };
  EXPECT_EQ(plan_shape(plan), "-");
  plan.pipelines = {pipeline({8, 8}), pipeline({4, 2, 2}), pipeline({8, 8})};
  EXPECT_EQ(plan_shape(plan), "2x[8 8] 1x[4 2 2]");
}

// Runs every planner on the random scenarios of seeds 1..`seeds` within `limits` (the exact
// search up to 8 GPUs: above, one cluster can take minutes) and holds HexiScale to the targets:
// >= 0.95 x the best baseline on every feasible cluster and >= 0.99 x on 95 % of them, >= 0.97
// x the exact optimum where it ran. Returns the feasible clusters (no planner's plan fits on
// the others). Clusters below 0.99 are listed on stdout.
int expect_targets(int seeds, const RandomScenarioLimits& limits) {
  const QualityTargets targets;
  PlanQualityOptions options;
  options.exact_max_gpus = 8;
  std::vector<ClusterQuality> all;
  for (int seed = 1; seed <= seeds; ++seed) {
    auto sc =
        random_user_scenario(seed, limits, testing::shipped_gpus(), testing::shipped_models());
    if (!sc) {
      ADD_FAILURE() << sc.error().message;
      return 0;
    }
    ClusterQuality q = measure_plan_quality(*sc, options);
    q.seed = seed;
    const std::string what = "seed " + std::to_string(seed) + " (" + sc->description + ")";
    const std::string hexiscale = fixed(q.hexiscale.feasible_tokens_per_s(), 0) + " tokens/s";
    if (auto r = q.ratio_to_best_baseline()) {
      const PlannerOutcome& best = *q.best_baseline();
      EXPECT_GE(*r, targets.every) << what << ": hexiscale " << hexiscale << ", " << best.scheduler
                                   << " " << fixed(best.tokens_per_s, 0);
      if (*r < targets.most)
        std::cout << what << ": hexiscale / " << best.scheduler << " = " << fixed(*r, 4) << "\n";
    } else if (q.feasible()) {
      EXPECT_TRUE(q.hexiscale.feasible()) << what << ": only the exact search's plan fits";
    }
    if (auto r = q.ratio_to_exact()) {
      EXPECT_GE(*r, targets.exact)
          << what << ": hexiscale " << hexiscale << ", exact " << fixed(q.exact->tokens_per_s, 0);
    }
    all.push_back(std::move(q));
  }
  const QualitySummary s = summarize_plan_quality(all, targets);
  const QualityGroup& pooled = s.groups.back();
  std::string per_kind;
  for (const QualityGroup& g : s.groups) {
    per_kind += " " + g.kind + " " + std::to_string(g.at_least_most) + " of " +
                std::to_string(g.clusters - g.infeasible);
  }
  EXPECT_GE(pooled.share_at_least_most(), targets.share)
      << "clusters where hexiscale >= " << fixed(targets.most, 2)
      << " x the best baseline:" << per_kind;
  return pooled.clusters - pooled.infeasible;
}

// 24 clusters of 8 to 16 GPUs of 2 to 4 types, Llama 7B to 13B, every batch
// (studies/random_scenarios.hpp). bench/plan_quality runs the same on 100 clusters of 12 to 90
// GPUs and every model.
TEST(PlanQuality, HexiScaleMeetsTheTargetsOnSmallRandomClusters) {
  RandomScenarioLimits limits;
  limits.min_gpus = 8;
  limits.max_gpus = 16;
  limits.max_model_params = 14e9;
  EXPECT_GE(expect_targets(24, limits), 20);
}

// 16 clusters of 4 to 8 GPUs: the exact search runs on every one.
TEST(PlanQuality, HexiScaleMeetsTheTargetsOnTinyRandomClusters) {
  RandomScenarioLimits limits;
  limits.min_gpus = 4;
  limits.max_gpus = 8;
  limits.max_model_params = 14e9;
  EXPECT_GE(expect_targets(16, limits), 12);
}

// The exact search is at least every plan of its space, whoever found it: on this 14-GPU
// cluster (A100-SXM-40GB 1x4 and 1x2, H100-PCIe 1x8, TCP at 2.7 GB/s, Llama 30B) random's plan,
// two pipelines of one slice of each machine, is such a plan, and the exact search once
// proved a one-pipeline plan optimal below it (23,514 against 24,081 tokens/s): it cut plans
// on their pipeline curves, which lie above the estimate's timeline where sends and the fill
// weigh. Its bounds are now lower bounds of the estimate.
TEST(PlanQuality, TheExactSearchIsAtLeastABaselinesPlanOfItsSpace) {
  RandomScenarioLimits limits;
  limits.min_gpus = 12;
  limits.max_gpus = 64;
  auto sc = random_user_scenario(5009, limits, testing::shipped_gpus(), testing::shipped_models());
  ASSERT_TRUE(sc.ok()) << sc.error().message;
  ASSERT_EQ(sc->cluster.num_devices(), 14);
  auto random = run_pipeline_scheduler("random", *sc, {});
  ASSERT_TRUE(random.ok()) << random.error().message;
  auto exact = run_pipeline_scheduler("exact", *sc, {});
  ASSERT_TRUE(exact.ok()) << exact.error().message;
  ASSERT_FALSE(exact->notes.empty());
  EXPECT_EQ(exact->notes[0].rfind("proven optimal", 0), 0u) << exact->notes[0];
  EXPECT_GE(exact->estimate.tokens_per_s, random->estimate.tokens_per_s * (1 - 1e-9));
}

// HexiScale's plan gives at least `factor` times the tokens/s of `baseline`'s on `sc`.
void expect_hexiscale_at_least(const Scenario& sc, const std::string& baseline, double factor) {
  auto hexiscale = run_pipeline_scheduler("hexiscale", sc, {});
  ASSERT_TRUE(hexiscale.ok()) << hexiscale.error().message;
  auto other = run_pipeline_scheduler(baseline, sc, {});
  ASSERT_TRUE(other.ok()) << other.error().message;
  EXPECT_GE(hexiscale->estimate.tokens_per_s, factor * other->estimate.tokens_per_s)
      << "hexiscale " << fixed(hexiscale->estimate.tokens_per_s, 0) << ", " << baseline << " "
      << fixed(other->estimate.tokens_per_s, 0);
}

// A scenario over TCP at `nic_GBps` per machine: `machines`, the cluster file's machine list;
// micro-batch 1. The network runs GPUDirect-TCPXO's table (tcpxo), the TCP table these cases
// were found on: mid-size messages reach a small share of the line rate there (0.1 at 1 MiB),
// which the pipeline curves misplace. NCCL's socket table (tcp) is flatter.
Scenario tcp_scenario(double nic_GBps, const char* machines, const std::string& model,
                      int global_batch, int seq_len) {
  return testing::tiny_scenario(
      R"({"version": 1, "name": "tcp", "cluster": {"version": 1, "name": "tcp", "network": {"nic_GBps": )" +
      std::to_string(nic_GBps) + R"(, "transport": "tcpxo"}, "machines": )" + machines +
      R"(}, "model": ")" + model + R"(", "training": {"global_batch": )" +
      std::to_string(global_batch) + R"(, "micro_batch": 1, "seq_len": )" +
      std::to_string(seq_len) + "}}");
}

// Phase 2 splits layers by the pipeline curves, which take every boundary of a machine at once
// on its NIC; over TCP, with a boundary between every pair of 2-GPU machines, they overstate
// the sends the estimate's timeline overlaps with compute, and split layers to spare the
// stages that send (one layer on some A800s, three on others). HexiScale then polishes the
// split, its reverse and both balanced by compute under the full estimate: 19 640 -> 23 164
// tokens/s on this cluster (metis-like, layers by FLOP/s: 21 284; 1.088 x).
TEST(PlanQuality, HexiScalePolishesTheLayersItsCurvesMisplaceOverTcp) {
  const Scenario sc =
      tcp_scenario(1.3, R"([{"name": "a", "gpu": "A800-PCIe-80GB", "gpus": 2, "repeat": 5},
                                            {"name": "h", "gpu": "H100-PCIe", "gpus": 1, "repeat": 3}])",
                   "llama2-13b", 128, 2048);
  expect_hexiscale_at_least(sc, "metis-like", 1.04);
}

TEST(PlanQuality, HexiScaleWeighsTheSendsItsCurvesOverstateOverTcp) {
  // One pipeline of 20 H800s over TCP: the curves charge a stage next to a machine boundary
  // its send whole and give it one layer; split by compute alone every stage gets three, and
  // the estimate's best (amp-like's 2 next to a boundary, 4 inside) lies between: a split with
  // sends weighted 1/2 finds it. Without the reweighted splits HexiScale gave 31 509 tokens/s
  // against amp-like's 34 375 (burst rates). At the H800's sustained rate the search's best
  // idles a machine (16 stages: 27 810 against amp-like's 31 144); the polish resplits the best
  // plan on every GPU too: 31 536.
  const Scenario sc = tcp_scenario(2.4, R"([{"name": "h", "gpu": "H800", "gpus": 4, "repeat": 5}])",
                                   "llama-30b", 32, 2048);
  expect_hexiscale_at_least(sc, "amp-like", 0.99);
}

TEST(PlanQuality, HexiScaleSplitsByComputeThePipelinesItsDpSyncSlowsOverTcp) {
  // Over TCP the curves charge each stage boundary's send whole and give the stages next to
  // a machine boundary few layers and the others many, so a layer's DP replicas hold uneven
  // pieces and the DP sync over the NICs waits on the largest. The search also splits its
  // candidates near the best by compute (outside its plan space: kept apart), and the polish
  // starts from the fastest of those too. Without that HexiScale gave 64 516 tokens/s (8
  // pipelines of two machines, 13 s of DP sync exposed) against metis-like's 65 283.
  const Scenario sc = tcp_scenario(
      1.0, R"([{"name": "h", "gpu": "H800", "gpus": 2, "repeat": 16}])", "llama2-7b", 256, 4096);
  expect_hexiscale_at_least(sc, "metis-like", 1.1);
}

TEST(PlanQuality, HexiScaleEstimatesTheWholeFastTypeWhateverItsCurvesSay) {
  // One pipeline of the 10 H100s (uniform's plan, 4 layers each) is the fastest here; its
  // curves overstate its sends over TCP and said it was slower than the best plan so far, so
  // the start that uses the whole fastest type was cut before its estimate. Without that
  // HexiScale gave 36 904 tokens/s against uniform's 41 894.
  const Scenario sc =
      tcp_scenario(3.0, R"([{"name": "h", "gpu": "H100-PCIe", "gpus": 2, "repeat": 5},
                                            {"name": "t", "gpu": "T4", "gpus": 8, "repeat": 2},
                                            {"name": "a", "gpu": "A100-PCIe-40GB", "gpus": 1, "repeat": 4}])",
                   "llama2-13b", 64, 2048);
  expect_hexiscale_at_least(sc, "uniform", 0.99);
}

}  // namespace
}  // namespace hexi
