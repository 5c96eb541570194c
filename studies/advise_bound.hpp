#pragma once
// An upper bound on the tokens/s any plan can reach on a set of GPUs, for pruning mixes
// without planning them.
//
// Every compute kernel of the cost model takes at least FLOPs / (peak x eff(shape)) on its
// device (cost_model.hpp: time = overhead + max(compute, memory)), and no GEMM or
// attention shape is more efficient than its family's ceiling: eff <= best_efficiency =
// max(gemm_ceiling, flash attention forward / backward at an infinite sequence and the
// model's head dim). Whatever the plan (TP shards sum to the layer, pipelines to the batch,
// recompute only adds), one iteration executes at least F = the forward and backward
// FLOPs of the GEMM and attention kernels of every layer and the head without recompute,
// and a device computing for T seconds does at most T x peak x best_efficiency of them, so
//   T >= F / sum_d (peak_d x best_efficiency_d),
//   tokens/s <= tokens per iteration x sum_d (peak_d x best_efficiency_d) / F,
// a sum over GPUs: each GPU type contributes tokens_per_s_bound() per GPU.
//
// Pipeline plans (HexiScale) allow a tighter bound from the kernels' times themselves. A TP
// rank holding a share phi = k / heads of a layer spends at least the forward and backward
// kernel times of that layer at phi without recompute per micro-batch (the estimate's
// layer_s: overheads, memory-bound kernels and shapes included; recompute, communication
// and bubbles only add). So one whole layer of one micro-batch costs a GPU at least
// c = min over phi of time(phi) / phi, an iteration needs layers x micro-batches of them
// (the head's work only adds), and a GPU adds at most micro_batch x seq_len / (layers x c)
// tokens/s: layer_tokens_per_s_bound().

#include "scenarios/model.hpp"
#include "scenarios/training.hpp"
#include "topologies/gpu_catalog.hpp"
#include "topologies/profile.hpp"

namespace hexi {
inline namespace studies {

// The largest fraction of peak any GEMM or attention kernel of `m` reaches under `p`.
double best_efficiency(const DeviceProfile& p, const Model& m);

// F / tokens: the fewest FLOPs one token costs in any plan (elementwise kernels, whose time
// is memory-bound, left out).
double min_flops_per_token(const Model& m, const TrainingConfig& t);

// Tokens/s one GPU of this type can contribute at most: peak x best_efficiency / F per token.
double tokens_per_s_bound(const GpuSpec& gpu, const Profile& profile, const Model& m,
                          const TrainingConfig& t);

// The same for pipeline plans, from the layers' kernel times (above); never above
// tokens_per_s_bound's peak x best_efficiency but usually well below it.
double layer_tokens_per_s_bound(const GpuSpec& gpu, const Profile& profile, const Model& m,
                                const TrainingConfig& t);

}  // namespace studies
}  // namespace hexi
