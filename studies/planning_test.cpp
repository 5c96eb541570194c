// verify_with_simulator on hand-made search results: the simulator's fastest plan is returned
// whatever the closed form's ranking said, with the figures and a note; nothing to do without
// runners-up; plans whose programs exceed the lowering's limit are not simulated, and a
// verification no plan allows is refused before the search (or skipped by default).
#include "studies/planning.hpp"

#include <gtest/gtest.h>

#include "scenarios/testing.hpp"
#include "scheduler/estimate/estimate.hpp"
#include "scheduler/plan/plan.hpp"
#include "scheduler/scheduler.hpp"

namespace hexi {
inline namespace studies {
namespace {

Plan parse_plan(const char* text) {
  auto p = plan_from_json(Json::parse(text), "plan");
  EXPECT_TRUE(p.ok()) << p.error().message;
  return *p;
}

// tiny-llama-cpu: one 8-stage pipeline (the slow plan) and 8 one-GPU pipelines (the fast one).
const char* kDeep = R"({"version": 1, "pipelines": [{"batch": 8, "stages": [
  {"devices": [0], "layers": [0, 1]}, {"devices": [1], "layers": [1, 2]},
  {"devices": [2], "layers": [2, 3]}, {"devices": [3], "layers": [3, 4]}]}]})";
const char* kWide = R"({"version": 1, "pipelines": [
  {"batch": 1, "stages": [{"devices": [0], "layers": [0, 4]}]},
  {"batch": 1, "stages": [{"devices": [1], "layers": [0, 4]}]},
  {"batch": 1, "stages": [{"devices": [2], "layers": [0, 4]}]},
  {"batch": 1, "stages": [{"devices": [3], "layers": [0, 4]}]},
  {"batch": 1, "stages": [{"devices": [4], "layers": [0, 4]}]},
  {"batch": 1, "stages": [{"devices": [5], "layers": [0, 4]}]},
  {"batch": 1, "stages": [{"devices": [6], "layers": [0, 4]}]},
  {"batch": 1, "stages": [{"devices": [7], "layers": [0, 4]}]}]})";

TEST(Verify, ReturnsTheFastestSimulatedPlanWhateverTheClosedFormRanked) {
  const Scenario sc = testing::shipped_scenario("tiny-llama-cpu");
  CostModel cm(sc.cluster, sc.model, sc.training, sc.profile);
  SearchResult r;
  r.scheduler = "hand";
  r.plan = parse_plan(kDeep);  // ranked first, as a misled closed form would
  r.estimate = cm.estimate(r.plan);
  const Plan wide = parse_plan(kWide);
  r.runners_up.push_back({wide, cm.estimate(wide)});
  ASSERT_TRUE(verify_with_simulator(sc, r).ok());
  ASSERT_EQ(r.verified.size(), 2u);
  EXPECT_EQ(r.verified[0].rank, 0);
  EXPECT_EQ(r.verified[1].rank, 1);
  EXPECT_GT(r.verified[1].simulated_tokens_per_s, r.verified[0].simulated_tokens_per_s);
  EXPECT_EQ(r.verified_chosen, 1);
  EXPECT_EQ(r.verified_fidelity, "stage");
  EXPECT_EQ(plan_text(r.plan), plan_text(wide));  // the runner-up, with its own estimate
  EXPECT_DOUBLE_EQ(r.estimate.tokens_per_s, cm.estimate(wide).tokens_per_s);
  EXPECT_TRUE(r.runners_up.empty());
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("plan 2 of 2 simulates fastest"), std::string::npos) << r.notes[0];
  const Json j = r.to_json();
  EXPECT_EQ(j["verify"]["chosen_rank"], 1);
  EXPECT_EQ(j["verify"]["plans"].size(), 2u);

  // In the other order the best stays, and no note is added.
  SearchResult s;
  s.plan = wide;
  s.estimate = cm.estimate(wide);
  s.runners_up.push_back({parse_plan(kDeep), cm.estimate(parse_plan(kDeep))});
  ASSERT_TRUE(verify_with_simulator(sc, s).ok());
  EXPECT_EQ(s.verified_chosen, 0);
  EXPECT_EQ(plan_text(s.plan), plan_text(wide));
  EXPECT_TRUE(s.notes.empty());

  // Nothing to verify: untouched, and no "verify" in the JSON.
  SearchResult none;
  none.plan = wide;
  ASSERT_TRUE(verify_with_simulator(sc, none).ok());
  EXPECT_TRUE(none.verified.empty());
  EXPECT_FALSE(none.to_json().contains("verify"));
}

