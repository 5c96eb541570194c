#include "studies/planning.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include "scheduler/hexiscale/hexiscale.hpp"
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
  lo.fold_replicas = true;  // identical pipelines once per symmetric block: the same iteration
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

namespace {

Result<SearchResult> plan_one(const std::string& name, const Scenario& sc, SearchOptions options,
                              std::optional<int> verify, const PlanningLog& log);

// What a compared scheduler's plan simulates at: from its own verification, else simulated here
// when verification runs (0 when it does not, or the plan is too large to simulate).
Result<double> simulated_for_comparison(const Scenario& sc, const SearchResult& r, bool verifying) {
  if (r.verified_chosen >= 0) return r.verified[r.verified_chosen].simulated_tokens_per_s;
  if (!verifying || !simulable(r.plan)) return 0.0;
  return simulated_tokens_per_s(sc, r.plan, 0);
}

Result<SearchResult> plan_best(const Scenario& sc, const SearchOptions& options,
                               std::optional<int> verify, const PlanningLog& log) {
  const bool verifying = verify.value_or(default_verify(sc)) > 0;
  std::vector<ComparedScheduler> compared;
  std::vector<SearchResult> results;  // per entry of `compared` (empty where it failed)
  std::optional<Error> first_error;
  const std::vector<std::string> names = best_plan_schedulers(sc.cluster.num_devices());
  std::string left_out;
  for (const std::string& name : best_plan_schedulers()) {
    if (std::find(names.begin(), names.end(), name) == names.end())
      left_out += (left_out.empty() ? "" : ", ") + name;
  }
  for (const std::string& name : names) {
    const auto start = std::chrono::steady_clock::now();
    auto r = plan_one(name, sc, options, verify, log);
    ComparedScheduler c;
    c.scheduler = name;
    if (r) {
      auto simulated = simulated_for_comparison(sc, *r, verifying);
      if (!simulated) return simulated.error();
      c.tokens_per_s = r->estimate.tokens_per_s;
      c.simulated_tokens_per_s = *simulated;
      c.gpus = r->plan.num_devices();
      c.fits = r->estimate.feasible;
    } else {
      // The scenario's own scheduler failing (its options, say) is the answer, as it would be
      // run alone; another's failure is listed.
      if (name == sc.scheduler) return r.error();
      if (!first_error) first_error = r.error();
      c.error = r.error().message;
    }
    c.search_time_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    compared.push_back(c);
    results.push_back(r ? std::move(*r) : SearchResult{});
  }
  // Simulated throughput where every plan found was simulated, else the closed form's; plans
  // that fit before those that do not; ties keep the first in registry order (HexiScale).
  bool all_simulated = true;
  for (const auto& c : compared) {
    all_simulated = all_simulated && (!c.error.empty() || c.simulated_tokens_per_s > 0);
  }
  auto score = [&](const ComparedScheduler& c) {
    return all_simulated ? c.simulated_tokens_per_s : c.tokens_per_s;
  };
  int chosen = -1, all_gpus = -1;
  const int n = static_cast<int>(compared.size());
  for (int i = 0; i < n; ++i) {
    const ComparedScheduler& c = compared[i];
    if (!c.error.empty()) continue;
    if (chosen < 0 || std::make_pair(c.fits, score(c)) >
                          std::make_pair(compared[chosen].fits, score(compared[chosen])))
      chosen = i;
  }
  if (chosen < 0) return *first_error;
  for (int i = 0; i < n; ++i) {
    const ComparedScheduler& c = compared[i];
    if (c.error.empty() && c.fits && c.gpus == sc.cluster.num_devices() &&
        (all_gpus < 0 || score(c) > score(compared[all_gpus])))
      all_gpus = i;
  }
  SearchResult out = std::move(results[chosen]);
  out.compared = std::move(compared);
  if (!left_out.empty()) {
    out.notes.push_back("best of the schedulers: " + left_out + " not run on " +
                        std::to_string(sc.cluster.num_devices()) +
                        " GPUs (their searches cost a large part of HexiScale's there)");
  }
  if (out.plan.num_devices() < sc.cluster.num_devices() && all_gpus >= 0) {
    const SearchResult& full = results[all_gpus];
    if (!out.all_gpus || full.estimate.tokens_per_s > out.all_gpus->estimate.tokens_per_s)
      out.all_gpus = EstimatedPlan{full.plan, full.estimate};
  }
  return out;
}

}  // namespace

