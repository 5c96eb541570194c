#pragma once
// One pipeline's iteration time as a function of its micro-batch count m, for a
// fixed ordered list of TP groups, with the layer split that minimises it.
//
// Under the cost model (estimate.hpp) a stage's forward + backward time per
// micro-batch is linear in its layer count l: t_i(l) = l * c_i + e_i (c_i: one
// layer's compute and TP collectives; e_i: embedding / head), its send time C_i
// does not depend on l, and its per-device memory is linear in l for a given
// number of in-flight micro-batches. The estimate runs the schedule's timeline
// (scheduler/cost/schedule.hpp), whose steady-state period lambda is the worst mean of
// (F + B) and boundary round trips over windows of stages; the curve uses its upper
// bound max_i (t_i + C_{i-1} + C_i) (tight for one slow boundary between equal
// stages), linear in l_i, so that the split stays exactly solvable:
//   T(m) = sum_i t_i(l_i) + 2 sum_i C_i + (m - 1) * max_i (t_i(l_i) + C_{i-1} + C_i)
// and the split {l_i >= 1, sum l_i = L, memory_i(l_i) <= capacity_i} minimising it
// is found exactly: for a bound B on the slowest stage, the smallest sum puts
// layers on the cheapest stages first up to min(cap_i, (B - e_i) / c_i); the
// optimum is at the smallest feasible B or at one of the larger breakpoints
// where the smaller sum still pays for the (m - 1)-weighted larger bound.
// T(m) is within a few per cent of CostModel::estimate's pipeline time for the same
// plan (tested; at least it, where boundaries do not share NICs);
// memory caps keep a margin of 1e-9 of capacity against rounding.
//
// Per-stage recompute: a stage may come with several options (its terms under
// recompute none / selective / full: full recompute costs one more forward per
// layer but keeps only the layer input, so the stage holds more layers). The
// cheapest option that fits l layers gives the stage's time g_i(l), nondecreasing
// in l but no longer linear (it jumps where an option runs out of memory), so for
// a bound B the smallest sum is a dynamic program over stages and layers (each
// option's range of l a sliding-window minimum: O(stages x options x L)); the
// smallest feasible bound is still the greedy over g_i, and the larger bounds are
// the options' breakpoints, as above. Options that cannot help at a bound (another
// is no slower and holds at least as many layers) are dropped first; when every
// stage is left with one, the greedy fill above is used unchanged.

#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "scheduler/estimate/estimate.hpp"

