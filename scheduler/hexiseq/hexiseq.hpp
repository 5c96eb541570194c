#pragma once
// The HexiSeq search (arXiv 2605.07569):
// a sequence layout (plan/sequence_layout.hpp) for one long sequence over a mesh of
// devices, hierarchically
//
//   (1) groupings of the devices into all-to-all groups from the topology (groupings.hpp):
//       small meshes: the whole family, its whole-domain groupings (merged or not) in full
//       and the rest ranked by the LP of (2) at proportional guesses, the best `screen` in
//       full; large meshes: every domain cut into groups of one size, merges of <= 16
//       devices and round-robin ("dealt") groups, then a descent over each GPU type's size;
//       each grouping's integer programs skipped when its first LP (stage 2, at proportional
//       guesses) plus what every split is charged (ZeRO-3's per-layer collectives, the sync
//       and optimizer steps) already reach the best layout found (`lp_screen`; the fastest
//       type's mesh is held to the whole mesh's best too, a ZeRO stage's search to the best
//       of the stages before). On every mesh, with `lp_screen`: a grouping whose split-free
//       charges reach the best is left after its even split, a program whose LP relaxation
//       does is cut off, and a round whose LP, scaled by the closed form's ratio to the model
//       on the round before, does is not run
//   (2) per grouping, S split over the groups by an LP (linear.hpp's model is linear in T_g
//       for each group's relative shards and heads; groups alike share one entry), rounded
//       to whole token blocks (min-max)
//   (3) per group, an integer program for its shards (whole blocks) and heads (integers; kv
//       heads >= h / (n_q / n_kv), or whole GQA groups only) minimising its slowest device
//       under memory <= 95 %; the all-to-all's bilinear bytes s_j (h_i + 2 kv_i) are taken
//       to first order at a guess (the previous answer) and the program solved again at its
//       own answer until it repeats or gains under 0.5 % (at most 4 times); interchangeable
//       devices are ordered
//   (2) and (3) alternate (`rounds`, until the split repeats): the LP reads the groups' last
//   shards and heads. Every layout, and every grouping's even split, is scored by the closed
//   form (estimate/sequence_time.hpp) and the best that fits is kept; on meshes of <= 16
//   groups the best is polished by moving single blocks between groups on the closed form.
//   (4) the same search over the devices of the fastest GPU type alone: slower types behind a
//   slow link can cost more in ring steps, all-to-alls and ZeRO-3 gathers than their compute
//   brings, and then the best layout leaves them idle.
//   (5) layouts of tensor-parallel groups (tensor_layouts.hpp, ZeRO 0-2): a TP group holds its
//   share of the weights, where a Ulysses device holds them whole; the better of (1-4) and (5).
// The LP and integer programs go through the solver seam (scheduler/solver: GLPK by default,
// CBC possible; on these small programs GLPK is 5-40x faster, CBC's preprocessing and cuts
// cost more than they save, and both find the same layouts on hexiseq_bench's meshes and the
// 20 random meshes of exact_random_test; see bench/hexiseq_bench). hexiseq-exact keeps CBC.
// Deterministic: the same input gives the same layout (no budget, or a budget that does not
// run out; the per-program solver limit is far above what the programs take). Identical
// programs (groups alike at one T and guess) are solved once.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/estimate/sequence_time.hpp"
#include "scheduler/hexiseq/groupings.hpp"
#include "scheduler/hexiseq/linear.hpp"
#include "scheduler/plan/sequence_layout.hpp"
#include "scheduler/solver/solver.hpp"

