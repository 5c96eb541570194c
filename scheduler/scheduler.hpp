#pragma once
// One interface for every scheduler: a name, a scenario and options in; a Plan,
// its closed-form Estimate and how the search went out. Every scheduler's plan is
// judged by the same CostModel (scheduler/estimate/estimate.hpp), whatever it used to choose.
//
//   hexiscale   HexiScale: METIS phase 1, per-pipeline phase 2, exact batch/layer
//               splits, iterative refinement (scheduler/hexiscale/)
//   uniform     Megatron TP x PP x DP grid ignoring heterogeneity (scheduler/baselines/)
//   random      random device partitions + HexiScale's phase 2
//   flashflex   the reference implementation's choices and cost model
//   metis-like  Metis (ATC'24): type-ordered stages, uniform (dp, tp), power-of-two groups
//   amp-like    AMP (NeurIPS'22): uniform (tp, pp, dp) + layers by dynamic programming
//   exact       exhaustive search of HexiScale's plan space, <= 16 GPUs
//   (scheduler/hexiscale/exact.hpp)
//
// The sequence schedulers lay out one long sequence over a mesh of devices (context + head
// parallelism, a SequenceLayout scored by SequenceCost): HexiSeq (scheduler/hexiseq/) and its
// baselines (scheduler/baselines/sequence.hpp):
//   hexiseq, hexiseq-exact, ring, ulysses, usp, megatron-cp, hexiseq-homogeneous, round-robin

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/estimate/sequence_time.hpp"
#include "scheduler/hexiseq/hexiseq.hpp"
#include "scheduler/search/search.hpp"

namespace hexi {

struct SchedulerInfo {
  std::string name;
  std::string description;
  std::function<Result<SearchResult>(const Scenario&, const SearchOptions&)> run;
};

// All schedulers, in the order of the table above.
const std::vector<SchedulerInfo>& schedulers();
std::string scheduler_names();  // "hexiscale, uniform, ..."

using SequenceSchedulerFn = std::function<Result<HexiSeqResult>(
    const SequenceCost&, std::vector<int>, const HexiSeqOptions&)>;

struct SequenceScheduler {
  std::string name;
  std::string description;
  SequenceSchedulerFn run;
};

// hexiseq, hexiseq-exact, then the baselines above, in that order.
const std::vector<SequenceScheduler>& sequence_schedulers();
// The one named `name`; nullptr when there is none.
const SequenceScheduler* find_sequence_scheduler(std::string_view name);

// Every name, pipeline schedulers first: "hexiscale, uniform, ..., round-robin".
std::string all_scheduler_names();

// Runs scheduler `name` on the scenario. Bad name, a disconnected cluster or a
// model that fits nowhere: bad input (exit 2); the message says why.
Result<SearchResult> run_scheduler(const std::string& name, const Scenario& scenario,
                                   const SearchOptions& options);

}  // namespace hexi
