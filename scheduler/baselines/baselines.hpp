#pragma once
// Baseline schedulers. Each produces a Plan in the common format; the plan is then
// judged by the same CostModel as HexiScale's, whatever the baseline used to choose.
//
//   uniform     Megatron-LM's grid: world size W = TP x PP x DP over devices 0..W-1 in
//               id order (TP fastest, then DP, then PP, Megatron's rank order), TP
//               inside a machine, PP dividing the layers, even layers and even batch;
//               the best valid grid by the cost model (grid.cpp)
//   amp-like    AMP (Li et al., NeurIPS'22): the same uniform (tp, pp, dp) grids and
//               even batch, but layers split by a dynamic program that minimises the
//               slowest stage over the heterogeneous devices (grid.cpp)
//   metis-like  Metis (Um et al., ATC'24): every stage a power-of-two group of one GPU
//               type with one (dp, tp) for the whole plan, stages ordered by GPU type
//               (every type order tried), layers in proportion to stage compute,
//               even batch (metis.cpp)
//   random      random device-to-pipeline partitions (D by the reference's random
//               +-1 walk in [n/L + 1, n/5], or uniform over [1, D_max]), then
//               HexiScale's phase 2 and splits; best of 40 iterations
//               (random.cpp)
//   flashflex   the reference implementation (FlashFlex `experimental/`): METIS over
//               the 1/bandwidth graph, random +-1 walk of D in [n/L + 1, n/5], 40
//               iterations, secondary METIS partitions into 1-3 groups, TP menus per
//               machine, a top-tau path over summed bandwidth, memory-proportional
//               layers, even batch, chosen by its own cost model (1.8 x slowest
//               pipeline + 1.1 x DP); its choice is then evaluated by ours
//               (flashflex*.cpp)
// Scenario options ("scheduler": {"name": ..., ...}): random {"iterations": 40,
// "d_range": "reference" | "full"},
// flashflex {"iterations": 40, "initial_pipelines": 0 (auto)}.

#include "scheduler/search/search.hpp"

namespace hexi {
inline namespace baselines {

Result<SearchResult> run_uniform(const Scenario& scenario, const SearchOptions& options);
Result<SearchResult> run_amp_like(const Scenario& scenario, const SearchOptions& options);
Result<SearchResult> run_metis_like(const Scenario& scenario, const SearchOptions& options);
Result<SearchResult> run_random(const Scenario& scenario, const SearchOptions& options);
// The random baseline with explicit settings (full_range: D uniform in [1, D_max]).
Result<SearchResult> run_random_with(const Scenario& scenario, const SearchOptions& options,
                                     int iterations, bool full_range);
Result<SearchResult> run_flashflex(const Scenario& scenario, const SearchOptions& options);

// A Megatron grid: W = tp * pp * dp devices 0..W-1; stage s of pipeline d holds
// ranks s*tp*dp + d*tp .. + tp - 1. Layers even (pp divides L), batch even.
struct Grid {
  int tp = 1, pp = 1, dp = 1;
  int world() const { return tp * pp * dp; }
};
// Every valid grid of the scenario (TP within machines, divisibility rules).
std::vector<Grid> valid_grids(const Scenario& scenario);
// The plan of a grid with the given per-stage layer counts (size pp).
Plan grid_plan(const Scenario& scenario, const Grid& grid, const std::vector<int>& layers,
               const std::string& scheduler);

}  // namespace baselines
}  // namespace hexi
