#pragma once
// The pipeline planners' quality on one scenario: HexiScale, every registered pipeline
// baseline and, on small clusters, the exact search, each through the registry
// (scheduler/scheduler.hpp) with default options and judged by the same closed form; and the
// summary of many scenarios against the quality targets, per kind of network. Run over seeded
// random clusters (random_scenarios.hpp) by bench/plan_quality.cpp and plan_quality_test.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "scenarios/scenario.hpp"
#include "scheduler/plan/plan.hpp"
#include "topologies/json_input.hpp"

namespace hexi {
inline namespace studies {

// One scheduler's answer on one scenario.
struct PlannerOutcome {
  std::string scheduler;
  std::string error;        // why the scheduler gave no plan; empty when it gave one
  bool fits = false;        // its plan fits every device's memory
  double tokens_per_s = 0;  // the closed form's, of its plan (0 without one)
  double search_time_s = 0;
  Plan plan;  // no pipelines without one

  bool feasible() const { return error.empty() && fits; }
  // tokens/s of a plan that fits, else 0.
  double feasible_tokens_per_s() const { return feasible() ? tokens_per_s : 0; }
};

struct PlanQualityOptions {
  int exact_max_gpus = 16;  // the exact search runs on clusters of at most this many GPUs
  // Called after each scheduler ran (progress for long runs).
  std::function<void(const PlannerOutcome&)> on_outcome;
};

// Every planner's outcome on one scenario.
struct ClusterQuality {
  std::uint64_t seed = 0;  // the caller's: the random scenario's seed
  std::string name;        // the scenario's
  std::string mix;         // cluster_mix (random_scenarios.hpp)
  int gpus = 0;
  std::string transport;  // the network's: "tcp", "rdma", "efa"
  double nic_GBps = 0;    // the first machine's NIC, all its NICs together
  std::string model;
  int global_batch = 0;
  int seq_len = 0;
  PlannerOutcome hexiscale;
  std::vector<PlannerOutcome> baselines;  // every pipeline baseline, in registry order
  std::optional<PlannerOutcome> exact;    // when the cluster is small enough

  // Some planner found a plan that fits.
  bool feasible() const;
  // The baseline with the most tokens/s among those whose plan fits; nullptr when none fits.
  const PlannerOutcome* best_baseline() const;
  // HexiScale's tokens/s over the best baseline's (0 when HexiScale's plan does not fit);
  // nullopt when no baseline's plan fits.
  std::optional<double> ratio_to_best_baseline() const;
  // HexiScale's tokens/s over the exact search's, where it ran and its plan fits.
  std::optional<double> ratio_to_exact() const;
};

// The pipeline baselines of the registry: every pipeline scheduler but hexiscale and exact.
std::vector<std::string> pipeline_baselines();

// Runs HexiScale, every baseline and (small clusters) the exact search on `scenario`, each
// with default options (seed 1, no time budget). A scheduler's error is its outcome's, not a
// failure of the measurement.
ClusterQuality measure_plan_quality(const Scenario& scenario, const PlanQualityOptions& options);

// The targets HexiScale is held to on feasible clusters.
struct QualityTargets {
  double every = 0.95;  // HexiScale >= every x the best baseline, on every cluster
  double most = 0.99;   // and >= most x on at least `share` of the clusters
  double share = 0.95;
  double exact = 0.97;  // HexiScale >= exact x the exact optimum, where the exact search ran
};

// The clusters of one kind of setting (the network's transport), or of all of them.
struct QualityGroup {
  std::string kind;  // "tcp", "rdma", ... or "all"
  int clusters = 0;
  int infeasible = 0;          // no planner found a plan that fits: left out of the ratios
  int only_hexiscale = 0;      // HexiScale's plan fits and no baseline's does
  std::vector<double> ratios;  // HexiScale / best baseline, where a baseline's plan fits
  // Feasible clusters where HexiScale is below targets.every x the best baseline (or its plan
  // does not fit where only the exact search's does), and at or above targets.most x (or its
  // plan alone fits).
  int below_every = 0;
  int at_least_most = 0;
  std::vector<double> exact_ratios;  // HexiScale / exact, where it ran and its plan fits
  int below_exact = 0;               // exact ratios below targets.exact

  double min_ratio() const;     // 0 without ratios
  double median_ratio() const;  // the middle one (mean of the two middle ones); 0 without
  double min_exact_ratio() const;
  double share_at_least_most() const;  // at_least_most over the feasible clusters (1 if none)
  bool meets(const QualityTargets& t) const;
};

struct QualitySummary {
  QualityTargets targets;
  std::vector<QualityGroup> groups;  // one per kind, in name order, then "all"
  bool met = false;                  // every group meets the targets
};

QualitySummary summarize_plan_quality(const std::vector<ClusterQuality>& clusters,
                                      const QualityTargets& targets);

// A plan's shape in one line: pipelines grouped by their stages' TP degrees, e.g.
// "3x[8 8] 1x[4 2 2]" (three pipelines of two TP-8 stages, one of three stages), "-" for none.
std::string plan_shape(const Plan& plan);

Json to_json(const PlannerOutcome& o);
Json to_json(const ClusterQuality& q);
Json to_json(const QualitySummary& s);

}  // namespace studies
}  // namespace hexi
