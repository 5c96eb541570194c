#pragma once
// Planning one mix of machines: the cluster `cluster gen` would build for it
// (topologies/cluster_gen.hpp), planned by HexiScale (the function behind `hexisim plan`)
// or, for long sequences, HexiSeq (behind `hexisim seq`), and scored by the closed form.
//
// Mixes of more than search.plan_gpus GPUs are planned in groups: k equal groups of
// floor(machines / k) of each type, planned once by HexiScale (cached across mixes), plus
// the remainder as one more group (planned the same way) when it holds the model with room
// to spare, else added to the last group; k = ceil(GPUs / plan_gpus) or one more (both
// tried, the better kept), fewer when a group would not hold the model. The pipelines of
// all groups are put together, the global batch split over the groups in proportion to
// their tokens/s, and the whole plan checked and scored on the whole cluster
// (validate_plan, CostModel::estimate). Equal groups give pipelines that line up stage by
// stage for the DP sync; where a remainder's do not, the simulator finds the DP sync slower
// than the closed form does (NOTES-advise.md). HexiScale on a whole 1 024-GPU mix takes
// 30-50 s; the groups take about a second and plan within a few percent of it. HexiSeq
// plans the whole mix.
//
// MixEvaluator is the seam: the search (search.hpp) sees only it, tests give it fakes.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/plan/plan.hpp"
#include "studies/advise_request.hpp"
#include "topologies/cluster.hpp"
#include "topologies/profile.hpp"

namespace hexi {
inline namespace studies {

struct MixPlan {
  bool ok = false;
  std::string error;        // why there is no plan (when !ok)
  double tokens_per_s = 0;  // closed form
  std::string summary;      // short: pipelines, stages, TP degrees (or sequence groups)
  int groups = 1;           // planned as this many groups
  int scheduler_runs = 0;   // HexiScale / HexiSeq runs it took (0: all from the cache)
};

class MixEvaluator {
 public:
  virtual ~MixEvaluator() = default;
  // Plans the mix of `machines` machines per type (owned and bought together).
  virtual MixPlan plan(const std::vector<int>& machines) = 0;
  // The plan plan() found, as JSON (a plan file, or {"sequence": layout} for HexiSeq).
  virtual Json plan_json(const std::vector<int>& machines) = 0;
  // SimGrid's tokens/s for that plan, or why it was not simulated.
  virtual Result<double> simulate(const std::vector<int>& machines) = 0;
};

class MixPlanner : public MixEvaluator {
 public:
  MixPlanner(const AdviseRequest& request, const GpuCatalog& catalog);
  ~MixPlanner() override;

  MixPlan plan(const std::vector<int>& machines) override;
  Json plan_json(const std::vector<int>& machines) override;
  Result<double> simulate(const std::vector<int>& machines) override;

  // The cluster of a mix (machines per type, in type order), as `cluster gen` builds it.
  Result<Cluster> cluster(const std::vector<int>& machines) const;
  // Bad input when search.scheduler_options are not HexiScale's.
  Status check_options() const;

 private:
  struct Planned;  // a mix's plan, layout and result
  struct Group;    // a planned group
  Planned plan_whole(const std::vector<int>& machines, int micro_batches) const;
  // A mix planned by HexiScale when small enough, else in parts (cached either way).
  const Group& plan_part(const std::vector<int>& machines, int micro_batches);
  Group combine(const std::vector<int>& machines, const std::vector<std::vector<int>>& parts,
                int micro_batches);
  // combine's steps: each part planned for its share of the batch by peak FLOP/s; the parts'
  // pipelines placed on the whole cluster with `share[j]` micro-batches for part j.
  Result<std::vector<const Group*>> plan_parts(const std::vector<std::vector<int>>& parts,
                                               int micro_batches, const std::vector<double>& peak);
  Result<Plan> place_parts(const std::vector<int>& machines, const Cluster& whole,
                           const std::vector<std::vector<int>>& parts,
                           const std::vector<const Group*>& planned, const std::vector<int>& share,
                           int micro_batch) const;

  const AdviseRequest& request_;
  const GpuCatalog& catalog_;
  Profile profile_;
  std::map<std::vector<int>, std::unique_ptr<Planned>> mixes_;
  std::map<std::pair<std::vector<int>, int>, std::unique_ptr<Group>> groups_;
  int runs_ = 0;  // scheduler runs since the last plan() began
};

// "24 pipelines x 3-5 stages, TP 1/2/8, full recompute on 6 stages".
std::string plan_summary(const Plan& plan, const TrainingConfig& training);

}  // namespace studies
}  // namespace hexi
