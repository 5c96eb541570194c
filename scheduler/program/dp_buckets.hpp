#pragma once
// Gradient-synchronisation buckets of a plan whose pipelines may shard layers
// differently (rules in program.hpp, "DP gradient synchronisation").
//
// Every parameter is cut at the shard boundaries of all its holders: query heads
// (wq, wo), kv heads (wk, wv), ffn units (gate/up rows, down columns; fc1/fc2),
// vocab rows (embedding, output head). A TP rank holding query heads [a0, a1)
// holds kv heads [floor(a0*k/a), ceil(a1*k/a)), ffn units [floor(f*a0/a),
// floor(f*a1/a)) and vocab rows [floor(V*a0/a), floor(V*a1/a)). Each piece's
// holder set becomes the all-reduce (or reduce-scatter + all-gather) group of
// its bucket. This is at least as fine as FlashFlex's "split the smaller-TP
// shard into max_tp/tp pieces" and equals the 1/lcm(t) pieces the closed-form
// estimate assumes for even splits; it also handles uneven head splits and
// replicated kv heads.

#include <vector>

#include "scenarios/model.hpp"
#include "scheduler/plan/plan.hpp"
#include "scheduler/program/program.hpp"

namespace hexi {
inline namespace program {

// A rank's shard along each sharded axis, from its query heads [a0, a1).
struct ShardRanges {
  int head_begin = 0, head_end = 0;
  int kv_begin = 0, kv_end = 0;
  int ffn_begin = 0, ffn_end = 0;        // dense: MLP columns; MoE: every routed expert's columns
  int shared_begin = 0, shared_end = 0;  // MoE: the shared experts' columns
  int expert_begin = 0, expert_end = 0;  // MoE with an expert_split: the experts held whole
  int vocab_begin = 0, vocab_end = 0;
};
ShardRanges shard_ranges(const Model& model, int head_begin, int head_end);
// Query heads [a0, a1) of TP rank `rank` of a stage (even split or head_split).
std::pair<int, int> head_range(const Stage& stage, int rank, int heads);
// TP rank `rank` of a (non-mesh) stage: shard_ranges of its heads, and with an expert_split
// its whole experts, after those of the lower ranks.
ShardRanges stage_ranges(const Stage& stage, int rank, const Model& model);

struct DpBuckets {
  std::vector<Bucket> buckets;  // in the global issue order; Bucket::group indexes `groups`
  std::vector<std::vector<int>> groups;  // holder sets (ascending device ids), >= 2 members
  // Per device id (cluster-sized): parameters its optimizer updates.
  std::vector<double> owned_params;
  // Per device id: the buckets it joins, in issue order.
  std::vector<std::vector<int>> device_buckets;
  // Per device id: bytes-worth elements of replicated parameters it holds (norms...).
  std::vector<double> replicated_params;
};

// zero_stage 1 shards each bucket's optimizer state over its members.
DpBuckets plan_dp_buckets(const Plan& plan, const Model& model, int zero_stage, int num_devices);

}  // namespace program
}  // namespace hexi