namespace hexi {
inline namespace hexiseq {

struct HexiSeqOptions {
  Backend backend = Backend::kGlpk;   // the LP's and integer programs' solver
  double time_budget_s = 0;           // s; 0: none (every candidate; deterministic)
  int rounds = 3;                     // token split <-> shards and heads alternations
  std::int64_t block_tokens = 0;      // shards in whole blocks of this many; 0: auto
  bool split_kv_heads = true;         // head ranges may split a GQA group (kv replicated)
  std::size_t exhaustive_limit = 64;  // enumerate the grouping family up to this many
  std::size_t screen = 8;             // ... and evaluate the best this many by the LP in full
  std::size_t largest_merge = 16;     // merged groups of at most this many devices (large meshes)
  bool identical_devices = false;     // plan as if every device were the mesh's first
                                      // (hexiseq-homogeneous); scored on the real cluster
  double solver_time_limit_s = 10;    // s per LP / integer program
  // A group's integer program stops once its layout is within this fraction of the bound:
  // long contexts' programs (a thousand token blocks) find their layout at once and then
  // spend the time limit proving it (on the 32-GPU mix at 512K, two programs hit 10 s each),
  // and a time limit's answer depends on the machine. hexiseq-exact proves its programs.
  double mip_gap = 1e-3;
  // ... or, past this many branch-and-bound nodes (0: no limit), once its best layout is
  // within mip_node_limit_gap of the bound: a few programs of meshes with uneven GQA head
  // groups take thousands of nodes to close the last 0.1 % (1.4 s of the 2.9 s search of
  // hexiseq-64-4types-llama-70b-256k). With 100 nodes and 2 % every shipped scenario keeps its
  // layout (at 5 %, tiny-seq-cpu loses 0.4 %). A node count, unlike a clock, is the same on
  // every machine. hexiseq-exact proves its own programs.
  long mip_node_limit = 100;
  double mip_node_limit_gap = 0.02;
  // May leave GPUs idle: HexiSeq also searches the mesh of the fastest GPU type alone, and
  // each baseline (baselines/sequence.hpp) also tries each GPU type alone and the fastest
  // machines. Off: every layout spreads over every device (the HexiSeq paper's baselines).
  bool idle_slow_types = true;
  // Large meshes: skip a grouping's integer programs when its first LP already puts it at or
  // above the best layout found; every mesh: cut off a group's integer program when its LP
  // relaxation does.
  bool lp_screen = true;
  // Not read from JSON: an iteration time (s) found elsewhere (the registry's search under
  // another ZeRO stage) that this search's layouts must beat to matter; the screen and the
  // cutoff read it. A search whose layouts all fall at or above it fails (bad input, saying
  // so), as one whose layouts do not fit does.
  double bar_s = kInfinity;
  // Through the scheduler registry (scheduler/scheduler.hpp): every ZeRO stage from 1 to the
  // training config's is tried and the fastest layout that fits kept (a lower stage holds
  // more model states but replaces ZeRO-3's per-layer gathers by one gradient all-reduce).
  // Off: the training config's stage only.
  bool zero_stages = true;
  // Also lay the mesh out in tensor-parallel groups (tensor_layouts.hpp) and keep the better;
  // not for hexiseq-homogeneous (identical_devices).
  bool tensor_groups = true;
  // hexiseq-exact's whole-mesh MILPs: large, where CBC's cuts pay (a "solver" named in the
  // options or on the command line sets both backends).
  Backend exact_backend = Backend::kCbc;
};

// The options of a JSON object (a sweep's scheduler entry, an advise request's
// "hexiseq_options"): "solver" ("cbc" | "glpk": both backends), "time_budget_s", "rounds",
// "block_tokens", "split_kv_heads", "exhaustive_limit", "screen", "largest_merge",
// "solver_time_limit_s", "mip_gap", "mip_node_limit", "mip_node_limit_gap",
// "idle_slow_types", "lp_screen", "zero_stages", "tensor_groups", each optional over `defaults`.
// Throws InputError naming the path (load_with() turns it into bad input).
HexiSeqOptions read_hexiseq_options(const JsonNode& node, HexiSeqOptions defaults = {});

struct HexiSeqResult {
  SequenceLayout layout;
  IterationTime time;    // closed form, on the real cluster
  std::string grouping;  // the chosen grouping's name
  long candidates = 0;   // layouts scored
  long solves = 0;       // LPs and integer programs solved
  double search_time_s = 0;
  bool budget_exhausted = false;
  // hexiseq-exact: whether every program was solved to optimality (or proven infeasible).
  std::optional<bool> proven = std::nullopt;
  double exact_gap = 0;  // hexiseq-exact: the largest relative gap of a program not proven
  int zero_stage = -1;   // the ZeRO stage `time` was scored under; -1: the training config's

  // What `hexisim seq --json` prints of it, as `scheduler`'s: times, fit, search account,
  // per-device layer times and memory, the layout.
  Json to_json(const std::string& scheduler) const;
};

// The training config a result was scored under (its ZeRO stage).
TrainingConfig training_of(const TrainingConfig& training, const HexiSeqResult& result);

// The closed-form polishes (block moves between groups) run on rings of at most this many
// groups; larger rings keep the proportional split, which is finer there and whose moves
// would each score every other group.
constexpr std::size_t kPolishGroups = 16;

// Whether `a` is the better of two layouts' times: fitting first, then the shorter iteration.
bool better_time(const IterationTime& a, const IterationTime& b);
// better_time of two results (any layout beats none).
bool better_layout(const HexiSeqResult& a, const std::optional<HexiSeqResult>& b);

// The search over `devices` (empty: every device of the cluster). Bad input (exit 2) when S
// is odd or not a multiple of the block, or when no layout fits in memory (the message
// names the memory needed and available).
Result<HexiSeqResult> run_hexiseq(const SequenceCost& cost, std::vector<int> devices,
                                  const HexiSeqOptions& options);

// ---- the stages, for the exact search and the tests -------------------------------------

// The layouts the search's stages 2 and 3 score for one grouping of `devices` (sorted): its
// even split, then each round's (unpolished; some may not fit). hexiseq-exact starts its
// programs from the best of them.
std::vector<SequenceLayout> grouping_layouts(const SequenceCost& cost,
                                             const std::vector<int>& devices,
                                             const Grouping& grouping, std::int64_t block,
                                             const HexiSeqOptions& options);

// The second mesh hexiseq and hexiseq-exact search: the devices of the fastest GPU type among
// `devices` (by dense bf16 TFLOP/s, ties by name); none when every device is of that type, the
// devices are told identical or idle_slow_types is off.
std::vector<int> fastest_type_mesh(const Cluster& cluster, const std::vector<int>& devices,
                                   const HexiSeqOptions& options);
// The grouping name of a layout found on that mesh of `used` of `all` devices.
std::string fastest_type_grouping(std::size_t used, std::size_t all, const std::string& grouping);

// Shards are whole blocks: `requested`, or (0) the largest power of two <= S / (32 n),
// at least 2, that divides S. nullopt when S is odd or not a multiple of `requested`.
std::optional<std::int64_t> token_block(std::int64_t sequence, int devices, std::int64_t requested);

// A group's shards (tokens), heads and kv heads as the model reads them; fractional in a
// first guess (proportional to speed), whole after an integer program.
struct GroupGuess {
  std::vector<double> shards, heads, kv;
};
GroupGuess proportional_guess(const LinearModel& lm, const GroupTerms& terms, double tokens);
GroupGuess guess_of(const LinearModel& lm, const SequenceGroup& g);

// Stage 2: T per group in blocks (fractional; `counts[g]` groups alike share entry g's
// terms, guess and T; sum of counts x T = S / block), minimising the model's slowest device
// for each guess (shards as fractions of T) under memory; nullopt when infeasible. The
// optimum (the model's layer time, s) goes to `model_s` when given.
std::optional<std::vector<double>> split_tokens(const LinearModel& lm,
                                                const std::vector<GroupTerms>& terms,
                                                const std::vector<int>& counts,
                                                const std::vector<GroupGuess>& guesses,
                                                std::int64_t block, const HexiSeqOptions& options,
                                                double* model_s = nullptr);

// T_g in whole blocks >= 1 summing to `total`: floors, then each block left to the group
// whose blocks / T_g grows the least (min-max rounding; ties to the lower index). Empty when
// `total` is below the number of groups (no group may go without a block).
std::vector<std::int64_t> round_blocks(const std::vector<double>& blocks, std::int64_t total);

// Stage 3: one group's shards and heads for T_g = `tokens` (ring blocks up to `ring_block`
// tokens; 0 without a ring), the all-to-all taken at `guess`; no group when infeasible, or
// when the program's LP relaxation already puts the group's layer time at or above
// `cutoff_s` (then `cut_off_s` holds that relaxation's time).
struct GroupAnswer {
  std::optional<SequenceGroup> group;
  double cut_off_s = -kInfinity;  // s per layer; -infinity unless cut off
};
GroupAnswer solve_group(const LinearModel& lm, const GroupTerms& terms,
                        const std::vector<int>& devices, std::int64_t tokens,
                        std::int64_t ring_block, const GroupGuess& guess, std::int64_t block,
                        const HexiSeqOptions& options, double cutoff_s = kInfinity);

// Everything solve_group's program reads, as bytes: equal keys, equal programs. Machines
// by their place in the group's list, so groups alike on other machines match.
std::string program_key(const GroupTerms& terms, std::int64_t tokens, std::int64_t ring_block,
                        const GroupGuess& guess);

// Orders a group's devices (with their shards and heads) so that head ranges split as few
// GQA groups as possible: ranges ending on a group boundary first (first fit decreasing).
void align_heads(SequenceGroup& g, int heads_per_kv);

}  // namespace hexiseq
}  // namespace hexi
