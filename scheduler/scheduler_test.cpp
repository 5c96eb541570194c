// Every scheduler through the common interface: valid, feasible plans on the
// shipped scenarios, determinism, the time budget, and bad input.
#include "scheduler/scheduler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "scheduler/hexiscale/exact.hpp"
#include "scheduler/search/testing.hpp"

namespace hexi {
namespace {

using testing::cluster_json;
using testing::make_scenario;
using testing::shipped_scenario;

// Large searches get a budget here; their full runs are measured in bench/.
SearchOptions options_for(const Scenario& sc, const std::string& scheduler) {
  SearchOptions o;
  o.seed = sc.seed;
  // A valid plan is the point here: above 8 GPUs the searches stop after 2 s (their full
  // runs on the paper's settings are the tests below and the goldens).
  if (sc.cluster.num_devices() > 8 && (scheduler == "hexiscale" || scheduler == "random"))
    o.time_budget_s = 2;
  return o;
}

TEST(Search, EverySchedulerGivesAValidPlanOnEveryShippedScenario) {
  for (const std::string& name : shipped_scenarios()) {
    Scenario sc = shipped_scenario(name);
    if (sc.scheduler == "hexiseq") continue;  // long-context scenarios: `hexisim seq`
    for (const auto& s : schedulers()) {
      if (s.kind != SchedulerKind::kPipeline) continue;
      if (s.name == "exact" && sc.cluster.num_devices() > kExactMaxGpus) continue;
      auto r = run_pipeline_scheduler(s.name, sc, options_for(sc, s.name));
      if (!r) {
        // Only a baseline that cannot place the model may fail, and it must say so.
        EXPECT_NE(s.name, "hexiscale") << name << ": " << r.error().message;
        EXPECT_EQ(r.error().kind, ErrorKind::kBadInput) << name << " " << s.name;
        continue;
      }
      auto st = validate_plan(r->plan, sc.cluster, sc.model, sc.training, name + "/" + s.name);
      EXPECT_TRUE(st.ok()) << st.error().message;
      // FlashFlex chooses by its own memory model, which undercounts; the others fit.
      if (s.name != "flashflex") {
        EXPECT_TRUE(r->estimate.feasible) << name << " " << s.name;
      }
      EXPECT_GT(r->estimate.tokens_per_s, 0) << name << " " << s.name;
      EXPECT_EQ(r->scheduler, s.name);
    }
  }
}

// A mixture of experts: the plan a search returns is scored with whole experts per GPU as
// well as with every expert split by columns, and the faster kept, with a note. On Mixtral
// over A100 + L40S HexiScale's TP-2 stages run faster with whole experts.
TEST(Search, MixtureOfExpertsPlansKeepTheFasterExpertPlacement) {
  const Scenario sc = shipped_scenario("mix-32-mixtral-8x7b");
  auto r = run_pipeline_scheduler("hexiscale", sc, {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(validate_plan(r->plan, sc.cluster, sc.model, sc.training, "moe").ok());
  Plan columns = r->plan;
  for (Pipeline& p : columns.pipelines) {
    for (Stage& s : p.stages) s.expert_split.clear();
  }
  CostModel cm(sc.cluster, sc.model, sc.training, sc.profile);
  const Estimate by_columns = cm.estimate(columns);
  EXPECT_LE(r->estimate.iteration_time_s, by_columns.iteration_time_s);
  EXPECT_DOUBLE_EQ(cm.estimate(r->plan).iteration_time_s, r->estimate.iteration_time_s);
  ASSERT_FALSE(r->plan.pipelines.front().stages.front().expert_split.empty());
  const auto note = std::find_if(r->notes.begin(), r->notes.end(), [](const std::string& n) {
    return n.find("mixture of experts: the search's best plan takes") != std::string::npos;
  });
  ASSERT_NE(note, r->notes.end());
  EXPECT_NE(note->find("the plan returned runs whole experts"), std::string::npos) << *note;
}

TEST(Search, HexiScaleBeatsOrMatchesTheHandPlan) {
  Scenario sc = shipped_scenario("hexiscale-setting1-llama2-7b");
  auto hand = load_plan(*sc.plan);
  ASSERT_TRUE(hand.ok());
  CostModel cm(sc.cluster, sc.model, sc.training, sc.profile);
  auto r = run_pipeline_scheduler("hexiscale", sc, {});
  ASSERT_TRUE(r.ok());
  EXPECT_GE(r->estimate.tokens_per_s, cm.estimate(*hand).tokens_per_s);
}

// Progress reports (every one: progress_interval_s 0) carry what the search can say of the time
// left: the strided sweep an estimate from its second D on, each refinement a lower bound once
// it has scored moves; the plan is the one found without reports.
TEST(Search, HexiScaleProgressSaysWhatTimeIsLeft) {
  Scenario sc = shipped_scenario("a800-2x8-llama2-7b");
  std::vector<SearchProgress> reports;
  SearchOptions o;
  o.progress = [&](const SearchProgress& p) { reports.push_back(p); };
  o.progress_interval_s = 0;
  auto r = run_pipeline_scheduler("hexiscale", sc, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  auto quiet = run_pipeline_scheduler("hexiscale", sc, {});
  ASSERT_TRUE(quiet.ok());
  EXPECT_EQ(plan_text(r->plan), plan_text(quiet->plan));
  int sweep = 0, sweep_eta = 0, refinement = 0, floors = 0;
  for (const SearchProgress& p : reports) {
    EXPECT_EQ(p.scheduler, "hexiscale");
    EXPECT_GE(p.eta_s, 0) << p.phase;
    if (p.phase.rfind("phase 1: D=", 0) == 0) {
      ++sweep;
      sweep_eta += p.eta == Eta::kEstimate;
      if (p.phase.rfind("phase 1: D=1 of ", 0) == 0) {
        EXPECT_EQ(p.eta, Eta::kNone);  // nothing timed yet
      }
    } else if (p.phase.rfind("refinement: ", 0) == 0) {
      ++refinement;
      floors += p.eta == Eta::kAtLeast;
      EXPECT_NE(p.eta, Eta::kEstimate) << p.phase;
    }
  }
  EXPECT_GT(sweep, 1);
  EXPECT_EQ(sweep_eta, sweep - 1);
  EXPECT_GT(refinement, 0);
  EXPECT_GT(floors, 0);
  // With a time budget every report's ETA is at most the budget's end.
  reports.clear();
  o.time_budget_s = 1e6;
  ASSERT_TRUE(run_pipeline_scheduler("hexiscale", sc, o).ok());
  ASSERT_FALSE(reports.empty());
  for (const SearchProgress& p : reports) {
    EXPECT_NE(p.eta, Eta::kNone) << p.phase;
    EXPECT_LE(p.eta_s, 1e6 - p.elapsed_s + 1e-9) << p.phase;
  }
}

TEST(Search, SameSeedSamePlanBytes) {
  Scenario sc = shipped_scenario("hexiscale-setting3-llama-30b");
  for (const char* s : {"hexiscale", "random", "flashflex", "metis-like"}) {
    SearchOptions o;
    o.seed = 7;
    auto a = run_pipeline_scheduler(s, sc, o);
    auto b = run_pipeline_scheduler(s, sc, o);
    ASSERT_TRUE(a.ok() && b.ok()) << s;
    EXPECT_EQ(plan_text(a->plan), plan_text(b->plan)) << s;
  }
}

TEST(Search, HexiScaleGivesTheSamePlanBytesWithOneOrTwoThreads) {
  // Device-level, and machine-level + device refinement (the 4 machines of 8 GPUs partitioned
  // as machines once device-level stops at 16 GPUs, as it does at 64 on larger clusters):
  // candidates are scored in parallel batches, recorded in order.
  for (int device_level_max : {64, 16}) {
    Scenario sc = shipped_scenario("a800-4x8-llama-30b");
    sc.scheduler = "hexiscale";
    std::string plans[2];
    std::string modes[2];
    for (int threads : {1, 2}) {
      sc.scheduler_options = {{"threads", threads}, {"device_level_max", device_level_max}};
      auto r = run_pipeline_scheduler("hexiscale", sc, {});
      ASSERT_TRUE(r.ok()) << device_level_max << ": " << r.error().message;
      EXPECT_FALSE(r->budget_exhausted);
      plans[threads - 1] = plan_text(r->plan);
      modes[threads - 1] = r->mode;
    }
    EXPECT_EQ(plans[0], plans[1]) << device_level_max;
    EXPECT_EQ(modes[0],
              device_level_max == 16 ? "machine-level + device refinement" : "device-level");
  }
}

TEST(Search, HexiScaleKeepsItsRunnersUpWithoutChangingItsBest) {
  Scenario sc = shipped_scenario("testbed-h100-a100-llama2-13b");
  SearchOptions plain;
  SearchOptions keeping;
  keeping.runners_up = 4;
  auto a = run_pipeline_scheduler("hexiscale", sc, plain);
  auto b = run_pipeline_scheduler("hexiscale", sc, keeping);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(a->runners_up.empty());
  EXPECT_EQ(plan_text(a->plan), plan_text(b->plan));  // keeping them changes nothing
  ASSERT_EQ(b->runners_up.size(), 4u);
  double previous = b->estimate.tokens_per_s;
  std::set<std::string> distinct{plan_text(b->plan)};
  for (const EstimatedPlan& r : b->runners_up) {
    EXPECT_TRUE(validate_plan(r.plan, sc.cluster, sc.model, sc.training, "runner-up").ok());
    EXPECT_TRUE(r.estimate.feasible);
    EXPECT_LE(r.estimate.tokens_per_s, previous);  // best first
    previous = r.estimate.tokens_per_s;
    EXPECT_TRUE(distinct.insert(plan_text(r.plan)).second) << "a runner-up repeats a plan";
    // Its estimate is the plan's.
    CostModel cm(sc.cluster, sc.model, sc.training, sc.profile);
    EXPECT_DOUBLE_EQ(cm.estimate(r.plan).tokens_per_s, r.estimate.tokens_per_s);
  }
}

TEST(Search, TimeBudgetIsRespected) {
  Scenario sc = shipped_scenario("mix-1024-llama2-70b");
  SearchOptions o;
  o.time_budget_s = 0.5;
  auto r = run_pipeline_scheduler("hexiscale", sc, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->budget_exhausted);
  // Stops at the first check after the budget, whatever the machine's speed: every loop checks
  // before its next batch (0 measured; 16, two threads' batches of refinement moves, at most).
  EXPECT_LE(r->candidates_after_budget, 16) << r->summary();
  EXPECT_TRUE(validate_plan(r->plan, sc.cluster, sc.model, sc.training, "budget").ok());
}

TEST(Search, ModelThatFitsNowhereIsBadInputWithTheNumbers) {
  auto sc = make_scenario(cluster_json("two-t4", {{"T4", 2}}), "llama2-70b", {{"global_batch", 8}});
  ASSERT_TRUE(sc.ok());
  for (const char* s : {"hexiscale", "uniform", "exact"}) {
    auto r = run_pipeline_scheduler(s, *sc, {});
    ASSERT_FALSE(r.ok()) << s;
    EXPECT_EQ(r.error().kind, ErrorKind::kBadInput);
    EXPECT_NE(r.error().message.find("needs at least"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("GiB"), std::string::npos) << r.error().message;
  }
}

TEST(Search, ModelThatFitsInTotalButNoStageSaysSo) {
  // 30B in 16 x 12 GiB = 192 GiB: the total is there, but no arrangement fits.
  auto sc = make_scenario(cluster_json("3080ti", {{"RTX3080Ti", 8}, {"RTX3080Ti", 8}}), "llama-30b",
                          {{"global_batch", 16}, {"seq_len", 2048}});
  ASSERT_TRUE(sc.ok());
  auto r = run_pipeline_scheduler("hexiscale", *sc, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(r.error().message.find("GiB"), std::string::npos) << r.error().message;
}

TEST(Search, DisconnectedClusterIsBadInput) {
  Json c = cluster_json("split", {{"A100", 8}, {"A100", 8}});
  c["network"]["machines_per_leaf"] = 1;
  c["network"]["spine"] = false;
  auto sc = make_scenario(c, "llama2-7b", {{"global_batch", 16}});
  ASSERT_TRUE(sc.ok()) << sc.error().message;
  auto r = run_pipeline_scheduler("hexiscale", *sc, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(r.error().message.find("disconnected"), std::string::npos) << r.error().message;
}

TEST(Search, UnknownSchedulerIsBadInputListingTheNames) {
  Scenario sc = shipped_scenario("testbed-h100-a100-llama2-13b");
  auto r = run_pipeline_scheduler("hexiscal", sc, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(r.error().message.find("hexiscale, uniform, random"), std::string::npos)
      << r.error().message;
}

// The shipped Llama 3 405B long-context plan (TP 8 x CP 16 x PP 16 x DP 8 on 16 384 H100,
// scripts/mesh_grid_plan.py): valid, and it fits, each device holding an eighth of its
// stage's weights in a tensor group of one machine.
TEST(Search, ShippedLlama405bLongContextPlanIsValidAndFits) {
  Scenario sc = shipped_scenario("llama3-405b-16384-h100-128k");
  ASSERT_TRUE(sc.plan.has_value());
  auto plan = load_plan(*sc.plan);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  ASSERT_TRUE(validate_plan(*plan, sc.cluster, sc.model, sc.training, "405b").ok());
  ASSERT_EQ(plan->pipelines.size(), 8u);
  const Stage& first = plan->pipelines[0].stages[0];
  ASSERT_EQ(plan->pipelines[0].stages.size(), 16u);
  ASSERT_EQ(first.sequence->groups.size(), 16u);
  EXPECT_TRUE(first.sequence->groups[0].tensor);
  EXPECT_EQ(first.sequence->groups[0].devices, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  const Estimate e = CostModel(sc.cluster, sc.model, sc.training, sc.profile).estimate(*plan);
  EXPECT_TRUE(e.feasible);
  for (const DeviceEstimate& d : e.devices) {
    EXPECT_LT(d.memory.total(), 0.95 * sc.cluster.device_memory_bytes(d.device));
  }
}

TEST(Search, ExactRefusesLargeClusters) {
  Scenario sc = shipped_scenario("hexiscale-setting1-llama2-7b");
  auto r = run_pipeline_scheduler("exact", sc, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kBadInput);
}

TEST(Search, BadSchedulerOptionsAreBadInput) {
  auto sc = make_scenario(cluster_json("opt", {{"A100", 8}}), "llama2-7b", {{"global_batch", 16}});
  ASSERT_TRUE(sc.ok());
  sc->scheduler_options = {{"tua", 3}};
  auto r = run_pipeline_scheduler("hexiscale", *sc, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(r.error().message.find("tua"), std::string::npos) << r.error().message;
}

// A fast machine that holds the model and a slow one behind a thin link: any plan on the
// slow GPUs sends activations or gradients over the link, so the best plan leaves them idle
// and says what the best plan on every GPU gives.
TEST(Search, HexiScaleLeavesASlowMachineIdleWhereItDragsTheJob) {
  Json c = cluster_json("fast-and-slow", {{"A100-SXM-80GB", 8}, {"T4", 4}}, 0.1);
  auto sc = make_scenario(c, testing::small_model(2048),
                          {{"global_batch", 32}, {"micro_batch", 1}, {"seq_len", 2048}});
  ASSERT_TRUE(sc.ok()) << sc.error().message;
  auto r = run_pipeline_scheduler("hexiscale", *sc, {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->plan.num_devices(), 8) << r->plan.comment;
  for (const auto& p : r->plan.pipelines) {
    for (const auto& stage : p.stages) {
      for (int d : stage.devices) EXPECT_LT(d, 8) << "a T4 in the plan: " << r->plan.comment;
    }
  }
  ASSERT_TRUE(r->all_gpus.has_value());
  EXPECT_EQ(r->all_gpus->plan.num_devices(), 12);
  EXPECT_LT(r->all_gpus->estimate.tokens_per_s, r->estimate.tokens_per_s);
  // Where every GPU is used, there is no alternative to report.
  auto full =
      make_scenario(cluster_json("fast", {{"A100-SXM-80GB", 8}}, 0.1), testing::small_model(2048),
                    {{"global_batch", 32}, {"micro_batch", 1}, {"seq_len", 2048}});
  ASSERT_TRUE(full.ok());
  auto f = run_pipeline_scheduler("hexiscale", *full, {});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->plan.num_devices(), 8);
  EXPECT_FALSE(f->all_gpus.has_value());
}

// The plan said to run on every GPU does: over TCP with two single-A10 machines, an
// assignment that hands each pipeline an A10 may get no stage on it from phase 2, and was
// once reported as the every-GPU plan while it ran on 16 of the 18.
TEST(Search, HexiScalesEveryGpuPlanRunsOnEveryGpu) {
  Json c = {
      {"version", 1},
      {"name", "h800-a10-tcp"},
      {"network", {{"nic_GBps", 2.4}, {"transport", "tcp"}}},
      {"machines", Json::array({{{"name", "h"}, {"gpu", "H800"}, {"gpus", 4}, {"repeat", 4}},
                                {{"name", "a"}, {"gpu", "A10"}, {"gpus", 1}, {"repeat", 2}}})}};
  auto sc =
      make_scenario(c, "llama-30b", {{"global_batch", 32}, {"micro_batch", 1}, {"seq_len", 2048}});
  ASSERT_TRUE(sc.ok()) << sc.error().message;
  auto r = run_pipeline_scheduler("hexiscale", *sc, {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_LT(r->plan.num_devices(), 18) << r->plan.comment;
  ASSERT_TRUE(r->all_gpus.has_value());
  EXPECT_EQ(r->all_gpus->plan.num_devices(), 18) << r->all_gpus->plan.comment;
}

// The default planning call's schedulers: HexiScale and every baseline but the exhaustive one.
TEST(Search, TheBestPlanRunsHexiScaleAndEveryCheapBaseline) {
  const std::vector<std::string> best = best_plan_schedulers();
  EXPECT_EQ(best.front(), "hexiscale");
  EXPECT_EQ(std::count(best.begin(), best.end(), "exact"), 0);
  for (const auto& s : schedulers()) {
    const bool in_best = s.kind == SchedulerKind::kPipeline && s.name != "exact";
    EXPECT_EQ(std::count(best.begin(), best.end(), s.name), in_best ? 1 : 0) << s.name;
  }
  // On large clusters the baselines whose searches cost about as much as HexiScale's stay out.
  const std::vector<std::string> large = best_plan_schedulers(4096);
  EXPECT_EQ(large.front(), "hexiscale");
  EXPECT_EQ(std::count(large.begin(), large.end(), "random"), 0);
  EXPECT_EQ(std::count(large.begin(), large.end(), "uniform"), 1);
}

}  // namespace
}  // namespace hexi
