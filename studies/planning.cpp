#include "studies/planning.hpp"

#include <chrono>
#include <utility>

#include "scheduler/program/lower.hpp"
#include "scheduler/scheduler.hpp"
#include "topologies/text.hpp"

namespace hexi {
inline namespace studies {

int default_verify(const Scenario& scenario) {
  if (scenario.cluster.num_devices() > kVerifyMaxGpus) return 0;
  if (!check_program_size(scenario.model, scenario.training, Granularity::kStage, "")) return 0;
  return kDefaultVerify;
}

Result<SimReport> simulate_untraced(const Scenario& sc, const Result<Program>& program) {
  if (!program) return program.error();
  SimOptions so;
  so.scenario = sc.name;
  so.trace = false;
  auto out = simulate(*program, sc.cluster, sc.model, sc.training, sc.profile, so);
  if (!out) return out.error();
  return std::move(out->report);
}

namespace {

Result<double> simulated_tokens_per_s(const Scenario& sc, const Plan& plan, int rank) {
  LowerOptions lo;
  lo.scenario = sc.name;
  lo.granularity = Granularity::kStage;
  auto report =
      simulate_untraced(sc, lower_plan(plan, sc.cluster, sc.model, sc.training, lo,
                                       "plan of closed-form rank " + std::to_string(rank)));
  if (!report) return report.error();
  return report->tokens_per_s;
}

// Whether the plan's program at stage fidelity is within what the lowering materialises.
bool simulable(const Plan& plan) {
  return min_compute_ops(plan, Granularity::kStage) <= kMaxProgramComputeOps;
}

std::string too_large_note(const Plan& plan, const std::string& which) {
  return "verify: " + which + " lowers to at least " +
         format("%.3g", min_compute_ops(plan, Granularity::kStage)) +
         " compute ops at stage fidelity, over the " + format("%.3g", kMaxProgramComputeOps) +
         " a simulated program holds: ";
}

}  // namespace

Status verify_with_simulator(const Scenario& sc, SearchResult& r, const PlanningLog& log) {
  if (r.runners_up.empty()) return {};
  const auto start = std::chrono::steady_clock::now();
  const int n = static_cast<int>(r.runners_up.size()) + 1;
  // Plans the simulator cannot take are not re-ranked; without the closed form's best there
  // is nothing to compare with.
  if (!simulable(r.plan)) {
    r.notes.push_back(too_large_note(r.plan, "the closed form's best plan") +
                      "returned without verification");
    r.runners_up.clear();
    return {};
  }
  if (log) {
    log("verifying the " + std::to_string(n) +
        " best plans by the closed form with the simulator (stage fidelity)...");
  }
  r.verified.clear();
  int chosen = 0, skipped = 0;  // chosen: index into r.verified
  for (int rank = 0; rank < n; ++rank) {
    const EstimatedPlan* p = rank == 0 ? nullptr : &r.runners_up[rank - 1];
    if (p && !simulable(p->plan)) {
      ++skipped;
      continue;
    }
    auto tokens = simulated_tokens_per_s(sc, p ? p->plan : r.plan, rank);
    if (!tokens) return tokens.error();
    r.verified.push_back({rank, (p ? p->estimate : r.estimate).tokens_per_s, *tokens});
    if (*tokens > r.verified[chosen].simulated_tokens_per_s)
      chosen = static_cast<int>(r.verified.size()) - 1;
  }
  if (skipped > 0) {
    r.notes.push_back("verify: " + std::to_string(skipped) + " of the " + std::to_string(n - 1) +
                      " runners-up lower to more than the " +
                      format("%.3g", kMaxProgramComputeOps) +
                      " compute ops a simulated program holds and were not simulated");
  }
  r.verified_chosen = chosen;
  r.verified_fidelity = "stage";
  if (const int rank = r.verified[chosen].rank; rank > 0) {
    const VerifiedPlan &was = r.verified[0], &now = r.verified[chosen];
    r.notes.push_back(
        "verify: the closed form's plan " + std::to_string(rank + 1) + " of " + std::to_string(n) +
        " simulates fastest (" + fixed(now.simulated_tokens_per_s, 0) + " tokens/s against " +
        fixed(was.simulated_tokens_per_s, 0) + " for the closed form's best) and is returned");
    std::swap(r.plan, r.runners_up[rank - 1].plan);
    std::swap(r.estimate, r.runners_up[rank - 1].estimate);
  }
  r.runners_up.clear();
  r.verify_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {};
}

Result<SearchResult> plan_pipeline(const std::string& name, const Scenario& sc,
                                   SearchOptions options, std::optional<int> verify,
                                   const PlanningLog& log) {
  // A verification no plan's program allows is refused when asked for, skipped with a note
  // by default, before the search either way.
  if (verify && *verify > 0) {
    if (auto st = check_program_size(sc.model, sc.training, Granularity::kStage,
                                     "--verify " + std::to_string(*verify));
        !st) {
      return st.error();
    }
  }
  options.runners_up = verify.value_or(default_verify(sc));
  auto r = run_pipeline_scheduler(name, sc, options);
  if (!r) return r.error();
  if (log) log(r->summary());  // what the search did, in one line
  if (!verify && sc.cluster.num_devices() <= kVerifyMaxGpus) {
    if (auto st = check_program_size(sc.model, sc.training, Granularity::kStage, "verify: not run");
        !st) {
      r->notes.push_back(st.error().message);
    }
  }
  if (auto st = verify_with_simulator(sc, *r, log); !st) return st.error();
  return r;
}

}  // namespace studies
}  // namespace hexi
