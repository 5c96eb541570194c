#include "scheduler/solver/solver.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace hexi {
inline namespace solver {

int Problem::add_variable(Variable v) {
  variables.push_back(std::move(v));
  return static_cast<int>(variables.size()) - 1;
}

int Problem::add_constraint(Constraint c) {
  constraints.push_back(std::move(c));
  return static_cast<int>(constraints.size()) - 1;
}

Status check(const Problem& p) {
  const int n = static_cast<int>(p.variables.size());
  for (const auto& v : p.variables) {
    if (std::isnan(v.lower) || std::isnan(v.upper) || std::isnan(v.objective) ||
        !std::isfinite(v.objective)) {
      return bad_input("variable '" + v.name + "': a bound or objective is not a number");
    }
    if (v.lower > v.upper) {
      return bad_input("variable '" + v.name + "': lower bound " + std::to_string(v.lower) +
                       " above upper bound " + std::to_string(v.upper));
    }
  }
  for (const auto& c : p.constraints) {
    if (!std::isfinite(c.rhs)) return bad_input("constraint '" + c.name + "': rhs not finite");
    for (const auto& t : c.terms) {
      if (t.variable < 0 || t.variable >= n) {
        return bad_input("constraint '" + c.name + "': term names variable " +
                         std::to_string(t.variable) + "; expected 0.." + std::to_string(n - 1));
      }
      if (!std::isfinite(t.coefficient)) {
        return bad_input("constraint '" + c.name + "': a coefficient is not finite");
      }
    }
  }
  for (const auto& [v, x] : p.start) {
    if (v < 0 || v >= n) {
      return bad_input("start: names variable " + std::to_string(v) + "; expected 0.." +
                       std::to_string(n - 1));
    }
    if (!std::isfinite(x))
      return bad_input("start: variable '" + p.variables[v].name +
                       "' has a value that is not finite");
  }
  return {};
}

std::string_view to_string(SolveStatus s) {
  return kSolveStatusNames.name(s);
}

std::string_view to_string(Backend b) {
  return kBackendNames.name(b);
}

std::vector<Term> merged_terms(const std::vector<Term>& terms) {
  std::map<int, double> sum;
  for (const auto& t : terms) sum[t.variable] += t.coefficient;
  std::vector<Term> out;
  for (const auto& [v, a] : sum) {
    if (a != 0) out.push_back({v, a});
  }
  return out;
}

double objective_value(const Problem& p, const std::vector<double>& values) {
  double sum = 0;
  for (std::size_t v = 0; v < p.variables.size(); ++v) sum += p.variables[v].objective * values[v];
  return sum;
}

Solution solve(const Problem& p, Backend backend, double time_limit_s) {
  if (Status s = check(p); !s) {
    Solution bad;
    bad.message = s.error().message;
    return bad;
  }
  Solution out =
      backend == Backend::kCbc ? solve_cbc(p, time_limit_s) : solve_glpk(p, time_limit_s);
  if (!out.has_values()) return out;
  for (std::size_t v = 0; v < p.variables.size(); ++v) {  // 2.9999999 -> 3
    if (p.variables[v].integer) out.values[v] = std::round(out.values[v]);
  }
  out.objective = objective_value(p, out.values);
  if (out.status == SolveStatus::kOptimal && p.relative_gap == 0) out.bound = out.objective;
  out.bound = std::min(out.bound, out.objective);
  return out;
}

}  // namespace solver
}  // namespace hexi
