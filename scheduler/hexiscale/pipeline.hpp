#pragma once
// HexiScale phase 2: build one pipeline from the devices phase 1 gave it.
//   (i)   secondary partition into high-bandwidth groups: the pipeline's devices on
//         one machine (TP never leaves a machine; machines are the groups whose
//         internal links are faster than the network between them);
//   (ii)  a TP degree per group (uneven across groups and pipelines), and the
//         stages it yields (count / tp groups of tp GPUs);
//   (iii) the order of the groups: a top-tau greedy over the inter-group bandwidth
//         that maximises the bottleneck link between consecutive stages (all
//         orders when there are at most 5 groups);
// each choice scored by the pipeline's exact time (pipeline_curve.hpp) at its
// expected micro-batch count, by coordinate descent over (ii) and (iii) from the
// largest degrees; pipelines of at most 8 groups also start from each degree on
// every group, and try a degree change at every position of the group (a stage's
// position sets its in-flight micro-batches and so its memory). HexiScale turns
// that wider search off where it partitions whole machines (> 64 GPUs).
// Layers per stage (minimising the slowest stage subject to memory) come with the
// curve. Results are cached per composition (the machines and their counts).

#include <memory>
#include <vector>

#include "scheduler/hexiscale/partition.hpp"
#include "scheduler/search/plan_space.hpp"
#include "scheduler/search/shared_map.hpp"

namespace hexi {
inline namespace hexiscale {

class PipelineBuilder {
 public:
  PipelineBuilder(SpecEvaluator& evaluator, int tau);

  // The best pipeline over these devices (units of one machine are merged) for a
  // plan of `dp` pipelines in which it runs about `micro_batches` micro-batches.
  PipelineSpec build(const std::vector<Unit>& devices, int dp, int micro_batches);

  long evaluations() const { return evaluations_; }
  // The wider search for pipelines of at most 8 groups (see above); on by default.
  void set_wide(bool wide) { wide_ = wide; }
  // Use `other`'s cache of answers (thread-safe; both must have the same settings).
  void share_cache(const PipelineBuilder& other) { cache_ = other.cache_; }

 private:
  // The pipeline's penalised time; at or above `limit` possibly a lower bound of it.
  double score(const PipelineSpec& p, int dp, int m, double limit = kInfeasible);
  // Valid until the next call.
  const std::vector<std::vector<int>>& candidate_orders(const std::vector<MachineSegment>& segs);
  PipelineSpec optimise(std::vector<MachineSegment> segs, int dp, int m);
  // Coordinate descent over degrees (small pipelines: each at every place) and
  // orders from `segs`; `score` gets the best score.
  std::vector<MachineSegment> descend(std::vector<MachineSegment> segs, int dp, int m,
                                      double& score);

  SpecEvaluator& ev_;
  int tau_ = 3;
  bool wide_ = true;
  // By (dp, m, machines, counts); shared by the builders of a parallel search.
  using Cache = SharedMap<std::vector<int>, std::vector<MachineSegment>>;
  std::shared_ptr<Cache> cache_ = std::make_shared<Cache>();
  long evaluations_ = 0;
  std::vector<std::vector<int>> beam_orders_;  // candidate_orders() of more than 5 groups
  PlanSpec one_;                               // score(): the pipeline as a plan of its own
};

// Valid TP degrees for a segment of `count` devices (degree divides count).
std::vector<int> segment_degrees(const Model& model, int count);

}  // namespace hexiscale
}  // namespace hexi
