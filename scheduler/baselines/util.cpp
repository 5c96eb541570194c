#include "scheduler/baselines/util.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "scheduler/hexiscale/hexiscale.hpp"

namespace hexi {
inline namespace baselines {

bool fit_layers_in_memory(const std::vector<StageTerms>& terms, int m, PipelineSchedule schedule,
                          std::vector<int>& layers) {
  const int k = static_cast<int>(terms.size());
  auto room = [&](int i, int l) {
    return terms[i].capacity_bytes - terms[i].memory(l, in_flight_micro_batches(schedule, i, k, m));
  };
  for (int guard = 0; guard < 100000; ++guard) {
    int over = -1;
    for (int i = 0; i < k && over < 0; ++i) {
      if (room(i, layers[i]) < 0) over = i;
    }
    if (over < 0) return true;
    int to = -1;
    double most = 0;
    for (int j = 0; j < k; ++j) {
      const double r = room(j, layers[j] + 1);
      if (j != over && r >= 0 && (to < 0 || r > most)) {
        to = j;
        most = r;
      }
    }
    if (to < 0 || layers[over] <= 1) return false;
    --layers[over];
    ++layers[to];
  }
  return false;
}

void BestPlan::offer(Plan plan, const CostModel& cm, SearchClock& clock) {
  Estimate e = cm.estimate(plan);
  offer(std::move(plan), std::move(e), clock);
}

void BestPlan::offer(Plan plan, Estimate e, SearchClock& clock) {
  clock.count(e.feasible ? e.tokens_per_s : 0);
  if (!e.feasible) return;
  if (plan_ && !(e.iteration_time_s < estimate_.iteration_time_s)) return;
  plan_ = std::move(plan);
  estimate_ = std::move(e);
}

Result<SearchResult> BestPlan::result(const Scenario& sc, const SearchClock& clock) {
  if (!plan_) return no_feasible_plan(sc, clock.name());
  SearchResult out;
  out.plan = std::move(*plan_);
  out.estimate = std::move(estimate_);
  clock.finish(out);
  return out;
}

}  // namespace baselines
}  // namespace hexi
