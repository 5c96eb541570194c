#include "scheduler/scheduler.hpp"

#include "scheduler/baselines/baselines.hpp"
#include "scheduler/hexiscale/exact.hpp"
#include "scheduler/hexiscale/hexiscale.hpp"

namespace hexi {

const std::vector<SchedulerInfo>& schedulers() {
  static const std::vector<SchedulerInfo> all = {
      {"hexiscale",
       "HexiScale: METIS phase 1, per-pipeline phase 2, exact batch/layer splits, refinement",
       run_hexiscale},
      {"uniform",
       "Megatron TP x PP x DP grid over device ids, ignoring heterogeneity (best valid grid)",
       run_uniform},
      {"random", "random device partitions, then HexiScale's phase 2 (best of the iterations)",
       run_random},
      {"flashflex",
       "the FlashFlex reference: even batch, memory-proportional layers, TP menus, fudge-factor "
       "cost",
       run_flashflex},
      {"metis-like", "Metis (ATC'24): type-ordered stages, uniform (dp, tp), power-of-two groups",
       run_metis_like},
      {"amp-like", "AMP (NeurIPS'22): uniform (tp, pp, dp) grid, layers by dynamic programming",
       run_amp_like},
      {"exact", "exhaustive search of HexiScale's plan space (<= 16 GPUs), branch and bound",
       run_exact},
  };
  return all;
}

std::string scheduler_names() {
  std::string out;
  for (const auto& s : schedulers()) out += (out.empty() ? "" : ", ") + s.name;
  return out;
}

Result<SearchResult> run_scheduler(const std::string& name, const Scenario& sc,
                                   const SearchOptions& options) {
  for (const auto& s : schedulers()) {
    if (s.name != name) continue;
    if (auto st = check_schedulable(sc); !st) return st.error();
    return s.run(sc, options);
  }
  // The sequence schedulers (scheduler/hexiseq/) plan layouts, not pipelines.
  for (const char* seq : {"hexiseq", "hexiseq-exact", "hexiseq-homogeneous", "ring", "ulysses",
                          "usp", "megatron-cp", "round-robin"}) {
    if (name == seq) {
      return bad_input("scheduler \"" + name +
                       "\" plans sequence (context + head parallel) layouts: use `hexisim seq "
                       "SCENARIO --scheduler " +
                       name + "`; pipeline schedulers: " + scheduler_names());
    }
  }
  return bad_input("unknown scheduler \"" + name + "\" (known: " + scheduler_names() + ")");
}

}  // namespace hexi
