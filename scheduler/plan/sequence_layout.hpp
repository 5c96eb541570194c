#pragma once
// A sequence mesh (HexiSeq, arXiv 2605.07569): the
// devices of one stage split into all-to-all groups that form a context-parallel ring over
// one sequence of S tokens.
//
//   "sequence": {"groups": [{"devices": [0, 1], "tokens": T_0, "shards": [s_0, s_1],
//                            "heads": [h_0, h_1]}, ...],
//                "split_kv_heads": true}
//
// Group g (ring order) holds T_g tokens in the mirrored layout (T_g/2 from the front of the
// sequence, T_g/2 mirrored from the back; cost/sequence.hpp), so its causal work is exactly
// T_g (S + 1) / 2 pairs. Inside the group device i holds s_i of those tokens (s_i/2 of the
// front half, s_i/2 of the back half; sum T_g) for the token-wise ops, and after a ragged
// Ulysses all-to-all the query heads [sum_{j<i} h_j, sum_{j<=i} h_j) of the whole group's
// T_g tokens (sum n_q). A head range that splits a GQA group replicates that kv head
// (kv_heads_needed); "split_kv_heads": false forbids it. Optional, default true.
//
// A group may instead be a tensor-parallel group, "parallel": "tensor" (default "ulysses"):
// its devices, in TP-rank order, split the layer's weights as a TP stage with head_split
// h_i does (query heads [sum_{j<i} h_j, ...) with their kv heads, phi_i = h_i / n_q of the ffn
// columns and of the vocabulary; every h_i >= 1), and run the linear layers on all T_g tokens
// of the group; s_i are the sequence-parallel shards (Megatron-LM's: norms, residual adds and
// the layer's input and output on s_i tokens, an all-gather of the T_g tokens before the QKV
// and MLP blocks and a reduce-scatter after each, padded to the largest shard). The ring runs
// between groups as for Ulysses groups: device i carries its h_i heads of the T_g queries.
// ZeRO 0-2 only (a layout with a tensor group refuses ZeRO-3).
//
// Model states: every device holds the whole model, ZeRO-sharded over the mesh by the
// training config's stage. Memory per device must stay within kMemoryCap of its capacity.

#include <cstdint>
#include <string>
#include <vector>

