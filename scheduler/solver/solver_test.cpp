// The solver seam: both backends on programs whose optimum is known by hand (and, for the
// knapsack, by enumeration), infeasible and unbounded programs, bad input, silence and
// determinism.
#include "scheduler/solver/solver.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hexi {
namespace {

constexpr double kLimit = 10;  // s: every program here solves in milliseconds

class Solver : public ::testing::TestWithParam<Backend> {};

std::string backend_name(const ::testing::TestParamInfo<Backend>& info) {
  return std::string(to_string(info.param));
}

int binary(Problem& p, const std::string& name, double objective) {
  return p.add_variable({name, 0, 1, true, objective});
}

// A 0/1 knapsack: values, weights, capacity 14. Maximise value = minimise -value.
struct Knapsack {
  std::vector<double> value{10, 13, 7, 8, 4};
  std::vector<double> weight{5, 7, 4, 5, 3};
  double capacity = 14;

  Problem problem() const {
    Problem p;
    Constraint fits{"capacity", {}, Sense::kLessEqual, capacity};
    for (std::size_t i = 0; i < value.size(); ++i) {
      int x = binary(p, "take" + std::to_string(i), -value[i]);
      fits.terms.push_back({x, weight[i]});
    }
    p.add_constraint(fits);
    return p;
  }

  // 18 items of nearly equal value density: the LP bound stays above the optimum deep into
  // the tree.
  static Knapsack nearly_equal_density() {
    Knapsack k;
    k.value.clear();
    k.weight.clear();
    for (int i = 0; i < 18; ++i) {
      k.weight.push_back(20 + (i * 7) % 13);
      k.value.push_back(k.weight.back() * (10 + (i * 5) % 3) + (i % 4));
    }
    k.capacity = 211;
    return k;
  }

