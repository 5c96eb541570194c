#pragma once
// Internals of the HexiScale search (hexiscale.hpp): the partition sweep and the
// refinement, over assignments of devices to pipelines.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "scheduler/hexiscale/hexiscale.hpp"
#include "scheduler/hexiscale/partition.hpp"
#include "scheduler/hexiscale/pipeline.hpp"

namespace hexi {
inline namespace hexiscale {

// Devices of each pipeline: machine -> how many of its GPUs.
using Assignment = std::vector<std::map<int, int>>;

// A refinement move (refine.cpp): devices of machine m1 (n1 of them) from
// pipeline p to q (q == size: a new pipeline); merge q into p; n1 of m1 in p
// against n2 of m2 in q; n1 of m1 in p left idle; or n1 idle GPUs of m1 into p.
struct Move {
  enum Kind { kTransfer, kMerge, kSwap, kIdle, kUse } kind = kTransfer;
  int p = 0, q = 0, m1 = 0, n1 = 0, m2 = 0, n2 = 0;
};
Assignment apply_move(const Assignment& a, const Move& move);

class HexiScaleSearch {
 public:
  HexiScaleSearch(SpecEvaluator& ev, const HexiScaleOptions& options, SearchClock& clock,
                  std::uint64_t seed);

  std::optional<SpecResult> run();
  // The next best distinct plans by the objective, best first (at most `keep`, set before
  // run(); 0: none kept).
  void keep_runners_up(int keep) { keep_ = keep; }
  std::vector<SpecResult> runners_up() const;
  // The best plan found that runs on every GPU (none when no such plan fits).
  const std::optional<SpecResult>& best_all_gpus() const { return best_all_gpus_; }
  // The fastest candidate with its layers split by compute (Outcome::balanced): outside the
  // search's plan space, a start for the scheduler's layer polish (none where never faster).
  const std::optional<SpecResult>& best_balanced() const { return best_balanced_; }
  // "device-level", "machine-level + device refinement" or "machine-level".
  std::string mode() const;

  // Phase 2 for every pipeline of an assignment.
  PlanSpec build(const Assignment& a) { return build(builder_, a); }
  // Builds and scores; the iteration time when it was fully evaluated and feasible
  // (kInfeasible otherwise); the best is kept.
  // Skips the full estimate when the slowest pipeline alone reaches `threshold`
  // (default: the best plan so far).
  double consider(const Assignment& a, std::optional<double> threshold = std::nullopt);
  // consider() of each assignment, evaluated in parallel against the same threshold
  // and best plan (those before the batch), then recorded in order: the outcome does
  // not depend on the number of threads. `screen`: where the shared timeline would run, a
  // candidate whose fixed point is kScreenMargin over the threshold is not estimated
  // (CostModel::estimate_below): for the refinement's moves, which only ask whether a
  // candidate beats the current plan; the sweep's and the starts' objectives rank starts
  // that need not beat the best, and stay whole.
  std::vector<double> consider_all(const std::vector<Assignment>& as,
                                   std::optional<double> threshold = std::nullopt,
                                   bool screen = false);

 private:
  // What a thread needs to evaluate candidates: its own cost model (whose caches are
  // not thread-safe), evaluator and phase-2 builder; their caches never change values.
  struct Worker {
    Worker(const CostModel& cm, const HexiScaleOptions& options, bool wide);
    CostModel cm;
    SpecEvaluator ev;
    PipelineBuilder builder;
    PipelineBuilder wide_builder;  // the wider phase 2 (device-level candidates)
  };
  // What evaluating one assignment found (evaluate() is free of side effects on the
  // search; record() applies them).
  struct Outcome {
    double slowest = kInfeasible;
    double objective = kInfeasible;
    bool estimated = false;
    std::vector<double> counted;     // tokens/s of each variant scored (0: not feasible)
    std::optional<SpecResult> best;  // its best feasible variant
    // Its best variant with the layers split by compute (kBalanceNear), where faster than
    // its own split; not in `objective` (the search's course does not see it).
    std::optional<SpecResult> balanced;
  };
  Outcome evaluate(SpecEvaluator& ev, PipelineBuilder& builder, PipelineBuilder& wide_builder,
                   const Assignment& a, double limit, double best, double best_balanced,
                   bool screen) const;
  double record(const Assignment& a, const std::string& signature, Outcome& o);
  SpecEvaluator& worker_ev(int w) { return w == 0 ? ev_ : workers_[w - 1]->ev; }
  PipelineBuilder& worker_builder(int w) { return w == 0 ? builder_ : workers_[w - 1]->builder; }
  PipelineBuilder& worker_wide_builder(int w) {
    return w == 0 ? wide_builder_ : workers_[w - 1]->wide_builder;
  }
  // Whether some pipeline takes part of a machine (a device-level candidate).
  bool splits_machines(const Assignment& a) const;
  // Whether a realized plan runs on every GPU (an assignment may hand a pipeline a segment
  // that phase 2 gives no stage).
  bool uses_every_gpu(const Plan& plan) const;
  // Phase 2 for every pipeline of an assignment.
  PlanSpec build(PipelineBuilder& builder, const Assignment& a) const;
  void sweep();  // phase 1 over D, cut modes and seeds
  // The partitions of one D; `eta`, `eta_s`: the sweep's, for the progress report.
  void try_pipelines(int d, int d_max, Eta eta, double eta_s);
  // D = 2, 3, ... pipelines on the k fastest machines of `fastest` (spread and packed
  // partitions); the best that fits is split_subset_start_.
  void try_subset(const std::vector<int>& fastest, std::size_t k);
  // The most pipelines memory allows (max_pipelines_by_memory at the least-memory recompute).
  int pipelines_by_memory() const;
  // Local search from `start`; whole machines move when `whole_machines`, else any
  // number of GPUs (and GPUs of different kinds are exchanged). Stops after `patience_cap`
  // moves in a row without improvement at most.
  void refine(Assignment start, bool whole_machines, std::size_t patience_cap = SIZE_MAX);
  std::vector<Move> neighbours(const Assignment& a, bool whole_machines) const;
  double peak_flops(const std::map<int, int>& pipeline) const;
  int threads_ = 1;
  std::vector<std::unique_ptr<Worker>> workers_;  // threads 1.. (thread 0: ev_, builder_)
  // The spec with every pipeline's segments in one common order of machine classes.
  PlanSpec aligned(const PlanSpec& spec) const;
  // Pipelines as sorted (machine class, count) lists, sorted: assignments with the
  // same signature have the same cost (machines of a class are interchangeable).
  std::string signature(const Assignment& a) const;
  double best_objective() const { return best_ ? best_->scored.objective() : kInfeasible; }

  SpecEvaluator& ev_;
  HexiScaleOptions options_;
  SearchClock& clock_;
  std::uint64_t seed_;
  PipelineBuilder builder_;
  PipelineBuilder wide_builder_;  // device-level candidates of a machine-level search
  bool per_machine_ = false;      // the sweep partitions whole machines
  bool device_seeds_ = false;     // ... and device-level seeds and refinement follow
  std::vector<Unit> units_;
  std::vector<Unit> device_units_;  // one per GPU
  std::optional<SpecResult> best_;
  std::optional<SpecResult> best_balanced_;  // the fastest Outcome::balanced
  Assignment best_assignment_;
  std::optional<SpecResult> best_all_gpus_;
  // The best `keep_ + 1` distinct assignments' plans (the best among them), by objective.
  struct Kept {
    double objective = kInfeasible;
    std::string signature;
    SpecResult result;
  };
  int keep_ = 0;
  std::vector<Kept> kept_;
  void keep(const std::string& signature, const SpecResult& result);
  std::vector<std::pair<double, Assignment>> elite_;  // best per D, for refinement starts
  using Start = std::pair<double, Assignment>;        // (objective, assignment)
  // `a` into `slot` when it fits and is better than the start there.
  static void keep_best(std::optional<Start>& slot, double objective, const Assignment& a);
  std::optional<Start> subset_start_;        // best of one pipeline / one per machine, fewer GPUs
  std::optional<Start> split_subset_start_;  // best of try_subset
  // Machine-level + device refinement: best of try_subset's slices of machines, in full.
  std::optional<Start> spread_subset_start_;
  struct Seen {
    double slowest = kInfeasible;    // slowest pipeline's curve: about the objective's floor
    double objective = kInfeasible;  // when estimated in full (else kInfeasible)
    bool estimated = false;
  };
  std::unordered_map<std::string, Seen> seen_;
};

// Assignment from a unit partition (empty parts dropped).
Assignment assignment_from_parts(const std::vector<Unit>& units, const std::vector<int>& parts);

}  // namespace hexiscale
}  // namespace hexi
