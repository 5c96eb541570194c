#include "scheduler/program/lower.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "scheduler/program/builder.hpp"
#include "scheduler/program/dp_buckets.hpp"
#include "scheduler/program/lower_sequence.hpp"
#include "scheduler/program/replica_fold.hpp"
#include "topologies/text.hpp"

namespace hexi {
inline namespace program {

namespace {

struct ShapeKey {
  ComputeKind kind;
  int micro_batch;
  double phi;
  int layers;
  bool first, last;
  double extra;
  Recompute recompute;  // backward ops: the stage's recompute
  double share;         // of the tokens, in the token-wise kernels (token_share)
  double experts;       // MoE: the routed experts held whole (DeviceLayout::experts)
  auto tie() const {
    return std::tie(kind, micro_batch, phi, layers, first, last, extra, recompute, share, experts);
  }
  bool operator<(const ShapeKey& o) const { return tie() < o.tie(); }
};

class Lowerer {
 public:
  Lowerer(const Plan& plan, const Cluster& cluster, const Model& model,
          const TrainingConfig& training, const LowerOptions& options, const ReplicaFold* fold)
      : plan_(plan),
        cluster_(cluster),
        m_(model),
        t_(training),
        opt_(options),
        fold_(fold),
        ops_(cluster.num_devices()),
        waits_(cluster.num_devices()) {}

  Program run() {
    prog_ = program_header(opt_.scenario, cluster_, m_, t_, opt_.granularity);
    layouts_.resize(cluster_.num_devices());
    make_layouts_and_groups();
    dp_ = plan_dp_buckets(plan_, m_, t_.zero_stage, cluster_.num_devices());
    for (const auto& g : dp_.groups) dp_group_ids_.push_back(group_id(GroupKind::kDp, g));
    prog_.buckets = dp_.buckets;
    for (auto& b : prog_.buckets) b.group = dp_group_ids_[b.group];
    const bool fold = fold_ != nullptr && fold_->folded();
    const std::size_t lowered =
        fold ? static_cast<std::size_t>(fold_->simulated) : plan_.pipelines.size();
    for (std::size_t p = 0; p < lowered; ++p) {
      const Pipeline& pipe = plan_.pipelines[p];
      for (int s = 0; s < pipe.groups(); ++s) {
        if (pipe.stages[s].mesh()) {
          emit_mesh(static_cast<int>(p), s);
          continue;
        }
        for (int d : pipe.stages[s].devices) emit_device(static_cast<int>(p), s, d);
      }
    }
    std::vector<DeviceLayout> used;
    for (int d : used_) {
      if (layouts_[d].pipeline < static_cast<int>(lowered)) used.push_back(layouts_[d]);
    }
    if (fold_ != nullptr) prog_.replicas = *fold_;
    if (fold) fold_groups();
    ops_.finish(prog_, std::move(used));
    return std::move(prog_);
  }

 private:
  // ---- layouts, groups, shapes -------------------------------------------
  void make_layouts_and_groups() {
    for (std::size_t p = 0; p < plan_.pipelines.size(); ++p) {
      const Pipeline& pipe = plan_.pipelines[p];
      const int stages = static_cast<int>(pipe.stages.size());
      const int groups = pipe.groups();
      for (int s = 0; s < groups; ++s) {
        const Stage& st = pipe.stages[s];
        if (st.mesh()) {
          mesh_layouts(static_cast<int>(p), s);
          continue;
        }
        int tp_group = -1, gather_group = -1;
        if (st.tp() > 1) {
          tp_group = group_id(GroupKind::kTp, st.devices);
          gather_group = group_id(GroupKind::kGather, st.devices);
        }
        for (int r = 0; r < st.tp(); ++r) {
          DeviceLayout& l = layouts_[st.devices[r]];
          l.device = st.devices[r];
          l.pipeline = static_cast<int>(p);
          l.stage = s;
          l.stages = stages;
          l.tp_rank = r;
          l.tp = st.tp();
          l.tp_group = tp_group;
          l.gather_group = gather_group;
          l.layer_begin = st.layer_begin;
          l.layer_end = st.layer_end;
          l.first = s == 0;
          l.last = s == stages - 1 || (groups < stages && s == groups - 1);
          const ShardRanges sr = stage_ranges(st, r, m_);
          l.head_begin = sr.head_begin;
          l.head_end = sr.head_end;
          l.kv_begin = sr.kv_begin;
          l.kv_end = sr.kv_end;
          l.ffn_begin = sr.ffn_begin;
          l.ffn_end = sr.ffn_end;
          l.vocab_begin = sr.vocab_begin;
          l.vocab_end = sr.vocab_end;
          l.phi = st.phi(r, m_.heads);
          l.experts = st.expert_share(r);
          if (m_.is_moe()) {  // whole experts (expert_split), or every one by columns
            l.shared_ffn = std::pair{sr.shared_begin, sr.shared_end};
            l.routed_experts = st.expert_split.empty() ? std::pair{0, m_.moe.experts}
                                                       : std::pair{sr.expert_begin, sr.expert_end};
          }
          l.micro_batch = pipe.micro_batch;
          l.micro_batches = pipe.micro_batches();
          l.loss_scale = static_cast<double>(pipe.micro_batch) / t_.global_batch;
          l.recompute = st.recompute_in(t_);
          if (groups < stages) {  // interleaved: chunk c is virtual stage c * groups + s
            for (int k = s; k < stages; k += groups) {
              const Stage& chunk = pipe.stages[k];
              l.chunks.push_back({k, chunk.layer_begin, chunk.layer_end, k == 0, k == stages - 1});
            }
          }
          l.params = 0;
          for (int c = 0; c < num_chunks(l); ++c)
            l.params += stage_params(m_, chunk_shape(l, c, 1, 1));
          used_.push_back(l.device);
        }
      }
    }
    std::sort(used_.begin(), used_.end());
  }

  // A folded program: each group keeps the members in the lowered pipelines; one across
  // pipelines remembers the whole group.
  void fold_groups() {
    for (Group& g : prog_.groups) {
      std::vector<int> kept;
      for (int d : g.devices) {
        if (layouts_[d].pipeline < prog_.replicas.simulated) kept.push_back(d);
      }
      if (kept.size() == g.devices.size()) continue;
      g.whole = std::move(g.devices);
      g.devices = std::move(kept);
    }
  }

  // A mesh stage: its lowerer and its devices' layouts (lower_sequence's, in the pipeline).
  void mesh_layouts(int p, int s) {
    const Pipeline& pipe = plan_.pipelines[p];
    const int stages = static_cast<int>(pipe.stages.size());
    const Stage& st = pipe.stages[s];
    auto mesh = std::make_unique<MeshStageLowerer>(st, s == 0, s == stages - 1, cluster_, m_, t_,
                                                   prog_, ops_);
    for (int i = 0; i < st.tp(); ++i) {
      DeviceLayout& l = layouts_[st.devices[i]];
      l = mesh->layout(i);
      l.pipeline = p;
      l.stage = s;
      l.stages = stages;
      l.micro_batch = pipe.micro_batch;
      l.micro_batches = pipe.micro_batches();
      l.loss_scale = static_cast<double>(pipe.micro_batch) / t_.global_batch;
      l.recompute = t_.recompute;
      l.params = stage_params(m_, chunk_shape(l, 0, 1, 1));
      l.mesh = static_cast<int>(prog_.meshes.size());
      used_.push_back(l.device);
    }
    prog_.meshes.push_back(*st.sequence);
    meshes_[{p, s}] = std::move(mesh);
  }

  int group_id(GroupKind kind, const std::vector<int>& devices) {
    return ops_.group(prog_, kind, devices);
  }

  int shape_id(const ShapeKey& key) {
    auto it = shape_ids_.find(key);
    if (it != shape_ids_.end()) return it->second;
    Shape s;
    s.kind = key.kind;
    s.micro_batch = key.micro_batch;
    s.phi = key.phi;
    s.layers = key.layers;
    s.kernels = kernels_of(key);
    const int id = static_cast<int>(prog_.shapes.size());
    prog_.shapes.push_back(std::move(s));
    shape_ids_.emplace(key, id);
    return id;
  }

  // Backward kernels of a block; under full recompute the replayed forward is its
  // own op, so its kernels are left out here.
  std::vector<Kernel> backward_kernels(Block block, int b, double phi, Recompute r, double share,
                                       double experts) const {
    std::vector<Kernel> ks = block_backward(m_, t_, block, b, phi, r, share, experts);
    if (r == Recompute::kFull) {
      std::erase_if(ks, [](const Kernel& k) { return k.name == "recompute"; });
    }
    return ks;
  }

  std::vector<Kernel> kernels_of(const ShapeKey& k) const {
    const int b = k.micro_batch;
    const double phi = k.phi, share = k.share, experts = k.experts;
    auto append = [](std::vector<Kernel>& out, const std::vector<Kernel>& more) {
      out.insert(out.end(), more.begin(), more.end());
    };
    std::vector<Kernel> out;
    switch (k.kind) {
      case ComputeKind::kEmbeddingFwd:
        return embedding_forward(m_, t_, b, share);
      case ComputeKind::kEmbeddingBwd:
        return embedding_backward(m_, t_, b, share);
      case ComputeKind::kAttnFwd:
      case ComputeKind::kAttnRecompute:
        return block_forward(m_, t_, Block::kAttention, b, phi, share);
      case ComputeKind::kMlpFwd:
      case ComputeKind::kMlpRecompute:
        return block_forward(m_, t_, Block::kMlp, b, phi, share, experts);
      case ComputeKind::kAttnBwd:
        return backward_kernels(Block::kAttention, b, phi, k.recompute, share, experts);
      case ComputeKind::kMlpBwd:
        return backward_kernels(Block::kMlp, b, phi, k.recompute, share, experts);
      case ComputeKind::kHeadFwd:
        return head_forward(m_, t_, b, phi, share);
      case ComputeKind::kHeadBwd:
        return head_backward(m_, t_, b, phi, share);
      case ComputeKind::kStageFwd:
        if (k.first) append(out, embedding_forward(m_, t_, b, share));
        for (int l = 0; l < k.layers; ++l) {
          append(out, block_forward(m_, t_, Block::kAttention, b, phi, share));
          append(out, block_forward(m_, t_, Block::kMlp, b, phi, share, experts));
        }
        if (k.last) append(out, head_forward(m_, t_, b, phi, share));
        return out;
      case ComputeKind::kStageBwd:
        if (k.last) append(out, head_backward(m_, t_, b, phi, share));
        for (int l = 0; l < k.layers; ++l) {
          append(out, block_backward(m_, t_, Block::kMlp, b, phi, k.recompute, share, experts));
          append(out, block_backward(m_, t_, Block::kAttention, b, phi, k.recompute, share));
        }
        if (k.first) append(out, embedding_backward(m_, t_, b, share));
        return out;
      case ComputeKind::kOptimizer:
        // Adam reads and writes fp32 master weights and both moments and the
        // e-byte weights and gradients: ~28 bytes per owned parameter, memory-bound.
        return {{"adam", KernelClass::kElementwise, 0.0, 28.0 * k.extra}};
      default:  // sequence-mesh ops: lower_sequence.cpp
        break;
    }
    return out;
  }

  // ---- emission ------------------------------------------------------------
  int add(int device, Op op, std::initializer_list<int> deps) {
    op.chunk = chunk_;
    return ops_.add(device, op, deps);
  }

  int compute(int device, ComputeKind kind, int layer, int mb, const ShapeKey& key, int dep = -1,
              int fold = -1) {
    Op op;
    op.kind = OpKind::kCompute;
    op.compute = kind;
    op.layer = layer;
    op.micro_batch = mb;
    op.shape = shape_id(key);
    op.folded = fold;
    if (waits_[device].empty()) return add(device, op, {dep});
    std::vector<int> deps = std::move(waits_[device]);  // a boundary from a mesh: every recv
    waits_[device].clear();
    deps.push_back(dep);
    op.chunk = chunk_;
    return ops_.add(device, op, deps);
  }

  // The messages of the boundary `from` -> `to` next to a mesh stage (mesh_boundary: each
  // mesh device's front and back rows; tags 2j and 2j + 1 per pair of devices) that `device`
  // sends (after its last compute) or receives; returns their ops.
  std::vector<int> mesh_messages(int device, OpKind kind, const Stage& from, const Stage& to,
                                 TensorKind tensor, int j) {
    std::vector<int> out;
    const bool sends = kind == OpKind::kSend;
    const BoundaryMessages& b = boundary_messages(from, to);
    const auto& mine = sends ? b.from : b.to;
    const auto it = mine.find(device);
    if (it == mine.end()) return out;
    for (const auto& [k, ordinal] : it->second) {
      const MeshMessage& msg = b.messages[k];
      const int tag = 2 * j + ordinal;
      Op op;
      op.kind = kind;
      op.stream = Stream::kP2p;
      op.tensor = tensor;
      op.peer = sends ? msg.to : msg.from;
      op.tag = tag;
      op.micro_batch = j;
      op.rows_begin = static_cast<int>(msg.rows.begin);
      op.rows_end = static_cast<int>(msg.rows.end);
      op.bytes = static_cast<double>(msg.rows.size()) * m_.hidden * t_.bytes_per_element();
      out.push_back(add(device, op, {sends ? ops_.last_compute(device) : -1}));
    }
    return out;
  }

  // mesh_boundary(from, to), found once per boundary: each message with its ordinal among
  // those of its pair of devices (0 or 1: its tag's offset), indexed by sender and receiver.
  struct BoundaryMessages {
    std::vector<MeshMessage> messages;
    std::map<int, std::vector<std::pair<std::size_t, int>>> from, to;  // device -> (k, ordinal)
  };
  const BoundaryMessages& boundary_messages(const Stage& from, const Stage& to) {
    auto [it, fresh] = boundaries_.try_emplace({&from, &to});
    if (!fresh) return it->second;
    BoundaryMessages& b = it->second;
    b.messages = mesh_boundary(from, to);
    std::map<std::pair<int, int>, int> sent;  // per pair of devices: messages so far
    for (std::size_t k = 0; k < b.messages.size(); ++k) {
      const MeshMessage& msg = b.messages[k];
      const int ordinal = sent[{msg.from, msg.to}]++;
      b.from[msg.from].push_back({k, ordinal});
      b.to[msg.to].push_back({k, ordinal});
    }
    return b;
  }

  // A mesh stage's micro-batches in its pipeline's order: forward after the previous stage's
  // rows arrive, its rows sent on; backward after the next stage's gradients, its gradient
  // rows sent back. Then each device's DP sync and optimizer.
  //
  // At stage granularity each mesh device runs one op per micro-batch and pass instead: its
  // compute inside the pass (mesh_pass_kernels) with the rest of the pass folded in
  // (Fold::mesh: the closed form's time of the mesh's pass).
  void emit_mesh(int p, int s) {
    const Pipeline& pipe = plan_.pipelines[p];
    const int stages = static_cast<int>(pipe.stages.size());
    const Stage& st = pipe.stages[s];
    MeshStageLowerer& mesh = *meshes_.at({p, s});
    const bool fused = opt_.granularity == Granularity::kStage;
    for (auto [fwd, j] : pipeline_order(t_.schedule, s, stages, pipe.micro_batches())) {
      const int from = fwd ? s - 1 : s + 1;
      const TensorKind in = fwd ? TensorKind::kActivation : TensorKind::kActivationGrad;
      std::vector<std::vector<int>> ready(st.devices.size());
      if (from >= 0 && from < stages) {
        for (std::size_t i = 0; i < st.devices.size(); ++i) {
          ready[i] = mesh_messages(st.devices[i], OpKind::kRecv, pipe.stages[from], st, in, j);
        }
      }
      if (fused) {
        mesh_pass(p, s, j, fwd, ready);
      } else if (fwd) {
        mesh.forward(j, ready);
      } else {
        mesh.backward(j, ready);
      }
      const int to = fwd ? s + 1 : s - 1;
      if (to < 0 || to >= stages) continue;
      for (int d : st.devices) mesh_messages(d, OpKind::kSend, st, pipe.stages[to], in, j);
    }
    for (int d : st.devices) synchronise(d);
  }

  // Micro-batch j's pass (forward or backward) of mesh stage s of pipeline p, one op per
  // device after ready[i].
  void mesh_pass(int p, int s, int j, bool forward, const std::vector<std::vector<int>>& ready) {
    const Pipeline& pipe = plan_.pipelines[p];
    const Stage& st = pipe.stages[s];
    const bool first = s == 0, last = s == static_cast<int>(pipe.stages.size()) - 1;
    const int mesh = layouts_[st.devices.front()].mesh;
    auto [fold, fresh] =
        mesh_folds_.emplace(std::make_pair(mesh, forward), static_cast<int>(prog_.folds.size()));
    if (fresh) {
      Fold f;
      f.mesh = mesh;
      f.layers = st.layers();
      f.first = first;
      f.last = last;
      f.forward = forward;
      prog_.folds.push_back(f);
    }
    std::size_t i = 0;
    for (int g = 0; g < static_cast<int>(st.sequence->groups.size()); ++g) {
      const SequenceGroup& group = st.sequence->groups[g];
      for (int r = 0; r < group.size(); ++r, ++i) {
        Op op;
        op.kind = OpKind::kCompute;
        op.compute = forward ? ComputeKind::kStageFwd : ComputeKind::kStageBwd;
        op.micro_batch = j;
        op.shape = mesh_shape(*st.sequence, g, r, st.layers(), first, last, forward);
        op.folded = fold->second;
        ops_.add(group.devices[r], op, ready[i]);
      }
    }
  }

  // The shape of a mesh device's pass, shared by devices whose work is alike.
  int mesh_shape(const SequenceLayout& layout, int g, int r, int layers, bool first, bool last,
                 bool forward) {
    const SequenceGroup& group = layout.groups[g];
    const MemberWork w = member_work(group, r, m_.heads);
    const auto key = std::make_tuple(w.tokens, w.phi, w.share, group.heads[r], group.tokens, layers,
                                     first, last, forward);
    auto [it, fresh] = mesh_shapes_.emplace(key, static_cast<int>(prog_.shapes.size()));
    if (fresh) {
      Shape shape;
      shape.kind = forward ? ComputeKind::kStageFwd : ComputeKind::kStageBwd;
      shape.micro_batch = 1;
      shape.phi = w.phi;
      shape.layers = layers;
      shape.kernels = mesh_pass_kernels(layout, g, r, m_, t_, layers, first, last, forward);
      prog_.shapes.push_back(std::move(shape));
    }
    return it->second;
  }

  int collective(int device, int group, Stream stream, Collective c, TensorKind tensor,
                 double bytes, int mb, int dep = -1, int bucket = -1) {
    Op op;
    op.kind = OpKind::kCollective;
    op.stream = stream;
    op.collective = c;
    op.tensor = tensor;
    op.group = group;
    op.instance = ops_.next_instance(device, group);
    op.bytes = bytes;
    op.micro_batch = mb;
    op.bucket = bucket;
    return add(device, op, {dep});
  }

  // The message id of micro-batch mb over the boundary from virtual stage k to k + 1 (either
  // direction): mb, unique per ordered pair of devices and micro-batch in a plain pipeline;
  // interleaved pipelines send several boundaries' messages between the same two devices.
  int tag(const DeviceLayout& l, int boundary, int mb) const {
    return l.chunks.empty() ? mb : boundary * l.micro_batches + mb;
  }

  int p2p(int device, OpKind kind, int peer, TensorKind tensor, int mb, const Piece& piece, int tag,
          int dep = -1) {
    Op op;
    op.kind = kind;
    op.stream = Stream::kP2p;
    op.tensor = tensor;
    op.peer = peer;
    op.tag = tag;
    op.micro_batch = mb;
    op.rows_begin = piece.rows_begin;
    op.rows_end = piece.rows_end;
    op.bytes =
        static_cast<double>(piece.rows_end - piece.rows_begin) * m_.hidden * t_.bytes_per_element();
    return add(device, op, {dep});
  }

  // Receives a boundary tensor for micro-batch j from stage `from` and all-gathers
  // it; returns the op the consumer must wait for (-1 if none).
  int receive(int device, const Stage& from, TensorKind tensor, int j, int tag) {
    const DeviceLayout& l = layouts_[device];
    if (from.mesh()) {  // every rank gets the whole sequence from the mesh: no all-gather
      const Pipeline& pipe = plan_.pipelines[l.pipeline];
      waits_[device] = mesh_messages(device, OpKind::kRecv, from, pipe.stages[l.stage], tensor, j);
      return -1;
    }
    const int rows = l.micro_batch * t_.seq_len;
    int ready = -1;
    for (const Piece& pc : boundary_pieces(from.tp(), l.tp, rows, t_.sequence_parallel)) {
      if (pc.dst_rank == l.tp_rank)
        ready = p2p(device, OpKind::kRecv, from.devices[pc.src_rank], tensor, j, pc, tag);
    }
    if (l.tp > 1 && !t_.sequence_parallel) {
      ready = collective(device, l.gather_group, Stream::kGather, Collective::kAllGather, tensor,
                         hidden_bytes(m_, t_, l.micro_batch), j, ready);
    }
    return ready;
  }

  void send(int device, const Stage& to, TensorKind tensor, int j, int tag) {
    const DeviceLayout& l = layouts_[device];
    if (to.mesh()) {
      const Pipeline& pipe = plan_.pipelines[l.pipeline];
      mesh_messages(device, OpKind::kSend, pipe.stages[l.stage], to, tensor, j);
      return;
    }
    const int rows = l.micro_batch * t_.seq_len;
    const int dep = ops_.last_compute(device);
    for (const Piece& pc : boundary_pieces(l.tp, to.tp(), rows, t_.sequence_parallel)) {
      if (pc.src_rank == l.tp_rank)
        p2p(device, OpKind::kSend, to.devices[pc.dst_rank], tensor, j, pc, tag, dep);
    }
  }

  bool sequence_parallel(const DeviceLayout& l) const { return t_.sequence_parallel && l.tp > 1; }

  // After a block whose output is a partial sum over the TP group: its all-reduce, or under
  // sequence parallelism its reduce-scatter to the rank's tokens (Megatron-LM).
  void tp_reduce(int device, TensorKind tensor, int j) {
    const DeviceLayout& l = layouts_[device];
    if (l.tp > 1) {
      collective(device, l.tp_group, Stream::kCompute,
                 sequence_parallel(l) ? Collective::kReduceScatter : Collective::kAllReduce, tensor,
                 hidden_bytes(m_, t_, l.micro_batch), j);
    }
  }

  // Before a block that needs every token: under sequence parallelism the all-gather of the
  // group's token shards (after `dep`); nothing otherwise. Returns what the block waits for.
  int tp_gather(int device, TensorKind tensor, int j, int dep) {
    const DeviceLayout& l = layouts_[device];
    if (!sequence_parallel(l)) return dep;
    collective(device, l.tp_group, Stream::kCompute, Collective::kAllGather, tensor,
               hidden_bytes(m_, t_, l.micro_batch), j, dep);
    return -1;
  }

  bool fused(const DeviceLayout& l) const {
    if (opt_.granularity != Granularity::kStage) return false;
    const Stage& st = plan_.pipelines[l.pipeline].stages[l.stage];
    for (int d : st.devices) {
      if (cluster_.devices()[d].machine != cluster_.devices()[st.devices.front()].machine)
        return false;
    }
    return true;
  }

  ShapeKey key(ComputeKind kind, const DeviceLayout& l, int layers = 0, double extra = 0) const {
    const bool stage_op = kind == ComputeKind::kStageFwd || kind == ComputeKind::kStageBwd;
    const bool backward = kind == ComputeKind::kAttnBwd || kind == ComputeKind::kMlpBwd ||
                          kind == ComputeKind::kStageBwd;
    // Only backward kernels depend on recompute; forward shapes stay shared.
    const Recompute r = backward ? recompute_of(l) : Recompute::kNone;
    const ChunkLayout ch = chunk_layout(l, chunk_);
    return {kind,
            l.micro_batch,
            l.phi,
            layers,
            stage_op && ch.first,
            stage_op && ch.last,
            extra,
            r,
            token_share(t_, l.tp),
            l.experts};
  }

  Recompute recompute_of(const DeviceLayout& l) const { return l.recompute.value_or(t_.recompute); }

  int fold_id(const DeviceLayout& l, bool forward) {
    if (l.tp <= 1) return -1;
    const ChunkLayout ch = chunk_layout(l, chunk_);
    const TpCollectives tp = tp_collectives(t_, ch.layer_end - ch.layer_begin, ch.first, ch.last,
                                            forward, recompute_of(l));
    Fold f;
    f.group = l.tp_group;
    f.collective = tp.kind;
    f.bytes = hidden_bytes(m_, t_, l.micro_batch);
    f.count = tp.count;
    f.loss_stats_bytes = forward && ch.last ? loss_stats_bytes(l) : 0;
    auto k = std::make_tuple(f.group, f.bytes, f.count, f.loss_stats_bytes);
    auto [it, fresh] = fold_ids_.emplace(k, static_cast<int>(prog_.folds.size()));
    if (fresh) prog_.folds.push_back(f);
    return it->second;
  }

  double loss_stats_bytes(const DeviceLayout& l) const {
    return 12.0 * l.micro_batch * t_.seq_len * l.tp;  // 3 fp32 per token row per rank
  }

  // Forward of micro-batch j through the device's chunk_ (virtual stage k).
  void forward(int device, const Pipeline& pipe, int j) {
    const DeviceLayout& l = layouts_[device];
    const ChunkLayout ch = chunk_layout(l, chunk_);
    const int k = ch.stage;
    int dep =
        k > 0 ? receive(device, pipe.stages[k - 1], TensorKind::kActivation, j, tag(l, k - 1, j))
              : -1;
    if (fused(l)) {
      compute(device, ComputeKind::kStageFwd, -1, j,
              key(ComputeKind::kStageFwd, l, ch.layer_end - ch.layer_begin), dep, fold_id(l, true));
    } else {
      const TensorKind act = TensorKind::kActivation;
      if (ch.first) {
        compute(device, ComputeKind::kEmbeddingFwd, -1, j, key(ComputeKind::kEmbeddingFwd, l), dep);
        dep = -1;
        tp_reduce(device, act, j);
      }
      for (int layer = ch.layer_begin; layer < ch.layer_end; ++layer) {
        dep = tp_gather(device, act, j, dep);
        compute(device, ComputeKind::kAttnFwd, layer, j, key(ComputeKind::kAttnFwd, l), dep);
        dep = -1;
        tp_reduce(device, act, j);
        tp_gather(device, act, j, -1);
        compute(device, ComputeKind::kMlpFwd, layer, j, key(ComputeKind::kMlpFwd, l));
        tp_reduce(device, act, j);
      }
      if (ch.last) {
        dep = tp_gather(device, act, j, dep);
        compute(device, ComputeKind::kHeadFwd, -1, j, key(ComputeKind::kHeadFwd, l), dep);
        if (l.tp > 1) {
          collective(device, l.tp_group, Stream::kCompute, Collective::kAllGather,
                     TensorKind::kLossStats, loss_stats_bytes(l), j);
        }
      }
    }
    if (!ch.last) send(device, pipe.stages[k + 1], TensorKind::kActivation, j, tag(l, k, j));
  }

  void backward(int device, const Pipeline& pipe, int j) {
    const DeviceLayout& l = layouts_[device];
    const ChunkLayout ch = chunk_layout(l, chunk_);
    const int k = ch.stage;
    int dep =
        ch.last ? -1
                : receive(device, pipe.stages[k + 1], TensorKind::kActivationGrad, j, tag(l, k, j));
    if (fused(l)) {
      compute(device, ComputeKind::kStageBwd, -1, j,
              key(ComputeKind::kStageBwd, l, ch.layer_end - ch.layer_begin), dep,
              fold_id(l, false));
    } else {
      const TensorKind act = TensorKind::kActivation, grad = TensorKind::kActivationGrad;
      if (ch.last) {
        compute(device, ComputeKind::kHeadBwd, -1, j, key(ComputeKind::kHeadBwd, l));
        tp_reduce(device, grad, j);
      }
      for (int layer = ch.layer_end - 1; layer >= ch.layer_begin; --layer) {
        if (recompute_of(l) == Recompute::kFull) {
          dep = tp_gather(device, act, j, dep);
          compute(device, ComputeKind::kAttnRecompute, layer, j,
                  key(ComputeKind::kAttnRecompute, l), dep);
          dep = -1;
          tp_reduce(device, act, j);
          tp_gather(device, act, j, -1);
          compute(device, ComputeKind::kMlpRecompute, layer, j, key(ComputeKind::kMlpRecompute, l));
          tp_reduce(device, act, j);
        }
        dep = tp_gather(device, grad, j, dep);
        compute(device, ComputeKind::kMlpBwd, layer, j, key(ComputeKind::kMlpBwd, l), dep);
        dep = -1;
        tp_reduce(device, grad, j);
        tp_gather(device, grad, j, -1);
        compute(device, ComputeKind::kAttnBwd, layer, j, key(ComputeKind::kAttnBwd, l));
        tp_reduce(device, grad, j);
      }
      if (ch.first) {
        dep = tp_gather(device, grad, j, dep);
        compute(device, ComputeKind::kEmbeddingBwd, -1, j, key(ComputeKind::kEmbeddingBwd, l), dep);
      }
    }
    if (!ch.first)
      send(device, pipe.stages[k - 1], TensorKind::kActivationGrad, j, tag(l, k - 1, j));
  }

  // DP sync (all-reduce, or reduce-scatter + all-gather under ZeRO-1), optimizer,
  // and the broadcast of replicated parameters from TP rank 0.
  void synchronise(int device) {
    DeviceLayout& l = layouts_[device];
    const double e = t_.bytes_per_element();
    const bool zero = t_.zero_stage >= 1;
    int dep = ops_.last_compute(device);
    for (int b : dp_.device_buckets[device]) {
      const Bucket& bk = prog_.buckets[b];
      dep = collective(device, bk.group, Stream::kDp,
                       zero ? Collective::kReduceScatter : Collective::kAllReduce,
                       TensorKind::kGradBucket, bk.elements * e, -1, dep, b);
    }
    l.owned_params = dp_.owned_params[device];
    dep = compute(device, ComputeKind::kOptimizer, -1, -1,
                  key(ComputeKind::kOptimizer, l, 0, l.owned_params), dep);
    if (zero) {
      for (int b : dp_.device_buckets[device]) {
        const Bucket& bk = prog_.buckets[b];
        dep = collective(device, bk.group, Stream::kDp, Collective::kAllGather,
                         TensorKind::kWeightBucket, bk.elements * e, -1, dep, b);
      }
    }
    if (l.tp > 1 && dp_.replicated_params[device] > 0) {
      collective(device, l.tp_group, Stream::kCompute, Collective::kBroadcast,
                 TensorKind::kReplicas, dp_.replicated_params[device] * e, -1, dep);
    }
  }

  void emit_device(int p, int s, int device) {
    const Pipeline& pipe = plan_.pipelines[p];
    const int stages = static_cast<int>(pipe.stages.size());
    if (pipe.chunks() > 1) {
      for (const ChunkStep& step :
           interleaved_order(s, pipe.groups(), pipe.chunks(), pipe.micro_batches())) {
        chunk_ = step.chunk;
        if (step.forward) {
          forward(device, pipe, step.micro_batch);
        } else {
          backward(device, pipe, step.micro_batch);
        }
      }
      chunk_ = 0;
    } else {
      for (auto [fwd, j] : pipeline_order(t_.schedule, s, stages, pipe.micro_batches())) {
        if (fwd) {
          forward(device, pipe, j);
        } else {
          backward(device, pipe, j);
        }
      }
    }
    synchronise(device);
  }

  const Plan& plan_;
  const Cluster& cluster_;
  const Model& m_;
  const TrainingConfig& t_;
  const LowerOptions& opt_;
  const ReplicaFold* fold_;  // null: not analysed
  Program prog_;
  ProgramBuilder ops_;
  std::vector<DeviceLayout> layouts_;
  std::vector<int> used_;
  DpBuckets dp_;
  std::vector<int> dp_group_ids_;
  std::map<ShapeKey, int> shape_ids_;
  std::map<std::tuple<int, double, int, double>, int> fold_ids_;
  int chunk_ = 0;  // the chunk whose ops are being emitted (interleaved pipelines)
  std::vector<std::vector<int>> waits_;  // per device: recvs its next compute waits for
  std::map<std::pair<int, int>, std::unique_ptr<MeshStageLowerer>> meshes_;  // (pipeline, stage)
  std::map<std::pair<int, bool>, int> mesh_folds_;  // (mesh, forward) -> Program::folds index
  std::map<std::pair<const Stage*, const Stage*>, BoundaryMessages> boundaries_;
  std::map<std::tuple<std::int64_t, double, double, int, std::int64_t, int, bool, bool, bool>, int>
      mesh_shapes_;  // mesh_shape's key -> Program::shapes index
};

}  // namespace

double min_compute_ops(const Plan& plan, Granularity granularity) {
  double ops = 0;
  for (const Pipeline& p : plan.pipelines) {
    for (const Stage& s : p.stages) {
      const double per_micro_batch = granularity == Granularity::kLayer ? 2.0 * s.layers() : 2.0;
      ops += static_cast<double>(p.micro_batches()) * s.tp() * per_micro_batch;
    }
  }
  return ops;
}

double least_compute_ops(const Model& model, const TrainingConfig& training,
                         Granularity granularity) {
  const double micro_batches = static_cast<double>(training.global_batch) / training.micro_batch;
  return 2.0 * micro_batches * (granularity == Granularity::kLayer ? model.layers : 1);
}

Status check_program_size(const Model& model, const TrainingConfig& training,
                          Granularity granularity, const std::string& what) {
  const double ops = least_compute_ops(model, training, granularity);
  if (ops <= kMaxProgramComputeOps) return {};
  const bool layer = granularity == Granularity::kLayer;
  return bad_input(what + ": training.global_batch " + std::to_string(training.global_batch) +
                   " / micro_batch " + std::to_string(training.micro_batch) +
                   " micro-batches lower to at least " + format("%.3g", ops) + " compute ops" +
                   (layer ? " at layer fidelity" : "") +
                   " whatever the plan; hexisim materialises at most " +
                   format("%.3g", kMaxProgramComputeOps) + ": use a larger micro_batch" +
                   (layer ? " or stage fidelity" : ""));
}

Result<Program> lower_plan(const Plan& plan, const Cluster& cluster, const Model& model,
                           const TrainingConfig& training, const LowerOptions& options,
                           const std::string& plan_origin) {
  if (auto st = validate_plan(plan, cluster, model, training, plan_origin); !st) return st.error();
  std::optional<ReplicaFold> fold;
  if (options.fold_replicas) fold = find_replica_fold(plan, cluster, model, training);
  if (const double ops = min_compute_ops(plan, options.granularity) / (fold ? fold->factor() : 1);
      ops > kMaxProgramComputeOps) {
    return bad_input(plan_origin + ": the program would hold at least " + format("%.3g", ops) +
                     " compute ops (" + std::to_string(training.global_batch) +
                     " sequences in micro-batches of " + std::to_string(training.micro_batch) +
                     " on " + std::to_string(plan.num_devices()) + " devices" +
                     (options.granularity == Granularity::kLayer ? ", per layer" : "") +
                     "); hexisim materialises at most " + format("%.3g", kMaxProgramComputeOps) +
                     ": use a larger micro_batch" +
                     (options.granularity == Granularity::kLayer ? " or stage granularity" : ""));
  }
  return Lowerer(plan, cluster, model, training, options, fold ? &*fold : nullptr).run();
}

}  // namespace program
}  // namespace hexi
