#pragma once
// Seeded random scenarios shaped like the clusters users bring: 2 to 4 GPU types of the
// shipped catalog in machines of 1, 2, 4 or 8 GPUs, a TCP or RDMA network, a Llama model of
// 7B to 70B, and a training config with micro-batch 1, ZeRO-1 and selective recompute. The
// pipeline planners' quality suite (plan_quality.hpp, bench/plan_quality.cpp) runs on them.
//
// Deterministic from the seed on every platform: draws come from splitmix64
// (scheduler/search/random.hpp) by integer arithmetic only. The scenario of a seed depends on
// the limits and on the shipped catalogs (a GPU type added to topologies/gpus.json changes
// the types drawn).

#include <cstdint>
#include <string>

#include "scenarios/scenario.hpp"
#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi {
inline namespace studies {

// What a random scenario may be: each draw is uniform within these bounds.
struct RandomScenarioLimits {
  int min_gpus = 12;  // GPUs in the cluster, at least (>= 2: two types of one GPU each)
  int max_gpus = 90;  // and at most
  // The largest model drawn, in parameters: the default takes every Llama of 7B to 70B
  // (llama2-7b, llama3-8b, llama2-13b, llama-30b, llama2-70b, llama3-70b); 14e9 stops at 13B.
  double max_model_params = 71e9;
  int max_global_batch = 512;  // sequences; batches are drawn from {32, 64, 128, 256, 512}
};

// The models drawn, smallest first (names in scenarios/models.json).
inline constexpr const char* kRandomScenarioModels[] = {"llama2-7b", "llama3-8b",  "llama2-13b",
                                                        "llama-30b", "llama2-70b", "llama3-70b"};

// The scenario file (format version 1, its cluster inline and named "random-<seed>") of
// `seed`: 2 to 4 distinct GPU types of the catalog (CPU entries excluded), total GPUs uniform
// in [min_gpus, max_gpus], machines of one type each, with 1, 2, 4 or 8 GPUs (a type's machines
// share a size, but for smaller ones that make up the total); network "tcp" at 0.5-3 GB/s per
// machine NIC or "rdma" at 12.5-25 GB/s (in steps of 0.1 GB/s); global batch, seq_len (2048 or
// 4096, at most the model's) and model drawn from the limits. Bad input when the limits allow
// no scenario (min_gpus < 2 or > max_gpus, no model or batch within them).
Result<Json> random_user_scenario_json(std::uint64_t seed, const RandomScenarioLimits& limits,
                                       const GpuCatalog& gpus, const ModelCatalog& models);

// The same scenario, loaded (its file named "random-<seed>.json", which is never read).
Result<Scenario> random_user_scenario(std::uint64_t seed, const RandomScenarioLimits& limits,
                                      const GpuCatalog& gpus, const ModelCatalog& models);

// A cluster's machines in the mix form of `hexisim cluster gen --mix`, runs of consecutive
// machines of one type and size together: "A100-SXM-80GB:2x8,RTX4090:3x4".
std::string cluster_mix(const Cluster& cluster);

}  // namespace studies
}  // namespace hexi
