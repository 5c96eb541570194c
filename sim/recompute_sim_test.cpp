// The simulator on plans with per-stage recompute: it follows the program's
// recompute ops and agrees with the closed-form estimate, and its memory report
// uses each stage's own recompute.
//
// The closed form's 1F1B timeline (schedule.hpp) follows the program event by event,
// whichever stage is the slowest: with full recompute on the first stage (the slowest),
// its second warm-up forward runs while it waits for the first gradient, which the
// former closed form sum(F + B) + (m - 1) max(F + B) counted once too many.

#include <gtest/gtest.h>

#include "scenarios/testing.hpp"
#include "scheduler/estimate/estimate.hpp"
#include "scheduler/plan/testing.hpp"
#include "scheduler/program/lower.hpp"
#include "sim/simulator.hpp"

namespace hexi {
namespace {

// The layout of UniformHomogeneousPlanAgreesWithTheEstimate (2 machines of 8 A100,
// Llama-2 7B, DP 2 x PP 2 x TP 4, stage s on machine s), with stage `full` (-1:
// none) under full recompute and the other under the training config's selective.
Plan mixed_plan(int full) {
  Json pipes = Json::array();
  for (int p = 0; p < 2; ++p) {
    Json stages = Json::array();
    for (int s = 0; s < 2; ++s) {
      const int base = 8 * s + 4 * p;
      Json stage = {{"devices", {base, base + 1, base + 2, base + 3}},
                    {"layers", {16 * s, 16 * (s + 1)}}};
      if (s == full) stage["recompute"] = "full";
      stages.push_back(stage);
    }
    pipes.push_back({{"batch", 8}, {"stages", stages}});
  }
  return testing::plan_from({{"version", 1}, {"pipelines", pipes}});
}

TEST(SimulatorRecompute, PerStageRecomputeAgreesWithTheEstimate) {
  const Model& m = *testing::shipped_models().find("llama2-7b");
  Cluster c = testing::make_cluster(2, 8);
  TrainingConfig t = testing::tiny_training(16, 1, 4096);
  Profile prof;
  CostModel cm(c, m, t, prof);
  double simulated[3] = {0, 0, 0};
  for (int full : {-1, 0, 1}) {
    const Plan plan = mixed_plan(full);
    const Estimate est = cm.estimate(plan);
    for (Granularity g : {Granularity::kLayer, Granularity::kStage}) {
      LowerOptions lo;
      lo.granularity = g;
      auto program = lower_plan(plan, c, m, t, lo, "<plan>");
      ASSERT_TRUE(program.ok()) << program.error().message;
      SimOptions o;
      o.trace = false;
      o.plan_digest = "0123456789abcdef";
      auto out = simulate(*program, c, m, t, prof, o);
      ASSERT_TRUE(out.ok()) << out.error().message;
      EXPECT_EQ(out->report.plan_digest, o.plan_digest);  // through the child's JSON
      const double sim = out->report.iteration_time_s, closed = est.iteration_time_s;
      const std::string what =
          std::string(to_string(g)) + ", full recompute on stage " + std::to_string(full);
      EXPECT_NEAR(sim, closed, 1e-3 * closed) << what;
      if (g == Granularity::kLayer) simulated[full + 1] = sim;
      // Hardware FLOPs (HFU's numerator) are what the program's compute ops execute: the
      // plan's, each stage under its own recompute; none recomputed: HFU = MFU. The
      // report came back from the simulating child as JSON, figures included.
      const double executed = out->report.figures.hfu * sim * c.peak_flops();
      EXPECT_NEAR(executed, hardware_flops(plan, m, t), 1e-9 * executed) << what;
      if (full < 0) {
        EXPECT_NEAR(out->report.figures.hfu, out->report.mfu, 1e-12) << what;
      } else {
        EXPECT_GT(out->report.figures.hfu, out->report.mfu * 1.05) << what;
      }
      auto back = SimReport::from_json(out->report.to_json());
      ASSERT_TRUE(back.ok()) << back.error().message;
      EXPECT_EQ(back->to_json(), out->report.to_json()) << what;
      // Memory: each device as the estimate has it (full: only layer inputs kept).
      for (const auto& d : out->report.devices) {
        for (const auto& de : est.devices) {
          if (de.device == d.device) {
            EXPECT_NEAR(d.peak_memory_bytes, de.memory.total(), 0.05 * de.memory.total())
                << what << ", device " << d.device;
          }
        }
      }
      std::printf("  %s: simulated %.4f s, closed form %.4f s\n", what.c_str(), sim, closed);
    }
  }
  // The replayed forward (with its TP all-reduces) costs time wherever it runs.
  EXPECT_GT(simulated[1], simulated[0] * 1.05);
  EXPECT_GT(simulated[2], simulated[0] * 1.05);
}

}  // namespace
}  // namespace hexi
