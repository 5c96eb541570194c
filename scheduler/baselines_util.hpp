#pragma once
// Pieces shared by the baselines: rounding layers, fitting them in memory,
// assembling plans, keeping the best.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/pipeline_curve.hpp"
#include "scheduler/search.hpp"

namespace hexi {

// L layers in proportion to `weight`, at least one each (largest remainder; ties
// to the first). Empty when there are more weights than layers.
std::vector<int> proportional_layers(const std::vector<double>& weight, int layers);

// Moves layers off stages that would run out of memory (with m micro-batches in
// flight as the schedule allows) onto the stage with the most room, one at a time.
// False when no such move is left.
bool fit_layers_in_memory(const std::vector<StageTerms>& terms, int m, PipelineSchedule schedule,
                          std::vector<int>& layers);

// The next number of a splitmix64 sequence (same on every platform for a seed).
std::uint64_t next_random(std::uint64_t& state);

// The best feasible plan offered so far.
class BestPlan {
 public:
  // Estimates the plan and keeps it if feasible and faster.
  void offer(Plan plan, const CostModel& cm, SearchClock& clock);
  void offer(Plan plan, Estimate estimate, SearchClock& clock);
  bool empty() const { return !plan_; }
  // The SearchResult, or the "no feasible plan" error.
  Result<SearchResult> result(const Scenario& sc, const SearchClock& clock);

 private:
  std::optional<Plan> plan_;
  Estimate estimate_;
};

}  // namespace hexi
