#pragma once
// The structured plan space shared by HexiScale, the `random` baseline and the
// exact search (so that "HexiScale / exact optimum" is a meaningful ratio):
//
//   * every device of the cluster is used;
//   * a pipeline is an ordered list of segments; a segment takes `count` devices of
//     one machine (a pipeline visits a machine at most once) and splits them into
//     count / tp TP groups of one degree tp (a valid degree of the model: it divides
//     the heads, and the KV heads divide it or it divides them), i.e. TP never
//     leaves a machine and degrees may differ between segments and pipelines;
//   * segments may come in any order; the stages of a segment follow each other;
//   * devices are handed out machine by machine in plan order (device ids are a
//     canonical choice: devices of one machine are interchangeable when the machine
//     has one CPU socket and no device-level link overrides);
//   * the batch split is the exact minimiser of the slowest pipeline
//     (batch_split.hpp) and each pipeline's layer split is the exact minimiser of
//     its time (pipeline_curve.hpp), both subject to memory;
//   * with per-stage recompute (the default), each stage's recompute (none /
//     selective / full) is chosen with its layers by the same exact split; a plan
//     stage names it only where it differs from the training config's.
// A point of the space (a PlanSpec) therefore determines its Plan; the Plan's
// iteration time comes from the full CostModel (pipelines + DP sync + optimizer).

#include <array>
#include <atomic>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/estimate/estimate.hpp"
#include "scheduler/plan/plan.hpp"
#include "scheduler/search/batch_split.hpp"
#include "scheduler/search/pipeline_curve.hpp"
#include "scheduler/search/shared_map.hpp"

