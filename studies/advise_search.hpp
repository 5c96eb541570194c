#pragma once
// The search behind `hexisim advise`: which mixes of machines to plan, and the Pareto front
// of tokens/s against cost among them.
//
// 1. Enumerate every combination of bought machine counts (0..max_machines per type) and
//    keep the candidates: within the budget, with at least one GPU, and with the memory
//    any plan needs (search.hpp's minimum_memory_bytes; 16 bytes per parameter for HexiSeq).
//    Costs and the tokens/s bound (bound.hpp) are sums over machines: exact and cheap.
// 2. Plan what is owned, and what is owned plus each marginal addition.
// 3. With search.prune: calibrate a prediction, plan one homogeneous reference per type
//    and take its tokens/s over its bound (phi); a mix is predicted at kappa x sum phi x
//    bound, kappa the median planned / predicted of the mixes planned so far with as many
//    machine types (mixing types costs what the per-type phi misses). Then, until
//    search.max_plans mixes are planned, plan the candidate whose prediction adds the most
//    hypervolume to the planned front in the (log cost, log tokens/s) plane (each factor of
//    cost weighs the same; below 5 % of the largest prediction counts for nothing), or,
//    every other plan when there is a throughput target, the cheapest candidate predicted
//    to reach it for less than any planned mix does (its prediction corrected by the
//    planned mix nearest in composition). A candidate whose *bound* does not exceed the
//    best tokens/s planned at its cost or less is proven dominated and never planned. The
//    search ends early when every candidate is planned or proven dominated; then the front
//    is exact (the same as planning everything). Otherwise the candidates left are "open",
//    and the most any of them could add is reported (and how many could still reach the
//    target for less).
//    A candidate with no more machines of any type than a mix that got no plan is presumed
//    to get none (less memory everywhere) and skipped.
// 4. The front: planned candidates that no other planned one beats on both cost (<=) and
//    tokens/s (>=, one of them strictly). search.simulate of its points are simulated: the
//    cheapest reaching the target first, then points spread along the front.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "studies/advise_costs.hpp"
#include "studies/advise_planner.hpp"
#include "studies/advise_request.hpp"

namespace hexi {
inline namespace studies {

// Per machine type: what one GPU adds to the bound, and to the usable memory; the memory
// any plan needs.
struct MixModel {
  std::vector<double> bound_per_gpu;         // tokens/s (bound.hpp)
  std::vector<double> usable_bytes_per_gpu;  // memory less the training config's reserve
  double memory_need_bytes = 0;
};
MixModel mix_model(const AdviseRequest& r);

struct Point {
  std::vector<int> buy;       // machines bought (or rented) per type
  std::vector<int> machines;  // owned + bought per type
  int gpus = 0;
  MixCost cost;
  double cost_axis = 0;  // capex or $/h
  double bound_tokens_per_s = 0;
  bool candidate = true;  // within max_machines and the budget
  MixPlan plan;
  PointMetrics metrics;  // when plan.ok
  std::optional<double> simulated_tokens_per_s;
  std::string simulation_note;  // why not simulated
  Json plan_json;               // front points only
  // Front points, marginal rows and the types alone: break_even against the winner's $/M
  // tokens (the lowest of the front points that buy something and reach the target, if any).
  std::optional<BreakEven> break_even;
  // Against the front (every point with a plan): on it (the same mix as a front point), or the
  // buy of the cheapest front point that costs no more and plans at least as many tokens/s.
  // Neither for a point beyond the request's limits that nothing within them matches.
  bool on_front = false;
  std::optional<std::vector<int>> dominated_by;
};

struct MarginalRow {
  Addition add;
  Point point;                    // owned + the addition
  double delta_tokens_per_s = 0;  // over what is owned alone (0 when that has no plan)
  double delta_cost = 0;          // on the cost axis
};

struct AdviseStats {
  std::int64_t combinations = 0;  // of bought machine counts
  std::int64_t over_budget = 0;
  std::int64_t no_memory = 0;  // no GPU, or too little memory for any plan
  std::int64_t candidates = 0;
  std::int64_t planned = 0;           // candidates planned
  std::int64_t dominated = 0;         // candidates proven dominated by the bound, never planned
  std::int64_t presumed_no_plan = 0;  // no more machines of any type than a mix that got
                                      // no plan: skipped
  std::int64_t open = 0;              // candidates neither planned, proven dominated nor skipped
  double open_gain = 0;               // most an open candidate could add over the front at its cost
  // Open candidates that could still reach the throughput target for less than the
  // cheapest planned mix that reaches it (their bound reaches it).
  std::int64_t target_open = 0;
  int calibration_plans = 0;
  int scheduler_runs = 0;
  bool complete = false;  // every candidate planned or proven dominated: the front is exact
};

struct AdviseResult {
  std::vector<Point> evaluated;  // planned candidates, by cost
  std::vector<int> front;        // indices into evaluated, by cost
  std::optional<Point> owned;    // what is owned, alone (when anything is)
  std::vector<MarginalRow> marginal;
  // Each machine type that may be bought, alone: the most machines of it within the limits
  // (planned whether or not the search would have; a type no count of which is a candidate:
  // its maximum, not planned, the reason as plan.error).
  std::vector<Point> alone;
  std::optional<int> cheapest_meeting_target;  // index into evaluated (a front point)
  std::vector<double> phi;                     // per type: the calibration (NaN: none)
  AdviseStats stats;
};

using ProgressFn = std::function<void(const std::string&)>;

AdviseResult run_advise(const AdviseRequest& r, const MixModel& model, MixEvaluator& evaluator,
                        const ProgressFn& progress = {});

// "+2 H100-SXM x8, +4 RTX4090 x8" ("owned only" when nothing is added).
std::string buy_label(const AdviseRequest& r, const std::vector<int>& buy);

// The whole answer for --json: request summary, front, marginal values, each type alone, search
// statistics, every planned candidate (each point: on the front, or what dominates it).
Json to_json(const AdviseRequest& r, const AdviseResult& result);

}  // namespace studies
}  // namespace hexi
