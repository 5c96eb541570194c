// Per-stage activation recompute: the plan field, the estimate of a stage under its
// own recompute, the pipeline curve's joint choice of layers and recompute against
// a brute force over every split and every assignment of modes, and the searches
// that choose it (the lowering: recompute_lower_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "scheduler/hexiscale/exact.hpp"
#include "scheduler/scheduler.hpp"
#include "scheduler/search/pipeline_curve.hpp"
#include "scheduler/search/plan_space.hpp"
#include "scheduler/search/testing.hpp"

namespace hexi {
namespace {

using testing::cluster_json;
using testing::compositions;
using testing::make_scenario;
using testing::shipped_scenario;
using testing::small_model;

Result<Scenario> consumer_scenario(const std::string& attention = "flash", int seq = 8192) {
  return make_scenario(
      cluster_json("rc", {{"RTX3080Ti", 2}, {"RTX3090", 2}, {"A100-PCIe-40GB", 2}, {"RTX4090", 2}}),
      small_model(8192), {{"global_batch", 8}, {"seq_len", seq}, {"attention", attention}});
}

Plan one_pipeline(const std::vector<std::vector<int>>& devices, const std::vector<int>& layers,
                  const std::vector<std::optional<Recompute>>& recompute, int batch) {
  Plan plan;
  Pipeline p;
  p.batch = batch;
  int begin = 0;
  for (std::size_t s = 0; s < devices.size(); ++s) {
    p.stages.push_back({devices[s], begin, begin + layers[s], {}, recompute[s], {}});
    begin += layers[s];
  }
  plan.pipelines.push_back(p);
  return plan;
}

TEST(RecomputePlan, RoundTripsAndRejectsUnknownModes) {
  const Json j = {{"version", 1},
                  {"pipelines",
                   {{{"batch", 4},
                     {"stages",
                      {{{"devices", {0}}, {"layers", {0, 2}}, {"recompute", "full"}},
                       {{"devices", {1}}, {"layers", {2, 4}}},
                       {{"devices", {2}}, {"layers", {4, 6}}, {"recompute", "none"}}}}}}}};
  auto plan = plan_from_json(j, "p.json");
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const auto& st = plan->pipelines[0].stages;
  EXPECT_EQ(st[0].recompute, Recompute::kFull);
  EXPECT_FALSE(st[1].recompute.has_value());
  EXPECT_EQ(st[2].recompute, Recompute::kNone);
  TrainingConfig t;
  t.recompute = Recompute::kSelective;
  EXPECT_EQ(st[1].recompute_in(t), Recompute::kSelective);
  EXPECT_EQ(st[0].recompute_in(t), Recompute::kFull);
  auto again = plan_from_json(to_json(*plan), "again.json");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(plan_text(*again), plan_text(*plan));
  EXPECT_EQ(to_json(*again)["pipelines"][0]["stages"][0]["recompute"], "full");
  EXPECT_FALSE(to_json(*again)["pipelines"][0]["stages"][1].contains("recompute"));

  Json bad = j;
  bad["pipelines"][0]["stages"][1]["recompute"] = "partial";
  auto err = plan_from_json(bad, "bad.json");
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.error().message.find("/pipelines/0/stages/1/recompute"), std::string::npos)
      << err.error().message;
  EXPECT_NE(err.error().message.find("\"none\", \"selective\" or \"full\""), std::string::npos);
}

TEST(RecomputeEstimate, StageRunsItsOwnRecompute) {
  auto sc = consumer_scenario();
  ASSERT_TRUE(sc.ok()) << sc.error().message;
  CostModel cm(sc->cluster, sc->model, sc->training, sc->profile);
  const std::vector<std::vector<int>> devs = {{0}, {2}, {4, 5}, {6}};
  const std::vector<int> layers = {1, 3, 5, 3};
  const Estimate base = cm.estimate(one_pipeline(devs, layers, {{}, {}, {}, {}}, 8));
  const Estimate mixed = cm.estimate(
      one_pipeline(devs, layers, {Recompute::kFull, {}, Recompute::kFull, Recompute::kNone}, 8));
  // The same plan with the scenario's recompute set to full everywhere.
  TrainingConfig full_t = sc->training;
  full_t.recompute = Recompute::kFull;
  CostModel full_cm(sc->cluster, sc->model, full_t, sc->profile);
  const Estimate full = full_cm.estimate(one_pipeline(devs, layers, {{}, {}, {}, {}}, 8));

  const auto& b = base.pipelines[0].stages;
  const auto& x = mixed.pipelines[0].stages;
  const auto& f = full.pipelines[0].stages;
  for (int s : {0, 2}) {  // full: as under a full-recompute scenario
    EXPECT_EQ(x[s].recompute, Recompute::kFull);
    EXPECT_DOUBLE_EQ(x[s].forward_s, f[s].forward_s);
    EXPECT_DOUBLE_EQ(x[s].backward_s, f[s].backward_s);
    EXPECT_DOUBLE_EQ(x[s].tp_comm_s, f[s].tp_comm_s);
    EXPECT_GT(x[s].backward_s, b[s].backward_s);
  }
  // Full recompute on the TP-2 stage adds two all-reduces per layer to the backward.
  EXPECT_GT(x[2].tp_comm_s, b[2].tp_comm_s);
  const double ar = b[2].tp_comm_s / (4.0 * 5);  // 2 per layer forward + 2 backward, 5 layers
  EXPECT_NEAR(x[2].tp_comm_s - b[2].tp_comm_s, 2 * 5 * ar, 1e-9 * ar);
  // Under the flash kernel none and selective are the same stage.
  EXPECT_EQ(x[1].recompute, Recompute::kSelective);
  EXPECT_EQ(x[3].recompute, Recompute::kNone);
  EXPECT_DOUBLE_EQ(x[3].backward_s, b[3].backward_s);
  // Memory: full keeps only each layer's input, per device of the stage.
  for (std::size_t i = 0; i < mixed.devices.size(); ++i) {
    const DeviceEstimate& d = mixed.devices[i];
    const double want = d.stage == 0 || d.stage == 2 ? full.devices[i].memory.activations
                                                     : base.devices[i].memory.activations;
    EXPECT_DOUBLE_EQ(d.memory.activations, want) << "device " << d.device;
    if (d.stage == 0 || d.stage == 2) {
      EXPECT_LT(d.memory.activations, base.devices[i].memory.activations);
    }
  }
  EXPECT_EQ(mixed.to_json()["pipelines"][0]["stages"][0]["recompute"], "full");
}

// The curve with recompute options against all splits x all recompute assignments.
void check_against_brute_force(const Scenario& sc, const std::vector<std::vector<int>>& stages,
                               int* full_chosen) {
  CostModel cm(sc.cluster, sc.model, sc.training, sc.profile);
  const std::vector<Recompute> modes = recompute_modes(sc.training, true);
  PipelineCurve curve(pipeline_options(cm, stages, 1, 1, modes), sc.model.layers,
                      sc.training.schedule);
  PipelineCurve fixed(pipeline_terms(cm, stages, 1, 1), sc.model.layers, sc.training.schedule);
  const int k = static_cast<int>(stages.size());
  for (int m : {1, 2, 3, 8}) {
    double best = kInfeasible;
    std::vector<int> cur;
    compositions(sc.model.layers, k, cur, [&] {
      std::vector<int> pick(k, 0);
      for (;;) {
        std::vector<std::optional<Recompute>> r;
        for (int i = 0; i < k; ++i) r.push_back(modes[pick[i]]);
        Estimate e = cm.estimate(one_pipeline(stages, cur, r, m));
        if (e.feasible) best = std::min(best, e.pipelines[0].time_s);
        int i = 0;
        while (i < k && ++pick[i] == static_cast<int>(modes.size())) pick[i++] = 0;
        if (i == k) break;
      }
    });
    ASSERT_NE(best, kInfeasible) << "m=" << m;
    EXPECT_LE(curve.time(m), fixed.time(m) * (1 + 1e-12)) << "m=" << m;
    // The curve's own choice, estimated: within 7 % of the best split and modes (the
    // curve's period bounds the timeline's from above, pipeline_curve.hpp; 6.2 % measured
    // at m = 2 with the dense kernel, where the fill dominates).
    std::vector<std::optional<Recompute>> chosen;
    for (Recompute r : curve.recompute(m)) chosen.emplace_back(r);
    ASSERT_EQ(static_cast<int>(chosen.size()), k);
    Estimate e = cm.estimate(one_pipeline(stages, curve.layers(m), chosen, m));
    EXPECT_TRUE(e.feasible) << "m=" << m;
    EXPECT_LE(e.pipelines[0].time_s, 1.07 * best) << "m=" << m;
    for (Recompute r : curve.recompute(m)) *full_chosen += r == Recompute::kFull;
    std::string text;
    for (int i = 0; i < k; ++i) {
      text += std::to_string(curve.layers(m)[i]) + ":" +
              std::string(to_string(curve.recompute(m)[i])) + " ";
    }
    std::printf("  m=%d: per-stage %.4f s vs %s only %.4f s; split %s\n", m, curve.time(m),
                std::string(to_string(sc.training.recompute)).c_str(), fixed.time(m), text.c_str());
  }
}

TEST(RecomputeCurve, BestSplitAndModesAreWithinSevenPercentOfTheBruteForceBest) {
  // Flash kernel: two distinct modes (selective = none), four stages.
  auto sc = consumer_scenario();
  ASSERT_TRUE(sc.ok()) << sc.error().message;
  int full_chosen = 0;
  check_against_brute_force(*sc, {{0}, {2}, {6}, {7}}, &full_chosen);
  EXPECT_GT(full_chosen, 0) << "memory never made full recompute pay: the test checks nothing";
}

TEST(RecomputeCurve, ThreeModesUnderTheDenseKernel) {
  // Dense kernel: none, selective and full all differ; three stages.
  auto sc = consumer_scenario("dense", 4096);
  ASSERT_TRUE(sc.ok()) << sc.error().message;
  ASSERT_EQ(recompute_modes(sc->training, true).size(), 3u);
  int full_chosen = 0;
  check_against_brute_force(*sc, {{0}, {2}, {6}}, &full_chosen);
}

TEST(RecomputeCurve, ModesThatChangeNothingAreDropped) {
  auto sc = consumer_scenario();
  ASSERT_TRUE(sc.ok());
  CostModel cm(sc->cluster, sc->model, sc->training, sc->profile);
  const auto modes = recompute_modes(sc->training, true);
  ASSERT_EQ(modes.size(), 3u);
  EXPECT_EQ(modes[0], Recompute::kSelective);  // the scenario's first
  const auto options = pipeline_options(cm, {{0}, {6}}, 1, 1, modes);
  for (const auto& o : options) {
    ASSERT_EQ(o.size(), 2u);  // none is selective under the flash kernel
    EXPECT_EQ(o[0].recompute, Recompute::kSelective);
    EXPECT_EQ(o[1].recompute, Recompute::kFull);
    EXPECT_GT(o[1].per_layer_s, o[0].per_layer_s);
    EXPECT_LT(o[1].mem_slope_f, o[0].mem_slope_f);
  }
  EXPECT_EQ(recompute_modes(sc->training, false), std::vector<Recompute>{Recompute::kSelective});
}

// The exact optimum over the space with per-stage recompute is never worse than
// over the space without, and HexiScale's plan names its stages' recompute only
// where it differs from the scenario's and is estimated as the search said.
TEST(RecomputeSearch, PerStageSpaceContainsTheScenarioSpace) {
  auto sc = make_scenario(cluster_json("rc8", {{"RTX3080Ti", 4}, {"RTX4090", 4}}), "llama2-7b",
                          {{"global_batch", 32}, {"seq_len", 2048}});
  ASSERT_TRUE(sc.ok()) << sc.error().message;
  CostModel cm(sc->cluster, sc->model, sc->training, sc->profile);
  double best[2] = {0, 0};
  for (bool per_stage : {false, true}) {
    SpecEvaluator ev(cm, per_stage);
    SearchOptions options;
    SearchClock clock("exact", options);
    ExactStats stats;
    auto r = exact_search(ev, clock, std::nullopt, stats);
    ASSERT_TRUE(r.has_value());
    ASSERT_TRUE(stats.proven);
    best[per_stage] = r->scored.estimate.tokens_per_s;
    int full = 0;
    for (const auto& p : r->scored.plan.pipelines) {
      for (const auto& s : p.stages) {
        if (s.recompute) {
          EXPECT_TRUE(per_stage);
          EXPECT_NE(*s.recompute, sc->training.recompute);
          full += *s.recompute == Recompute::kFull;
        }
      }
    }
    // The plan's own estimate is what the search scored.
    const Estimate again = cm.estimate(r->scored.plan);
    EXPECT_DOUBLE_EQ(again.iteration_time_s, r->scored.estimate.iteration_time_s);
    std::printf("  exact, %s recompute: %.0f tokens/s, %d full-recompute stage(s)\n",
                per_stage ? "per-stage" : "scenario", best[per_stage], full);
  }
  EXPECT_GE(best[1], best[0] * (1 - 1e-12));
}

TEST(RecomputeSearch, HexiScaleOptionKeepsTheScenarioRecompute) {
  Scenario sc = shipped_scenario("hexiscale-setting1-llama2-13b");
  sc.scheduler_options = {{"recompute", "scenario"}};
  auto r = run_pipeline_scheduler("hexiscale", sc, SearchOptions{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  for (const auto& p : r->plan.pipelines) {
    for (const auto& s : p.stages) EXPECT_FALSE(s.recompute.has_value());
  }
  sc.scheduler_options = {{"recompute", "sometimes"}};
  auto bad = run_pipeline_scheduler("hexiscale", sc, SearchOptions{});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(bad.error().message.find("recompute"), std::string::npos) << bad.error().message;
}

}  // namespace
}  // namespace hexi

namespace hexi {
namespace {

// A random cluster of consumer cards (12 and 24 GiB), 6-16 GPUs in 2-3 machines.
Json consumer_cluster(int index) {
  static const char* pool[] = {"RTX3080Ti", "RTX3090", "RTX4090", "A10"};
  std::uint64_t state = 77ULL * 1000003ULL + static_cast<std::uint64_t>(index);
  std::vector<std::pair<std::string, int>> machines;
  int total = 0;
  const int want = 2 + static_cast<int>(next_random(state) % 2);
  while (static_cast<int>(machines.size()) < want) {
    static const int sizes[] = {2, 4, 4, 8};
    int g = sizes[next_random(state) % 4];
    while (total + g > 16) g /= 2;
    if (g < 2) break;
    total += g;
    machines.emplace_back(pool[next_random(state) % 4], g);
  }
  return cluster_json("consumer-" + std::to_string(index), machines,
                      next_random(state) % 2 ? 25.0 : 12.5);
}

int full_stages(const Plan& plan) {
  int n = 0;
  for (const auto& p : plan.pipelines) {
    for (const auto& s : p.stages) n += s.recompute == Recompute::kFull;
  }
  return n;
}

// Where memory is short (Llama-2 13B on 12/24 GiB cards), the exact search and
// HexiScale choose per-stage recompute; HexiScale stays within 0.97 of the optimum.
// (Measured with the shipped shape-aware profile: min 0.9904, median 1.0000 over the 20.)
TEST(RecomputeSearch, HexiScaleNearTheOptimumOnConsumerClusters) {
  std::vector<double> ratios;
  int with_full = 0;
  for (int i = 0; static_cast<int>(ratios.size()) < 20 && i < 80; ++i) {
    const Json cluster = consumer_cluster(i);
    auto sc = make_scenario(cluster, "llama2-13b", {{"global_batch", 32}, {"seq_len", 4096}});
    ASSERT_TRUE(sc.ok()) << sc.error().message;
    auto hx = run_pipeline_scheduler("hexiscale", *sc, {});
    if (!hx) continue;  // does not fit this draw
    auto ex = run_pipeline_scheduler("exact", *sc, {});
    ASSERT_TRUE(ex.ok()) << ex.error().message;
    ASSERT_EQ(ex->notes[0].rfind("proven optimal", 0), 0u) << ex->notes[0];
    const double ratio = hx->estimate.tokens_per_s / ex->estimate.tokens_per_s;
    const std::string machines = testing::machines_text(cluster);
    std::printf(
        "  cluster %2d: %-34s hexiscale %7.0f (%d full)  exact %7.0f (%d full)  ratio %.4f  "
        "(exact %.2f s)\n",
        i, machines.c_str(), hx->estimate.tokens_per_s, full_stages(hx->plan),
        ex->estimate.tokens_per_s, full_stages(ex->plan), ratio, ex->search_time_s);
    EXPECT_LE(ratio, 1 + 1e-9);
    EXPECT_GE(ratio, 0.97) << "cluster " << i << ": " << machines;
    with_full += full_stages(ex->plan) > 0;
    ratios.push_back(ratio);
  }
  ASSERT_EQ(ratios.size(), 20u);
  std::sort(ratios.begin(), ratios.end());
  std::printf(
      "  HexiScale / exact over %zu consumer clusters: min %.4f  median %.4f; %d optima use "
      "full recompute on some stage\n",
      ratios.size(), ratios.front(), (ratios[9] + ratios[10]) / 2, with_full);
  EXPECT_GT(with_full, 0);
}

}  // namespace
}  // namespace hexi
