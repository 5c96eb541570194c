// verify_with_simulator on hand-made search results: the simulator's fastest plan is returned
// whatever the closed form's ranking said, with the figures and a note; nothing to do without
// runners-up.
#include "studies/planning.hpp"

#include <gtest/gtest.h>

#include "scenarios/testing.hpp"
#include "scheduler/estimate/estimate.hpp"
#include "scheduler/plan/plan.hpp"

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

}  // namespace
}  // namespace studies
}  // namespace hexi