namespace hexi {
inline namespace search {

struct MachineSegment {
  int machine = 0;
  int count = 0;  // devices taken from the machine
  int tp = 1;     // TP degree of each of its count / tp stages
  bool operator==(const MachineSegment&) const = default;
};

struct PipelineSpec {
  std::vector<MachineSegment> segments;  // pipeline order
  int num_devices() const;
  int num_stages() const;
};

struct PlanSpec {
  std::vector<PipelineSpec> pipelines;
};

// Valid TP degrees of a model up to `max_degree`, ascending (1 always included).
std::vector<int> tp_degrees(const Model& model, int max_degree);

// Whether the devices of machine m are interchangeable for the cost model.
bool machine_symmetric(const Cluster& cluster, int machine);
// Class of each machine: the lowest index of a machine it is interchangeable with.
std::vector<int> machine_classes(const Cluster& cluster);

// A plan, its estimate and the slowest pipeline time predicted by the curves.
struct ScoredPlan {
  Plan plan;
  Estimate estimate;
  double pipelines_s = 0;
  double objective() const { return estimate.feasible ? estimate.iteration_time_s : kInfeasible; }
};

// `plan` with `cm`'s estimate of it (pipelines_s: the estimate's slowest pipeline); below a
// finite `bound`, CostModel::estimate_below's (the estimate may come back `screened`).
ScoredPlan score_plan(const CostModel& cm, Plan plan,
                      double bound = std::numeric_limits<double>::infinity(),
                      CostModel::OverBound over = CostModel::OverBound::kUsed);

// Turns PlanSpecs into Plans and scores them, caching per-pipeline curves.
class SpecEvaluator {
 public:
  // `per_stage_recompute`: stages may choose their recompute (recompute_modes());
  // false: every stage runs the training config's.
  explicit SpecEvaluator(const CostModel& cm, bool per_stage_recompute = true);

  const CostModel& cost_model() const { return cm_; }
  const std::vector<Recompute>& recompute_modes() const { return modes_; }
  // The mode of the least activation memory a stage may choose (for memory bounds).
  Recompute least_memory_recompute() const;
  // TP groups of every pipeline (device ids), devices handed out in plan order.
  std::vector<std::vector<std::vector<int>>> stages(const PlanSpec& spec) const;
  // The curve of pipeline `p` of `spec` in a plan of `dp` pipelines (cached; the
  // cache may be emptied by later calls, the returned curve stays valid).
  std::shared_ptr<const PipelineCurve> curve(const PlanSpec& spec, int p, int dp);
  // Batch and layer splits: the Plan, or nullopt when it cannot fit in memory.
  std::optional<Plan> realize(const PlanSpec& spec, const std::string& scheduler);
  // The slowest pipeline time of the realized plan (kInfeasible if none), cheap.
  double pipelines_s(const PlanSpec& spec);
  // A lower bound of the realized plan's iteration time (kInfeasible if none): the largest
  // PipelineCurve::timeline_floor at the batch split realize() takes, or the DP sync's floor
  // through the NICs (dp_nic_floor) where that is later. (pipelines_s is none: the curves
  // approximate the timeline from above where sends and the fill weigh.)
  double iteration_floor_s(const PlanSpec& spec);
  // realize() then the full estimate (below `bound`: score_plan's).
  std::optional<ScoredPlan> evaluate(const PlanSpec& spec, const std::string& scheduler,
                                     double bound = std::numeric_limits<double>::infinity());
  // Where `scored`'s DP sync shows (over kAlignShare of its iteration) and pipelines of one
  // stage count split their layers differently (each pipeline's own best split): the plan
  // with the layers (and recompute) of one such pipeline imposed on every pipeline of its
  // stage count, for each of the first kAlignDonors distinct splits; the best that fits and is
  // faster than `scored`, or nullopt. Aligned layers keep a layer's DP replicas on
  // same-position stages, whose devices often share a machine; a DP sync between differently
  // split pipelines crosses the network for every layer on a boundary. (Each trial is
  // scored below the best so far: score_plan's screen.)
  std::optional<ScoredPlan> align_layers(const ScoredPlan& scored) const;
  static constexpr double kAlignShare = 0.02;
  static constexpr std::size_t kAlignDonors = 4;
  // The layer split of `scored` polished under the full estimate: one layer moved across one
  // stage boundary at a time (in every pipeline of the same stage count and split at once, so
  // DP replicas stay aligned), each move kept when the plan fits and is faster, until none
  // helps or `budget` estimates are spent (each taken off it); the result if faster than
  // `scored`, or nullopt.
  // Phase 2 splits layers exactly under the pipeline curves, which overstate sends where one
  // NIC carries a machine's forward and backward boundaries (every boundary's rate at once);
  // there the full estimate's best split differs.
  std::optional<ScoredPlan> polish_layers(const ScoredPlan& scored, long& budget) const;
  // `scored` with each pipeline's layers split to balance its stages' compute (forward,
  // backward and TP collectives) plus `send_weight` times the sends over both of a stage's
  // boundaries: the least slowest stage under memory, each stage keeping its recompute;
  // nullopt where it does not fit or changes nothing. Weight 0 leaves every send to overlap,
  // as the estimate's timeline overlaps most; the pipeline curves charge a stage each
  // boundary's send whole (weight 1); the estimate's best often lies between.
  // Below a finite `bound`: nullopt also where the balanced plan is screened (score_plan).
  std::optional<ScoredPlan> compute_balanced(
      const ScoredPlan& scored, double send_weight = 0,
      double bound = std::numeric_limits<double>::infinity()) const;

  long evaluations() const { return evaluations_; }
  // Use `other`'s caches of curves and stage terms (thread-safe; for evaluators of one
  // search, each over its own copy of the cost model).
  void share_caches(const SpecEvaluator& other) { caches_ = other.caches_; }
  // Machines that behave identically (same GPUs, links, NICs and leaf switch) share
  // a class; curves and phase-2 choices are cached by class.
  int machine_class(int machine) const { return class_of_[machine]; }
  int micro_batches() const { return cm_.training().global_batch / cm_.training().micro_batch; }

 private:
  std::vector<int> curve_key(const PlanSpec& spec, int p, int dp) const;
  // stages(spec)[p] alone.
  std::vector<std::vector<int>> stages_of(const PlanSpec& spec, int p) const;
  // stage_options() of every TP group of a pipeline, cached by machine class.
  std::vector<std::vector<StageTerms>> options(const std::vector<std::vector<int>>& groups, int dp);
  // Each boundary's send at the rate its NICs give when every boundary of the pipeline sends
  // at once, both ways (the estimate's NIC sharing, at its busiest): a machine in the middle of
  // a pipeline carries activations forward and gradients back through one NIC direction.
  // A boundary inside a machine takes the slower of its sends alone (own_send_s, own_back_s).
  void share_nics(const std::vector<std::vector<int>>& groups,
                  std::vector<std::vector<StageTerms>>& options) const;
  BatchSplit split(const PlanSpec& spec);
  // When the DP sync's rings can end at the earliest, from the bytes each machine's NICs carry:
  // a gradient piece (the embedding's and head's tables, each layer's TP-split weights) whose
  // holders lie on k >= 2 machines crosses each of their NICs with 2 (k - 1) / k of its bytes
  // each way, from when its last holder stage ends (PipelineCurve::finish_floors). `finish`
  // and `layers`: per pipeline, its stages' finish floors and layers at the batch split.
  double dp_nic_floor(const PlanSpec& spec, const std::vector<std::vector<double>>& finish,
                      const std::vector<std::vector<int>>& layers) const;

  const CostModel& cm_;
  std::vector<Recompute> modes_;  // the training config's first
  std::vector<bool> symmetric_;   // per machine
  bool all_symmetric_ = true;     // every machine
  std::vector<int> class_of_;     // per machine
  // Curves and stage terms, shared by the evaluators of a parallel search (share_caches):
  // values depend only on their keys, so which thread computed one never matters.
  struct Caches {
    SharedMap<std::vector<int>, std::shared_ptr<const PipelineCurve>> curves;
    SharedMap<std::array<int, 7>, std::vector<StageTerms>> stages;
    // A NIC-crossing boundary's transfer, by (class, size) of both groups and the flows
    // through the sender's outgoing and the receiver's incoming NIC (share_nics).
    SharedMap<std::array<int, 6>, double> crossings;
    std::atomic<long> new_curves{0};
    std::atomic<std::size_t> bytes{0};  // of the curves, as they came in (see curve())
    std::mutex recount;                 // held by the thread that recounts the bytes
  };
  std::shared_ptr<Caches> caches_ = std::make_shared<Caches>();
  long evaluations_ = 0;
};

// A plan from per-pipeline TP groups, per-pipeline layers per stage (stages with 0
// layers are left out: their GPUs idle) and micro-batches per pipeline; `recompute`
// (per pipeline and stage, empty: none given) sets the stages' "recompute".
Plan assemble_plan(const std::vector<std::vector<std::vector<int>>>& stages,
                   const std::vector<std::vector<int>>& layers,
                   const std::vector<int>& micro_batches, int micro_batch,
                   const std::string& scheduler,
                   const std::vector<std::vector<std::optional<Recompute>>>& recompute = {});

// A compact text form of a spec for logs and plan comments:
// "3 pipelines: [m0:8/tp2 m1:4/tp1] [...]".
std::string describe(const PlanSpec& spec, const Cluster& cluster);

}  // namespace search
}  // namespace hexi
