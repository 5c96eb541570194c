#pragma once
// HexiScale (Yan, Jiang et al., "HexiScale: Facilitating Large Language Model
// Training over Heterogeneous Hardware", arXiv 2409.01143): hierarchical graph
// partitioning for asymmetric DP / TP / PP plans.
//
//   for D over its feasible range (1 .. the most pipelines memory allows):
//     for each cut mode (DP on slow links / on fast links) and seed:
//       phase 1: METIS splits the device graph into D pipelines (partition)
//       phase 2: each pipeline: groups, TP degrees, order, layers (pipeline)
//       batch split across pipelines, proportional then exact (batch_split)
//       score the plan with the full cost model; keep the best
//   refinement from the best plans: move devices (or whole machines) to another
//   or a new pipeline, merge pipelines, swap machines, while the cost model
//   improves; stop on convergence or the time budget.
// Deterministic for a seed when no time budget cuts it short. Large clusters
// (more than 64 GPUs) partition machines rather than devices.
// Up to 512 GPUs, device-level seeds (GPUs dealt round-robin) join the machine-level
// sweep and its best plan seeds a refinement that moves single GPUs.
// Scenario "scheduler" options: {"tau": 3, "seeds": 3, "refine": true,
// "device_level_max": 64, "device_refine_max": 512, "threads": min(2, cores),
// "recompute": "per-stage", "interleave": 1} (see README).

#include <optional>

#include "scheduler/search/parallel.hpp"
#include "scheduler/search/plan_space.hpp"
#include "scheduler/search/search.hpp"

namespace hexi {
inline namespace hexiscale {

struct HexiScaleOptions {
  int tau = 3;                      // top-tau greedy width for stage ordering
  int seeds = 3;                    // METIS seeds per (D, cut mode)
  bool refine = true;               // local refinement after the partition sweep
  int device_level_max = 64;        // partition devices up to this many GPUs, machines above
  int device_refine_max = 512;      // above device_level_max and up to this many GPUs, the
                                    // machine-level search seeds a device-level refinement
  int threads = default_threads();  // candidates scored in parallel (same plan for any count)
  bool per_stage_recompute = true;  // stages choose none/selective/full ("per-stage"), or
                                    // all run the scenario's ("scenario")
  int interleave = 1;  // up to this many chunks per device group (interleaved 1F1B) tried on
                       // the best plan's pipelines (interleave_pipelines); 1: off
};

// Interleaved 1F1B on a found plan (Megatron-LM's virtual stages): pipeline by pipeline (p >= 2
// stages, its micro-batches a multiple of p, 1F1B, no mesh stage), v = 2 .. `max_chunks` chunks per
// stage, each stage of L layers dealt into v chunks of L / v (the first L mod v one more) in layer
// order, so every device keeps its layer count; a choice is kept where the closed form is faster
// and the plan fits. Returns the chunks chosen per pipeline (1: left plain).
std::vector<int> interleave_pipelines(const CostModel& cm, ScoredPlan& best, int max_chunks);
// One pipeline's stages as `v` chunks each (the deal above); every stage needs >= v layers.
Pipeline interleaved(const Pipeline& plain, int v);

Result<HexiScaleOptions> read_hexiscale_options(const Scenario& sc);

struct SpecResult {
  PlanSpec spec;
  ScoredPlan scored;
};

// The search itself, over an existing evaluator (the exact search reuses it).
// `mode`, when given, receives how it searched ("device-level", ...).
// `runners_up`, when given, receives up to `keep` next best distinct plans; `all_gpus`, when
// given, the best plan found that runs on every GPU (where the best leaves some idle).
std::optional<SpecResult> hexiscale_search(
    SpecEvaluator& ev, const HexiScaleOptions& options, SearchClock& clock, std::uint64_t seed,
    std::string* mode = nullptr, std::vector<SpecResult>* runners_up = nullptr, int keep = 0,
    std::optional<SpecResult>* all_gpus = nullptr, std::optional<SpecResult>* balanced = nullptr);

Result<SearchResult> run_hexiscale(const Scenario& scenario, const SearchOptions& options);

// The largest number of pipelines whose model replicas can fit in the cluster's
// memory at all (ZeRO-1 shards the optimizer state over them), with activations
// under `recompute` (default: the training config's); >= 1.
int max_pipelines_by_memory(const CostModel& cm, std::optional<Recompute> recompute = std::nullopt);

// What a HexiScale search of `gpus` GPUs is expected to take (s), for the line the planning
// call prints before a long search. Above options.device_refine_max GPUs the machine-level
// search grew as GPUs^kExpectedGrowth from kExpectedAt1024 s at 1 024 GPUs (four GPU types,
// eight a machine, Llama-3 70B, two threads on a 2-core VM: 22.6 s at 1 024, 167.8 s at 4 096;
// one thread kOneThread x as long: bench/RESULTS.md, cost at scale). nullopt at or below it, where
// the device-level refinement's cost depends on the network more than on the size (a 40-GPU TCP
// cluster took 30 s, 128 GPUs over RDMA 5 s).
inline constexpr double kExpectedAt1024 = 22.6;
inline constexpr double kExpectedGrowth = 1.45;
inline constexpr double kOneThread = 1.3;
std::optional<double> expected_search_s(int gpus, const HexiScaleOptions& options);

// Error for "no feasible plan found": memory needed vs available.
Error no_feasible_plan(const Scenario& scenario, const std::string& scheduler);

}  // namespace hexiscale
}  // namespace hexi