namespace hexi {
inline namespace search {

constexpr double kInfeasible = std::numeric_limits<double>::infinity();

// What a stage contributes, per micro-batch (from CostModel, see stage_terms()).
struct StageTerms {
  Recompute recompute = Recompute::kSelective;  // the stage's recompute these terms assume
  double per_layer_s = 0;  // c_i: forward + backward + TP collectives of one layer
  double fixed_s = 0;      // e_i: embedding (first) / head (last) and their collectives
  double send_s = 0;       // C_i: activation to the next stage (0 for the last)
  // The activation's and the gradient's transfers to and from the next stage, each alone (no
  // other flow on its NICs; send_s may be more): lower bounds, for timeline_floor. The
  // gradient's is filled by SpecEvaluator (elsewhere 0: a weaker bound).
  double own_send_s = 0, own_back_s = 0;
  double boundary_s = 0;  // D_i = C_{i-1} + C_i: set by PipelineCurve from the neighbours
  // Memory of the tightest device: bytes = base + f*base_f + l*(slope + f*slope_f)
  // with f micro-batches in flight and l layers (linear in both, cost_model.hpp).
  double mem_base = 0, mem_base_f = 0, mem_slope = 0, mem_slope_f = 0;
  double capacity_bytes = 0;

  double memory(int layers, int in_flight) const {
    return mem_base + in_flight * mem_base_f + layers * (mem_slope + in_flight * mem_slope_f);
  }
};

// Terms of the TP group `devices` at a pipeline position (first / last), sending
// to `next` (nullptr for the last stage), in a plan of `dp` pipelines, under
// recompute `r` (default: the training config's).
StageTerms stage_terms(const CostModel& cm, const std::vector<int>& devices, bool first, bool last,
                       const std::vector<int>* next, int dp, int micro_batch,
                       std::optional<Recompute> r = std::nullopt);
// Terms of every stage of a pipeline (the training config's recompute).
std::vector<StageTerms> pipeline_terms(const CostModel& cm,
                                       const std::vector<std::vector<int>>& stages, int dp,
                                       int micro_batch);
// Options of one stage: its terms under each of `modes` (in that order; the first is
// preferred on ties), leaving out a mode whose terms equal an earlier one's (selective
// is none under the flash kernel).
std::vector<StageTerms> stage_options(const CostModel& cm, const std::vector<int>& devices,
                                      bool first, bool last, const std::vector<int>* next, int dp,
                                      int micro_batch, const std::vector<Recompute>& modes);
// stage_options() of every stage of a pipeline.
std::vector<std::vector<StageTerms>> pipeline_options(const CostModel& cm,
                                                      const std::vector<std::vector<int>>& stages,
                                                      int dp, int micro_batch,
                                                      const std::vector<Recompute>& modes);

// The recompute modes a search may give a stage: the training config's first, then
// the others (none, selective, full); only the training config's when `per_stage`
// is false.
std::vector<Recompute> recompute_modes(const TrainingConfig& t, bool per_stage);

class PipelineCurve {
 public:
  // One option per stage.
  PipelineCurve(std::vector<StageTerms> terms, int layers, PipelineSchedule schedule);
  // Several options per stage (each non-empty; the first preferred on ties).
  PipelineCurve(std::vector<std::vector<StageTerms>> options, int layers,
                PipelineSchedule schedule);

  int num_stages() const { return static_cast<int>(options_.size()); }
  const std::vector<std::vector<StageTerms>>& options() const { return options_; }

  // Pipeline time (s) with m micro-batches and the best layer split; kInfeasible
  // when no split fits in memory (or there are more stages than layers).
  double time(int m) const;
  // time(m) when it is below `limit`; otherwise a lower bound of it that is at least `limit`
  // (kInfeasible when no split fits), found without the layer split's search and not memoised.
  double time_below(int m, double limit) const;
  // The layer count of each stage at that optimum (empty when infeasible).
  std::vector<int> layers(int m) const;
  // The recompute of each stage at that optimum (empty when infeasible).
  std::vector<Recompute> recompute(int m) const;
  // The largest m in [0, max_m] whose time is < `limit` (time is nondecreasing in m).
  int max_micro_batches_below(double limit, int max_m) const;
  // A lower bound of the seconds per micro-batch of any split's busiest stage: the least, over
  // the layer splits and options that fit one micro-batch in flight, of the largest stage
  // compute (fixed part and layers; no send). A stage computes its micro-batches one at a
  // time, so m of them take a pipeline at least m times this, whatever its schedule and
  // sends (kInfeasible when no split fits).
  double compute_floor() const;
  // A lower bound of the timeline of m micro-batches under this curve's split at m (the
  // layers and options of layers(m), recompute(m)): for each stage i, the first micro-batch
  // reaches it through the stages before (their forwards and sends), it computes all m, and
  // the last gradient goes back through them (their backwards and sends): max_i sum_{j<i}
  // (c_j + own sends_j) + m c_i, with c a stage's compute per micro-batch; no wait counted
  // (kInfeasible when none fits).
  double timeline_floor(int m) const;
  // Per stage s, a lower bound of when it ends its last backward in the timeline of m
  // micro-batches under the same split: for every i >= s, the first micro-batch's way from s
  // to i and the last gradient's way back (stages s .. i - 1's compute and own sends) around
  // m c_i. The first is timeline_floor(m); empty when none fits.
  std::vector<double> finish_floors(int m) const;
  // Steady-state seconds per micro-batch at m (the max term), kInfeasible if none.
  double bottleneck(int m) const;
  // Approximate bytes held (terms and memoised solutions), for cache limits.
  std::size_t memory_bytes() const;

 private:
  struct Solution {
    double time = kInfeasible;
    double bottleneck = kInfeasible;
    std::vector<int> layers;           // empty when infeasible
    std::vector<std::uint8_t> option;  // per stage: index into its options
    bool bound_only = false;           // time is a lower bound at or above solve()'s limit
    // Keeps `least`, a lower bound of the time, when it reaches `limit`.
    bool bounded(double least, double limit) {
      if (!(least >= limit)) return false;
      time = least;
      bound_only = true;
      return true;
    }
  };
  // An option of a stage usable at some m: its terms and the layers it can hold.
  struct Choice {
    const StageTerms* terms = nullptr;
    int option = 0;
    int cap = 0;
  };
  // Per stage, its choices (stage i's: all[begin[i] .. begin[i + 1])), in one array: the
  // solver builds these by the million.
  struct Choices {
    std::vector<Choice> all;
    std::vector<int> begin{0};
    std::span<const Choice> operator[](int i) const {
      return {all.data() + begin[i], all.data() + begin[i + 1]};
    }
    int stages() const { return static_cast<int>(begin.size()) - 1; }
    void clear() {
      all.clear();
      begin.assign(1, 0);
    }
    // Ends the stage whose choices were added last, without its useless ones; false when
    // none is left.
    bool end_stage();
  };
  const Solution& solution(int m) const;              // memoised solve()
  const Solution& remember(int m, Solution s) const;  // memoises a full solve() of m
  // With a `limit`: where a lower bound of the time reaches it, `out` holds that bound
  // (bound_only) instead of the optimum.
  void solve(int m, Solution& out, double limit = kInfeasible) const;
  void solve_single(int m, const Choices& choices, Solution& out, double limit) const;
  void solve_options(int m, const Choices& choices, Solution& out, double limit) const;
  // Its steps: the smallest feasible bound on the slowest stage (greedy over each
  // stage's cheapest option per layer count); a lower bound of the least sum at any
  // bound (false: none fits); the next options' breakpoint above `bound`.
  static double min_max_bound(const Choices& choices, int layers);
  // A lower bound of min_max_bound's, in one pass over the stages.
  double fluid_bound(const Choices& choices) const;
  bool relaxed_floor_sum(const Choices& choices, double& floor_sum) const;
  static double next_breakpoint(const Choices& choices, double bound);
  // The least sum of stage times with every stage at most `bound` (every
  // assignment of the options still useful under it, or a DP over stages and
  // layers when there are many); false when no split fits under it.
  bool min_sum(const Choices& choices, double bound, std::vector<int>& layers,
               std::vector<std::uint8_t>& option, double& sum) const;
  // Its steps: each option capped by the bound, the useless dropped (empty: a stage has
  // none left); every assignment of few options; the DP for many.
  bool useful_under(const Choices& choices, double bound, Choices& useful,
                    long& combinations) const;
  bool enumerate_min_sum(const Choices& useful, std::vector<int>& layers,
                         std::vector<std::uint8_t>& option, double& sum) const;
  bool dp_min_sum(const Choices& useful, std::vector<int>& layers,
                  std::vector<std::uint8_t>& option, double& sum) const;
  // Options fixed (pick[i] of useful[i], whose cap is the most layers it may take):
  // layers to the cheapest stages first; false when they cannot hold L.
  bool fill_cheapest(const Choices& useful, const std::vector<int>& pick, std::vector<int>& layers,
                     double& sum) const;
  // Drops the useless among all[from ..] (their order kept).
  static void drop_useless(std::vector<Choice>& all, std::size_t from);
  int layer_cap(const StageTerms& t, int in_flight) const;  // most layers that fit (0: none)

  std::vector<std::vector<StageTerms>> options_;
  int num_layers_ = 0;
  PipelineSchedule schedule_ = PipelineSchedule::k1F1B;
  double send_sum_ = 0;  // 2 sum C_i
  double send_max_ = 0;
  // By m (sparse: m reaches thousands). A curve is shared by the threads of a parallel
  // search, so the memo is guarded; its nodes never move, so a found Solution stays valid.
  mutable std::mutex memo_mutex_;
  mutable std::unordered_map<int, Solution> memo_;
};

}  // namespace search
}  // namespace hexi
