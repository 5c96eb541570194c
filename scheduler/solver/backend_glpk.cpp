// GLPK (GNU Linear Programming Kit, Debian libglpk-dev): the simplex for the LP relaxation,
// then branch and cut (glp_intopt) from its optimum when some variable is integer. GLPK
// aborts the process on malformed input, so solve() checks the problem first and terms are
// merged per variable.
#include <glpk.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "scheduler/solver/solver.hpp"

namespace hexi {
inline namespace solver {
namespace {

// GLPK's bound type for [lower, upper] (either may be infinite).
int bound_type(double lower, double upper) {
  const bool lo = std::isfinite(lower), up = std::isfinite(upper);
  if (lo && up) return lower == upper ? GLP_FX : GLP_DB;
  if (lo) return GLP_LO;
  return up ? GLP_UP : GLP_FR;
}

void load_row(glp_prob* g, int row, const Constraint& c) {
  glp_set_row_name(g, row, c.name.c_str());
  const double lower = c.sense == Sense::kLessEqual ? -kInfinity : c.rhs;
  const double upper = c.sense == Sense::kGreaterEqual ? kInfinity : c.rhs;
  glp_set_row_bnds(g, row, bound_type(lower, upper), c.rhs, c.rhs);
  // GLPK arrays are 1-based: element 0 is unused.
  std::vector<int> cols{0};
  std::vector<double> coefs{0};
  for (const auto& t : merged_terms(c.terms)) {
    cols.push_back(t.variable + 1);
    coefs.push_back(t.coefficient);
  }
  glp_set_mat_row(g, row, static_cast<int>(cols.size()) - 1, cols.data(), coefs.data());
}

void load(glp_prob* g, const Problem& p) {
  glp_set_obj_dir(g, GLP_MIN);
  const int n = static_cast<int>(p.variables.size());
  if (n > 0) glp_add_cols(g, n);
  for (int j = 0; j < n; ++j) {
    const Variable& v = p.variables[j];
    glp_set_col_name(g, j + 1, v.name.c_str());
    glp_set_col_bnds(g, j + 1, bound_type(v.lower, v.upper), std::isfinite(v.lower) ? v.lower : 0,
                     std::isfinite(v.upper) ? v.upper : 0);
    glp_set_obj_coef(g, j + 1, v.objective);
    if (v.integer) glp_set_col_kind(g, j + 1, GLP_IV);
  }
  const int m = static_cast<int>(p.constraints.size());
  if (m > 0) glp_add_rows(g, m);
  for (int i = 0; i < m; ++i) load_row(g, i + 1, p.constraints[i]);
}

bool has_integers(const Problem& p) {
  for (const auto& v : p.variables) {
    if (v.integer) return true;
  }
  return false;
}

// Silent, and the time limit in milliseconds (glp_smcp and glp_iocp share the fields).
template <class Parameters>
void configure(Parameters& p, double time_limit_s) {
  p.msg_lev = GLP_MSG_OFF;
  p.tm_lim = static_cast<int>(std::min(time_limit_s * 1000.0, 2e9));
}

// The LP relaxation: the answer for a pure LP, the start of branch and cut otherwise. Dual
// simplex first (GLPK falls back to primal where it fails): the scheduler's programs are
// min-max ones whose slack basis is dual feasible, and the HexiSeq search at 128 GPUs took
// 47.8 ms with it against 53.7 ms with the primal (median of 30; scheduler/README.md,
// "HexiSeq search time").
Solution relaxation(glp_prob* g, double time_limit_s) {
  glp_smcp lp;
  glp_init_smcp(&lp);
  configure(lp, time_limit_s);
  lp.meth = GLP_DUALP;
  Solution out;
  const int rc = glp_simplex(g, &lp);
  const int status = glp_get_status(g);
  if (rc == 0 && status == GLP_OPT) {
    out.status = SolveStatus::kOptimal;
  } else if (rc == 0 && status == GLP_NOFEAS) {
    out.status = SolveStatus::kInfeasible;
  } else if (rc == 0 && status == GLP_UNBND) {
    out.status = SolveStatus::kUnbounded;
  } else {
    out.message = "glpk: simplex failed (return code " + std::to_string(rc) + ", status " +
                  std::to_string(status) + ")";
  }
  return out;
}

// Branch and bound's callback: stops the search once it has explored more than the node
// limit and its best solution is within the gap allowed then (the node count, unlike the
// clock, is the same on every machine).
struct NodeLimit {
  long nodes;
  double gap;
};
void stop_at_node_limit(glp_tree* tree, void* info) {
  if (glp_ios_reason(tree) != GLP_ISELECT) return;
  const auto* limit = static_cast<const NodeLimit*>(info);
  int active = 0, current = 0, total = 0;
  glp_ios_tree_size(tree, &active, &current, &total);
  if (total > limit->nodes && glp_mip_status(glp_ios_get_prob(tree)) == GLP_FEAS &&
      glp_ios_mip_gap(tree) <= limit->gap) {
    glp_ios_terminate(tree);
  }
}

Solution branch_and_cut(glp_prob* g, double time_limit_s, double relative_gap,
                        NodeLimit node_limit) {
  glp_iocp mip;
  glp_init_iocp(&mip);
  configure(mip, time_limit_s);
  mip.mip_gap = relative_gap;
  if (node_limit.nodes > 0) {
    mip.cb_func = stop_at_node_limit;
    mip.cb_info = &node_limit;
  }
  Solution out;
  const int rc = glp_intopt(g, &mip);
  const int status = glp_mip_status(g);
  if ((status == GLP_OPT && rc == 0) ||
      ((status == GLP_OPT || status == GLP_FEAS) && rc == GLP_EMIPGAP)) {
    out.status = SolveStatus::kOptimal;  // or within the relative gap asked for
  } else if (status == GLP_OPT || status == GLP_FEAS) {
    out.status = SolveStatus::kFeasible;  // stopped early (time limit) with a solution
  } else if (status == GLP_NOFEAS) {
    out.status = SolveStatus::kInfeasible;
  } else {
    out.message = "glpk: branch and cut found no solution (return code " + std::to_string(rc) +
                  (rc == GLP_ETMLIM ? ", time limit reached)" : ")");
  }
  return out;
}

}  // namespace

Solution solve_glpk(const Problem& p, double time_limit_s) {
  glp_term_out(GLP_OFF);
  std::unique_ptr<glp_prob, decltype(&glp_delete_prob)> problem(glp_create_prob(),
                                                                &glp_delete_prob);
  glp_prob* g = problem.get();
  load(g, p);
  const bool mip = has_integers(p);
  Solution out = relaxation(g, time_limit_s);
  const double relaxed = glp_get_obj_val(g);
  if (out.status == SolveStatus::kOptimal && mip && relaxed >= p.cutoff) {
    out.status = SolveStatus::kCutOff;
    out.bound = relaxed;
    return out;
  }
  if (out.status == SolveStatus::kOptimal && mip)
    out = branch_and_cut(g, time_limit_s, p.relative_gap, {p.node_limit, p.node_limit_gap});
  if (out.has_values()) out.bound = relaxed;
  if (out.has_values()) {
    for (int j = 0; j < static_cast<int>(p.variables.size()); ++j) {
      out.values.push_back(mip ? glp_mip_col_val(g, j + 1) : glp_get_col_prim(g, j + 1));
    }
  }
  return out;
}

}  // namespace solver
}  // namespace hexi