// tiny-llama-cpu with 2^22 sequences: one plan of 2^22 micro-batches over 4 stages (2^25
// compute ops at stage fidelity, over the lowering's 2^24) and one of 8 micro-batches of
// 2^16 sequences per pipeline (128 ops).
const char* kDeepHuge = R"({"version": 1, "pipelines": [{"batch": 4194304, "stages": [
  {"devices": [0], "layers": [0, 1]}, {"devices": [1], "layers": [1, 2]},
  {"devices": [2], "layers": [2, 3]}, {"devices": [3], "layers": [3, 4]}]}]})";

Plan wide_huge() {
  Plan p = parse_plan(kWide);
  for (Pipeline& pipe : p.pipelines) {
    pipe.micro_batch = 1 << 16;
    pipe.batch = 1 << 19;
  }
  return p;
}

TEST(Verify, PlansWhoseProgramsExceedTheLoweringsLimitAreNotSimulated) {
  Scenario sc = testing::shipped_scenario("tiny-llama-cpu");
  sc.training.global_batch = 1 << 22;
  CostModel cm(sc.cluster, sc.model, sc.training, sc.profile);
  const Plan deep = parse_plan(kDeepHuge), wide = wide_huge();
  ASSERT_TRUE(validate_plan(deep, sc.cluster, sc.model, sc.training, "deep").ok());
  ASSERT_TRUE(validate_plan(wide, sc.cluster, sc.model, sc.training, "wide").ok());

  // A runner-up over the limit is left out, with a note; the others are verified.
  SearchResult r;
  r.plan = wide;
  r.estimate = cm.estimate(wide);
  r.runners_up.push_back({deep, cm.estimate(deep)});
  auto st = verify_with_simulator(sc, r);
  ASSERT_TRUE(st.ok()) << st.error().message;
  ASSERT_EQ(r.verified.size(), 1u);
  EXPECT_EQ(r.verified[0].rank, 0);
  EXPECT_EQ(r.verified_chosen, 0);
  EXPECT_EQ(plan_text(r.plan), plan_text(wide));
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("1 of the 1 runners-up lower to more than the 1.68e+07"),
            std::string::npos)
      << r.notes[0];

  // The closed form's best over the limit: nothing to compare with, returned unverified.
  SearchResult s;
  s.plan = deep;
  s.estimate = cm.estimate(deep);
  s.runners_up.push_back({wide, cm.estimate(wide)});
  st = verify_with_simulator(sc, s);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_TRUE(s.verified.empty());
  EXPECT_TRUE(s.runners_up.empty());
  EXPECT_EQ(plan_text(s.plan), plan_text(deep));
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_NE(s.notes[0].find("the closed form's best plan lowers to at least 3.36e+07 compute ops"),
            std::string::npos)
      << s.notes[0];
  EXPECT_NE(s.notes[0].find("returned without verification"), std::string::npos) << s.notes[0];
}