Result<SearchResult> plan_pipeline(const std::string& name, const Scenario& sc,
                                   SearchOptions options, std::optional<int> verify,
                                   const PlanningLog& log) {
  if (name == kBestPlan) return plan_best(sc, options, verify, log);
  return plan_one(name, sc, std::move(options), verify, log);
}

namespace {

// Before a HexiScale search expected to take 10 s or more (expected_search_s): one line
// saying how long, from what, and what stops it sooner.
void log_expected_cost(const Scenario& sc, const SearchOptions& options, const PlanningLog& log) {
  auto o = read_hexiscale_options(sc);
  if (!o) return;  // the search reports it
  const int gpus = sc.cluster.num_devices();
  const auto expected = expected_search_s(gpus, *o);
  if (!expected || *expected < 10) return;
  std::string line = "hexiscale: " + std::to_string(gpus) + " GPUs: about " + fixed(*expected, 0) +
                     " s of search expected (" + fixed(kExpectedAt1024, 1) +
                     " s at 1024 GPUs on a 2-core machine, growing as GPUs^" +
                     fixed(kExpectedGrowth, 2) + "); ";
  line += options.time_budget_s > 0 && options.time_budget_s < *expected
              ? "--time-budget stops it at " + fixed(options.time_budget_s, 1) + " s"
              : "--time-budget S returns the best plan so far after S s";
  log(line);
}

Result<SearchResult> plan_one(const std::string& name, const Scenario& sc, SearchOptions options,
                              std::optional<int> verify, const PlanningLog& log) {
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
  if (name == "hexiscale" && log) log_expected_cost(sc, options, log);
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

bool faster(bool fits, double tokens_per_s, bool best_fits, double best_tokens_per_s) {
  if (fits != best_fits) return fits;
  return tokens_per_s > best_tokens_per_s * (1 + 1e-9);
}

}  // namespace

Result<SequencePlanning> plan_sequence(const Scenario& sc, const SchedulerOptions& o,
                                       const PlanningLog& log) {
  SequencePlanning out;
  std::optional<Error> first_error;
  std::string names;
  for (const char* name : kBestLayoutSchedulers) {
    names += std::string(names.empty() ? "" : ", ") + name;
    if (log) log(std::string(name) + "...");
    auto r = find_scheduler(name)->run(sc, o);
    if (!r) {
      out.rows.push_back({{"scheduler", name}, {"error", r.error().message}});
      if (!first_error) first_error = r.error();
      continue;
    }
    HexiSeqResult& h = *r->sequence;
    out.rows.push_back({{"scheduler", name},
                        {"grouping", h.grouping},
                        {"tokens_per_s", h.time.tokens_per_s},
                        {"fits", h.time.fits}});
    if (!out.layout || faster(h.time.fits, h.time.tokens_per_s, out.layout->time.fits,
                              out.layout->time.tokens_per_s)) {
      out.layout = std::move(h);
      out.layout_scheduler = name;
    }
  }
  if (sc.training.global_batch > 1) {
    names += " and pipelines of meshes";
    if (log) log("pipelines of meshes...");
    auto r = run_scheduler("mesh-pipeline", sc, o);
    if (r) {
      out.pipeline = std::move(*r->hybrid);
      out.rows.push_back({{"scheduler", "mesh-pipeline"},
                          {"stages", out.pipeline->plan.pipelines.front().stages.size()},
                          {"tokens_per_s", out.pipeline->estimate.tokens_per_s},
                          {"fits", out.pipeline->estimate.feasible}});
    } else {
      out.rows.push_back({{"scheduler", "mesh-pipeline"}, {"error", r.error().message}});
    }
  }
  if (!out.layout && !out.pipeline) return *first_error;
  const bool pipelined =
      out.pipeline &&
      (!out.layout || faster(out.pipeline->estimate.feasible, out.pipeline->estimate.tokens_per_s,
                             out.layout->time.fits, out.layout->time.tokens_per_s));
  if (pipelined) {
    out.layout.reset();
    out.layout_scheduler.clear();
  } else {
    out.pipeline.reset();
  }
  const double tps =
      pipelined ? out.pipeline->estimate.tokens_per_s : out.layout->time.tokens_per_s;
  out.line = "best of " + names + ": " +
             (pipelined ? std::string("a pipeline of meshes") : out.layout_scheduler) + ", " +
             fixed(tps, 0) + " tokens/s";
  if (out.rows.front().contains("tokens_per_s") &&
      (pipelined || out.layout_scheduler != "hexiseq")) {
    out.line +=
        " (hexiseq: " + fixed(out.rows.front()["tokens_per_s"].get<double>(), 0) + " tokens/s)";
  }
  return out;
}

}  // namespace studies
}  // namespace hexi
