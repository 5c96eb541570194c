// Sequence meshes (HexiSeq: context + head parallelism; scheduler/program/program.hpp,
// "Sequence meshes"): the ops of a program lowered by lower_sequence, executed op for op.
//
// Device i of group g holds s_i tokens of each sequence (mirrored layout, cost/sequence.hpp:
// the group's T_g tokens are a front and a mirrored back range of the sequence, and inside
// the group each device takes its share of both halves in rank order) and runs the
// token-wise parts of every layer on them: pre (RMSNorm, Q, K, V of every head, RoPE at the
// tokens' global positions), post (Wo, residual, the MLP block), embedding and head. The
// attention core runs on its query heads H_i (kv heads K_i) of all T_g tokens of its group,
// received by the ragged Ulysses all-to-all, against one key/value block per ring step
// (blockwise causal attention by global position, merged by log-sum-exp). Blocks travel
// between groups on sub-rings: one per interval of the common refinement of the groups' head
// ranges, so a message from group g to g+1 carries the kv heads of the intervals its sender
// and receiver both hold. Backward: dO by the all-to-all, per step the block's dQ (kept), dK
// and dV (per interval, accumulated along the sub-ring and brought home by the last pass),
// dQ, dK, dV back to the tokens' holders by the all-to-all (replicated kv heads' partial
// gradients summed there), then pre's backward.
//
// GQA: a device's query heads may split a kv group, so its kv heads are expanded to one per
// query head before the blockwise kernels (hq = hk), and the gradients of the expanded heads
// are summed back per kv head (and per interval, for the sub-rings).
//
// Messages (contiguous, float32; `Piece`s in this order), for a sender a and receiver b:
//   qkv           Q of a's tokens for b's heads (s_a, |H_b| d), then K, V for b's kv heads
//   attn_out      O of b's tokens for a's heads (s_b, |H_a| d)
//   attn_out_grad dO of a's tokens for b's heads (s_a, |H_b| d)
//   qkv_grad      dQ of b's tokens for a's heads, then dK, dV for a's kv heads
//   kv, kv_grad   per interval (increasing): K (or dK) of the block's T tokens for its kv
//                 heads (T, kv_m d), then V (or dV)

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/runtime_impl.hpp"
#include "scheduler/cost/sequence.hpp"
#include "scheduler/plan/sequence_layout.hpp"

