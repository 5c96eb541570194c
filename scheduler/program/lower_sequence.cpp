#include "scheduler/program/lower_sequence.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "scheduler/cost/sequence.hpp"
#include "scheduler/program/builder.hpp"
#include "scheduler/program/dp_buckets.hpp"
#include "scheduler/program/lower.hpp"
#include "topologies/text.hpp"

namespace hexi {
inline namespace program {
namespace {

// A device of the mesh, by its flat index (layout order: group by group, rank order).
struct Member {
  int device = 0;
  int group = 0;
  int rank = 0;
  int head_begin = 0;  // query heads [head_begin, head_begin + heads)
  int heads = 0;
  int kv = 0;  // kv heads it needs (kv_heads_needed)
  std::int64_t shard = 0;
  MemberWork work;  // what its token-wise kernels run on (member_work)
  bool tensor = false;
};

// One ring hop: `kv` kv heads' worth of every block from flat index `from` to `to`.
struct Hop {
  int from = 0, to = 0;
  int kv = 0;
};

// The kernels of one layer on `tokens` tokens, split around the attention core: what runs
// before it, after it (output projection and the MLP block), and their backward.
struct TokenWise {
  std::vector<Kernel> pre_fwd, post_fwd, post_bwd, pre_bwd;
};

// Splits `ks` at its attention-class kernels (left out).
std::pair<std::vector<Kernel>, std::vector<Kernel>> around_core(const std::vector<Kernel>& ks) {
  std::pair<std::vector<Kernel>, std::vector<Kernel>> out;
  bool after = false;
  for (const Kernel& k : ks) {
    if (k.cls == KernelClass::kAttention) {
      after = true;
    } else {
      (after ? out.second : out.first).push_back(k);
    }
  }
  return out;
}

void append(std::vector<Kernel>& to, const std::vector<Kernel>& ks) {
  to.insert(to.end(), ks.begin(), ks.end());
}

// Backward kernels without the replayed forward (full recompute runs it as its own ops).
std::vector<Kernel> backward_only(const Model& m, const TrainingConfig& t, Block block,
                                  const MemberWork& work) {
  std::vector<Kernel> ks = block_backward(m, t, block, 1, work.phi, t.recompute, work.share);
  std::erase_if(ks, [](const Kernel& k) { return k.name == "recompute"; });
  return ks;
}

TokenWise token_wise(const Model& m, TrainingConfig t, const MemberWork& work) {
  t.seq_len = static_cast<int>(work.tokens);
  t.micro_batch = 1;
  TokenWise w;
  auto [pre, post] = around_core(block_forward(m, t, Block::kAttention, 1, work.phi, work.share));
  w.pre_fwd = pre;
  w.post_fwd = post;
  append(w.post_fwd, block_forward(m, t, Block::kMlp, 1, work.phi, work.share));
  w.post_bwd = backward_only(m, t, Block::kMlp, work);
  auto [post_b, pre_b] = around_core(backward_only(m, t, Block::kAttention, work));
  append(w.post_bwd, post_b);
  w.pre_bwd = pre_b;
  return w;
}

}  // namespace

// The ops of a sequence mesh: the whole plan's (run), or one stage's of a pipeline plan,
// micro-batch by micro-batch (stage_forward, stage_backward; MeshStageLowerer).
class SequenceLowerer {
 public:
  SequenceLowerer(const SequenceLayout& layout, const Cluster& cluster, const Model& model,
                  const TrainingConfig& training, const std::string& scenario, Program& prog,
                  ProgramBuilder& ops)
      : layout_(layout),
        cluster_(cluster),
        m_(model),
        t_(training),
        scenario_(scenario),
        a_(attention_shape(model, training)),
        p_(static_cast<int>(layout.groups.size())),
        prog_(prog),
        ops_(ops),
        layer_end_(model.layers),
        pending_(layout.num_devices()) {
    for (int g = 0; g < p_; ++g) {
      const SequenceGroup& group = layout.groups[g];
      tokens_.push_back(group.tokens);
      first_.push_back(static_cast<int>(members_.size()));
      const std::vector<int> offsets = head_offsets(group);
      for (int r = 0; r < group.size(); ++r) {
        members_.push_back({group.devices[r], g, r, offsets[r], group.heads[r],
                            kv_heads_needed(a_, offsets[r], group.heads[r]), group.shards[r],
                            member_work(group, r, model.heads), group.tensor});
      }
    }
    make_hops();
  }

  // A stage of a pipeline plan: layers [begin, end), the embedding where `first`, the head
  // where `last`; its buckets are the plan's.
  void set_stage(int begin, int end, bool first, bool last) {
    make_tp_groups();
    layer_begin_ = begin;
    layer_end_ = end;
    stage_first_ = first;
    stage_last_ = last;
  }
  int device(int i) const { return members_[i].device; }
  // The ops device i's next compute op waits for (a stage boundary's recvs).
  void wait_for(int i, std::vector<int> ops) { pending_[i] = std::move(ops); }

  // One micro-batch (sequence) through the stage's layers, forward: the embedding where
  // first, the layers, the head where last.
  void stage_forward(int seq) {
    const std::vector<int> none(members_.size(), -1);
    if (stage_first_) all_computes(ComputeKind::kEmbeddingFwd, seq, none);
    for (int layer = layer_begin_; layer < layer_end_; ++layer)
      layer_forward(layer, seq, false, none);
    if (stage_last_) all_computes(ComputeKind::kHeadFwd, seq, none);
  }
  // Its backward: the head's where last, the layers' (replayed first under full recompute),
  // the embedding's where first.
  void stage_backward(int seq) {
    const std::vector<int> none(members_.size(), -1);
    if (stage_last_) all_computes(ComputeKind::kHeadBwd, seq, none);
    for (int layer = layer_end_ - 1; layer >= layer_begin_; --layer) {
      if (t_.recompute == Recompute::kFull) layer_forward(layer, seq, true, none);
      layer_backward(layer, seq, none);
    }
    if (stage_first_) all_computes(ComputeKind::kEmbeddingBwd, seq, none);
  }

  // The layout of device i (flat index) as a stage's: its query heads, the whole stage's
  // weights, one sequence per micro-batch.
  DeviceLayout stage_layout(int i) const {
    DeviceLayout l = device_layout(i);
    l.layer_begin = layer_begin_;
    l.layer_end = layer_end_;
    l.first = stage_first_;
    l.last = stage_last_;
    return l;
  }

  void run() {
    prog_ = program_header(scenario_, cluster_, m_, t_, Granularity::kLayer);
    prog_.sequence = layout_;
    make_buckets();
    make_tp_groups();
    for (int seq = 0; seq < t_.global_batch; ++seq) sequence(seq);
    for (int i = 0; i < static_cast<int>(members_.size()); ++i) synchronise(i);
    std::vector<DeviceLayout> used;
    for (int i = 0; i < static_cast<int>(members_.size()); ++i) used.push_back(device_layout(i));
    std::sort(used.begin(), used.end(),
              [](const DeviceLayout& x, const DeviceLayout& y) { return x.device < y.device; });
    ops_.finish(prog_, std::move(used));
  }

 private:
  int size() const { return static_cast<int>(members_.size()); }
  // The group whose block group g computes at step k (and holds during it).
  int visiting(int g, int k) const { return ((g - k) % p_ + p_) % p_; }

  // The sub-rings' hops: for every group and interval of the common refinement of the
  // groups' head ranges, from its holder in the group to its holder in the next group.
  void make_hops() {
    out_.resize(members_.size());
    if (p_ <= 1) return;
    const SubRings rings = sub_rings(a_, layout_);
    std::map<std::pair<int, int>, int> kv;  // (from, to) -> kv heads
    for (int g = 0; g < p_; ++g) {
      const int next = (g + 1) % p_;
      for (std::size_t m = 0; m < rings.kv.size(); ++m) {
        kv[{first_[g] + rings.owner[g][m], first_[next] + rings.owner[next][m]}] += rings.kv[m];
      }
    }
    for (const auto& [pair, heads] : kv) {
      out_[pair.first].push_back({pair.first, pair.second, heads});
    }
  }

  // Each tensor group of more than one device: its TP group in the program.
  void make_tp_groups() {
    for (int g = 0; g < p_; ++g) {
      const SequenceGroup& group = layout_.groups[g];
      if (group.tensor && group.size() > 1) {
        tp_groups_[g] = ops_.group(prog_, GroupKind::kTp, group.devices);
      }
    }
  }

  // ZeRO buckets over the mesh: the DP buckets of a one-stage pipeline of the whole layout
  // (every device of a Ulysses group holds the whole model, a tensor group's devices their
  // shares); under ZeRO-3 cut into one bucket per layer (and the head's and the embedding's)
  // so that each layer's weights are gathered on their own.
  void make_buckets() {
    Stage st;
    st.devices = layout_.devices();
    st.layer_begin = 0;
    st.layer_end = m_.layers;
    st.sequence = layout_;
    Plan plan;
    plan.pipelines.push_back({t_.global_batch, 1, {st}});
    const DpBuckets dp =
        plan_dp_buckets(plan, m_, std::min(t_.zero_stage, 1), cluster_.num_devices());
    owned_ = dp.owned_params;
    device_buckets_ = dp.device_buckets;
    for (const auto& g : dp.groups) dp_groups_.push_back(ops_.group(prog_, GroupKind::kDp, g));
    for (Bucket b : dp.buckets) {
      b.group = dp_groups_[b.group];
      if (t_.zero_stage < 3) {
        prog_.buckets.push_back(std::move(b));
        continue;
      }
      for (const ParamSegment& s : b.segments) {
        auto [it, fresh] = layer_bucket_.emplace(s.layer, static_cast<int>(prog_.buckets.size()));
        if (fresh) prog_.buckets.push_back({b.group, 0.0, {}});
        Bucket& to = prog_.buckets[it->second];
        to.elements += s.elements;
        to.segments.push_back(s);
      }
    }
  }

  // ---- shapes -------------------------------------------------------------------------
  int shape_id(ComputeKind kind, std::int64_t size, int heads, const std::vector<Kernel>& ks,
               double share = 1.0) {
    auto [it, fresh] = shape_ids_.emplace(std::make_tuple(kind, size, heads, share),
                                          static_cast<int>(prog_.shapes.size()));
    if (fresh) {
      Shape s;
      s.kind = kind;
      s.micro_batch = 1;
      s.phi = static_cast<double>(heads) / a_.q_heads;
      s.kernels = ks;
      prog_.shapes.push_back(std::move(s));
    }
    return it->second;
  }

  // The token-wise kernels of a member's work (a Ulysses member: its shard, whole weights; a
  // tensor group's: T_g tokens, phi of the weights, norms on its share).
  const TokenWise& kernels_for(const MemberWork& w) {
    const auto key = std::make_tuple(w.tokens, w.phi, w.share);
    auto it = token_wise_.find(key);
    if (it == token_wise_.end()) it = token_wise_.emplace(key, token_wise(m_, t_, w)).first;
    return it->second;
  }

  // Shapes of member i's work: heads and share tell a tensor group's members apart.
  int work_shape(ComputeKind kind, int i, const std::vector<Kernel>& ks) {
    const Member& mb = members_[i];
    return shape_id(kind, mb.work.tokens, mb.tensor ? mb.heads : a_.q_heads, ks, mb.work.share);
  }

  int token_shape(ComputeKind kind, int i) {
    const TokenWise& w = kernels_for(members_[i].work);
    switch (kind) {
      case ComputeKind::kPreFwd:
      case ComputeKind::kPreRecompute:
        return work_shape(kind, i, w.pre_fwd);
      case ComputeKind::kPostFwd:
      case ComputeKind::kPostRecompute:
        return work_shape(kind, i, w.post_fwd);
      case ComputeKind::kPostBwd:
        return work_shape(kind, i, w.post_bwd);
      default:
        return work_shape(kind, i, w.pre_bwd);
    }
  }

  // One ring step's attention: `heads` query heads of the group's T_g queries against one
  // block (`pairs` causal pairs), flash-style (no s^2 memory): reads Q, K, V (and O, dO
  // backward), writes O (dQ, dK, dV).
  int ring_shape(ComputeKind kind, std::int64_t pairs, int heads, int kv, std::int64_t queries,
                 std::int64_t keys) {
    const Kernel k = attention_kernel(a_, pairs, heads, kv, queries, keys, t_.seq_len,
                                      kind == ComputeKind::kRingBwd);
    return shape_id(kind, pairs, heads, {k});
  }

  int embedding_shape(ComputeKind kind, int i) {
    const MemberWork& w = members_[i].work;
    TrainingConfig t = t_;
    t.seq_len = static_cast<int>(w.tokens);
    t.micro_batch = 1;
    switch (kind) {
      case ComputeKind::kEmbeddingFwd:
        return work_shape(kind, i, embedding_forward(m_, t, 1, w.share));
      case ComputeKind::kEmbeddingBwd:
        return work_shape(kind, i, embedding_backward(m_, t, 1, w.share));
      case ComputeKind::kHeadFwd:
        return work_shape(kind, i, head_forward(m_, t, 1, w.phi, w.share));
      default:
        return work_shape(kind, i, head_backward(m_, t, 1, w.phi, w.share));
    }
  }

  // ---- emission -------------------------------------------------------------------------
  int compute(int i, ComputeKind kind, int layer, int seq, int shape, std::vector<int> deps,
              int step = -1) {
    Op op;
    op.kind = OpKind::kCompute;
    op.compute = kind;
    op.layer = layer;
    op.micro_batch = seq;
    op.shape = shape;
    op.step = step;
    if (!pending_[i].empty()) {
      deps.insert(deps.end(), pending_[i].begin(), pending_[i].end());
      pending_[i].clear();
    }
    return ops_.add(members_[i].device, op, deps);
  }

  // A message from flat index `from` to `to`: the send posted after `send_deps` (local to
  // `from`), the recv after `recv_deps` (local to `to`), as NCCL's grouped send/recv calls;
  // returns the recv's local index.
  int message(int from, int to, TensorKind tensor, double bytes, int layer, int seq, int step,
              const std::vector<int>& send_deps, const std::vector<int>& recv_deps) {
    const int src = members_[from].device, dst = members_[to].device;
    const int tag = tags_[{src, dst}]++;
    Op op;
    op.stream = Stream::kP2p;
    op.tensor = tensor;
    op.tag = tag;
    op.bytes = bytes;
    op.layer = layer;
    op.micro_batch = seq;
    op.step = step;
    Op send = op, recv = op;
    send.kind = OpKind::kSend;
    send.peer = dst;
    recv.kind = OpKind::kRecv;
    recv.peer = src;
    ops_.add(src, send, send_deps);
    return ops_.add(dst, recv, recv_deps);
  }

  // The all-to-all of one group: every member joins it after after[i] (a collective: its
  // sends and recvs posted together) and sends bytes(from, to) to every other member; returns
  // each member's recvs (flat-indexed).
  template <class Bytes>
  std::vector<std::vector<int>> all_to_all(TensorKind tensor, Bytes bytes, int layer, int seq,
                                           const std::vector<std::vector<int>>& after) {
    std::vector<std::vector<int>> recvs(members_.size());
    for (int g = 0; g < p_; ++g) {
      if (layout_.groups[g].tensor) continue;  // a tensor group gathers and scatters instead
      const int n = layout_.groups[g].size();
      for (int a = 0; a < n; ++a) {
        for (int b = 0; b < n; ++b) {
          const int from = first_[g] + a, to = first_[g] + b;
          if (a == b) continue;
          recvs[to].push_back(
              message(from, to, tensor, bytes(from, to), layer, seq, -1, after[from], after[to]));
        }
      }
    }
    return recvs;
  }

  double e() const { return a_.bytes_per_element; }
  // Q, K, V of from's tokens for to's heads (the backward's dQ, dK, dV the other way).
  double qkv_bytes(int from, int to) const {
    return static_cast<double>(members_[from].shard) * (members_[to].heads + 2 * members_[to].kv) *
           a_.head_dim * e();
  }
  // O of to's tokens for from's heads (the backward's dO the other way).
  double out_bytes(int from, int to) const {
    return static_cast<double>(members_[to].shard) * members_[from].heads * a_.head_dim * e();
  }
  double block_bytes(int block, int kv, int bytes_per_element) const {
    return 2.0 * static_cast<double>(layout_.groups[block].tokens) * kv * a_.head_dim *
           bytes_per_element;
  }

  std::vector<std::vector<int>> each(const std::vector<int>& local) const {
    std::vector<std::vector<int>> out;
    for (int x : local) out.push_back({x});
    return out;
  }

  // Step k's K, V passed on to the next group (none at the last step), each device's send
  // and recv posted once its block of step k is here (ready[i]); returns each device's
  // recvs: what step k + 1 waits for.
  std::vector<std::vector<int>> pass_blocks(int k, int layer, int seq,
                                            const std::vector<std::vector<int>>& ready) {
    std::vector<std::vector<int>> arrived(members_.size());
    if (k + 1 >= p_) return arrived;
    for (int i = 0; i < size(); ++i) {
      const int block = visiting(members_[i].group, k);
      for (const Hop& h : out_[i]) {
        arrived[h.to].push_back(message(i, h.to, TensorKind::kKv,
                                        block_bytes(block, h.kv, a_.bytes_per_element), layer, seq,
                                        k, ready[i], ready[h.to]));
      }
    }
    return arrived;
  }

  // The ring of one layer, forward (or its replay): P steps per device, each after the block
  // has arrived; K, V passed on as soon as they are here. `ready`: what step 0 waits for.
  // Returns each device's last step.
  std::vector<int> ring_forward(ComputeKind kind, int layer, int seq,
                                std::vector<std::vector<int>> ready) {
    std::vector<int> last(members_.size(), -1);
    for (int k = 0; k < p_; ++k) {
      std::vector<std::vector<int>> arrived = pass_blocks(k, layer, seq, ready);
      for (int i = 0; i < size(); ++i) {
        last[i] = compute(i, kind, layer, seq, ring_step_shape(i, k, kind), ready[i], k);
      }
      ready = std::move(arrived);
    }
    return last;
  }

  int ring_step_shape(int i, int k, ComputeKind kind) {
    const Member& mb = members_[i];
    const int block = visiting(mb.group, k);
    const std::int64_t pairs = mirrored_block_pairs(tokens_, mb.group, block);
    return ring_shape(kind, pairs, mb.heads, mb.kv, layout_.groups[mb.group].tokens,
                      layout_.groups[block].tokens);
  }

  // The ring's backward: K, V passed on at each step's start as forward, each block's
  // accumulated dK, dV passed on after the step (its last pass brings them home). Returns,
  // per device, its last step and the recv of its own block's dK, dV.
  std::vector<std::vector<int>> ring_backward(int layer, int seq,
                                              std::vector<std::vector<int>> ready) {
    std::vector<int> grads_in(members_.size(), -1);  // kv_grad recvs of the previous step
    std::vector<std::vector<int>> grad_recvs(members_.size());
    std::vector<int> last(members_.size(), -1);
    for (int k = 0; k < p_; ++k) {
      std::vector<std::vector<int>> arrived = pass_blocks(k, layer, seq, ready);
      for (int i = 0; i < size(); ++i) {
        last[i] = compute(i, ComputeKind::kRingBwd, layer, seq,
                          ring_step_shape(i, k, ComputeKind::kRingBwd), ready[i], k);
      }
      if (p_ > 1) {
        std::vector<std::vector<int>> next_grads(members_.size());
        for (int i = 0; i < size(); ++i) {
          const int block = visiting(members_[i].group, k);
          std::vector<int> after = grad_recvs[i];
          after.push_back(last[i]);
          for (const Hop& h : out_[i]) {
            next_grads[h.to].push_back(message(i, h.to, TensorKind::kKvGrad,
                                               block_bytes(block, h.kv, a_.grad_bytes_per_element),
                                               layer, seq, k, after, {last[h.to]}));
          }
        }
        grad_recvs = std::move(next_grads);
      }
      ready = std::move(arrived);
    }
    std::vector<std::vector<int>> out(members_.size());
    for (int i = 0; i < size(); ++i) {
      out[i] = grad_recvs[i];
      out[i].push_back(last[i]);
    }
    return out;
  }

  // One layer's forward, or its replay before the backward (`replay`), after `gathered`
  // (ZeRO-3's weights; -1: none); returns each device's first op (pre). A tensor group's
  // device gathers the group's tokens before its pre ops and, after its post ops, runs the
  // attention block's reduce-scatter and the MLP block's all-gather and reduce-scatter.
  std::vector<int> layer_forward(int layer, int seq, bool replay,
                                 const std::vector<int>& gathered) {
    const ComputeKind pre = replay ? ComputeKind::kPreRecompute : ComputeKind::kPreFwd;
    const ComputeKind ring = replay ? ComputeKind::kRingRecompute : ComputeKind::kRingFwd;
    const ComputeKind post = replay ? ComputeKind::kPostRecompute : ComputeKind::kPostFwd;
    const TensorKind act = TensorKind::kActivation;
    std::vector<int> pres;
    for (int i = 0; i < size(); ++i) {
      const int in = tp_chain(i, {Collective::kAllGather}, act, layer, seq,
                              gathered.empty() ? -1 : gathered[i]);
      pres.push_back(compute(i, pre, layer, seq, token_shape(pre, i), {in}));
    }
    auto in = all_to_all(
        TensorKind::kQkv, [&](int from, int to) { return qkv_bytes(from, to); }, layer, seq,
        each(pres));
    for (int i = 0; i < size(); ++i) in[i].push_back(pres[i]);
    const std::vector<int> last = ring_forward(ring, layer, seq, in);
    auto out = all_to_all(
        TensorKind::kAttnOut, [&](int from, int to) { return out_bytes(from, to); }, layer, seq,
        each(last));
    for (int i = 0; i < size(); ++i) {
      if (members_[i].tensor) out[i].push_back(last[i]);
      const int done = compute(i, post, layer, seq, token_shape(post, i), out[i]);
      tp_chain(i, {Collective::kReduceScatter, Collective::kAllGather, Collective::kReduceScatter},
               act, layer, seq, done);
    }
    return pres;
  }

  // One layer's backward (after its replay under full recompute), its first op after
  // `gathered`; returns each device's first op (post.bwd) and last (pre.bwd). A tensor group's
  // device runs the forward's collectives the other way: an all-gather of the output's
  // gradient before its post ops, a reduce-scatter and an all-gather after them, a
  // reduce-scatter after its pre ops.
  std::pair<std::vector<int>, std::vector<int>> layer_backward(int layer, int seq,
                                                               const std::vector<int>& gathered) {
    const TensorKind grad = TensorKind::kActivationGrad;
    std::vector<int> posts;
    std::vector<int> after(members_.size());
    for (int i = 0; i < size(); ++i) {
      const int in = tp_chain(i, {Collective::kAllGather}, grad, layer, seq, gathered[i]);
      posts.push_back(compute(i, ComputeKind::kPostBwd, layer, seq,
                              token_shape(ComputeKind::kPostBwd, i), {in}));
      after[i] = tp_chain(i, {Collective::kReduceScatter, Collective::kAllGather}, grad, layer, seq,
                          posts[i]);
    }
    auto dout = all_to_all(
        TensorKind::kAttnOutGrad, [&](int from, int to) { return out_bytes(to, from); }, layer, seq,
        each(posts));
    for (int i = 0; i < size(); ++i) dout[i].push_back(after[i]);
    const auto done = ring_backward(layer, seq, dout);
    auto dqkv = all_to_all(
        TensorKind::kQkvGrad, [&](int from, int to) { return qkv_bytes(to, from); }, layer, seq,
        done);
    std::vector<int> pres;
    for (int i = 0; i < size(); ++i) {
      if (members_[i].tensor) dqkv[i] = done[i];
      pres.push_back(compute(i, ComputeKind::kPreBwd, layer, seq,
                             token_shape(ComputeKind::kPreBwd, i), dqkv[i]));
      tp_chain(i, {Collective::kReduceScatter}, grad, layer, seq, pres[i]);
    }
    return {posts, pres};
  }

  // A tensor group's collectives on member i, one after the other from `dep` on its compute
  // stream: all-gathers and reduce-scatters of the group's hidden states
  // (tensor_group_bytes). Returns the last (`dep` for a Ulysses member or a group of one).
  int tp_chain(int i, std::initializer_list<Collective> cs, TensorKind tensor, int layer, int seq,
               int dep) {
    const Member& mb = members_[i];
    const SequenceGroup& g = layout_.groups[mb.group];
    if (!mb.tensor || g.size() <= 1) return dep;
    const int group = tp_groups_.at(mb.group);
    for (Collective c : cs) {
      Op op;
      op.kind = OpKind::kCollective;
      op.stream = Stream::kCompute;
      op.collective = c;
      op.tensor = tensor;
      op.group = group;
      op.instance = ops_.next_instance(mb.device, group);
      op.bytes = tensor_group_bytes(m_, t_, g);
      op.layer = layer;
      op.micro_batch = seq;
      std::vector<int> deps{dep};
      deps.insert(deps.end(), pending_[i].begin(), pending_[i].end());
      pending_[i].clear();
      dep = ops_.add(mb.device, op, deps);
    }
    return dep;
  }

  // ZeRO-3: an all-gather of bucket `position`'s weights (layer, -1 embedding, -2 head) on
  // every device, each after after[i] (-1: stream order only); each device's op (-1: none).
  std::vector<int> gather(int position, int seq, const std::vector<int>& after) {
    std::vector<int> out(members_.size(), -1);
    auto it = layer_bucket_.find(position);
    if (t_.zero_stage < 3 || it == layer_bucket_.end()) return out;
    for (int i = 0; i < size(); ++i) {
      out[i] = collective(i, it->second, Collective::kAllGather, TensorKind::kWeightBucket, seq,
                          after[i]);
    }
    return out;
  }
  void scatter(int position, int seq, const std::vector<int>& after) {
    auto it = layer_bucket_.find(position);
    if (t_.zero_stage < 3 || it == layer_bucket_.end()) return;
    for (int i = 0; i < size(); ++i) {
      collective(i, it->second, Collective::kReduceScatter, TensorKind::kGradBucket, seq, after[i]);
    }
  }

  int collective(int i, int bucket, Collective c, TensorKind tensor, int seq, int dep) {
    const Bucket& b = prog_.buckets[bucket];
    Op op;
    op.kind = OpKind::kCollective;
    op.stream = Stream::kDp;
    op.collective = c;
    op.tensor = tensor;
    op.group = b.group;
    op.instance = ops_.next_instance(members_[i].device, b.group);
    op.bytes = b.elements * e();
    op.micro_batch = seq;
    op.bucket = bucket;
    return ops_.add(members_[i].device, op, {dep});
  }

  // The embedding's or the head's op on every device, each after after[i] (-1: none).
  std::vector<int> all_computes(ComputeKind kind, int seq, const std::vector<int>& after) {
    std::vector<int> out;
    for (int i = 0; i < size(); ++i) {
      out.push_back(compute(i, kind, -1, seq, embedding_shape(kind, i), {after[i]}));
    }
    return out;
  }

  // One sequence through the mesh. ZeRO-3 gathers each position's weights one position
  // ahead of their use (after the previous position's first op) and scatters its gradients
  // after its last backward op.
  void sequence(int seq) {
    const std::vector<int> none(members_.size(), -1);
    std::vector<int> current = gather(-1, seq, none);
    std::vector<int> next = gather(0, seq, none);
    std::vector<int> started = all_computes(ComputeKind::kEmbeddingFwd, seq, current);
    for (int layer = 0; layer < m_.layers; ++layer) {
      current = next;
      next = gather(layer + 1 < m_.layers ? layer + 1 : -2, seq, started);
      started = layer_forward(layer, seq, false, current);
    }
    all_computes(ComputeKind::kHeadFwd, seq, next);
    const std::vector<int> done = all_computes(ComputeKind::kHeadBwd, seq, none);
    next = gather(m_.layers - 1, seq, done);
    scatter(-2, seq, done);
    for (int layer = m_.layers - 1; layer >= 0; --layer) {
      current = next;
      const bool replay = t_.recompute == Recompute::kFull;
      if (replay) started = layer_forward(layer, seq, true, current);
      auto [first, last] = layer_backward(layer, seq, replay ? none : current);
      next = gather(layer > 0 ? layer - 1 : -1, seq, replay ? started : first);
      scatter(layer, seq, last);
    }
    scatter(-1, seq, all_computes(ComputeKind::kEmbeddingBwd, seq, next));
  }

  // After the last sequence: ZeRO 0-2 synchronise the gradients over the mesh (all-reduce,
  // or reduce-scatter + all-gather of the updated weights), then the optimizer.
  void synchronise(int i) {
    const int device = members_[i].device;
    int dep = ops_.last_compute(device);
    const bool zero = t_.zero_stage >= 1 && t_.zero_stage < 3;
    if (t_.zero_stage < 3) {
      for (int b : device_buckets_[device]) {
        dep = collective(i, b, zero ? Collective::kReduceScatter : Collective::kAllReduce,
                         TensorKind::kGradBucket, -1, dep);
      }
    }
    Op op;
    op.kind = OpKind::kCompute;
    op.compute = ComputeKind::kOptimizer;
    const double owned = owned_[device];
    // Adam: ~28 bytes per owned parameter (lower.cpp's figure), memory-bound.
    op.shape = shape_id(ComputeKind::kOptimizer, static_cast<std::int64_t>(owned), 0,
                        {{"adam", KernelClass::kElementwise, 0.0, 28.0 * owned}});
    dep = ops_.add(device, op, {dep});
    if (zero) {
      for (int b : device_buckets_[device]) {
        dep = collective(i, b, Collective::kAllGather, TensorKind::kWeightBucket, -1, dep);
      }
    }
  }

  DeviceLayout device_layout(int i) const {
    const Member& mb = members_[i];
    DeviceLayout l;
    l.device = mb.device;
    l.stages = 1;
    l.layer_begin = 0;
    l.layer_end = m_.layers;
    l.first = l.last = true;
    const ShardRanges mine = shard_ranges(m_, mb.head_begin, mb.head_begin + mb.heads);
    // A Ulysses member holds the whole ffn and vocabulary; a tensor group's its share.
    const ShardRanges weights = mb.tensor ? mine : shard_ranges(m_, 0, m_.heads);
    l.head_begin = mine.head_begin;
    l.head_end = mine.head_end;
    l.kv_begin = mine.kv_begin;
    l.kv_end = mine.kv_end;
    l.ffn_begin = weights.ffn_begin;
    l.ffn_end = weights.ffn_end;
    l.vocab_begin = weights.vocab_begin;
    l.vocab_end = weights.vocab_end;
    l.phi = mb.work.phi;
    if (mb.tensor && layout_.groups[mb.group].size() > 1) {
      l.tp = layout_.groups[mb.group].size();
      l.tp_rank = mb.rank;
      l.tp_group = tp_groups_.at(mb.group);
    }
    l.micro_batch = 1;
    l.micro_batches = t_.global_batch;
    l.loss_scale = 1.0 / t_.global_batch;
    l.params = member_params(m_, layout_.groups[mb.group], mb.rank);
    l.owned_params = owned_.empty() ? 0.0 : owned_[mb.device];  // a stage: the plan's
    l.recompute = t_.recompute;
    l.seq_group = mb.group;
    l.seq_rank = mb.rank;
    return l;
  }

  const SequenceLayout& layout_;
  const Cluster& cluster_;
  const Model& m_;
  const TrainingConfig& t_;
  const std::string& scenario_;
  const AttentionShape a_;
  const int p_;
  Program& prog_;
  ProgramBuilder& ops_;
  int layer_begin_ = 0, layer_end_ = 0;  // the layers it runs (a stage's, or all)
  bool stage_first_ = true, stage_last_ = true;
  std::vector<std::vector<int>> pending_;  // per member: what its next compute waits for
  std::vector<Member> members_;
  std::vector<int> first_;                        // flat index of each group's rank 0
  std::vector<std::int64_t> tokens_;              // T_g of each group
  std::vector<std::vector<Hop>> out_;             // ring hops by sender
  std::vector<double> owned_;                     // per device id: parameters its optimizer updates
  std::vector<std::vector<int>> device_buckets_;  // per device id: its buckets (ZeRO 0-2)
  std::vector<int> dp_groups_;
  std::map<int, int> layer_bucket_;  // ZeRO-3: position (layer, -1, -2) -> bucket
  std::map<std::pair<int, int>, int> tags_;
  std::map<std::tuple<ComputeKind, std::int64_t, int, double>, int> shape_ids_;
  std::map<std::tuple<std::int64_t, double, double>, TokenWise> token_wise_;
  std::map<int, int> tp_groups_;  // a tensor group (ring order) -> its Program::groups index
};

MeshStageLowerer::MeshStageLowerer(const Stage& stage, bool first, bool last,
                                   const Cluster& cluster, const Model& model,
                                   const TrainingConfig& training, Program& program,
                                   ProgramBuilder& ops)
    : impl_(std::make_unique<SequenceLowerer>(*stage.sequence, cluster, model, training,
                                              program.scenario, program, ops)) {
  impl_->set_stage(stage.layer_begin, stage.layer_end, first, last);
}

MeshStageLowerer::~MeshStageLowerer() = default;

int MeshStageLowerer::device(int i) const {
  return impl_->device(i);
}

void MeshStageLowerer::forward(int j, const std::vector<std::vector<int>>& ready) {
  for (std::size_t i = 0; i < ready.size(); ++i) impl_->wait_for(static_cast<int>(i), ready[i]);
  impl_->stage_forward(j);
}

void MeshStageLowerer::backward(int j, const std::vector<std::vector<int>>& ready) {
  for (std::size_t i = 0; i < ready.size(); ++i) impl_->wait_for(static_cast<int>(i), ready[i]);
  impl_->stage_backward(j);
}

DeviceLayout MeshStageLowerer::layout(int i) const {
  return impl_->stage_layout(i);
}

std::vector<Kernel> mesh_pass_kernels(const SequenceLayout& layout, int g, int rank,
                                      const Model& model, const TrainingConfig& training,
                                      int layers, bool first, bool last, bool forward) {
  const SequenceGroup& group = layout.groups[g];
  const MemberWork w = member_work(group, rank, model.heads);
  const TrainingConfig t = member_training(training, group, rank);
  const AttentionShape a = attention_shape(model, training);
  const int heads = group.heads[rank];
  const int kv = kv_heads_needed(a, head_offsets(group)[rank], heads);
  // Its heads of the group's T_g queries against every key of the sequence.
  const std::int64_t pairs = mirrored_rank_pairs(training.seq_len, group.tokens);
  auto attention = [&](bool backward) {
    return attention_kernel(a, pairs, heads, kv, group.tokens, training.seq_len, training.seq_len,
                            backward);
  };
  std::vector<Kernel> out;
  if (forward && first) append(out, embedding_forward(model, t, 1, w.share));
  if (!forward && last) append(out, head_backward(model, t, 1, w.phi, w.share));
  for (int l = 0; l < layers; ++l) {
    append(out,
           token_wise_kernels(model, t, w.phi, w.share, training.recompute, forward, !forward));
    if (!forward && training.recompute == Recompute::kFull) out.push_back(attention(false));
    out.push_back(attention(!forward));
  }
  if (forward && last) append(out, head_forward(model, t, 1, w.phi, w.share));
  if (!forward && first) append(out, embedding_backward(model, t, 1, w.share));
  return out;
}

double sequence_compute_ops(const SequenceLayout& layout, const Model& model,
                            const TrainingConfig& training) {
  const double p = static_cast<double>(layout.groups.size());
  const double per_layer = training.recompute == Recompute::kFull ? 6 + 3 * p : 4 + 2 * p;
  // Per sequence: the layers, embedding and head forward and backward; then the optimizer.
  return static_cast<double>(layout.num_devices()) *
         (static_cast<double>(training.global_batch) * (per_layer * model.layers + 4) + 1);
}

Result<Program> lower_sequence(const SequenceLayout& layout, const Cluster& cluster,
                               const Model& model, const TrainingConfig& training,
                               const std::string& scenario, const std::string& origin) {
  if (auto st = validate(layout, model, training, cluster, origin); !st) return st.error();
  if (const double ops = sequence_compute_ops(layout, model, training);
      ops > kMaxProgramComputeOps) {
    return bad_input(origin + ": the program would hold " + format("%.3g", ops) + " compute ops (" +
                     std::to_string(training.global_batch) + " sequences, " +
                     std::to_string(model.layers) + " layers, " +
                     std::to_string(layout.groups.size()) + " ring steps per layer on " +
                     std::to_string(layout.num_devices()) +
                     " devices); hexisim materialises at "
                     "most " +
                     format("%.3g", kMaxProgramComputeOps) + ": lower a smaller global_batch");
  }
  Program prog;
  ProgramBuilder ops(cluster.num_devices());
  SequenceLowerer(layout, cluster, model, training, scenario, prog, ops).run();
  return prog;
}

Result<Program> lower_plan_file(const PlanFile& file, const Cluster& cluster, const Model& model,
                                const TrainingConfig& training, const LowerOptions& options,
                                const std::string& origin) {
  if (file.layout) {
    return lower_sequence(*file.layout, cluster, model, training, options.scenario, origin);
  }
  return lower_plan(*file.plan, cluster, model, training, options, origin);
}

}  // namespace program
}  // namespace hexi
