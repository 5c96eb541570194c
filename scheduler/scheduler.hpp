#pragma once
// The one registry of every scheduler, with one call shape: a name, a scenario and options
// in; the plan document and its closed-form estimate out. Every list of scheduler names (the
// CLI's errors and --help, sweep axes, reproduce, benchmarks) comes from here.
//
// Pipeline schedulers: a Plan of pipelines of TP stages, judged by the same CostModel
// (scheduler/estimate/estimate.hpp) whatever they used to choose.
//   hexiscale   HexiScale: METIS phase 1, per-pipeline phase 2, exact batch/layer
//               splits, iterative refinement (scheduler/hexiscale/)
//   uniform     Megatron TP x PP x DP grid ignoring heterogeneity (scheduler/baselines/)
//   random      random device partitions + HexiScale's phase 2
//   flashflex   the reference implementation's choices and cost model
//   metis-like  Metis (ATC'24): type-ordered stages, uniform (dp, tp), power-of-two groups
//   amp-like    AMP (NeurIPS'22): uniform (tp, pp, dp) + layers by dynamic programming
//   exact       exhaustive search of HexiScale's plan space, <= 16 GPUs (32 under a budget)
//               (scheduler/hexiscale/exact.hpp)
// Sequence schedulers: one long sequence laid out over a mesh of every device (context + head
// parallelism: a SequenceLayout scored by SequenceCost, scheduler/estimate/sequence_time.hpp):
// HexiSeq (scheduler/hexiseq/) and its baselines (scheduler/baselines/sequence.hpp):
//   hexiseq, hexiseq-exact, ring, ulysses, usp, megatron-cp, hexiseq-homogeneous, round-robin
// Hybrid schedulers: a Plan whose stages are sequence meshes:
//   mesh-pipeline  pipelines of HexiSeq meshes (scheduler/hexiseq/mesh_pipeline.hpp)

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "scenarios/scenario.hpp"
#include "scheduler/estimate/sequence_time.hpp"
#include "scheduler/hexiseq/hexiseq.hpp"
#include "scheduler/hexiseq/mesh_pipeline.hpp"
#include "scheduler/plan/plan_file.hpp"
#include "scheduler/search/search.hpp"
#include "topologies/enum_names.hpp"

namespace hexi {

enum class SchedulerKind { kPipeline, kSequence, kHybrid };
inline constexpr auto kSchedulerKindNames =
    enum_names<SchedulerKind>({{SchedulerKind::kPipeline, "pipeline"},
                               {SchedulerKind::kSequence, "sequence"},
                               {SchedulerKind::kHybrid, "hybrid"}});

// Every scheduler's options; each reads those of its kind.
struct SchedulerOptions {
  SearchOptions search;     // pipeline schedulers
  HexiSeqOptions sequence;  // sequence schedulers, and each mesh of a hybrid one
  int max_stages = 0;       // mesh-pipeline: at most this many stages (0: one per machine)
};

// What a scheduler returns: the plan document (a pipeline plan, or a sequence layout), its
// closed-form estimate, and the account of the search that found it (one of the three, by
// kind).
struct Scheduled {
  std::string scheduler;
  SchedulerKind kind = SchedulerKind::kPipeline;
  PlanFile document;
  double iteration_time_s = 0;  // the closed form's
  double tokens_per_s = 0;
  bool fits = true;  // every device within its memory
  double search_time_s = 0;
  std::optional<SearchResult> pipeline;
  std::optional<HexiSeqResult> sequence;
  std::optional<MeshPipelineResult> hybrid;
};

struct SchedulerInfo {
  std::string name;
  std::string description;
  SchedulerKind kind = SchedulerKind::kPipeline;
  std::function<Result<Scheduled>(const Scenario&, const SchedulerOptions&)> run;
  // Run by the default planning call (kBestPlan): HexiScale and every baseline but the
  // exhaustive one, each up to `best_max_gpus` GPUs (0: any), above which its search costs a
  // large part of HexiScale's.
  bool in_best = false;
  int best_max_gpus = 0;
};

// The name that asks the planning call (studies/planning.hpp) for the best plan of every
// scheduler marked in_best, each verified, rather than one scheduler's.
inline constexpr std::string_view kBestPlan = "best";

// Every scheduler: the pipeline ones in the order of the table above, then the sequence
// ones, then the hybrid one.
const std::vector<SchedulerInfo>& schedulers();
// The one named `name`; nullptr when there is none.
const SchedulerInfo* find_scheduler(std::string_view name);
// "hexiscale, uniform, ...": the names of one kind, or every name.
std::string scheduler_names(std::optional<SchedulerKind> kind = std::nullopt);
// The schedulers marked in_best that run on a cluster of `gpus` GPUs (0: every one marked),
// in registry order.
std::vector<std::string> best_plan_schedulers(int gpus = 0);

// The ZeRO stage mesh-pipeline plans under: pipeline plans model ZeRO 0 and 1, so with the
// sequence options' zero_stages a higher training stage is lowered to 1.
int mesh_pipeline_zero_stage(const TrainingConfig& training, const HexiSeqOptions& options);

// Runs scheduler `name` on the scenario. Bad name, a disconnected cluster or a model that
// fits nowhere: bad input (exit 2); the message says why.
Result<Scheduled> run_scheduler(const std::string& name, const Scenario& scenario,
                                const SchedulerOptions& options);

// The same for a pipeline scheduler, its search's account out (`hexisim plan`, `simulate`,
// the tests): bad input naming the command for a scheduler of another kind.
Result<SearchResult> run_pipeline_scheduler(const std::string& name, const Scenario& scenario,
                                            const SearchOptions& options);

}  // namespace hexi
