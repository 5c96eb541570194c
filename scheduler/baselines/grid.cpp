// Megatron-style uniform grids: the `uniform` and `amp-like` baselines.
#include <algorithm>

#include "scheduler/baselines/baselines.hpp"
#include "scheduler/baselines/util.hpp"
#include "scheduler/hexiscale/hexiscale.hpp"
#include "scheduler/search/batch_split.hpp"
#include "scheduler/search/pipeline_curve.hpp"
#include "scheduler/search/plan_space.hpp"

namespace hexi {
inline namespace baselines {
namespace {

// Devices of stage s of pipeline d (Megatron rank order: TP, then DP, then PP).
std::vector<int> grid_stage(const Grid& g, int s, int d) {
  std::vector<int> out(g.tp);
  for (int r = 0; r < g.tp; ++r) out[r] = s * g.tp * g.dp + d * g.tp + r;
  return out;
}

// Every TP group of the grid inside one machine.
bool tp_inside_machines(const Cluster& c, const Grid& g) {
  for (int first = 0; first < g.world(); first += g.tp) {
    if (c.devices()[first].machine != c.devices()[first + g.tp - 1].machine) return false;
  }
  return true;
}

// AMP's layer split for a grid: one split for every replica, minimising the
// pipeline time with each stage as slow as its slowest replica and as tight in
// memory as its smallest GPU.
std::vector<int> amp_layers(const CostModel& cm, const Grid& g, int micro_batches) {
  std::vector<StageTerms> worst;
  for (int s = 0; s < g.pp; ++s) {
    std::vector<StageTerms> replicas;
    for (int d = 0; d < g.dp; ++d) {
      std::vector<int> dev = grid_stage(g, s, d), next;
      if (s + 1 < g.pp) next = grid_stage(g, s + 1, d);
      replicas.push_back(stage_terms(cm, dev, s == 0, s == g.pp - 1, s + 1 < g.pp ? &next : nullptr,
                                     g.dp, cm.training().micro_batch));
    }
    // Same shape on every replica, so the same bytes: the smallest GPU is the tightest.
    StageTerms w = *std::min_element(
        replicas.begin(), replicas.end(),
        [](const auto& a, const auto& b) { return a.capacity_bytes < b.capacity_bytes; });
    for (const auto& t : replicas) {
      w.per_layer_s = std::max(w.per_layer_s, t.per_layer_s);
      w.fixed_s = std::max(w.fixed_s, t.fixed_s);
      w.send_s = std::max(w.send_s, t.send_s);
    }
    worst.push_back(w);
  }
  PipelineCurve curve(std::move(worst), cm.model().layers, cm.training().schedule);
  return curve.layers(micro_batches);
}

Result<SearchResult> run_grid(const Scenario& sc, const SearchOptions& options, bool amp) {
  const std::string name = amp ? "amp-like" : "uniform";
  CostModel cm(sc.cluster, sc.model, sc.training, sc.profile);
  SearchClock clock(name, options);
  BestPlan best;
  for (const Grid& g : valid_grids(sc)) {
    if (clock.out_of_time()) break;
    clock.phase("grid tp=" + std::to_string(g.tp) + " pp=" + std::to_string(g.pp) +
                " dp=" + std::to_string(g.dp));
    const int m = sc.training.global_batch / sc.training.micro_batch / g.dp;
    std::vector<int> layers(g.pp, sc.model.layers / g.pp);
    if (amp) {
      layers = amp_layers(cm, g, m);
      if (layers.empty()) {
        clock.count();
        continue;
      }
    }
    best.offer(grid_plan(sc, g, layers, name), cm, clock);
  }
  return best.result(sc, clock);
}

}  // namespace

std::vector<Grid> valid_grids(const Scenario& sc) {
  const Cluster& c = sc.cluster;
  const int n = c.num_devices(), layers = sc.model.layers;
  const int micro = sc.training.global_batch / sc.training.micro_batch;
  int widest = 0;
  for (const auto& m : c.machines()) widest = std::max(widest, m.num_gpus);
  std::vector<Grid> out;
  for (int tp : tp_degrees(sc.model, widest)) {
    for (int pp = 1; pp <= layers; ++pp) {
      if (layers % pp != 0) continue;  // Megatron: layers divide evenly over stages
      for (int dp = 1; tp * pp * dp <= n; ++dp) {
        if (micro % dp != 0) continue;  // global batch = dp x micro-batch x m
        Grid g{tp, pp, dp};
        if (tp_inside_machines(c, g)) out.push_back(g);
      }
    }
  }
  return out;
}

Plan grid_plan(const Scenario& sc, const Grid& g, const std::vector<int>& layers,
               const std::string& scheduler) {
  std::vector<std::vector<std::vector<int>>> stages(g.dp);
  for (int d = 0; d < g.dp; ++d) {
    for (int s = 0; s < g.pp; ++s) stages[d].push_back(grid_stage(g, s, d));
  }
  const int m = sc.training.global_batch / sc.training.micro_batch / g.dp;
  Plan plan = assemble_plan(stages, std::vector<std::vector<int>>(g.dp, layers),
                            std::vector<int>(g.dp, m), sc.training.micro_batch, scheduler);
  plan.comment = scheduler + ": tp " + std::to_string(g.tp) + " x pp " + std::to_string(g.pp) +
                 " x dp " + std::to_string(g.dp) + " over devices 0.." +
                 std::to_string(g.world() - 1);
  return plan;
}

Result<SearchResult> run_uniform(const Scenario& sc, const SearchOptions& options) {
  return run_grid(sc, options, false);
}

Result<SearchResult> run_amp_like(const Scenario& sc, const SearchOptions& options) {
  return run_grid(sc, options, true);
}

}  // namespace baselines
}  // namespace hexi
