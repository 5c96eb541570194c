#pragma once
// A mixed-integer linear program and the seam to the solvers that solve it: CBC (COIN-OR
// branch and cut, backend_cbc.cpp) and GLPK (backend_glpk.cpp). The scheduler builds a
// Problem and never sees a solver's types. Both backends run silent, single-threaded and
// deterministic (fixed seeds): the same Problem gives the same answer every run.
//
//   minimise    sum_v objective_v x_v
//   subject to  sum_v a_cv x_v  (<= | >= | =)  rhs_c     for every constraint c
//               lower_v <= x_v <= upper_v, x_v integer where asked

#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "topologies/enum_names.hpp"
#include "topologies/status.hpp"

namespace hexi {
inline namespace solver {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

struct Variable {
  std::string name;
  double lower = 0;          // -kInfinity: free below
  double upper = kInfinity;  // kInfinity: free above
  bool integer = false;
  double objective = 0;  // coefficient in the objective (minimised)
};

enum class Sense { kLessEqual, kGreaterEqual, kEqual };

struct Term {
  int variable = 0;  // index into Problem::variables
  double coefficient = 0;
};

struct Constraint {
  std::string name;
  std::vector<Term> terms;  // a variable may appear twice: its coefficients add up
  Sense sense = Sense::kLessEqual;
  double rhs = 0;
};

struct Problem {
  std::vector<Variable> variables;
  std::vector<Constraint> constraints;
  // Branch and cut stops once its best solution is within this fraction of the bound (then
  // reported optimal); 0: proven optimal. A deterministic stop, where a time limit is not.
  double relative_gap = 0;
  // Branch and bound stops after this many nodes with its best solution (reported feasible)
  // once that is within node_limit_gap of the bound (GLPK; CBC stops at the node limit
  // whatever the gap); 0: no limit. A deterministic stop, where a time limit is not.
  long node_limit = 0;
  double node_limit_gap = 1;
  // A known solution's integer variables (variable, value), others left to the solver: CBC
  // starts branch and bound from it (a bound to prune by, not a constraint); GLPK ignores it.
  std::vector<std::pair<int, double>> start;
  // Integer programs: answers at or above this objective are of no use to the caller (who
  // holds a better one elsewhere). Where the solver proves that no solution lies below it,
  // the answer is kCutOff, without values: GLPK when the LP relaxation reaches it (branch and
  // cut is then not run), CBC anywhere in branch and bound. kInfinity: none.
  double cutoff = kInfinity;

  // Appends a variable / constraint and returns its index.
  int add_variable(Variable v);
  int add_constraint(Constraint c);
};

// What the problem is wrong with (a term naming no variable, lower > upper, a NaN), or ok.
Status check(const Problem& p);

enum class SolveStatus {
  kOptimal,     // proven optimal
  kFeasible,    // a solution, optimality not proven within the time limit
  kInfeasible,  // proven: no solution
  kUnbounded,   // the (relaxed) objective decreases without bound
  kCutOff,      // proven: no solution below Problem::cutoff (perhaps none at all)
  kError,       // no answer: the problem is ill-formed, the solver failed, or the time
                // limit passed before any solution was found (the message says which)
};
inline constexpr auto kSolveStatusNames =
    enum_names<SolveStatus>({{SolveStatus::kOptimal, "optimal"},
                             {SolveStatus::kFeasible, "feasible"},
                             {SolveStatus::kInfeasible, "infeasible"},
                             {SolveStatus::kUnbounded, "unbounded"},
                             {SolveStatus::kCutOff, "cut off"},
                             {SolveStatus::kError, "error"}});
std::string_view to_string(SolveStatus s);

enum class Backend { kCbc, kGlpk };
inline constexpr auto kBackendNames =
    enum_names<Backend>({{Backend::kCbc, "cbc"}, {Backend::kGlpk, "glpk"}});
std::string_view to_string(Backend b);

struct Solution {
  SolveStatus status = SolveStatus::kError;
  double objective = 0;  // of `values`, when optimal or feasible
  // What branch and cut proved: no solution below it (the objective when optimal; where it
  // stopped early, CBC's best node, GLPK's LP relaxation; when cut off, GLPK's LP relaxation
  // or CBC's cutoff). -kInfinity when unknown.
  double bound = -kInfinity;
  std::vector<double> values;  // one per variable, when optimal or feasible
  std::string message;         // why, when error
  bool has_values() const {
    return status == SolveStatus::kOptimal || status == SolveStatus::kFeasible;
  }
};

// Solves `p` with `backend` within about `time_limit_s` seconds of solver time.
Solution solve(const Problem& p, Backend backend, double time_limit_s);

// The backends, called by solve() with a checked problem.
Solution solve_cbc(const Problem& p, double time_limit_s);
Solution solve_glpk(const Problem& p, double time_limit_s);

// `terms` with one term per variable, in variable order: coefficients of a variable named
// twice added up, zeros dropped (what the backends load).
std::vector<Term> merged_terms(const std::vector<Term>& terms);

// Objective of `values` (what solve() reports as Solution::objective).
double objective_value(const Problem& p, const std::vector<double>& values);

}  // namespace solver
}  // namespace hexi
