#pragma once
// Pieces shared by the baselines: rounding layers, fitting them in memory,
// assembling plans, keeping the best.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/search/batch_split.hpp"
#include "scheduler/search/pipeline_curve.hpp"
#include "scheduler/search/random.hpp"
#include "scheduler/search/search.hpp"

namespace hexi {
inline namespace baselines {

// Moves layers off stages that would run out of memory (with m micro-batches in
// flight as the schedule allows) onto the stage with the most room, one at a time.
// False when no such move is left.
bool fit_layers_in_memory(const std::vector<StageTerms>& terms, int m, PipelineSchedule schedule,
                          std::vector<int>& layers);

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

}  // namespace baselines
}  // namespace hexi
