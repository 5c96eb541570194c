// CBC (COIN-OR branch and cut) through its C interface, Cbc_C_Interface.h (Debian
// coinor-libcbc-dev, pkg-config module cbc).
#include <coin/Cbc_C_Interface.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "scheduler/solver/solver.hpp"

namespace hexi {
inline namespace solver {
namespace {

// COIN's infinity is DBL_MAX.
double coin_bound(double b) {
  const double big = std::numeric_limits<double>::max();
  return std::clamp(b, -big, big);
}

char cbc_sense(Sense s) {
  return s == Sense::kLessEqual ? 'L' : s == Sense::kGreaterEqual ? 'G' : 'E';
}

void load(Cbc_Model* m, const Problem& p) {
  for (const auto& v : p.variables) {
    Cbc_addCol(m, v.name.c_str(), coin_bound(v.lower), coin_bound(v.upper), v.objective,
               v.integer ? 1 : 0, 0, nullptr, nullptr);
  }
  for (const auto& c : p.constraints) {
    std::vector<int> cols;
    std::vector<double> coefs;
    for (const auto& t : merged_terms(c.terms)) {
      cols.push_back(t.variable);
      coefs.push_back(t.coefficient);
    }
    Cbc_addRow(m, c.name.c_str(), static_cast<int>(cols.size()), cols.data(), coefs.data(),
               cbc_sense(c.sense), c.rhs);
  }
  Cbc_setObjSense(m, 1);  // minimise
}

// Silent, one thread, fixed seeds, the time limit.
void configure(Cbc_Model* m, double time_limit_s) {
  Cbc_setLogLevel(m, 0);
  Cbc_setParameter(m, "log", "0");
  Cbc_setParameter(m, "slog", "0");
  Cbc_setParameter(m, "threads", "0");
  Cbc_setParameter(m, "randomSeed", "1");
  Cbc_setParameter(m, "randomCbcSeed", "1");
  Cbc_setMaximumSeconds(m, time_limit_s);
}

// CBC 2.10's C interface reads an unbounded pure LP (no branch and bound ran: status -1)
// as "proven infeasible"; its initial solve tells the two apart (primal infeasible or not).
bool unbounded(Cbc_Model* m) {
  if (Cbc_isContinuousUnbounded(m) || Cbc_secondaryStatus(m) == 7) return true;
  return Cbc_status(m) == -1 && Cbc_isProvenInfeasible(m) &&
         !Cbc_isInitialSolveProvenPrimalInfeasible(m);
}

}  // namespace

Solution solve_cbc(const Problem& p, double time_limit_s) {
  std::unique_ptr<Cbc_Model, decltype(&Cbc_deleteModel)> model(Cbc_newModel(), &Cbc_deleteModel);
  Cbc_Model* m = model.get();
  load(m, p);
  configure(m, time_limit_s);
  if (p.relative_gap > 0) Cbc_setAllowableFractionGap(m, p.relative_gap);
  if (p.node_limit > 0) {
    Cbc_setMaximumNodes(m, static_cast<int>(std::min<long>(p.node_limit, 1 << 30)));
  }
  if (!p.start.empty()) {
    std::vector<int> cols;
    std::vector<double> values;
    for (const auto& [v, x] : p.start) cols.push_back(v), values.push_back(x);
    Cbc_setMIPStartI(m, static_cast<int>(cols.size()), cols.data(), values.data());
    // CBC 2.10.8 (Debian) crashes in CglPreProcess::postProcess when the time limit ends a
    // search that has a MIP start and preprocessed the problem: 18 of 56 solves of
    // hexiseq-exact's programs at limits of 0.01-0.5 s, none of 126 with preprocessing off.
    // Without it, those programs solved to the end in 0.15x-1.8x the time (one cut at 60 s
    // before was proven in 27 s); the start keeps a cut-short solve feasible.
    Cbc_setParameter(m, "preprocess", "off");
  }
  const bool cutoff =
      std::isfinite(p.cutoff) && std::any_of(p.variables.begin(), p.variables.end(),
                                             [](const Variable& v) { return v.integer; });
  if (cutoff) Cbc_setCutoff(m, p.cutoff);
  Solution out;
  const int rc = Cbc_solve(m);
  if (unbounded(m)) {
    out.status = SolveStatus::kUnbounded;
  } else if (Cbc_isProvenInfeasible(m)) {
    out.status = cutoff ? SolveStatus::kCutOff : SolveStatus::kInfeasible;
    if (cutoff) out.bound = p.cutoff;
  } else if (Cbc_isProvenOptimal(m)) {
    out.status = SolveStatus::kOptimal;
  } else if (Cbc_bestSolution(m) != nullptr) {
    out.status = SolveStatus::kFeasible;
  } else {
    out.message = "cbc: no solution (return code " + std::to_string(rc) + ", status " +
                  std::to_string(Cbc_status(m)) + ", secondary status " +
                  std::to_string(Cbc_secondaryStatus(m)) +
                  (Cbc_isSecondsLimitReached(m) ? ", time limit reached)" : ")");
    return out;
  }
  if (out.has_values()) {
    const double* x = Cbc_getColSolution(m);
    out.values.assign(x, x + p.variables.size());
    out.bound = Cbc_getBestPossibleObjValue(m);
  }
  return out;
}

}  // namespace solver
}  // namespace hexi
