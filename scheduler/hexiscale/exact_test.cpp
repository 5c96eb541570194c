// Ground truth: the exact search against an independent brute force on tiny
// clusters, and HexiScale against the exact optimum on 20 random heterogeneous
// clusters of 8-16 GPUs (target: >= 0.97 of the optimum on every one).
#include "scheduler/hexiscale/exact.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>

#include "scheduler/hexiscale/pipeline.hpp"
#include "scheduler/search/testing.hpp"

namespace hexi {
namespace {

using testing::cluster_json;
using testing::make_scenario;

Json small_model() {
  return {{"name", "test-8l"}, {"layers", 8},    {"hidden", 2048}, {"ffn", 5632},
          {"heads", 16},       {"kv_heads", 16}, {"vocab", 32000}, {"max_seq", 2048}};
}

// Brute force over the plan space, written independently of exact.cpp: every set
// partition of the devices into pipelines, every TP degree per (pipeline, machine)
// and every order of a pipeline's machines.
double brute_force(const Scenario& sc) {
  CostModel cm(sc.cluster, sc.model, sc.training, sc.profile);
  SpecEvaluator ev(cm);
  const int n = sc.cluster.num_devices();
  double best = kInfeasible;
  std::vector<int> label(n, 0);
  std::function<void(int, int)> partitions = [&](int i, int used) {
    if (i == n) {
      // Per pipeline: machine -> count; then every degree and order combination.
      std::vector<std::map<int, int>> pipes(used);
      for (int d = 0; d < n; ++d) ++pipes[label[d]][sc.cluster.devices()[d].machine];
      std::vector<PipelineSpec> chosen(used);
      std::function<void(int)> per_pipe = [&](int p) {
        if (p == used) {
          auto scored = ev.evaluate(PlanSpec{chosen}, "brute");
          if (scored && scored->estimate.feasible) best = std::min(best, scored->objective());
          return;
        }
        std::vector<int> machines;
        for (auto [m, _] : pipes[p]) machines.push_back(m);
        std::vector<int> pick(machines.size(), 0);
        for (;;) {
          std::vector<int> order(machines.size());
          std::iota(order.begin(), order.end(), 0);
          do {
            chosen[p].segments.clear();
            for (int o : order) {
              const int c = pipes[p][machines[o]];
              chosen[p].segments.push_back({machines[o], c, segment_degrees(sc.model, c)[pick[o]]});
            }
            per_pipe(p + 1);
          } while (std::next_permutation(order.begin(), order.end()));
          std::size_t k = 0;
          while (k < pick.size() &&
                 ++pick[k] ==
                     static_cast<int>(segment_degrees(sc.model, pipes[p][machines[k]]).size())) {
            pick[k++] = 0;
          }
          if (k == pick.size()) break;
        }
      };
      per_pipe(0);
      return;
    }
    for (int l = 0; l <= used; ++l) {  // restricted growth strings: each set partition once
      label[i] = l;
      partitions(i + 1, std::max(used, l + 1));
    }
  };
  partitions(0, 0);
  return best;
}

TEST(Exact, MatchesBruteForceOnTinyClusters) {
  const std::vector<std::vector<std::pair<std::string, int>>> clusters = {
      {{"RTX3090", 2}, {"A100-PCIe-40GB", 2}},
      {{"RTX4090", 4}, {"V100", 2}},
      {{"A10", 2}, {"RTX3080Ti", 2}, {"A6000", 2}},
      // Two interchangeable machines: mirrored plans are skipped, the optimum stays.
      {{"RTX3090", 2}, {"A100-PCIe-40GB", 2}, {"RTX3090", 2}}};
  for (std::size_t i = 0; i < clusters.size(); ++i) {
    auto sc = make_scenario(cluster_json("tiny" + std::to_string(i), clusters[i]), small_model(),
                            {{"global_batch", 12}, {"seq_len", 2048}});
    ASSERT_TRUE(sc.ok()) << sc.error().message;
    const double truth = brute_force(*sc);
    ASSERT_NE(truth, kInfeasible);
    auto exact = run_exact(*sc, {});
    ASSERT_TRUE(exact.ok()) << exact.error().message;
    EXPECT_NEAR(exact->estimate.iteration_time_s, truth, 1e-9 * truth) << "cluster " << i;
    ASSERT_FALSE(exact->notes.empty());
    EXPECT_EQ(exact->notes[0].rfind("proven optimal", 0), 0u) << exact->notes[0];
    EXPECT_EQ(exact->notes[0].find("(0 mirror images") == std::string::npos, i == 3)
        << exact->notes[0];
  }
}

// Stopped by its time budget, the search bounds every plan it did not reach: the bound lies
// below the proven optimum, and the gap it reports is the best plan's distance to it.
TEST(Exact, StoppedByItsBudgetItBoundsTheOptimum) {
  const Json cluster = testing::random_cluster(2024, 3);
  auto sc = make_scenario(cluster, "llama2-7b", {{"global_batch", 32}, {"seq_len", 4096}});
  ASSERT_TRUE(sc.ok()) << sc.error().message;
  auto full = run_exact(*sc, {});
  ASSERT_TRUE(full.ok()) << full.error().message;
  ASSERT_EQ(full->notes[0].rfind("proven optimal", 0), 0u) << full->notes[0];
  const double optimum = full->estimate.iteration_time_s;

  CostModel cm(sc->cluster, sc->model, sc->training, sc->profile);
  SpecEvaluator ev(cm);
  const SearchOptions unbounded;
  SearchClock hexiscale_clock("hexiscale", unbounded);
  auto hx = hexiscale_search(ev, HexiScaleOptions{}, hexiscale_clock, unbounded.seed);
  ASSERT_TRUE(hx.has_value());
  SearchOptions budget;
  budget.time_budget_s = 1e-6;  // spent at the first check
  SearchClock clock("exact", budget);
  ExactStats stats;
  auto best = exact_search(ev, clock, std::move(hx), stats);
  ASSERT_TRUE(best.has_value());
  EXPECT_FALSE(stats.proven);
  const double t = best->scored.objective();
  EXPECT_GE(t, optimum * (1 - 1e-9));
  EXPECT_GT(stats.bound_s, 0);
  EXPECT_LE(stats.bound_s, optimum * (1 + 1e-9));
  EXPECT_NEAR(stats.gap, (t - stats.bound_s) / t, 1e-12);
  std::printf("  stopped at once: best %.3f s, optimum %.3f s, bound %.3f s (gap %.1f %%)\n", t,
              optimum, stats.bound_s, 100 * stats.gap);
}

TEST(Exact, HexiScaleReachesTheOptimumOnRandomClusters) {
  std::vector<double> ratios;
  for (int i = 0; static_cast<int>(ratios.size()) < 20 && i < 60; ++i) {
    const Json cluster = testing::random_cluster(2024, i);
    auto sc =
        make_scenario(cluster, "llama2-7b", {{"global_batch", i % 2 ? 32 : 64}, {"seq_len", 4096}});
    ASSERT_TRUE(sc.ok()) << sc.error().message;
    // HexiScale's plan is the exact search's incumbent, as in run_exact; both share one
    // evaluator and its caches (HexiScale runs once).
    CostModel cm(sc->cluster, sc->model, sc->training, sc->profile);
    SpecEvaluator ev(cm);
    const SearchOptions options;  // the clock keeps a reference
    SearchClock clock("exact", options);
    auto hx = hexiscale_search(ev, HexiScaleOptions{}, clock, options.seed);
    if (!hx) continue;  // the model does not fit this draw
    const double hexiscale = hx->scored.estimate.tokens_per_s;
    ExactStats stats;
    auto ex = exact_search(ev, clock, std::move(hx), stats);
    ASSERT_TRUE(ex.has_value()) << "cluster " << i << ": too many pipeline types to enumerate";
    ASSERT_TRUE(stats.proven);
    const double ratio = hexiscale / ex->scored.estimate.tokens_per_s;
    const std::string machines = testing::machines_text(cluster);
    std::printf(
        "  cluster %2d: %-44s hexiscale %8.0f  exact %8.0f tokens/s  ratio %.4f  (both %.2f s)\n",
        i, machines.c_str(), hexiscale, ex->scored.estimate.tokens_per_s, ratio, clock.elapsed_s());
    EXPECT_LE(ratio, 1 + 1e-9) << "HexiScale's space is a subset of the exact search's";
    EXPECT_GE(ratio, 0.97) << "cluster " << i << ": " << machines;
    ratios.push_back(ratio);
  }
  ASSERT_EQ(ratios.size(), 20u);
  std::sort(ratios.begin(), ratios.end());
  std::printf("  HexiScale / exact optimum over %zu clusters: min %.4f  median %.4f  max %.4f\n",
              ratios.size(), ratios.front(), (ratios[9] + ratios[10]) / 2, ratios.back());
}

}  // namespace
}  // namespace hexi