#include "scenarios/model.hpp"
#include "scenarios/training.hpp"
#include "scheduler/cost/sequence.hpp"
#include "topologies/cluster.hpp"
#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi {
inline namespace plan {

// A plan's devices may use at most this fraction of their memory (HexiSeq's memory
// constraint: headroom for allocator fragmentation).
inline constexpr double kMemoryCap = 0.95;

struct SequenceGroup {
  std::vector<int> devices;          // all-to-all rank order
  std::int64_t tokens = 0;           // T_g, even (mirrored halves)
  std::vector<std::int64_t> shards;  // s_i per device, even, sum T_g
  std::vector<int> heads;            // h_i query heads per device, sum n_q
  bool tensor = false;               // a tensor-parallel group ("parallel": "tensor")

  int size() const { return static_cast<int>(devices.size()); }
  bool operator==(const SequenceGroup&) const = default;
};

struct SequenceLayout {
  std::vector<SequenceGroup> groups;  // ring order
  bool split_kv_heads = true;         // a head range may split a GQA group (kv replicated)

  int num_devices() const;
  std::vector<int> devices() const;  // group by group, rank order
  bool has_tensor_groups() const;
  // Devices holding each parameter of the layers: one per tensor group, every device of a
  // Ulysses group (ZeRO's shards inside the mesh).
  int holders() const;
  bool operator==(const SequenceLayout&) const = default;
};

// How device `rank` of group `g` runs one layer's token-wise kernels (everything but the
// attention core) and the embedding and head: a Ulysses device on its s_i tokens with the
// whole weights; a tensor-parallel device on the group's T_g tokens with phi = h_i / n_q of
// the weights, its norms and residual adds on its s_i (share = s_i / T_g).
struct MemberWork {
  std::int64_t tokens = 0;
  double phi = 1.0;
  double share = 1.0;
  int tp = 1;  // the group's size for a tensor group (the activations' SP split)
};
MemberWork member_work(const SequenceGroup& g, int rank, int heads);
// Parameters device `rank` of group `g` holds: the whole model (Ulysses), or a TP rank's
// share of it (stage_params at phi = h_i / n_q: norms whole).
double member_params(const Model& m, const SequenceGroup& g, int rank);
// Bytes of one all-gather (or reduce-scatter) of a tensor group, in all: the hidden states of
// its T_g tokens, each device's part padded to the largest shard (n max_i s_i h e: NCCL's
// collectives take equal counts).
double tensor_group_bytes(const Model& m, const TrainingConfig& t, const SequenceGroup& g);
// The devices of a layout holding the weights of query head `head` (and of its share of the
// ffn and vocabulary): every device of a Ulysses group, the one of a tensor group whose heads
// hold it. The ZeRO shards and gradient all-reduce of that share run over them.
std::vector<int> head_holders(const SequenceLayout& layout, int head);
// The training config that cost_model's kernels see for that work: seq_len = its tokens,
// one sequence per micro-batch, sequence parallelism on for a tensor group.
TrainingConfig member_training(const TrainingConfig& t, const SequenceGroup& g, int rank);

// The attention one layer carries: d, n_q, n_kv and the training precision's bytes for Q,
// K, V, O and for dK, dV on the ring (`grad_bytes` 0: the training precision's).
AttentionShape attention_shape(const Model& m, const TrainingConfig& t, int grad_bytes = 0);

// The first query head of each device of a group (prefix sums of its heads).
std::vector<int> head_offsets(const SequenceGroup& g);

// The sequence positions device `rank` of group `g` holds: its front rows (inside its group's
// front range) and its back rows (inside the group's mirrored back range), each ascending.
// The layout must be structurally valid (S = the groups' tokens).
MirroredShard device_tokens(const SequenceLayout& layout, int g, int rank);

// Equal split of `tokens` over `parts` in whole blocks of 2 (the mirrored halves): the first
// parts take one more block where it does not divide.
std::vector<std::int64_t> even_split(std::int64_t tokens, int parts);
// Equal heads over `parts`: n_q / parts each, the first parts one more where it does not
// divide.
std::vector<int> even_heads(int heads, int parts);
// The layout of `groups` (ring order) with equal shards per device (T_g = S n_g / P) and
// equal heads per group.
SequenceLayout even_layout(const std::vector<std::vector<int>>& groups, std::int64_t sequence,
                           int heads);

// What one device of a layout holds at its peak.
struct DeviceMemory {
  int device = 0;
  int group = 0;
  int rank = 0;         // inside the group
  SequenceMemory mesh;  // model states, activations, ring and all-to-all buffers, reserve
  double logits = 0;    // bytes: logits + fp32 softmax of its s_i tokens (cost_model's)
  double capacity = 0;  // bytes, the device's whole memory
  double total() const { return mesh.total() + logits; }
  double limit() const { return kMemoryCap * capacity; }
};

// Memory of every device of the layout (group by group, rank order). Model states: the
// whole model (model.params()) under the training config's ZeRO stage over every device of
// the mesh; activations of all layers for its s_i tokens (the training config's recompute);
// ring buffers by the longest group (none for one group); all-to-all buffers for T_g tokens
// of its h_i heads and their kv heads. The layout must be structurally valid.
std::vector<DeviceMemory> layout_memory(const SequenceLayout& layout, const Model& m,
                                        const TrainingConfig& t, const Cluster& cluster);

// What device `device` of a mesh that is one stage of a pipeline plan holds at its peak (the
// estimate, the simulator and the engine's preflight agree on it): cost_model's memory of
// `stage` (its layers, first / last, micro-batches in flight, dp pipelines) as a TP-1 stage
// holding the layers whole, at its s_i tokens per micro-batch, ZeRO-1 sharding over its
// holders (the other pipelines' and its mesh's: dp + n - 1), plus one layer's ring and
// all-to-all buffers (as layout_memory's) among the activations.
MemoryBreakdown mesh_stage_memory(const SequenceLayout& layout, int device, const Model& m,
                                  const TrainingConfig& t, StageShape stage);

// Structure and memory against the cluster, model and training config. Errors name
// `origin`, the JSON path (/sequence/groups/1/shards), the device and the numbers: a group
// without devices, shards or heads of the wrong count, a negative or odd value, shards not
// summing to T_g, heads not summing to n_q, a head range splitting a GQA group where
// split_kv_heads is false, groups' tokens not summing to S (the training's seq_len), a
// device out of range or in two groups, a device over kMemoryCap of its memory.
Status validate(const SequenceLayout& layout, const Model& m, const TrainingConfig& t,
                const Cluster& cluster, const std::string& origin);

// validate() without the memory check, errors naming the JSON path `path` of the layout (a
// mesh stage of a pipeline plan: /pipelines/0/stages/1/sequence; its memory is the
// estimate's, which knows the stage's layers and micro-batches in flight).
Status validate_structure(const SequenceLayout& layout, const Model& m, const TrainingConfig& t,
                          const Cluster& cluster, const std::string& origin,
                          const std::string& path);

// The "sequence" object: {"groups": [...], "split_kv_heads": ...}.
Json to_json(const SequenceLayout& layout);
// Reads a "sequence" object (syntax only: types, counts, non-negative values; validate()
// checks the rest). Errors name `origin` and the JSON path below `path`.
Result<SequenceLayout> layout_from_json(const Json& sequence, const std::string& origin,
                                        const std::string& path = "/sequence");
// Reads it from the node of a document already being walked (throws InputError).
SequenceLayout read_layout(const JsonNode& node);

// The rings of a layout: one sub-ring per interval of the common refinement of every
// group's head ranges, and which rank of each group holds each interval.
struct SubRings {
  std::vector<int> bounds;              // interval m = [bounds[m], bounds[m + 1])
  std::vector<int> kv;                  // kv heads interval m carries (kv_heads_needed)
  std::vector<std::vector<int>> owner;  // [group][m]: the rank holding interval m
};
SubRings sub_rings(const AttentionShape& a, const SequenceLayout& layout);

}  // namespace plan
}  // namespace hexi
