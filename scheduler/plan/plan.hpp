#pragma once
// A parallel plan (plan JSON, format version 1; one format for every scheduler):
//   {"version": 1, "pipelines": [{"batch": 32, "micro_batch": 1,
//     "stages": [{"devices": [0, 1], "layers": [0, 16]}, ...]}, ...]}
// Each pipeline takes its share of the global batch (uneven allowed); each stage
// lists its devices (the TP group, in TP-rank order) and the layer range [l0, l1), empty
// only on a pipeline's first stage (the embedding alone) or last (the head alone).
// Optional per stage: "head_split": heads per device (uneven TP; default even);
// "expert_split" (mixtures of experts): whole routed experts per device, summing to the
// model's experts (expert parallelism over the TP group, a device may hold none; given on
// one stage, every TP stage of the plan gives it); without it every expert is split by
// columns over the group as the MLP is;
// "recompute": "none" | "selective" | "full" (the stage's activation recompute;
// default: the scenario's training.recompute).
// A stage may be a sequence mesh (HexiSeq) instead of a TP group: it carries
//   "sequence": {"groups": [...], "split_kv_heads": ...}
// (the whole-plan layout's object, scheduler/plan/sequence_layout.hpp) and its devices are the
// mesh's, group by group in rank order ("devices" may be left out; if given, it must list
// them so). Such a stage runs each micro-batch, one sequence (its pipeline's micro_batch
// must be 1), through its layers as the mesh runs it: token shards, ragged all-to-alls and
// the ring; every device of a Ulysses group holds the stage's whole weights, a tensor group's
// devices their TP shares (sequence_layout.hpp). Not with head_split,
// recompute (the training config's) or interleaving (ZeRO 0-1, as every pipeline plan). Two
// mesh stages may follow each other with different layouts.
// Details: scheduler/README.md, "Sequence meshes as pipeline stages".
// Optional top level: "scheduler", "comment" (free text, kept on round trips).
//
// Interleaved 1F1B (Megatron-LM's virtual pipeline stages) needs no other field: a pipeline
// whose device groups appear more than once is interleaved. Its stages are its virtual
// stages in pipeline order; with p device groups (the stages before the first one whose
// devices are stage 0's) stage i runs on group i mod p as its chunk i div p, so every group
// appears v = stages / p times, in the same cyclic order:
//   p = 2, v = 2, 16 layers: [g0: 0-4] [g1: 4-9] [g0: 9-12] [g1: 12-16]
// (g0 holds layers 0-4 and 9-12 as chunks 0 and 1). Layers per chunk may differ (each at
// least one but the first and last chunk: Megatron-LM's layout of large jobs gives them the
// embedding and the head alone). A micro-batch goes through groups 0..p-1 v times; the wrap from
// group p - 1's chunk c to group 0's chunk c + 1 is a stage boundary like any other. Such a
// pipeline runs interleaved 1F1B (scheduler/cost/schedule.hpp) under training.schedule "1f1b"
// (GPipe is refused); every stage of a group has its devices, head_split and recompute.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "scenarios/model.hpp"
#include "scenarios/training.hpp"
#include "scheduler/plan/sequence_layout.hpp"
#include "topologies/cluster.hpp"
#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi {
inline namespace plan {

struct Stage {
  std::vector<int> devices;  // TP group, TP-rank order (a mesh: group by group, rank order)
  int layer_begin = 0;
  int layer_end = 0;
  std::vector<int> head_split;             // empty: even split; else heads per device
  std::optional<Recompute> recompute;      // absent: the training config's
  std::optional<SequenceLayout> sequence;  // a sequence mesh stage: devices are its devices
  std::vector<int> expert_split = {};      // MoE: whole experts per device; empty: by columns

  bool mesh() const { return sequence.has_value(); }
  int tp() const { return static_cast<int>(devices.size()); }
  int layers() const { return layer_end - layer_begin; }
  // Fraction of heads (and ffn / vocab columns) on TP rank r.
  double phi(int rank, int heads) const;
  // Fraction of the routed experts TP rank r holds whole (expert_split, which sums to them),
  // or -1 when every expert is split by columns (phi of each).
  double expert_share(int rank) const;
  // The largest fraction over the group (the slowest rank of an even-speed group).
  double max_phi(int heads) const;
  // The recompute this stage runs under a training config.
  Recompute recompute_in(const TrainingConfig& t) const { return recompute.value_or(t.recompute); }
};

struct Pipeline {
  int batch = 0;        // sequences per iteration
  int micro_batch = 1;  // sequences per micro-batch
  std::vector<Stage> stages;

  int micro_batches() const { return batch / micro_batch; }
  int num_devices() const;
  // Interleaved pipelines (header comment): p device groups with v chunks each; a plain
  // pipeline has groups() == stages.size() and chunks() == 1.
  int groups() const;
  int chunks() const { return groups() > 0 ? static_cast<int>(stages.size()) / groups() : 1; }
  bool has_mesh() const;  // some stage is a sequence mesh
};

struct Plan {
  std::string scheduler;  // who made it ("hand" if unknown)
  std::string comment;
  std::vector<Pipeline> pipelines;

  int num_devices() const;
  std::vector<int> devices() const;  // all devices used, pipeline by pipeline
  bool has_mesh() const;             // some pipeline has a sequence mesh stage
  // Some stage gives an expert_split (the plan validates only if every TP stage does).
  bool whole_experts() const;
};

// One stage-boundary message next to a mesh stage: sequence rows [begin, end) (token
// positions; micro_batch is 1) from device `from` to device `to`.
struct MeshMessage {
  int from = 0;
  int to = 0;
  TokenRange rows;
};
// The messages of the boundary `from` -> `to` (either direction: activations forward,
// their gradients back) where one side is a mesh stage: into a mesh, mesh device i (flat
// index, group by group) gets its front and back rows (plan::device_tokens) from TP rank
// i * ts / n of the other stage, which holds the whole sequence; out of a mesh, every mesh
// device sends its front and back rows to every TP rank (which then holds the whole
// sequence: no all-gather); mesh to mesh, each destination device gets the part of its front
// and back rows that each source device holds (fronts tile [0, S/2), backs [S/2, S): at most
// one front and one back message per pair). Empty ranges are left out. Neither side a mesh:
// empty.
std::vector<MeshMessage> mesh_boundary(const Stage& from, const Stage& to);

// Syntax and local consistency (types, ranges, head_split sizes).
Result<Plan> plan_from_json(const Json& json, const std::string& origin);
Result<Plan> load_plan(const std::filesystem::path& path);
Json to_json(const Plan& plan);
// Canonical JSON text (2-space indent, fixed key order): same plan -> same bytes.
std::string plan_text(const Plan& plan);

// Structural validity against the cluster, model and training config: devices exist
// and are used at most once, stages cover [0, L) exactly with no gaps or overlaps,
// batch shares sum to the global batch in whole micro-batches, TP degrees divide the
// heads (or an explicit head_split); a mesh stage's layout is structurally valid
// (plan::validate_structure: tokens summing to seq_len...), its pipeline has micro_batch
// 1 and is not interleaved. Errors name
// `origin` and the JSON path.
// Memory is checked by the estimate (it needs the cost model), see estimate.hpp.
Status validate_plan(const Plan& plan, const Cluster& cluster, const Model& model,
                     const TrainingConfig& training, const std::string& origin);

}  // namespace plan
}  // namespace hexi
