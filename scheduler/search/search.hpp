#pragma once
// What every search shares: options in; a Plan, its closed-form Estimate and how the
// search went out (SearchResult); progress reports and the SearchClock; the checks every
// scheduler runs first. The schedulers themselves are listed in scheduler/scheduler.hpp.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "scenarios/scenario.hpp"
#include "scheduler/estimate/estimate.hpp"
#include "scheduler/plan/plan.hpp"
#include "topologies/status.hpp"

namespace hexi {
inline namespace search {

// A point of the convergence trace: the best so far after some work.
struct TracePoint {
  double time_s = 0;        // since the search started
  long candidates = 0;      // plans evaluated so far
  double tokens_per_s = 0;  // of the best plan so far
};

// What a progress report's eta_s is: none, the remaining share at the pace so far, a lower
// bound (a search that stops when no move improves knows how many moves that takes at the
// least, not whether one will improve), or the time budget's end (the latest it stops).
enum class Eta { kNone, kEstimate, kAtLeast, kBudget };

struct SearchProgress {
  std::string scheduler;
  std::string phase;  // what it is doing, e.g. "D=4 seed 2"
  double elapsed_s = 0;
  long candidates = 0;
  double best_tokens_per_s = 0;  // 0 while nothing feasible was found
  double eta_s = 0;              // seconds left, read as `eta` says
  Eta eta = Eta::kNone;
};

// Time and candidates of one named phase of a search (SearchClock::begin).
struct PhaseTime {
  std::string name;
  double time_s = 0;
  long candidates = 0;
};

struct SearchOptions {
  std::uint64_t seed = 1;
  double time_budget_s = 0;  // 0: no budget (stop on convergence; deterministic)
  // How many runner-up plans to keep besides the best (distinct, best closed form first),
  // for a caller that re-ranks them with the simulator (SearchResult::runners_up). Searches
  // that keep none ignore it.
  int runners_up = 0;
  // Called now and then during long searches (the CLI prints it on stderr): at most once per
  // progress_interval_s.
  std::function<void(const SearchProgress&)> progress;
  double progress_interval_s = 1.0;
};

// A plan with its closed-form estimate.
struct EstimatedPlan {
  Plan plan;
  Estimate estimate;
};

// One plan a verification simulated (studies/planning.hpp): its rank by the closed form (0: the
// search's best) and both throughputs.
struct VerifiedPlan {
  int rank = 0;
  double estimate_tokens_per_s = 0;
  double simulated_tokens_per_s = 0;
};

// One scheduler the planning call ran when it compared several (studies/planning.hpp).
struct ComparedScheduler {
  std::string scheduler;
  std::string error;                  // why it returned no plan (empty: it did)
  double tokens_per_s = 0;            // its plan's closed form
  double simulated_tokens_per_s = 0;  // its plan simulated (0: not simulated)
  int gpus = 0;                       // GPUs its plan runs on
  double search_time_s = 0;           // its search and verification
  bool fits = false;
};

struct SearchResult {
  std::string scheduler;
  Plan plan;
  Estimate estimate;
  // The next best plans by the closed form (SearchOptions::runners_up of them at most).
  std::vector<EstimatedPlan> runners_up;
  // Where `plan` leaves GPUs idle: the best plan the search found that runs on every GPU
  // (empty when it found none, or keeps no such record).
  std::optional<EstimatedPlan> all_gpus;
  // When the planning call compared schedulers: each one's outcome, in the order run
  // (`scheduler` names the one returned); empty when one scheduler ran alone.
  std::vector<ComparedScheduler> compared;
  // When the plans were re-ranked with the simulator: each plan simulated, the one returned
  // (index into `verified`) and at which fidelity; empty when not verified.
  std::vector<VerifiedPlan> verified;
  int verified_chosen = -1;
  std::string verified_fidelity;
  double verify_time_s = 0;
  double search_time_s = 0;
  long candidates = 0;               // plans (or pipeline structures) evaluated
  bool budget_exhausted = false;     // stopped by the time budget, not by convergence
  long candidates_after_budget = 0;  // evaluated once the search saw its budget spent
  std::vector<TracePoint> trace;     // improvements of the best plan
  std::vector<std::string> notes;    // what the scheduler wants the user to know
  std::string mode;                  // how it searched, e.g. "device-level" (may be empty)
  std::vector<PhaseTime> phases;     // in order; empty when the search has no phases

  // Why it stopped: "budget" (the time budget cut it short) or "converged".
  std::string stop_reason() const { return budget_exhausted ? "budget" : "converged"; }
  // One line: scheduler, mode, candidates, time per phase, why it stopped.
  std::string summary() const;
  // {scheduler, search_time_s, candidates (the schedulers compared, or this one), ..., trace,
  // search: {mode, candidates (plans evaluated), phases, stopped}}
  Json to_json() const;
};

// Bytes any plan needs at least, besides the per-GPU reserve: every parameter once with
// its 16 bytes of mixed-precision Adam state (no ZeRO saving with one replica), one
// micro-batch of activations through every layer (under full recompute, which a plan may
// give every stage), and the logits.
double minimum_memory_bytes(const Model& m, const TrainingConfig& t);

// Checks shared by all schedulers: the cluster is connected and the model can fit
// in the cluster's memory at all (message: memory needed vs available).
Status check_schedulable(const Scenario& scenario);

// Bookkeeping for searches: elapsed time, budget, candidates, trace, progress.
class SearchClock {
 public:
  SearchClock(std::string scheduler, const SearchOptions& options);
  const std::string& name() const { return scheduler_; }
  double elapsed_s() const;
  bool out_of_time() const;  // budget set and spent
  // Records an evaluated candidate; `tokens_per_s` > best so far adds a trace point.
  void count(double tokens_per_s = 0);
  // Progress report, at most one per options.progress_interval_s, with the caller's ETA (as
  // SearchProgress's; the time budget's end replaces one that is unknown or later).
  void phase(const std::string& what, Eta eta = Eta::kNone, double eta_s = 0);
  // Seconds since the last begin() (since the start before any).
  double phase_elapsed_s() const;
  // Starts a named phase of the search (ends the previous one); finish() reports each
  // phase's time and candidates. Phases of the same name are summed.
  void begin(const std::string& phase);
  long candidates() const { return candidates_; }
  const std::vector<TracePoint>& trace() const { return trace_; }
  void finish(SearchResult& result) const;  // fills time, candidates, trace, budget flag

 private:
  std::string scheduler_;
  const SearchOptions& options_;
  std::chrono::steady_clock::time_point start_;
  double last_report_s_ = 0;
  long candidates_ = 0;
  double best_ = 0;
  mutable bool stopped_by_budget_ = false;
  mutable long candidates_at_budget_ = 0;  // candidates when the budget was first seen spent
  std::vector<TracePoint> trace_;
  struct PhaseStart {
    std::string name;
    double at_s = 0;
    long candidates = 0;
  };
  std::vector<PhaseStart> phase_starts_;
};

}  // namespace search
}  // namespace hexi