  // The oracle: every subset.
  double best_by_enumeration() const {
    double best = 0;
    for (unsigned mask = 0; mask < (1u << value.size()); ++mask) {
      double v = 0, w = 0;
      for (std::size_t i = 0; i < value.size(); ++i) {
        if (mask & (1u << i)) v += value[i], w += weight[i];
      }
      if (w <= capacity) best = std::max(best, v);
    }
    return best;
  }
};

TEST_P(Solver, KnapsackOptimum) {
  // Items 0, 2, 3: weight 5 + 4 + 5 = 14, value 10 + 7 + 8 = 25 (the only subset worth 25).
  Knapsack k;
  ::testing::internal::CaptureStdout();
  Solution s = solve(k.problem(), GetParam(), kLimit);
  const std::string printed = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(printed, "") << "the solver must run silent";
  ASSERT_EQ(s.status, SolveStatus::kOptimal) << s.message;
  EXPECT_DOUBLE_EQ(k.best_by_enumeration(), 25);
  EXPECT_DOUBLE_EQ(s.objective, -25);
  EXPECT_EQ(s.values, (std::vector<double>{1, 0, 1, 1, 0}));
}

TEST_P(Solver, MinMaxOfLinearTimes) {
  // 13 work units over devices taking 6, 3 and 2 s per unit; minimise the slowest device's
  // time z >= 6 w0, 3 w1, 2 w2. z = 13 would cap w at 2, 4, 6 (sum 12 < 13); z = 14 allows
  // 2, 4, 7 = 13: the optimum is 14 with w = (2, 4, 7).
  Problem p;
  const std::vector<double> per_unit{6, 3, 2};
  const int z = p.add_variable({"z", 0, kInfinity, false, 1});
  Constraint all{"all work", {}, Sense::kEqual, 13};
  for (int i = 0; i < 3; ++i) {
    const int w = p.add_variable({"w" + std::to_string(i), 0, 13, true, 0});
    all.terms.push_back({w, 1});
    p.add_constraint(
        {"slowest" + std::to_string(i), {{z, 1}, {w, -per_unit[i]}}, Sense::kGreaterEqual, 0});
  }
  p.add_constraint(all);
  Solution s = solve(p, GetParam(), kLimit);
  ASSERT_EQ(s.status, SolveStatus::kOptimal) << s.message;
  EXPECT_NEAR(s.objective, 14, 1e-9);
  EXPECT_EQ(s.values[1], 2);
  EXPECT_EQ(s.values[2], 4);
  EXPECT_EQ(s.values[3], 7);
}

TEST_P(Solver, LinearProgramVertex) {
  // min x + y, x + 2y >= 4, 3x + y >= 6: the vertex x = 1.6, y = 1.2, objective 2.8.
  Problem p;
  const int x = p.add_variable({"x", 0, kInfinity, false, 1});
  const int y = p.add_variable({"y", 0, kInfinity, false, 1});
  p.add_constraint({"a", {{x, 1}, {y, 2}}, Sense::kGreaterEqual, 4});
  p.add_constraint({"b", {{x, 3}, {y, 1}}, Sense::kGreaterEqual, 6});
  Solution s = solve(p, GetParam(), kLimit);
  ASSERT_EQ(s.status, SolveStatus::kOptimal) << s.message;
  EXPECT_NEAR(s.values[x], 1.6, 1e-9);
  EXPECT_NEAR(s.values[y], 1.2, 1e-9);
  EXPECT_NEAR(s.objective, 2.8, 1e-9);
}

TEST_P(Solver, RepeatedTermsAddUp) {
  // max x with x + x <= 7, x integer: 2x <= 7 -> x = 3.
  Problem p;
  const int x = p.add_variable({"x", 0, 100, true, -1});
  p.add_constraint({"twice", {{x, 1}, {x, 1}}, Sense::kLessEqual, 7});
  Solution s = solve(p, GetParam(), kLimit);
  ASSERT_EQ(s.status, SolveStatus::kOptimal) << s.message;
  EXPECT_EQ(s.values[x], 3);
}

TEST_P(Solver, InfeasibleProgram) {
  // x + y <= 1 and x + y >= 3 over integers in [0, 5].
  Problem p;
  const int x = p.add_variable({"x", 0, 5, true, 1});
  const int y = p.add_variable({"y", 0, 5, true, 1});
  p.add_constraint({"low", {{x, 1}, {y, 1}}, Sense::kLessEqual, 1});
  p.add_constraint({"high", {{x, 1}, {y, 1}}, Sense::kGreaterEqual, 3});
  Solution s = solve(p, GetParam(), kLimit);
  EXPECT_EQ(s.status, SolveStatus::kInfeasible) << s.message;
  EXPECT_TRUE(s.values.empty());
  // The same rows over continuous variables: a pure LP, infeasible too.
  Problem lp = p;
  for (auto& v : lp.variables) v.integer = false;
  EXPECT_EQ(solve(lp, GetParam(), kLimit).status, SolveStatus::kInfeasible);
  // Integrality alone: 2x = 3 has no integer solution though its relaxation does.
  Problem q;
  const int v = q.add_variable({"v", 0, 10, true, 1});
  q.add_constraint({"odd", {{v, 2}}, Sense::kEqual, 3});
  EXPECT_EQ(solve(q, GetParam(), kLimit).status, SolveStatus::kInfeasible);
}

TEST_P(Solver, UnboundedProgram) {
  // min -x - y with x - y <= 1, x, y >= 0: x = y + 1 grows without bound.
  Problem p;
  const int x = p.add_variable({"x", 0, kInfinity, false, -1});
  const int y = p.add_variable({"y", 0, kInfinity, false, -1});
  p.add_constraint({"c", {{x, 1}, {y, -1}}, Sense::kLessEqual, 1});
  EXPECT_EQ(solve(p, GetParam(), kLimit).status, SolveStatus::kUnbounded);
}

TEST_P(Solver, BadInputIsAnErrorNamingIt) {
  Problem p;
  p.add_variable({"x", 0, 1, true, 1});
  p.add_constraint({"stray", {{5, 1}}, Sense::kLessEqual, 1});
  Solution s = solve(p, GetParam(), kLimit);
  EXPECT_EQ(s.status, SolveStatus::kError);
  EXPECT_NE(s.message.find("constraint 'stray': term names variable 5; expected 0..0"),
            std::string::npos)
      << s.message;
  Problem q;
  q.add_variable({"y", 2, 1, false, 0});
  EXPECT_NE(solve(q, GetParam(), kLimit).message.find("variable 'y'"), std::string::npos);
}

TEST_P(Solver, Deterministic) {
  Knapsack k;
  k.value = {3, 3, 3, 3, 3, 3};  // many optima: the same one every run
  k.weight = {2, 2, 2, 2, 2, 2};
  k.capacity = 7;
  Solution first = solve(k.problem(), GetParam(), kLimit);
  ASSERT_EQ(first.status, SolveStatus::kOptimal) << first.message;
  EXPECT_DOUBLE_EQ(first.objective, -9);
  for (int run = 0; run < 3; ++run)
    EXPECT_EQ(solve(k.problem(), GetParam(), kLimit).values, first.values);
}

TEST_P(Solver, RelativeGapStopsWithinItOfTheOptimum) {
  // With a 5 % gap branch and cut may stop early: the answer is reported optimal
  // (within the gap) and is within 5 % of the optimum by enumeration.
  const Knapsack k = Knapsack::nearly_equal_density();
  Problem p = k.problem();
  p.relative_gap = 0.05;
  const Solution s = solve(p, GetParam(), kLimit);
  ASSERT_EQ(s.status, SolveStatus::kOptimal) << s.message;
  const double best = k.best_by_enumeration();
  EXPECT_LE(-s.objective, best + 1e-9);
  EXPECT_GE(-s.objective, best * (1 - 0.05) - 1e-9);
  p.relative_gap = 0;
  EXPECT_DOUBLE_EQ(solve(p, GetParam(), kLimit).objective, -best);
}

TEST_P(Solver, BoundIsTheObjectiveWhenProvenAndBelowItWhenStoppedEarly) {
  Knapsack k;
  const Solution s = solve(k.problem(), GetParam(), kLimit);
  ASSERT_EQ(s.status, SolveStatus::kOptimal) << s.message;
  EXPECT_DOUBLE_EQ(s.bound, s.objective);
  // Stopped at a 5 % gap: the bound is at most the optimum, the answer within 5 % of it.
  Problem p = Knapsack{}.problem();
  p.relative_gap = 0.05;
  const Solution gap = solve(p, GetParam(), kLimit);
  ASSERT_EQ(gap.status, SolveStatus::kOptimal) << gap.message;
  EXPECT_LE(gap.bound, -k.best_by_enumeration() + 1e-9);
  EXPECT_LE(gap.bound, gap.objective);
}

TEST_P(Solver, NodeLimitStopsWithTheBestSolutionSoFar) {
  // The 18-item knapsack above, branch and bound cut off after 2 nodes: still a solution that
  // fits, no better than the optimum, the same on every run; without the limit, the optimum.
  const Knapsack k = Knapsack::nearly_equal_density();
  Problem p = k.problem();
  p.node_limit = 2;
  const Solution s = solve(p, GetParam(), kLimit);
  ASSERT_TRUE(s.has_values()) << s.message;
  EXPECT_TRUE(s.status == SolveStatus::kFeasible || s.status == SolveStatus::kOptimal);
  double weight = 0;
  for (std::size_t i = 0; i < k.weight.size(); ++i) weight += k.weight[i] * s.values[i];
  EXPECT_LE(weight, k.capacity + 1e-9);
  const double best = k.best_by_enumeration();
  EXPECT_LE(-s.objective, best + 1e-9);
  EXPECT_EQ(solve(p, GetParam(), kLimit).values, s.values);
  p.node_limit = 0;
  EXPECT_DOUBLE_EQ(solve(p, GetParam(), kLimit).objective, -best);
}

TEST_P(Solver, AStartDoesNotChangeTheOptimum) {
  // A feasible but poor start (item 4 alone, value 4): CBC starts from it, GLPK ignores it;
  // both still prove the optimum, 25.
  Knapsack k;
  Problem p = k.problem();
  for (int i = 0; i < 5; ++i) p.start.push_back({i, i == 4 ? 1.0 : 0.0});
  const Solution s = solve(p, GetParam(), kLimit);
  ASSERT_EQ(s.status, SolveStatus::kOptimal) << s.message;
  EXPECT_DOUBLE_EQ(s.objective, -25);
  p.start = {{7, 1}};
  EXPECT_NE(solve(p, GetParam(), kLimit).message.find("start: names variable 7; expected 0..4"),
            std::string::npos);
}

TEST_P(Solver, CutOffOnlyWhereNothingLiesBelowIt) {
  // The knapsack's optimum is -25 and its LP relaxation -26.5 (items 0 and 1, half of 2).
  Knapsack k;
  Problem p = k.problem();
  p.cutoff = -26.6;  // below the relaxation: nothing can reach it
  Solution s = solve(p, GetParam(), kLimit);
  EXPECT_EQ(s.status, SolveStatus::kCutOff) << s.message;
  EXPECT_FALSE(s.has_values());
  EXPECT_LE(s.bound, -25 + 1e-9);
  EXPECT_GE(s.bound, -26.6 - 1e-9);
  p.cutoff = -24.5;  // above the optimum: the optimum
  s = solve(p, GetParam(), kLimit);
  ASSERT_EQ(s.status, SolveStatus::kOptimal) << s.message;
  EXPECT_DOUBLE_EQ(s.objective, -25);
  p.cutoff = -25.5;  // between: cut off (CBC prunes in the tree) or the optimum (GLPK)
  s = solve(p, GetParam(), kLimit);
  if (s.status != SolveStatus::kCutOff) {
    ASSERT_EQ(s.status, SolveStatus::kOptimal) << s.message;
    EXPECT_DOUBLE_EQ(s.objective, -25);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Solver, ::testing::Values(Backend::kCbc, Backend::kGlpk),
                         backend_name);

TEST(SolverSeam, BothBackendsAgreeOnTheKnapsack) {
  Knapsack k;
  Solution cbc = solve(k.problem(), Backend::kCbc, kLimit);
  Solution glpk = solve(k.problem(), Backend::kGlpk, kLimit);
  EXPECT_EQ(cbc.values, glpk.values);
  EXPECT_EQ(cbc.objective, glpk.objective);
}

TEST(SolverSeam, MergedTerms) {
  auto t = merged_terms({{2, 1.5}, {0, 1}, {2, -1.5}, {1, 2}, {0, 3}});
  ASSERT_EQ(t.size(), 2u);  // variable 2 cancels out
  EXPECT_EQ(t[0].variable, 0);
  EXPECT_EQ(t[0].coefficient, 4);
  EXPECT_EQ(t[1].variable, 1);
  EXPECT_EQ(t[1].coefficient, 2);
}

}  // namespace
}  // namespace hexi
