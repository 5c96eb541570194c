// Structure-aware mutation: random but legal plans (any number of pipelines, stages, TP
// degrees, uneven layers and batches, per-stage recompute, unused devices) through
// everything that consumes a plan: the closed-form estimate, lowering at both
// granularities, the program checker, the simulator, and on the tiny model the engine
// against the single-process reference. Nothing may crash or return a non-finite
// number, and each stage agrees with the next.
//
// Closed form vs simulator: random plans are far from what a search returns (a TP-8 stage
// beside a one-GPU stage, one micro-batch per pipeline), and on them the two disagree more
// than on searched plans (3 %, scripts/closed_form_check.py): the closed form's 1F1B and
// boundary terms. The seeds are fixed, so each scenario's worst ratio is a known number; its
// bound is that ratio's distance from 1 doubled (observed worst ratios in the calls below),
// which catches a unit slip, a lost stage or a program that does not run what the plan says,
// and a model change that moves the worst case must move the bound in the same commit.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "engine/engine_testing.hpp"
#include "scenarios/testing.hpp"
#include "scheduler/estimate/estimate.hpp"
#include "scheduler/plan/testing.hpp"
#include "scheduler/program/lower.hpp"
#include "sim/simulator.hpp"

namespace hexi {
namespace {

using Rng = std::mt19937_64;

int uniform(Rng& rng, int lo, int hi) {  // inclusive
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// `total` split into `parts` positive integers, uniformly among compositions.
std::vector<int> composition(Rng& rng, int total, int parts) {
  std::vector<int> cuts(total - 1);
  std::iota(cuts.begin(), cuts.end(), 1);
  std::shuffle(cuts.begin(), cuts.end(), rng);
  cuts.resize(parts - 1);
  std::sort(cuts.begin(), cuts.end());
  std::vector<int> out;
  int prev = 0;
  for (int c : cuts) {
    out.push_back(c - prev);
    prev = c;
  }
  out.push_back(total - prev);
  return out;
}

// A random plan that validate_plan accepts for this scenario.
Plan random_plan(Rng& rng, const Scenario& sc) {
  const Model& m = sc.model;
  const int micro = sc.training.micro_batch;
  std::vector<int> devices(sc.cluster.num_devices());
  std::iota(devices.begin(), devices.end(), 0);
  std::shuffle(devices.begin(), devices.end(), rng);
  devices.resize(uniform(rng, 1, static_cast<int>(devices.size())));  // some stay unused
  std::vector<int> degrees;  // TP degrees that split the heads evenly
  for (int t = 1; t <= static_cast<int>(devices.size()); ++t) {
    if (m.even_tp_degree(t)) degrees.push_back(t);
  }
  const int micro_batches = sc.training.global_batch / micro;
  const int d = uniform(rng, 1, std::min<int>(micro_batches, static_cast<int>(devices.size())));
  const std::vector<int> share = composition(rng, static_cast<int>(devices.size()), d);
  const std::vector<int> batches = composition(rng, micro_batches, d);
  const char* recompute[] = {"none", "selective", "full"};
  Json pipes = Json::array();
  std::size_t next = 0;
  for (int p = 0; p < d; ++p) {
    // Stages of valid TP degrees while devices last (a few may stay unused).
    std::vector<int> tps;
    int left = share[p];
    while (left > 0 && static_cast<int>(tps.size()) < m.layers) {
      std::vector<int> fit;
      for (int t : degrees) {
        if (t <= left) fit.push_back(t);
      }
      const int t = fit[uniform(rng, 0, static_cast<int>(fit.size()) - 1)];
      tps.push_back(t);
      left -= t;
      if (uniform(rng, 0, 3) == 0) break;
    }
    const std::vector<int> layers = composition(rng, m.layers, static_cast<int>(tps.size()));
    Json stages = Json::array();
    int layer = 0;
    for (std::size_t s = 0; s < tps.size(); ++s) {
      Json ids = Json::array();
      for (int k = 0; k < tps[s]; ++k) ids.push_back(devices[next++]);
      Json stage = {{"devices", ids}, {"layers", {layer, layer + layers[s]}}};
      if (uniform(rng, 0, 2) == 0) stage["recompute"] = recompute[uniform(rng, 0, 2)];
      stages.push_back(stage);
      layer += layers[s];
    }
    next += left;
    pipes.push_back({{"batch", batches[p] * micro}, {"micro_batch", micro}, {"stages", stages}});
  }
  return testing::plan_from({{"version", 1}, {"pipelines", pipes}});
}

struct Checked {
  double bound = 1;        // the largest max(sim/closed, closed/sim) allowed
  double worst_ratio = 1;  // max over plans of max(sim/closed, closed/sim)
  int plans = 0;
};

// The bound of a worst ratio observed at `observed`: its distance from 1, doubled.
double doubled(double observed) {
  return 1 + 2 * (observed - 1);
}

// Estimate, lower at `granularity`, check and simulate one plan; returns sim / closed.
double estimate_lower_simulate(const Scenario& sc, const Plan& plan, Granularity granularity,
                               const std::string& what, Program* program_out = nullptr) {
  EXPECT_TRUE(validate_plan(plan, sc.cluster, sc.model, sc.training, what).ok()) << what;
  const Estimate est = CostModel(sc.cluster, sc.model, sc.training, sc.profile).estimate(plan);
  EXPECT_TRUE(std::isfinite(est.iteration_time_s) && est.iteration_time_s > 0) << what;
  LowerOptions lo;
  lo.granularity = granularity;
  auto program = lower_plan(plan, sc.cluster, sc.model, sc.training, lo, what);
  if (!program.ok()) {
    ADD_FAILURE() << what << ": " << program.error().message;
    return 0;
  }
  auto st = validate_program(*program, what);
  EXPECT_TRUE(st.ok()) << what << ": " << (st.ok() ? "" : st.error().message);
  SimOptions so;
  so.trace = true;
  auto out = simulate(*program, sc.cluster, sc.model, sc.training, sc.profile, so);
  if (!out.ok()) {
    ADD_FAILURE() << what << ": " << out.error().message;
    return 0;
  }
  const double sim = out->report.iteration_time_s;
  EXPECT_TRUE(std::isfinite(sim) && sim > 0) << what;
  EXPECT_TRUE(Json::accept(out->trace_json)) << what;
  if (program_out != nullptr) *program_out = std::move(*program);
  return sim / est.iteration_time_s;
}

void record(Checked& c, double ratio, const std::string& what) {
  const double off = std::max(ratio, 1 / ratio);
  c.worst_ratio = std::max(c.worst_ratio, off);
  ++c.plans;
  EXPECT_LE(off, c.bound) << what << ": simulator / closed form = " << ratio;
}

TEST(Mutation, RandomPlansOnPaperScaleClusters) {
  const std::pair<const char*, double> cases[] = {
      {"hexiscale-setting1-llama2-7b", doubled(1.157)},    // 4.380 with rings in rank order
      {"hexiscale-setting2-llama2-13b", doubled(1.009)}};  // 1.147 with rings in rank order
  for (const auto& [name, bound] : cases) {
    const Scenario sc = testing::shipped_scenario(name);
    Rng rng(2026);
    Checked c;
    c.bound = bound;
    for (int i = 0; i < 12; ++i) {
      const Plan plan = random_plan(rng, sc);
      const std::string what = std::string(name) + " plan " + std::to_string(i);
      record(c, estimate_lower_simulate(sc, plan, Granularity::kStage, what), what);
    }
    std::printf("%s: %d random plans, worst |sim/closed| ratio %.3f\n", name, c.plans,
                c.worst_ratio);
  }
}

// On the tiny model the engine runs every random plan too, and matches the reference.
TEST(Mutation, RandomPlansRunInTheEngineLikeTheReference) {
  const Scenario sc = testing::shipped_scenario("tiny-llama-cpu");
  auto corpus = engine::CorpusSource::load(engine::default_corpus(), sc.training.seq_len, 5);
  ASSERT_TRUE(corpus.ok()) << corpus.error().message;
  engine::RuntimeOptions opt;
  const engine::Trajectory ref =
      engine::run_reference(sc.model, sc.training.global_batch, *corpus, opt, 2);
  Rng rng(7);
  Checked c;
  c.bound = doubled(1.018);
  for (int i = 0; i < 10; ++i) {
    const Plan plan = random_plan(rng, sc);
    const std::string what = "tiny plan " + std::to_string(i) + ": " + plan_text(plan);
    Program program;
    record(c, estimate_lower_simulate(sc, plan, Granularity::kStage, what), what);
    record(c, estimate_lower_simulate(sc, plan, Granularity::kLayer, what, &program), what);
    if (program.devices.empty()) continue;
    auto got = engine::run_fake(program, sc.model, *corpus, opt, 2);
    ASSERT_TRUE(got.ok()) << what << ": " << got.error().message;
    for (int k = 0; k < 2; ++k) {
      EXPECT_NEAR(got->losses[k], ref.losses[k], 1e-5 * ref.losses[k]) << what << " step " << k;
    }
    for (const auto& e : engine::compare(ref.params_last, got->params_last, 1e-4, 1e-3)) {
      EXPECT_TRUE(e.ok) << what << ": " << e.name;
    }
  }
  std::printf("tiny-llama-cpu: %d lowered programs, worst |sim/closed| ratio %.3f\n", c.plans,
              c.worst_ratio);
}

}  // namespace
}  // namespace hexi