namespace hexi::engine {

namespace {

std::string seq_layer_name(int layer, const char* what) {
  return "layers." + std::to_string(layer) + "." + what;
}

std::size_t sz(int x) {
  return static_cast<std::size_t>(x);
}

// Global positions of device `rank` of group `g`, front half then back half, each ascending.
Result<std::vector<int>> device_positions(const SequenceLayout& layout, int seq_len, int g,
                                          int rank) {
  std::vector<std::int64_t> group_tokens;
  for (const auto& grp : layout.groups) group_tokens.push_back(grp.tokens);
  auto outer = mirrored_layout(seq_len, group_tokens);
  HEXI_TRY(outer);
  const SequenceGroup& grp = layout.groups[g];
  auto inner = mirrored_layout(grp.tokens, grp.shards);
  HEXI_TRY(inner);
  const MirroredShard& mine = (*inner)[rank];
  const MirroredShard& group = (*outer)[g];
  const std::int64_t half = grp.tokens / 2;
  std::vector<int> pos;
  for (std::int64_t t = mine.front.begin; t < mine.front.end; ++t)
    pos.push_back(static_cast<int>(group.front.begin + t));
  for (std::int64_t t = mine.back.begin; t < mine.back.end; ++t)
    pos.push_back(static_cast<int>(group.back.begin + (t - half)));
  return pos;
}

}  // namespace

int RankRuntime::Impl::seq_visiting(int group, int step) const {
  const int p = static_cast<int>(seq->tokens.size());
  return ((group - step) % p + p) % p;
}

Status RankRuntime::Impl::setup_sequence() {
  seq = std::make_unique<SeqState>();
  SeqState& q = *seq;
  const SequenceLayout& mesh_layout = *mesh;
  const int d = dims.head_dim();
  q.ratio = dims.heads / dims.kv_heads;
  const AttentionShape heads_shape{d, dims.heads, dims.kv_heads, 4, 4};
  for (int g = 0; g < static_cast<int>(mesh_layout.groups.size()); ++g) {
    const SequenceGroup& grp = mesh_layout.groups[g];
    q.first.push_back(static_cast<int>(q.members.size()));
    q.tokens.push_back(static_cast<int>(grp.tokens));
    q.max_tokens = std::max(q.max_tokens, static_cast<int>(grp.tokens));
    const std::vector<int> offsets = head_offsets(grp);
    std::vector<int> group_pos;
    int row = 0;
    for (int r = 0; r < grp.size(); ++r) {
      SeqMember m;
      m.device = grp.devices[r];
      m.group = g;
      m.rank = r;
      m.head_begin = offsets[r];
      m.heads = grp.heads[r];
      m.kv_begin = m.heads > 0 ? m.head_begin / q.ratio : 0;
      m.kv = kv_heads_needed(heads_shape, m.head_begin, m.heads);
      m.shard = static_cast<int>(grp.shards[r]);
      m.row = row;
      row += m.shard;
      if (m.device == lay->device) q.me = static_cast<int>(q.members.size());
      q.members.push_back(m);
      auto pos = device_positions(mesh_layout, prog.seq_len, g, r);
      HEXI_TRY(pos);
      if (m.device == lay->device) q.host_pos = *pos;
      group_pos.insert(group_pos.end(), pos->begin(), pos->end());
    }
    auto dev = DeviceArray<int>::make(be, group_pos.size());
    HEXI_TRY(dev);
    HEXI_TRY(be.upload(dev->get(), group_pos.data(), group_pos.size() * sizeof(int)));
    q.group_pos.push_back(std::move(*dev));
  }
  const SeqMember& me = q.members[q.me];
  if (me.shard != rows) return failure("the sequence layout's shard differs from the program's");
  auto pos = DeviceArray<int>::make(be, q.host_pos.size());
  HEXI_TRY(pos);
  q.pos = std::move(*pos);
  HEXI_TRY(be.upload(q.pos.get(), q.host_pos.data(), q.host_pos.size() * sizeof(int)));
  q.sequence_tokens.resize(prog.seq_len);
  q.sequence_targets.resize(prog.seq_len);
  seq_setup_rings(heads_shape);
  return seq_setup_buffers();
}

// Sub-rings: which intervals each message between consecutive groups carries.
void RankRuntime::Impl::seq_setup_rings(const AttentionShape& heads_shape) {
  SeqState& q = *seq;
  const int p = static_cast<int>(q.tokens.size());
  if (p > 1) {
    const SubRings rings = sub_rings(heads_shape, *mesh);
    q.bounds = rings.bounds;
    q.interval_kv = rings.kv;
    for (int g = 0; g < p; ++g) {
      const int next = (g + 1) % p;
      for (std::size_t m = 0; m < rings.kv.size(); ++m) {
        const int from = q.first[g] + rings.owner[g][m], to = q.first[next] + rings.owner[next][m];
        q.hop_intervals[{from, to}].push_back(static_cast<int>(m));
        if (from == q.me) q.slot_of_interval.emplace(static_cast<int>(m), 0);
      }
    }
    int slot = 0;
    for (auto& [m, s] : q.slot_of_interval) s = slot++;
  }
}

Status RankRuntime::Impl::seq_setup_buffers() {
  SeqState& q = *seq;
  const SeqMember& me = q.members[q.me];
  const int d = dims.head_dim();
  // Saved per layer of each activation slot (micro-batches in flight: seq_saved).
  const std::size_t s = sz(me.shard), h = sz(hidden), L = sz(layers) * slots.size();
  const std::size_t T = sz(q.tokens[me.group]);
  const std::size_t tm = sz(q.max_tokens), hq = sz(me.heads), hk = sz(me.kv), dd = sz(d);
  const std::size_t nq = sz(dims.heads) * dd, nkv = sz(dims.kv_heads) * dd;
  auto alloc = [&](DeviceArray<float>& a, std::size_t n) -> Status {
    auto r = DeviceArray<float>::make(be, n);
    HEXI_TRY(r);
    a = std::move(*r);
    return be.zero(a.get(), a.bytes());
  };
  HEXI_TRY(alloc(q.rstd, L * s));
  HEXI_TRY(alloc(q.xn, L * s * h));
  HEXI_TRY(alloc(q.att, L * s * nq));
  HEXI_TRY(alloc(q.q_grp, L * T * hq * dd));
  HEXI_TRY(alloc(q.out_grp, L * T * hq * dd));
  HEXI_TRY(alloc(q.lse_grp, L * T * hq));
  HEXI_TRY(alloc(q.k_grp, L * T * hk * dd));
  HEXI_TRY(alloc(q.v_grp, L * T * hk * dd));
  for (auto* a : {&q.q_loc, &q.dq_loc, &q.datt}) HEXI_TRY(alloc(*a, s * nq));
  for (auto* a : {&q.k_loc, &q.v_loc, &q.dk_loc, &q.dv_loc}) HEXI_TRY(alloc(*a, s * nkv));
  for (auto* a : {&q.dout_grp, &q.dq_grp, &q.part_out}) HEXI_TRY(alloc(*a, T * hq * dd));
  for (auto* a : {&q.dk_own, &q.dv_own}) HEXI_TRY(alloc(*a, T * hk * dd));
  HEXI_TRY(alloc(q.part_lse, T * hq));
  for (auto* a : {&q.k_exp, &q.v_exp, &q.dk_exp, &q.dv_exp}) HEXI_TRY(alloc(*a, tm * hq * dd));
  for (int parity = 0; parity < 2; ++parity) {
    HEXI_TRY(alloc(q.kv_blocks[parity], 2 * tm * hk * dd));
    q.grad_blocks[parity].resize(q.slot_of_interval.size());
    for (const auto& [m, slot] : q.slot_of_interval) {
      HEXI_TRY(alloc(q.grad_blocks[parity][slot], 2 * tm * sz(q.interval_kv[m]) * dd));
    }
  }
  std::size_t largest = 0;
  for (int i = lay->op_begin; i < lay->op_end; ++i) {
    const Op& op = prog.ops[i];
    if (op.kind == OpKind::kRecv) largest = std::max(largest, static_cast<std::size_t>(op.bytes));
  }
  HEXI_TRY(alloc(q.message, largest / sizeof(float)));
  if (prog.zero_stage >= 3) {
    HEXI_TRY(alloc(q.zero3_grads, layout.total));
    std::size_t biggest = 0;
    for (const auto& [id, b] : buckets) biggest = std::max(biggest, b.elements);
    HEXI_TRY(alloc(q.scratch, biggest));
    for (std::size_t b = 0; b < prog.buckets.size(); ++b) {
      for (const ParamSegment& seg : prog.buckets[b].segments)
        q.bucket_of_position[seg.layer] = static_cast<int>(b);
    }
    // Nothing but the owned weights exists before the first gather.
    for (const auto& [position, b] : q.bucket_of_position) HEXI_TRY(zero3_release(position));
  }
  return {};
}

// The tokens and targets of this device's positions of global sequence `sequence` of the step.
Status RankRuntime::Impl::seq_load_tokens(Slot& s, int sequence) {
  SeqState& q = *seq;
  batch_tokens(data, prog.global_batch, steps, sequence, 1, q.sequence_tokens.data(),
               q.sequence_targets.data());
  for (std::size_t r = 0; r < q.host_pos.size(); ++r) {
    host_tokens[r] = q.sequence_tokens[q.host_pos[r]];
    host_targets[r] = q.sequence_targets[q.host_pos[r]];
  }
  HEXI_TRY(be.upload(s.tokens.get(), host_tokens.data(), rows * sizeof(int)));
  return be.upload(s.targets.get(), host_targets.data(), rows * sizeof(int));
}

Status RankRuntime::Impl::seq_compute(const Op& op) {
  switch (op.compute) {
    case ComputeKind::kPreFwd:
    case ComputeKind::kPreRecompute:
      return seq_pre(op);
    case ComputeKind::kRingFwd:
    case ComputeKind::kRingRecompute:
      return seq_ring_forward(op);
    case ComputeKind::kPostFwd:
    case ComputeKind::kPostRecompute:
      return seq_post(op, op.compute == ComputeKind::kPostRecompute);
    case ComputeKind::kPostBwd:
      return seq_post_backward(op);
    case ComputeKind::kRingBwd:
      return seq_ring_backward(op);
    case ComputeKind::kPreBwd:
      return seq_pre_backward(op);
    default:
      break;
  }
  return failure("a pipeline op (" + std::string(to_string(op.compute)) +
                 ") in a sequence program");
}

// Layer `l`'s slice of a per-layer saved buffer of `per_layer` floats.
namespace {
float* at_layer(const DeviceArray<float>& a, int l, std::size_t per_layer) {
  return a.get() + sz(l) * per_layer;
}
}  // namespace

Status RankRuntime::Impl::seq_pre(const Op& op) {
  SeqState& q = *seq;
  const SeqMember& me = q.members[q.me];
  auto s = slot(op.micro_batch);
  HEXI_TRY(s);
  const int l = op.layer - chunk_begin(op), d = dims.head_dim();  // in the stage
  const int sl = seq_saved(op);                                   // in the saved buffers
  const std::size_t n = sz(rows), T = sz(q.tokens[me.group]);
  const std::size_t nq = sz(dims.heads * d), nkv = sz(dims.kv_heads * d);
  const std::size_t hq = sz(me.heads * d), hk = sz(me.kv * d);
  HEXI_TRY(be.attention_qkv_forward(shape, attn_w(op.layer), resid(**s, 2 * l), q.pos.get(),
                                    at_layer(q.rstd, sl, n), at_layer(q.xn, sl, n * hidden),
                                    q.q_loc.get(), q.k_loc.get(), q.v_loc.get()));
  // Its own tokens of its own heads stay here.
  const std::size_t row = sz(me.row);
  HEXI_TRY(be.copy_2d(at_layer(q.q_grp, sl, T * hq) + row * hq, hq,
                      q.q_loc.get() + sz(me.head_begin * d), nq, n, hq, false));
  HEXI_TRY(be.copy_2d(at_layer(q.k_grp, sl, T * hk) + row * hk, hk,
                      q.k_loc.get() + sz(me.kv_begin * d), nkv, n, hk, false));
  return be.copy_2d(at_layer(q.v_grp, sl, T * hk) + row * hk, hk,
                    q.v_loc.get() + sz(me.kv_begin * d), nkv, n, hk, false);
}

// K (or V: `values`) of the block this device computes at ring step `step` of layer `layer`:
// its own group's at step 0, else the one received.
const float* RankRuntime::Impl::seq_block(int layer, int step, bool values) {
  SeqState& q = *seq;
  const SeqMember& me = q.members[q.me];
  const std::size_t T = sz(q.tokens[me.group]), hk = sz(me.kv * dims.head_dim());
  if (step == 0) return at_layer(values ? q.v_grp : q.k_grp, layer, T * hk);
  return q.kv_blocks[step % 2].get() + (values ? sz(q.max_tokens) * hk : 0);
}

// (T, hk, d) kv heads -> (T, hq, d): query head j of this device reads its kv head.
Status RankRuntime::Impl::seq_expand(const float* kv, int block_tokens, float* expanded) {
  const SeqMember& me = seq->members[seq->me];
  const std::size_t d = sz(dims.head_dim());
  for (int j = 0; j < me.heads; ++j) {
    const int local_kv = (me.head_begin + j) / seq->ratio - me.kv_begin;
    HEXI_TRY(be.copy_2d(expanded + sz(j) * d, sz(me.heads) * d, kv + sz(local_kv) * d,
                        sz(me.kv) * d, sz(block_tokens), d, false));
  }
  return {};
}

Status RankRuntime::Impl::seq_ring_forward(const Op& op) {
  SeqState& q = *seq;
  const SeqMember& me = q.members[q.me];
  if (me.heads == 0) return {};
  const int k = op.step, d = dims.head_dim(), sl = seq_saved(op);
  const int block = seq_visiting(me.group, k);
  const int T = q.tokens[me.group], Tb = q.tokens[block];
  HEXI_TRY(seq_expand(seq_block(sl, k, false), Tb, q.k_exp.get()));
  HEXI_TRY(seq_expand(seq_block(sl, k, true), Tb, q.v_exp.get()));
  const kernels::AttentionBlockPair pair{
      T, Tb, me.heads, me.heads, d, q.group_pos[me.group].get(), q.group_pos[block].get()};
  const std::size_t hq = sz(me.heads);
  float* out = at_layer(q.out_grp, sl, sz(T) * hq * sz(d));
  float* lse = at_layer(q.lse_grp, sl, sz(T) * hq);
  const float* query = at_layer(q.q_grp, sl, sz(T) * hq * sz(d));
  if (k == 0) return be.blockwise_forward(pair, query, q.k_exp.get(), q.v_exp.get(), out, lse);
  HEXI_TRY(be.blockwise_forward(pair, query, q.k_exp.get(), q.v_exp.get(), q.part_out.get(),
                                q.part_lse.get()));
  return be.attention_merge(out, lse, q.part_out.get(), q.part_lse.get(), T, me.heads, d);
}

// Wo on the whole attention output of its tokens, the residual, the MLP block. Under ZeRO-3
// the layer's weights are released after the forward (the backward gathers them again);
// a replay (full recompute) keeps them for the backward that follows it.
Status RankRuntime::Impl::seq_post(const Op& op, bool replay) {
  SeqState& q = *seq;
  const SeqMember& me = q.members[q.me];
  auto s = slot(op.micro_batch);
  HEXI_TRY(s);
  const int l = op.layer - chunk_begin(op), d = dims.head_dim(), sl = seq_saved(op);
  const std::size_t n = sz(rows), nq = sz(dims.heads * d), hq = sz(me.heads * d);
  const std::size_t T = sz(q.tokens[me.group]);
  float* att = at_layer(q.att, sl, n * nq);
  HEXI_TRY(be.copy_2d(att + sz(me.head_begin * d), nq,
                      at_layer(q.out_grp, sl, T * hq) + sz(me.row) * hq, hq, n, hq, false));
  float* x = resid(**s, 2 * l);
  float* mid = resid(**s, 2 * l + 1);
  float* out = resid(**s, 2 * l + 2);
  HEXI_TRY(be.attention_out_forward(shape, param(seq_layer_name(op.layer, "wo")), att, mid));
  HEXI_TRY(add_stored(mid, x, n * sz(hidden)));
  HEXI_TRY(be.mlp_forward(shape, mlp_w(op.layer), mid, mlp_saved(**s, l), out));
  HEXI_TRY(add_stored(out, mid, n * sz(hidden)));
  return prog.zero_stage >= 3 && !replay ? zero3_release(op.layer) : Status{};
}

Status RankRuntime::Impl::seq_post_backward(const Op& op) {
  SeqState& q = *seq;
  const SeqMember& me = q.members[q.me];
  auto s = slot(op.micro_batch);
  HEXI_TRY(s);
  const int l = op.layer - chunk_begin(op), g = op.layer, d = dims.head_dim();
  const int sl = seq_saved(op);
  const std::size_t n = sz(rows), nq = sz(dims.heads * d), hq = sz(me.heads * d);
  float* dy = (*s)->grad.get();
  HEXI_TRY(be.mlp_backward(shape, mlp_w(g), mlp_saved(**s, l), resid(**s, 2 * l + 1), dy,
                           partial.get(), mlp_g(g, grad(seq_layer_name(g, "mlp_norm")))));
  HEXI_TRY(add_stored(dy, partial.get(), n * sz(hidden)));
  HEXI_TRY(be.attention_out_backward(shape, param(seq_layer_name(g, "wo")),
                                     at_layer(q.att, sl, n * nq), dy, q.datt.get(),
                                     grad(seq_layer_name(g, "wo"))));
  for (auto* a : {&q.dq_grp, &q.dk_own, &q.dv_own, &q.dq_loc, &q.dk_loc, &q.dv_loc})
    HEXI_TRY(be.zero(a->get(), a->bytes()));
  return be.copy_2d(q.dout_grp.get() + sz(me.row) * hq, hq, q.datt.get() + sz(me.head_begin * d),
                    nq, n, hq, false);
}

Status RankRuntime::Impl::seq_ring_backward(const Op& op) {
  SeqState& q = *seq;
  const SeqMember& me = q.members[q.me];
  if (me.heads == 0) return {};
  const int k = op.step, d = dims.head_dim(), sl = seq_saved(op);
  const int p = static_cast<int>(q.tokens.size());
  const int block = seq_visiting(me.group, k);
  const int T = q.tokens[me.group], Tb = q.tokens[block];
  const std::size_t dd = sz(d), hq = sz(me.heads);
  HEXI_TRY(seq_expand(seq_block(sl, k, false), Tb, q.k_exp.get()));
  HEXI_TRY(seq_expand(seq_block(sl, k, true), Tb, q.v_exp.get()));
  HEXI_TRY(be.zero(q.dk_exp.get(), sz(Tb) * hq * dd * sizeof(float)));
  HEXI_TRY(be.zero(q.dv_exp.get(), sz(Tb) * hq * dd * sizeof(float)));
  const kernels::AttentionBlockPair pair{
      T, Tb, me.heads, me.heads, d, q.group_pos[me.group].get(), q.group_pos[block].get()};
  const std::size_t per = sz(T) * hq * dd;
  HEXI_TRY(be.blockwise_backward(pair, q.dq_grp.get(), q.dk_exp.get(), q.dv_exp.get(),
                                 q.dout_grp.get(), at_layer(q.q_grp, sl, per), q.k_exp.get(),
                                 q.v_exp.get(), at_layer(q.out_grp, sl, per),
                                 at_layer(q.lse_grp, sl, sz(T) * hq)));
  // Sum the expanded heads' gradients per kv head: into its own block's (one group), or into
  // each interval's accumulator that travels the sub-ring (received, after step 0).
  if (p > 1 && k == 0) {
    for (auto& acc : q.grad_blocks[0]) HEXI_TRY(be.zero(acc.get(), acc.bytes()));
  }
  for (int j = 0; j < me.heads; ++j) {
    const int head = me.head_begin + j, kv = head / q.ratio;
    const float* dk = q.dk_exp.get() + sz(j) * dd;
    const float* dv = q.dv_exp.get() + sz(j) * dd;
    if (p == 1) {
      const std::size_t col = sz(kv - me.kv_begin) * dd, stride = sz(me.kv) * dd;
      HEXI_TRY(be.copy_2d(q.dk_own.get() + col, stride, dk, hq * dd, sz(Tb), dd, true));
      HEXI_TRY(be.copy_2d(q.dv_own.get() + col, stride, dv, hq * dd, sz(Tb), dd, true));
      continue;
    }
    const int m = static_cast<int>(std::upper_bound(q.bounds.begin(), q.bounds.end(), head) -
                                   q.bounds.begin() - 1);
    const int width = q.interval_kv[m];
    const std::size_t col = sz(kv - q.bounds[m] / q.ratio) * dd, stride = sz(width) * dd;
    DeviceArray<float>& acc = q.grad_blocks[k % 2][q.slot_of_interval.at(m)];
    const std::size_t dv_offset = sz(q.max_tokens) * stride;
    HEXI_TRY(be.copy_2d(acc.get() + col, stride, dk, hq * dd, sz(Tb), dd, true));
    HEXI_TRY(be.copy_2d(acc.get() + dv_offset + col, stride, dv, hq * dd, sz(Tb), dd, true));
  }
  return {};
}

Status RankRuntime::Impl::seq_pre_backward(const Op& op) {
  SeqState& q = *seq;
  const SeqMember& me = q.members[q.me];
  auto s = slot(op.micro_batch);
  HEXI_TRY(s);
  const int l = op.layer - chunk_begin(op), d = dims.head_dim(), sl = seq_saved(op);
  const std::size_t n = sz(rows), nq = sz(dims.heads * d), nkv = sz(dims.kv_heads * d);
  const std::size_t hq = sz(me.heads * d), hk = sz(me.kv * d), row = sz(me.row);
  HEXI_TRY(be.copy_2d(q.dq_loc.get() + sz(me.head_begin * d), nq, q.dq_grp.get() + row * hq, hq, n,
                      hq, false));
  HEXI_TRY(be.copy_2d(q.dk_loc.get() + sz(me.kv_begin * d), nkv, q.dk_own.get() + row * hk, hk, n,
                      hk, true));
  HEXI_TRY(be.copy_2d(q.dv_loc.get() + sz(me.kv_begin * d), nkv, q.dv_own.get() + row * hk, hk, n,
                      hk, true));
  HEXI_TRY(be.attention_qkv_backward(
      shape, attn_w(op.layer), resid(**s, 2 * l), q.pos.get(), at_layer(q.rstd, sl, n),
      at_layer(q.xn, sl, n * hidden), q.dq_loc.get(), q.dk_loc.get(), q.dv_loc.get(), partial.get(),
      attn_g(op.layer, grad(seq_layer_name(op.layer, "attn_norm")))));
  return add_stored((*s)->grad.get(), partial.get(), n * sz(hidden));
}

// The pieces of a sequence message (the layouts at the top of this file), from this device's
// side: what it sends, or where what it receives goes.
Result<std::vector<Piece>> RankRuntime::Impl::seq_pieces(const Op& op, bool sending) {
  SeqState& q = *seq;
  const int peer_flat = [&] {
    for (std::size_t i = 0; i < q.members.size(); ++i)
      if (q.members[i].device == op.peer) return static_cast<int>(i);
    return -1;
  }();
  if (peer_flat < 0) return failure("device " + std::to_string(op.peer) + " is not in the mesh");
  auto out = op.tensor == TensorKind::kKv || op.tensor == TensorKind::kKvGrad
                 ? seq_ring_pieces(op, sending, peer_flat)
                 : seq_all_to_all_pieces(op, sending, peer_flat);
  if (!out) return out;
  std::size_t elements = 0;
  for (const Piece& pc : *out) elements += pc.rows * pc.cols;
  if (static_cast<double>(elements * sizeof(float)) != op.bytes) {
    return failure("the message holds " + std::to_string(elements * sizeof(float)) +
                   " bytes of the layout, the program counts " + std::to_string(op.bytes));
  }
  return out;
}

// The Ulysses all-to-all's pieces with member `peer_flat`: this device's columns of the
// peer's heads (n rows of its shard), or the peer's rows (its shard) of this device's heads.
Result<std::vector<Piece>> RankRuntime::Impl::seq_all_to_all_pieces(const Op& op, bool sending,
                                                                    int peer_flat) {
  SeqState& q = *seq;
  const SeqMember& me = q.members[q.me];
  const SeqMember& peer = q.members[peer_flat];
  const int sl = seq_saved(op), d = dims.head_dim();
  const std::size_t dd = sz(d), n = sz(me.shard), T = sz(q.tokens[me.group]);
  const std::size_t nq = sz(dims.heads) * dd, nkv = sz(dims.kv_heads) * dd;
  const std::size_t hq = sz(me.heads) * dd, hk = sz(me.kv) * dd;
  const std::size_t ph = sz(peer.heads) * dd, pk = sz(peer.kv) * dd;
  const std::size_t ph0 = sz(peer.head_begin) * dd, pk0 = sz(peer.kv_begin) * dd;
  const std::size_t prow = sz(peer.row), ps = sz(peer.shard);
  switch (op.tensor) {
    case TensorKind::kQkv:
      if (sending) {
        return std::vector<Piece>{{q.q_loc.get() + ph0, nq, n, ph},
                                  {q.k_loc.get() + pk0, nkv, n, pk},
                                  {q.v_loc.get() + pk0, nkv, n, pk}};
      }
      return std::vector<Piece>{{at_layer(q.q_grp, sl, T * hq) + prow * hq, hq, ps, hq},
                                {at_layer(q.k_grp, sl, T * hk) + prow * hk, hk, ps, hk},
                                {at_layer(q.v_grp, sl, T * hk) + prow * hk, hk, ps, hk}};
    case TensorKind::kAttnOut:
      if (sending)
        return std::vector<Piece>{{at_layer(q.out_grp, sl, T * hq) + prow * hq, hq, ps, hq}};
      return std::vector<Piece>{{at_layer(q.att, sl, n * nq) + ph0, nq, n, ph}};
    case TensorKind::kAttnOutGrad:
      if (sending) return std::vector<Piece>{{q.datt.get() + ph0, nq, n, ph}};
      return std::vector<Piece>{{q.dout_grp.get() + prow * hq, hq, ps, hq}};
    case TensorKind::kQkvGrad:
      if (sending) {
        return std::vector<Piece>{{q.dq_grp.get() + prow * hq, hq, ps, hq},
                                  {q.dk_own.get() + prow * hk, hk, ps, hk},
                                  {q.dv_own.get() + prow * hk, hk, ps, hk}};
      }
      // Replicated kv heads: every holder's partial dK, dV is summed.
      return std::vector<Piece>{{q.dq_loc.get() + ph0, nq, n, ph},
                                {q.dk_loc.get() + pk0, nkv, n, pk, true},
                                {q.dv_loc.get() + pk0, nkv, n, pk, true}};
    default:
      return failure("not a sequence-mesh tensor");
  }
}

// A sub-ring hop's pieces with member `peer_flat` at step op.step: per interval of the hop,
// the K, V block (or the dK, dV accumulator) columns of that interval's kv heads.
Result<std::vector<Piece>> RankRuntime::Impl::seq_ring_pieces(const Op& op, bool sending,
                                                              int peer_flat) {
  SeqState& q = *seq;
  const SeqMember& me = q.members[q.me];
  const int sl = seq_saved(op);
  const std::size_t dd = sz(dims.head_dim()), hk = sz(me.kv) * dd;
  const bool gradient = op.tensor == TensorKind::kKvGrad;
  const int p = static_cast<int>(q.tokens.size()), k = op.step;
  const int from = sending ? q.me : peer_flat, to = sending ? peer_flat : q.me;
  auto it = q.hop_intervals.find({from, to});
  if (it == q.hop_intervals.end() || k < 0 || k >= p)
    return failure("no sub-ring hop from device " + std::to_string(q.members[from].device) +
                   " to device " + std::to_string(q.members[to].device));
  const std::size_t Tb = sz(q.tokens[seq_visiting(q.members[from].group, k)]);
  const std::size_t tm = sz(q.max_tokens);
  std::vector<Piece> out;
  for (const int m : it->second) {
    const std::size_t width = sz(q.interval_kv[m]) * dd;
    const std::size_t col = sz(q.bounds[m] / q.ratio - me.kv_begin) * dd;
    if (gradient && (sending || k + 1 < p)) {
      // An interval's accumulator: the step's (sending) or the next step's (receiving).
      const float* acc = q.grad_blocks[(sending ? k : k + 1) % 2][q.slot_of_interval.at(m)].get();
      out.push_back({const_cast<float*>(acc), width, Tb, width});
      out.push_back({const_cast<float*>(acc) + tm * width, width, Tb, width});
    } else if (gradient) {
      // The last pass: its own block's complete dK, dV of the interval.
      out.push_back({q.dk_own.get() + col, hk, Tb, width, true});
      out.push_back({q.dv_own.get() + col, hk, Tb, width, true});
    } else if (sending) {
      out.push_back({const_cast<float*>(seq_block(sl, k, false)) + col, hk, Tb, width});
      out.push_back({const_cast<float*>(seq_block(sl, k, true)) + col, hk, Tb, width});
    } else {
      float* next = q.kv_blocks[(k + 1) % 2].get();
      out.push_back({next + col, hk, Tb, width});
      out.push_back({next + tm * hk + col, hk, Tb, width});
    }
  }
  return out;
}

Status RankRuntime::Impl::seq_send(const Op& op) {
  auto pieces = seq_pieces(op, true);
  HEXI_TRY(pieces);
  std::size_t total = 0;
  for (const Piece& pc : *pieces) total += pc.rows * pc.cols;
  auto staged = DeviceArray<float>::make(be, total);
  HEXI_TRY(staged);
  std::size_t at = 0;
  for (const Piece& pc : *pieces) {
    HEXI_TRY(be.copy_2d(staged->get() + at, pc.cols, pc.at, pc.stride, pc.rows, pc.cols, false));
    at += pc.rows * pc.cols;
  }
  auto req = world.isend(staged->get(), total, DType::kF32, rank_of_device[op.peer], op.tag);
  HEXI_TRY(req);
  seq->sends.push_back({std::move(*staged), std::move(*req)});
  return {};
}

Status RankRuntime::Impl::seq_recv(const Op& op) {
  auto pieces = seq_pieces(op, false);
  HEXI_TRY(pieces);
  std::size_t total = 0;
  for (const Piece& pc : *pieces) total += pc.rows * pc.cols;
  float* msg = seq->message.get();
  HEXI_TRY(world.recv(msg, total, DType::kF32, rank_of_device[op.peer], op.tag));
  std::size_t at = 0;
  for (const Piece& pc : *pieces) {
    HEXI_TRY(be.copy_2d(pc.at, pc.stride, msg + at, pc.cols, pc.rows, pc.cols, pc.accumulate));
    at += pc.rows * pc.cols;
  }
  return {};
}

Result<int> RankRuntime::Impl::local_row(int sequence_row) const {
  if (!seq) return sequence_row;
  const std::vector<int>& pos = seq->host_pos;
  for (std::size_t r = 0; r < pos.size(); ++r) {
    if (pos[r] == sequence_row) return static_cast<int>(r);
  }
  return failure("row " + std::to_string(sequence_row) + " of the sequence is not this device's");
}

// ---- ZeRO-3 over the mesh -----------------------------------------------------------------

Status RankRuntime::Impl::zero3_release(int position) {
  SeqState& q = *seq;
  auto it = q.bucket_of_position.find(position);
  if (it == q.bucket_of_position.end()) return {};
  const BucketState& b = buckets.at(it->second);
  HEXI_TRY(be.fill(q.scratch.get(), std::numeric_limits<float>::quiet_NaN(), b.elements));
  for (std::size_t i = 0; i + 1 < b.piece.size(); ++i) {
    if (static_cast<int>(i) == b.member) continue;
    HEXI_TRY(be.scatter(params.get(), b.idx.get() + b.piece[i], q.scratch.get(),
                        b.piece[i + 1] - b.piece[i]));
  }
  return {};
}

// One sequence's gradients of a position: reduce-scattered to their owners, who add their
// part to the step's; the local copies start again from zero, and the weights are released.
Status RankRuntime::Impl::zero3_scatter(const Op& op, BucketState& b) {
  SeqState& q = *seq;
  Communicator& comm = *b.comm;
  const std::size_t n = comm.size();
  float* f = flat.get();
  HEXI_TRY(be.zero(f, n * b.chunk * sizeof(float)));
  for (std::size_t i = 0; i < n; ++i) {
    HEXI_TRY(be.gather(f + i * b.chunk, grads.get(), b.idx.get() + b.piece[i],
                       b.piece[i + 1] - b.piece[i]));
  }
  HEXI_TRY(be.zero(q.scratch.get(), b.elements * sizeof(float)));
  HEXI_TRY(be.scatter(grads.get(), b.idx.get(), q.scratch.get(), b.elements));
  float* mine = f + n * b.chunk;
  HEXI_TRY(wire_reduce_scatter(comm, f, mine, b.chunk));
  const std::size_t lo = b.piece[b.member], len = b.piece[b.member + 1] - lo;
  float* sum = q.scratch.get();
  HEXI_TRY(be.gather(sum, q.zero3_grads.get(), b.idx.get() + lo, len));
  HEXI_TRY(be.add_inplace(sum, mine, len));
  HEXI_TRY(be.scatter(q.zero3_grads.get(), b.idx.get() + lo, sum, len));
  const ParamSegment& first = prog.buckets[op.bucket].segments.front();
  return zero3_release(first.layer);
}

}  // namespace hexi::engine