TEST(Verify, AVerificationNoPlanAllowsIsRefusedBeforeTheSearchOrSkippedByDefault) {
  // 2^24 sequences in micro-batches of 1: every plan lowers to at least 2^25 ops.
  Scenario sc = testing::shipped_scenario("tiny-llama-cpu");
  sc.training.global_batch = 1 << 24;
  EXPECT_EQ(default_verify(sc), 0);
  // Refused before the scheduler is even looked up (a name no registry holds).
  auto refused = plan_pipeline("no-such-scheduler", sc, SearchOptions{}, 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(refused.error().message.find("--verify 2: training.global_batch 16777216 / "
                                         "micro_batch 1 micro-batches lower to at least 3.36e+07"),
            std::string::npos)
      << refused.error().message;
  auto skipped = plan_pipeline("uniform", sc, SearchOptions{});
  ASSERT_TRUE(skipped.ok()) << skipped.error().message;
  EXPECT_TRUE(skipped->verified.empty());
  ASSERT_FALSE(skipped->notes.empty());
  EXPECT_NE(skipped->notes.back().find("verify: not run: training.global_batch 16777216"),
            std::string::npos)
      << skipped->notes.back();
  // A batch every plan lowers within the limit keeps the default.
  sc.training.global_batch = 8;
  EXPECT_EQ(default_verify(sc), kDefaultVerify);
}

// The default planning call: every scheduler marked in_best runs; the plan returned is the
// fastest simulated one (the closed form's fastest when verification is off), and the JSON
// lists each with the one returned marked. One scheduler alone lists itself.
void expect_best_of_all(const SearchResult& r, bool simulated) {
  ASSERT_EQ(r.compared.size(), best_plan_schedulers(8).size());
  const ComparedScheduler* chosen = nullptr;
  for (const ComparedScheduler& c : r.compared) {
    if (c.scheduler == r.scheduler) chosen = &c;
  }
  ASSERT_NE(chosen, nullptr);
  EXPECT_DOUBLE_EQ(chosen->tokens_per_s, r.estimate.tokens_per_s);
  for (const ComparedScheduler& c : r.compared) {
    ASSERT_TRUE(c.error.empty()) << c.scheduler << ": " << c.error;
    EXPECT_EQ(c.simulated_tokens_per_s > 0, simulated) << c.scheduler;
    if (simulated) {
      EXPECT_GE(chosen->simulated_tokens_per_s, c.simulated_tokens_per_s) << c.scheduler;
    } else {
      EXPECT_GE(chosen->tokens_per_s, c.tokens_per_s) << c.scheduler;
    }
  }
  const Json j = r.to_json();
  ASSERT_EQ(j["candidates"].size(), r.compared.size());
  int marked = 0;
  for (const auto& c : j["candidates"]) {
    if (c["chosen"].get<bool>()) {
      ++marked;
      EXPECT_EQ(c["scheduler"], r.scheduler);
    }
  }
  EXPECT_EQ(marked, 1);
}

TEST(BestPlan, IsTheFastestOfEverySchedulerItRan) {
  const Scenario sc = testing::shipped_scenario("tiny-llama-cpu");
  auto verified = plan_pipeline(std::string(kBestPlan), sc, SearchOptions{});
  ASSERT_TRUE(verified.ok()) << verified.error().message;
  expect_best_of_all(*verified, true);
  auto closed_form = plan_pipeline(std::string(kBestPlan), sc, SearchOptions{}, 0);
  ASSERT_TRUE(closed_form.ok()) << closed_form.error().message;
  expect_best_of_all(*closed_form, false);

  auto alone = plan_pipeline("uniform", sc, SearchOptions{});
  ASSERT_TRUE(alone.ok());
  EXPECT_TRUE(alone->compared.empty());
  const Json j = alone->to_json();
  ASSERT_EQ(j["candidates"].size(), 1u);
  EXPECT_EQ(j["candidates"][0]["scheduler"], "uniform");
  EXPECT_TRUE(j["candidates"][0]["chosen"].get<bool>());
}

TEST(BestPlan, AClusterNoSchedulerCanPlanIsBadInputWithTheFirstError) {
  Scenario sc = testing::shipped_scenario("tiny-llama-cpu");
  sc.training.zero_stage = 3;  // pipeline plans run ZeRO 0-1
  auto r = plan_pipeline(std::string(kBestPlan), sc, SearchOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kBadInput);
}

}  // namespace
}  // namespace studies
}  // namespace hexi
