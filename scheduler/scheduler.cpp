#include "scheduler/scheduler.hpp"

#include "scheduler/baselines/baselines.hpp"
#include "scheduler/baselines/sequence.hpp"
#include "scheduler/hexiscale/exact.hpp"
#include "scheduler/hexiscale/hexiscale.hpp"
#include "scheduler/hexiseq/exact.hpp"

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

const std::vector<SequenceScheduler>& sequence_schedulers() {
  static const std::vector<SequenceScheduler> all = {
      {"hexiseq", "HexiSeq: groupings, LP token split, per-group integer programs", run_hexiseq},
      {"hexiseq-exact", "whole-mesh MILP per grouping, proven optimal (<= 16 devices)",
       [](const SequenceCost& c, std::vector<int> d,
          const HexiSeqOptions& o) -> Result<HexiSeqResult> {
         auto e = run_hexiseq_exact(c, std::move(d), o);
         if (!e) return e.error();
         return e->best;
       }},
      {"ring", "Ring Attention: one ring, equal zig-zag shards, all heads", run_ring},
      {"ulysses", "DeepSpeed-Ulysses: one all-to-all group, equal heads", run_ulysses},
      {"usp", "USP: best Ulysses x ring factorisation, Ulysses on contiguous ranks", run_usp},
      {"megatron-cp", "Megatron a2a+p2p: a2a inside machines, ring across, equal", run_megatron_cp},
      {"hexiseq-homogeneous", "HexiSeq told every device is identical, scored for real",
       run_hexiseq_homogeneous},
      {"round-robin", "USP factorisations with devices dealt round-robin", run_round_robin},
  };
  return all;
}

const SequenceScheduler* find_sequence_scheduler(std::string_view name) {
  for (const auto& s : sequence_schedulers()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::string all_scheduler_names() {
  std::string out = scheduler_names();
  for (const auto& s : sequence_schedulers()) out += ", " + s.name;
  return out;
}

Result<SearchResult> run_scheduler(const std::string& name, const Scenario& sc,
                                   const SearchOptions& options) {
  for (const auto& s : schedulers()) {
    if (s.name != name) continue;
    if (auto st = check_schedulable(sc); !st) return st.error();
    return s.run(sc, options);
  }
  // The sequence schedulers plan layouts, not pipelines.
  if (find_sequence_scheduler(name) != nullptr) {
    return bad_input("scheduler \"" + name +
                     "\" plans sequence (context + head parallel) layouts: use `hexisim seq "
                     "SCENARIO --scheduler " +
                     name + "`; pipeline schedulers: " + scheduler_names());
  }
  return bad_input("unknown scheduler \"" + name + "\" (known: " + scheduler_names() + ")");
}

}  // namespace hexi
