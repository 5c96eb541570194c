#pragma once
// The program: a plan lowered into an ordered list of operations per device
// (the seam of the data flow). The simulator (sim/) and the engine (engine/) execute the same
// program op for op; op ids are shared by simulated and measured traces.
// Program JSON, format version 1 (written by `hexisim lower`, read back by
// read_program()). scheduler/program/lower.hpp builds programs from plans.
//
// ---------------------------------------------------------------------------
// Execution semantics (what an engine must do; the simulator does exactly this)
// ---------------------------------------------------------------------------
// Every op belongs to one device and one stream of that device:
//   compute  compute ops and the TP-group collectives (Megatron runs its TP
//            all-reduces on the compute stream); one op at a time, list order.
//   p2p      point-to-point sends/receives; one FIFO channel per (device, peer,
//            direction, and whether it carries stage-boundary gradients): two messages
//            on one channel are matched and delivered in list order; different
//            channels proceed concurrently. (A pipeline sends activations and
//            gradients between the same two devices only when it is interleaved.)
//   gather   the all-gather that completes a stage-boundary transfer; FIFO.
//   dp       gradient synchronisation across pipelines (and ZeRO all-gathers);
//            FIFO.
// An op starts when (1) the previous op of its stream (channel, for p2p) has
// completed and (2) every op in its `deps` (any device) has completed. Streams of
// one device run concurrently. A send/recv pair moves its bytes once both ends have
// started and both complete when the data has arrived (rendezvous, like NCCL
// send/recv). A collective starts when every member of its group has started its
// op of the same `instance`, and completes on all members together. On each group,
// all members issue the group's collectives in the same order (checked by the
// reader); each group is used by exactly one stream.
//
// Tensors moved (b = micro-batch, s = sequence, h = hidden, e = bytes/element,
// R = b*s token rows; activations are (R, h) row-major, replicated on every rank
// of a TP group after Megatron's all-reduce; under the training config's
// sequence_parallel, see "Sequence parallelism" below):
//   activation / activation_grad (TP all-reduce: sum; bytes = e*R*h)
//     forward: after each attention and MLP block, and after the vocab-parallel
//     embedding (first stage); backward: after each block's input gradient, and
//     after the logits' input gradient (last stage). Full recompute replays the
//     forward (with its two all-reduces) before a layer's backward.
//   loss_stats (last stage, TP > 1): all-gather of 3 fp32 values per token row
//     (local max logit, local sum of exp(logit - local max), target logit or 0);
//     each rank combines them into the global log-sum-exp. bytes = 12*R*t.
//   Stage boundary (pipeline stage i -> i+1, TP degrees ts -> td; backward the
//     same with the roles swapped): the (R, h) tensor is cut into td pieces,
//     piece j = rows [j*R/td, (j+1)*R/td) (integer division), sent from source
//     rank floor(j*ts/td) to destination rank j; then the destination group
//     all-gathers the pieces (td > 1) so every rank holds the whole tensor.
//     When ts >= td this is "chunk c from src rank c*ts/n to dst rank c*td/n,
//     n = min(ts, td)"; when ts < td each source rank sends its chunk as td/ts
//     sub-pieces, one to each destination rank, so that the all-gather has equal
//     parts (the per-sender bytes and the bottleneck equal CostModel::transfer_s).
//   grad_bucket / weight_bucket (DP, below).
//   Sequence parallelism (Megatron-LM's; TP > 1): between the TP regions rank i of a
//     group of t holds token rows [i*R/t, (i+1)*R/t) only. Each TP all-reduce above
//     is a reduce-scatter (same tensor, same bytes), and an all-gather (bytes = e*R*h)
//     comes before each block, before the head (forward) and before the
//     embedding's backward; the norms, residual adds and dropout run on the rank's
//     rows (their kernels' bytes scaled by 1/t). Stage boundaries send each overlap of
//     a source rank's rows with a destination rank's (boundary_pieces) and do not
//     all-gather. Megatron re-gathers a column-parallel GEMM's input in the backward,
//     overlapped with its input-gradient GEMM; that overlap is taken as complete and
//     the re-gather has no op. Simulated and estimated; the engine refuses it.
//
// TP shards. A TP rank holding query heads [a0, a1) of a heads (even split or the
// stage's head_split) holds: wq rows and wo columns of those heads; kv heads
// [floor(a0*k/a), ceil(a1*k/a)) of wk and wv (replicated on several ranks when
// t > k); ffn units [floor(f*a0/a), floor(f*a1/a)) of gate/up rows and down
// columns (fc1 rows, fc2 columns for GELU); vocab rows [floor(V*a0/a),
// floor(V*a1/a)) of the embedding (first stage) and of the output head (last
// stage); norms, row-parallel output biases and learned positions replicated.
//
// Loss scaling for uneven batches: pipeline p runs batch_p / micro_batch_p
// micro-batches; each micro-batch's loss is its mean token loss multiplied by
// loss_scale = micro_batch_p / global_batch, so that the sum of all gradients over
// micro-batches and pipelines (DP reduction = SUM) is the gradient of the mean loss
// over the global batch.
//
// DP gradient synchronisation (pipelines may shard a layer differently):
//   Every parameter element is held by a set of devices (its holders). Sharded
//   parameters are cut at every holder's shard boundary (in heads, kv heads, ffn
//   units or vocab rows) across all pipelines; each piece's holders are the ranks
//   whose shards contain it (one per pipeline, several when kv heads are
//   replicated: those hold partial gradients and are summed too). Replicated
//   parameters (norms, ...) are held, for synchronisation, by TP rank 0 of each
//   stage holding them; TP rank 0 broadcasts them to its TP group after the update
//   (op `replicas.bcast`). A bucket is a maximal run of consecutive layers' pieces
//   with the same holder set; its group is that holder set (in device order). The
//   bucket's flat buffer concatenates its segments in listed order, each segment
//   the row-major sub-matrix of the parameter's gradient selected by [begin, end)
//   along its sharded axis (the whole tensor for replicated parameters).
//   zero_stage 0: all-reduce (sum) of the bucket, then Adam on the whole shard.
//   zero_stage 1: reduce-scatter (member i of n gets elements [i*E/n, (i+1)*E/n)),
//   Adam on the owned elements only, all-gather of the updated weights.
//   Buckets are issued in one global order (descending layers: head first,
//   embedding last), so overlapping groups cannot deadlock. DP sync starts after a
//   device's last backward op (no overlap with backward, as Megatron's default and
//   the closed-form estimate).
//
// Sequence meshes (HexiSeq; scheduler/plan/sequence_layout.hpp; Program::sequence). A program
// lowered from a sequence layout (lower_sequence.hpp) runs global_batch sequences one after
// another through one mesh; every device holds the whole model (ZeRO-sharded over the mesh)
// and is pipeline 0, stage 0 of 1, TP 1, micro_batch = the sequence index. Device i of group
// g (group size n, P groups in ring order) holds s_i tokens for the token-wise ops and query
// heads H_i (kv heads K_i, kv_heads_needed) of its group's T_g tokens for attention. Per
// layer, forward:
//   pre.fwd (shard); all-to-all in: to each peer j of the group a qkv send of Q, K, V of its
//   s_i tokens for H_j, K_j (bytes s_i (|H_j| + 2 |K_j|) d e), from each a qkv recv;
//   P ring.fwd steps: step k computes H_i against the block of group g-k (`step` = k; the
//   mirrored layout's causal pairs, cost/sequence.hpp); for k < P-1 the block's K, V are
//   passed on (kv send, dep: the block is here) to the holders of the same heads in group
//   g+1 and the next block received (kv recv from group g-1), one message per peer holding
//   an interval of the common refinement of the groups' head ranges (2 T_b kv d e bytes, kv
//   the intervals' kv heads summed, as the closed form's sub-rings); step k+1 waits for it;
//   all-to-all out: attn_out sends of O (s_j |H_i| d e) after the last step, recvs; post.fwd.
// Backward of a layer (after the head): under full recompute pre.recompute, the qkv
// all-to-all, P ring.recompute steps with their kv messages and the attn_out all-to-all
// replay the forward; post.bwd; attn_out_grad all-to-all (dO); P ring.bwd steps: K, V passed
// on at the step's start as forward (kv), and after the step's compute the block's
// accumulated dK, dV (kv_grad, 2 T_b kv d e_grad bytes, dep: the step and the dK, dV of the
// block received from group g-1 at steps k >= 1), P of them: the last brings each block's
// dK, dV home; the qkv_grad all-to-all (dQ, dK, dV, the qkv bytes back); pre.bwd.
// Every device: embedding.fwd before the first layer and head.fwd, head.bwd after the last
// one on its s_i tokens, embedding.bwd after the first layer's backward. ZeRO-3: an
// all-gather (weight_bucket, dp stream, group = the mesh) of each layer's weights before its
// pre.fwd and before its backward (issued one layer ahead), and a reduce-scatter
// (grad_bucket) of its gradients after its pre.bwd; ZeRO 0-2: the DP rules below over the
// mesh (one holder set: every device) after the last sequence. Then the optimizer.
//
// A mesh as one stage of a pipeline plan (plan.hpp; Program::meshes, DeviceLayout::mesh):
// its devices run the ops above for their stage's layers only (embedding / head where the
// stage is first / last), micro-batch j being the pipeline's j-th sequence, in the
// pipeline's 1F1B or GPipe order; several micro-batches may be in flight. A stage boundary
// next to it carries sequence rows (rows_begin, rows_end = token positions): into the mesh,
// device i's front and back rows (two messages, tags 2j and 2j + 1 per pair of devices) from
// TP rank i t / n, which holds the whole sequence; out of it, every device's rows to every
// TP rank (no all-gather). The receiver's next compute op waits for all of its recvs. Its
// devices are DP holders of the whole stage (the DP rules below; ZeRO 0-1).
//
// Granularity: `layer` (one op per block per layer per micro-batch; what engines
// run) or `stage` (a stage's forward / backward of one micro-batch fused into one
// compute op; TP collectives inside one machine folded into it, listed in
// `folded`, and timed analytically by the simulator). Stages whose TP group spans
// machines keep layer granularity.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/cost/collectives.hpp"
#include "scheduler/cost/cost_model.hpp"
#include "scheduler/plan/sequence_layout.hpp"
#include "topologies/enum_names.hpp"
#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi {
inline namespace program {

enum class OpKind : std::uint8_t { kCompute, kSend, kRecv, kCollective };
inline constexpr auto kOpKindNames = enum_names<OpKind>({{OpKind::kCompute, "compute"},
                                                         {OpKind::kSend, "send"},
                                                         {OpKind::kRecv, "recv"},
                                                         {OpKind::kCollective, "collective"}});
enum class Stream : std::uint8_t { kCompute, kP2p, kGather, kDp };
inline constexpr auto kStreamNames = enum_names<Stream>({{Stream::kCompute, "compute"},
                                                         {Stream::kP2p, "p2p"},
                                                         {Stream::kGather, "gather"},
                                                         {Stream::kDp, "dp"}});

// What a compute op computes.
enum class ComputeKind : std::uint8_t {
  kEmbeddingFwd,
  kEmbeddingBwd,
  kAttnFwd,
  kAttnBwd,
  kAttnRecompute,  // full recompute: the attention block's forward replayed in backward
  kMlpFwd,
  kMlpBwd,
  kMlpRecompute,
  kHeadFwd,   // final norm, logits, local cross-entropy statistics
  kHeadBwd,   // cross-entropy gradient (scaled by loss_scale), logits and norm backward
  kStageFwd,  // stage granularity: the stage's whole forward of one micro-batch
  kStageBwd,
  kOptimizer,  // Adam over the device's owned parameters
  // Sequence meshes (below): one layer split around its attention core.
  kPreFwd,        // attention norm + QKV projection (+ RoPE) of the device's shard
  kRingFwd,       // the attention core of its heads against one ring block
  kPostFwd,       // output projection + MLP block of the shard
  kPreRecompute,  // full recompute: the forward replayed before the layer's backward
  kRingRecompute,
  kPostRecompute,
  kPostBwd,  // MLP block + output projection backward
  kRingBwd,  // the attention core's backward against one ring block
  kPreBwd,   // QKV projection + attention norm backward
};
inline constexpr auto kComputeKindNames =
    enum_names<ComputeKind>({{ComputeKind::kEmbeddingFwd, "embedding.fwd"},
                             {ComputeKind::kEmbeddingBwd, "embedding.bwd"},
                             {ComputeKind::kAttnFwd, "attn.fwd"},
                             {ComputeKind::kAttnBwd, "attn.bwd"},
                             {ComputeKind::kAttnRecompute, "attn.recompute"},
                             {ComputeKind::kMlpFwd, "mlp.fwd"},
                             {ComputeKind::kMlpBwd, "mlp.bwd"},
                             {ComputeKind::kMlpRecompute, "mlp.recompute"},
                             {ComputeKind::kHeadFwd, "head.fwd"},
                             {ComputeKind::kHeadBwd, "head.bwd"},
                             {ComputeKind::kStageFwd, "stage.fwd"},
                             {ComputeKind::kStageBwd, "stage.bwd"},
                             {ComputeKind::kOptimizer, "optimizer"},
                             {ComputeKind::kPreFwd, "pre.fwd"},
                             {ComputeKind::kRingFwd, "ring.fwd"},
                             {ComputeKind::kPostFwd, "post.fwd"},
                             {ComputeKind::kPreRecompute, "pre.recompute"},
                             {ComputeKind::kRingRecompute, "ring.recompute"},
                             {ComputeKind::kPostRecompute, "post.recompute"},
                             {ComputeKind::kPostBwd, "post.bwd"},
                             {ComputeKind::kRingBwd, "ring.bwd"},
                             {ComputeKind::kPreBwd, "pre.bwd"}});
// Forward compute (recompute excluded) / backward compute (recompute included).
bool is_forward(ComputeKind k);
bool is_backward(ComputeKind k);

// What a communication op moves.
enum class TensorKind : std::uint8_t {
  kActivation,      // (R, h) forward activations
  kActivationGrad,  // (R, h) their gradients
  kLossStats,       // (R, 3) fp32 per TP rank
  kGradBucket,      // DP bucket of gradients
  kWeightBucket,    // DP bucket of updated weights (ZeRO-1 all-gather)
  kReplicas,        // replicated parameters of a stage (broadcast from TP rank 0)
  // Sequence meshes (below):
  kQkv,          // Ulysses all-to-all in: Q, K, V of a shard's tokens for the peer's heads
  kAttnOut,      // Ulysses all-to-all out: attention output O back to the tokens' holder
  kAttnOutGrad,  // backward: dO of a shard's tokens for the peer's heads
  kQkvGrad,      // backward: dQ, dK, dV back to the tokens' holder
  kKv,           // ring: a block's K, V passed to the next group
  kKvGrad,       // ring backward: a block's accumulated dK, dV passed on (the last: home)
};
inline constexpr auto kTensorKindNames =
    enum_names<TensorKind>({{TensorKind::kActivation, "activation"},
                            {TensorKind::kActivationGrad, "activation_grad"},
                            {TensorKind::kLossStats, "loss_stats"},
                            {TensorKind::kGradBucket, "grad_bucket"},
                            {TensorKind::kWeightBucket, "weight_bucket"},
                            {TensorKind::kReplicas, "replicas"},
                            {TensorKind::kQkv, "qkv"},
                            {TensorKind::kAttnOut, "attn_out"},
                            {TensorKind::kAttnOutGrad, "attn_out_grad"},
                            {TensorKind::kQkvGrad, "qkv_grad"},
                            {TensorKind::kKv, "kv"},
                            {TensorKind::kKvGrad, "kv_grad"}});
// The Ulysses all-to-all and ring tensors of sequence meshes.
bool is_ulysses(TensorKind k);
bool is_ring(TensorKind k);

enum class GroupKind : std::uint8_t {
  kTp,      // a stage's TP group: TP collectives (compute stream)
  kGather,  // the same devices: all-gathers after a stage-boundary transfer
  kDp,      // a DP bucket's holders
};
inline constexpr auto kGroupKindNames = enum_names<GroupKind>(
    {{GroupKind::kTp, "tp"}, {GroupKind::kGather, "gather"}, {GroupKind::kDp, "dp"}});

std::string_view to_string(OpKind k);
std::string_view to_string(Stream s);
std::string_view to_string(ComputeKind k);
std::string_view to_string(TensorKind k);
std::string_view to_string(GroupKind k);

// A stable string_view for a kernel name read from a file (Kernel::name views
// static storage; names of shipped kernels are literals already).
std::string_view intern_name(std::string_view name);

struct Op {
  int device = 0;
  OpKind kind = OpKind::kCompute;
  Stream stream = Stream::kCompute;
  ComputeKind compute = ComputeKind::kAttnFwd;     // kCompute
  TensorKind tensor = TensorKind::kActivation;     // communication ops
  Collective collective = Collective::kAllReduce;  // kCollective
  int layer = -1;        // compute: its layer (-1 embedding/head/optimizer/stage ops)
  int micro_batch = -1;  // compute and activation transfers; -1 otherwise
  int shape = -1;        // compute: index into Program::shapes
  int peer = -1;         // send: destination device; recv: source device
  int tag = -1;          // send/recv: message id, equal on both ends (increasing per pair)
  int group = -1;        // collective: index into Program::groups
  int instance = -1;     // collective: sequence number on its group, equal on all members
  int bucket = -1;       // grad/weight bucket ops: index into Program::buckets
  int rows_begin = 0;    // send/recv: token rows [rows_begin, rows_end) of the (R, h) tensor
  int rows_end = 0;
  int folded = -1;               // stage compute ops: index into Program::folds (-1: none)
  int step = -1;                 // sequence meshes: ring step (ring compute, kv, kv_grad)
  int chunk = 0;                 // interleaved pipelines: the device's chunk the op belongs to
  double bytes = 0;              // send/recv: message bytes; collective: S as in collectives.hpp
  std::uint32_t deps_begin = 0;  // into Program::dep_ids
  std::uint32_t deps_count = 0;
};

// The kernels of one compute op class on one TP shard (shared by many ops).
struct Shape {
  ComputeKind kind = ComputeKind::kAttnFwd;
  int micro_batch = 0;          // sequences
  double phi = 1.0;             // fraction of heads / ffn / vocab of the rank
  int layers = 0;               // stage ops: layers fused (0 otherwise)
  std::vector<Kernel> kernels;  // names interned (see intern_name), so Shapes copy safely

  double flops() const { return kernels_flops(kernels); }
  double bytes() const;
};

// TP collectives folded into a stage-granularity compute op: `count` collectives
// of `bytes` on `group` (all inside one machine), timed by the ring formula.
// Or (mesh >= 0, group -1) a mesh stage's pass at stage granularity: the sequence mesh
// Program::meshes[mesh] through `layers` layers, with the embedding where `first` and the
// head where `last`, forward or backward: the op lasts the closed form's time of that pass
// (estimate.hpp's CostModel::mesh_stage: token-wise work, all-to-alls or TP collectives, the
// ring in lockstep), its kernels being the device's compute inside it.
struct Fold {
  int group = -1;
  Collective collective = Collective::kAllReduce;
  double bytes = 0;
  int count = 0;
  double loss_stats_bytes = 0;  // one loss-stats all-gather (last stage), 0 if none
  int mesh = -1;
  int layers = 0;
  bool first = false, last = false, forward = true;
};

struct Group {
  GroupKind kind = GroupKind::kTp;
  std::vector<int> devices;  // ring order
  // A replica-folded program (ReplicaFold): the whole group across every pipeline, whose
  // collectives `devices` (the simulated pipelines' members) run; empty otherwise.
  std::vector<int> whole;
};

// Replica folding (scheduler/program/replica_fold.hpp): a plan whose pipelines are
// identical, on machines and leaves that a shift by `simulated` pipelines maps onto each other
// (and whose gradient rings it maps onto themselves), runs the same on every pipeline; a
// folded program holds the first `simulated` of its `pipelines` pipelines only. Each
// collective across pipelines keeps its whole group (Group::whole); the simulator runs the
// flows leaving the simulated devices, each towards a device outside them charged on the
// links of its image inside them (`image`), which carry the same traffic by symmetry. Never
// in program JSON (programs written by `lower` are whole).
struct ReplicaFold {
  int pipelines = 0;       // the plan's
  int simulated = 0;       // pipelines the program holds (== pipelines: not folded)
  std::string why_not;     // why the plan does not fold further (empty when it folds)
  std::vector<int> image;  // per cluster device: its counterpart in the simulated pipelines
                           // (itself there; -1 unused)
  // Per leaf: the share of its uplink the simulated pipelines' flows get (a leaf that other
  // pipelines use too carries their images of the same flows at the same time); 1 elsewhere.
  std::vector<double> uplink_share;
  bool folded() const { return simulated > 0 && simulated < pipelines; }
  int factor() const { return folded() ? pipelines / simulated : 1; }
};

// A piece of one parameter in a DP bucket.
struct ParamSegment {
  std::string param;  // wq wk wv wo w_gate w_up w_down fc1 fc2 attn_norm mlp_norm ...
  int layer = -1;     // -1 embedding / positions, -2 output head / final norm
  int begin = 0;      // along the sharded axis (heads, kv heads, ffn units, vocab rows);
  int end = 0;        //   [0, 0) for replicated parameters (the whole tensor)
  double elements = 0;
};

struct Bucket {
  int group = -1;
  double elements = 0;  // parameters in the flat buffer
  std::vector<ParamSegment> segments;
};

// One chunk of a device in an interleaved pipeline: virtual stage `stage` (chunk c of group
// r is stage c * p + r), layers [layer_begin, layer_end), whether it is the pipeline's
// first (embedding) or last (head) virtual stage.
struct ChunkLayout {
  int stage = 0;
  int layer_begin = 0, layer_end = 0;
  bool first = false, last = false;
};

// Where a device sits in the plan and which shard it holds.
struct DeviceLayout {
  int device = 0;
  int pipeline = 0;
  int stage = 0;
  int stages = 0;
  int tp_rank = 0;
  int tp = 1;
  int tp_group = -1;      // Program::groups index (-1 when tp == 1)
  int gather_group = -1;  // idem
  int layer_begin = 0, layer_end = 0;
  bool first = false, last = false;
  int head_begin = 0, head_end = 0;    // query heads
  int kv_begin = 0, kv_end = 0;        // kv heads
  int ffn_begin = 0, ffn_end = 0;      // ffn units
  int vocab_begin = 0, vocab_end = 0;  // vocab rows (embedding and head)
  double phi = 1.0;                    // (head_end - head_begin) / heads
  double experts = -1;  // MoE: fraction of the routed experts held whole; < 0: phi of each
  // MoE (lowering writes both for every pipeline-stage device of a mixture of experts; absent:
  // a dense model, or a sequence mesh's device, which holds the whole model): the routed
  // experts it holds, [0, E) where every expert is split by columns (its `ffn` range then),
  // and its columns of the shared experts.
  std::optional<std::pair<int, int>> routed_experts, shared_ffn;
  int micro_batch = 1;
  int micro_batches = 0;
  double loss_scale = 0;    // micro_batch / global_batch
  double params = 0;        // parameters held (stage_params)
  double owned_params = 0;  // parameters this device's optimizer updates
  // Its stage's activation recompute (lowering always sets it; absent in a file:
  // the training config's). Full recompute is also visible as recompute ops.
  std::optional<Recompute> recompute;
  int seq_group = -1, seq_rank = -1;  // sequence meshes: its group (ring order) and rank
  int mesh = -1;  // a mesh stage of a pipeline plan: its layout, Program::meshes[mesh]
  // Interleaved pipelines (more than one chunk per device group): its chunks in chunk order;
  // empty otherwise. Then stage = its group's index r (chunk 0's virtual stage), stages = the
  // virtual stages p * v, layer_begin / layer_end = chunk 0's layers, first / last = it holds
  // the embedding (chunk 0 of group 0) / the head (chunk v - 1 of group p - 1).
  std::vector<ChunkLayout> chunks;
  int op_begin = 0, op_end = 0;  // its ops are ids [op_begin, op_end)
};

enum class Granularity { kLayer, kStage };
inline constexpr auto kGranularityNames =
    enum_names<Granularity>({{Granularity::kLayer, "layer"}, {Granularity::kStage, "stage"}});
std::string_view to_string(Granularity g);

struct Program {
  std::string scenario;
  std::string cluster;
  std::string model;
  Granularity granularity = Granularity::kLayer;
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int num_devices = 0;  // devices of the cluster (ids of ops are cluster device ids)
  int bytes_per_element = 2;
  int global_batch = 0;
  int seq_len = 0;
  int zero_stage = 0;
  // What the program was lowered from (input_digest): a program is only valid for the
  // same model and training config; `simulate --program` checks them.
  std::string model_digest;
  std::string training_digest;
  std::vector<DeviceLayout> devices;  // used devices, by device id
  std::vector<Op> ops;                // by id; a device's ops are contiguous, in its order
  std::vector<int> dep_ids;
  std::vector<Group> groups;
  std::vector<Shape> shapes;
  std::vector<Bucket> buckets;
  std::vector<Fold> folds;
  std::optional<SequenceLayout> sequence;  // lowered from a sequence mesh (above)
  std::vector<SequenceLayout> meshes;      // a pipeline plan's mesh stages (DeviceLayout::mesh)
  ReplicaFold replicas;                    // pipelines folded (above); pipelines 0 otherwise

  // The mesh a device runs (the whole program's or its stage's), or null.
  const SequenceLayout* mesh_of(const DeviceLayout& l) const {
    if (sequence) return &*sequence;
    return l.mesh >= 0 ? &meshes[static_cast<std::size_t>(l.mesh)] : nullptr;
  }

  std::span<const int> deps(const Op& op) const {
    return {dep_ids.data() + op.deps_begin, op.deps_count};
  }
  std::span<const int> deps(int id) const { return deps(ops[id]); }
  int num_ops() const { return static_cast<int>(ops.size()); }
  // The layout of a device id, or nullptr when the device runs nothing.
  const DeviceLayout* layout(int device) const;
};

// For each op, the previous op of the same stream on its device (for p2p: the same
// peer and direction), or -1: what an op waits for besides its deps.
std::vector<int> stream_predecessors(const Program& program);

// Chunk c of a device: layout.chunks[c], or its one stage (c == 0) when it has no chunks.
ChunkLayout chunk_layout(const DeviceLayout& layout, int chunk = 0);
int num_chunks(const DeviceLayout& layout);  // 1 when it has no chunks

// The stage shape of chunk c of a device (its layers, embedding and head).
StageShape chunk_shape(const DeviceLayout& layout, int chunk, int in_flight, int dp);
// The memory of a device keeping in_flight[c] micro-batches of chunk c alive (one entry for
// a device without chunks: device_memory of stage_shape): its chunks summed, one reserve.
MemoryBreakdown chunked_memory(const Model& model, const TrainingConfig& training,
                               const DeviceLayout& layout, const std::vector<int>& in_flight,
                               int dp);

// Per chunk of a device, the activation bytes one micro-batch keeps alive (the weights of
// interleaved_in_flight's peak).
std::vector<double> chunk_activation_bytes(const Model& model, const TrainingConfig& training,
                                           const DeviceLayout& layout);

// The stage shape (cost_model.hpp) of a device's layout, for memory accounting.
StageShape stage_shape(const DeviceLayout& layout, int in_flight = 1, int dp = 1);

// A short stable digest (FNV-1a 64, hex) of a model's or training config's JSON.
std::string input_digest(const Json& json);

// Whether `program` was lowered for this model and training config (its digests match);
// bad input naming `origin` and what differs otherwise.
Status check_program_inputs(const Program& program, const Model& model,
                            const TrainingConfig& training, const std::string& origin);

// Consistency of a program (what every reader relies on), each error naming op ids:
// ids/deps in range, devices' op ranges, every send matched by exactly one recv
// (same pair, tag and bytes), collectives complete on their group with equal kind
// and bytes and in the same order on every member, and no dependency cycle
// (counting stream order and rendezvous).
Status validate_program(const Program& program, const std::string& origin);

// A short label of op `id` for traces, the same in the simulator's and the engine's
// (e.g. "attn.fwd L3 mb2", "all-reduce activation mb0", "send activation to 4 mb1").
std::string op_label(const Program& program, int id);

Json to_json(const Program& program);
// Canonical text: same program -> same bytes.
std::string program_text(const Program& program);
Result<Program> program_from_json(const Json& json, const std::string& origin);
// Reads and validates a program file.
Result<Program> read_program(const std::filesystem::path& path);

}  // namespace program
}  // namespace hexi
