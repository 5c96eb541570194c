#pragma once
// hexiseq-exact: the ground truth for the HexiSeq search on meshes of at most 16 devices
// (beyond the paper, whose scheduler is local coordinate descent).
//
// What it is exact over: the two meshes the search tries (every device, and the fastest GPU
// type's alone unless idle_slow_types is off), every grouping of the family the search draws
// from in each (groupings.hpp: each NVLink domain cut into equal groups of any size dividing
// it, whole domains merged in any set partition), and for each, ONE mixed-integer program over the
// whole mesh deciding together every group's T_g (whole blocks), every device's shard (whole
// blocks) and its heads (integers, kv >= h / (n_q / n_kv)), minimising the slowest device
// of linear.hpp's model under memory <= 95 %, solved to proven optimality. The model's
// products (T_g h_i for attention and all-to-all buffers, T_max kv_i for ring buffers,
// s_i h_j for the all-to-all's bytes) are made linear exactly: each device's head count is
// one-hot (binaries z_ik, h_i = sum k z_ik) and every product of a bounded integer with a
// binary is its four McCormick inequalities, which are exact on binaries. What makes the
// 16-device programs provable in seconds to a minute (without them some ran past 30
// minutes unproven):
// - valid rows the McCormick rows do not imply once z is fractional: each device's products
//   with its head-count binaries sum to their factor (to 0 with no heads), and a group's
//   attention work sum_i T_g h_i is T_g n_q; without them the relaxation drops attention and
//   all-to-all work;
// - symmetry: interchangeable ranks (linear.hpp's classes) ordered by (heads, shard), groups
//   alike (program_key) by their tokens;
// - a start: the search's best layout for the grouping in the model (grouping_layouts;
//   CBC), an incumbent for branch and bound to prune by. The proof is the solver's; where
//   the start ties the optimum in the model, it is the answer.
// Every grouping's optimum is scored by the closed form (estimate/sequence_time.hpp) and the best
// kept, like the search's candidates, so hexiseq / exact measures what the hierarchical
// decomposition (LP for T, per-group programs with the all-to-all linearised at a guess,
// alternated) loses. The program grows with n_q (one binary per device and head count): meant for
// small models' head counts; `solver_time_limit_s` bounds each program and `time_budget_s` (> 0)
// the whole run, the groupings not reached skipped (either way, then not proven).

#include "scheduler/hexiseq/hexiseq.hpp"

namespace hexi {
inline namespace hexiseq {

inline constexpr int kExactMaxDevices = 16;

// One grouping's whole-mesh program: its optimal layout (nullopt: infeasible or no answer
// in time), its objective (the model's slowest device, s) and whether that is proven
// (optimal, or proven infeasible).
struct ExactGrouping {
  std::optional<SequenceLayout> layout;
  double model_s = 0;
  double bound_s = 0;  // no layout of the grouping is below it in the model (= model_s: proven)
  bool optimal = false;
};
// `starts`: layouts known to be feasible (the search's for this grouping); the program
// starts from the best of them in the model (a bound to prune by; CBC only).
ExactGrouping solve_exact(const LinearModel& lm, const Grouping& grouping, std::int64_t block,
                          const HexiSeqOptions& options,
                          const std::vector<SequenceLayout>& starts = {});

// Every grouping of the family. Bad input for more than kExactMaxDevices devices, S odd or
// not a multiple of the block, or nothing fitting. `proven` in the result: every program
// solved to optimality.
struct ExactResult {
  HexiSeqResult best;
  bool proven = true;
  double gap = 0;  // the largest (model - bound) / model of a program stopped early
  long groupings = 0;
};
Result<ExactResult> run_hexiseq_exact(const SequenceCost& cost, std::vector<int> devices,
                                      const HexiSeqOptions& options);

}  // namespace hexiseq
}  // namespace hexi
