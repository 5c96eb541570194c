// RankRuntime set-up: which device this rank is, its shard, parameters, groups, DP
// buckets, ownership of optimizer state and the activation buffer pool.

#include <algorithm>
#include <numeric>
#include <set>
#include <type_traits>

#include "engine/runtime_impl.hpp"

namespace hexi::engine {

Result<kernels::LlamaDims> llama_dims(const Model& m) {
  if (m.mlp != MlpKind::kSwiGlu || m.bias || m.layer_norm || m.tied_embeddings ||
      m.learned_positions) {
    return bad_input("model " + m.name +
                     ": the engine trains Llama-style decoders (SwiGLU MLP, RMSNorm, RoPE, no "
                     "biases, untied head, no learned positions)");
  }
  kernels::LlamaDims d;
  d.experts = m.moe.experts;
  d.top_k = m.moe.top_k;
  d.shared_ffn = m.moe.shared_ffn;
  d.layers = m.layers;
  d.hidden = m.hidden;
  d.ffn = m.ffn;
  d.heads = m.heads;
  d.kv_heads = m.kv_heads;
  d.vocab = m.vocab;
  if (std::string why = kernels::validate_dims(d); !why.empty()) {
    return bad_input("model " + m.name + ": " + why);
  }
  return d;
}

Status check_trainable(const Model& m, int bytes_per_element, std::string_view backend) {
  if (m.is_moe() && m.moe.capacity_factor > 0) {
    return bad_input("model " + m.name +
                     ": moe.capacity_factor is planned and simulated; the engine routes every "
                     "token (dropless): remove it to train this model");
  }
  if (!m.is_moe() || (bytes_per_element == 4 && backend == "cpu")) return {};
  return bad_input("model " + m.name +
                   ": the engine trains mixtures of experts in float32 on the cpu backend only "
                   "so far (training.precision \"fp32\", --backend cpu); this run asks for " +
                   std::string(bytes_per_element == 4 ? "fp32" : "bf16") + " on " +
                   std::string(backend));
}

Status RankRuntime::Impl::setup() {
  if (static_cast<int>(prog.devices.size()) != world.size()) {
    return bad_input("the program runs on " + std::to_string(prog.devices.size()) +
                     " devices but the job has " + std::to_string(world.size()) + " ranks");
  }
  if (prog.granularity != Granularity::kLayer) {
    return bad_input(
        "the engine executes layer-granularity programs (got a stage-granularity one)");
  }
  if ((prog.sequence || !prog.meshes.empty()) && prog.bytes_per_element != 4) {
    return bad_input(
        "this program runs a sequence mesh (context + head parallelism) in bf16; the engine "
        "runs sequence meshes in float32 only so far (training.precision \"fp32\")");
  }
  const auto tensor_groups = [](const SequenceLayout& l) { return l.has_tensor_groups(); };
  if ((prog.sequence && tensor_groups(*prog.sequence)) ||
      std::any_of(prog.meshes.begin(), prog.meshes.end(), tensor_groups)) {
    return bad_input(
        "this program's sequence mesh has a tensor-parallel group (\"parallel\": \"tensor\"); "
        "the engine runs Ulysses groups only so far (tensor groups are estimated and "
        "simulated): plan the mesh with `hexisim seq --ulysses-only` to train it");
  }
  if (prog.bytes_per_element != 4 && prog.bytes_per_element != 2) {
    return bad_input(
        "the program counts " + std::to_string(prog.bytes_per_element) +
        "-byte elements; the engine trains in float32 (4) or bf16 mixed precision (2)");
  }
  bf16 = prog.bytes_per_element == 2;
  HEXI_TRY(check_trainable(model, prog.bytes_per_element, be.name()));
  lay = &prog.devices[world.rank()];
  mesh = prog.mesh_of(*lay);
  auto d = llama_dims(model);
  HEXI_TRY(d);
  dims = *d;
  if (data.seq_len() != prog.seq_len) {
    return bad_input("the data source gives sequences of " + std::to_string(data.seq_len()) +
                     " tokens, the program trains on " + std::to_string(prog.seq_len));
  }
  if (std::string why = moe_ranges_missing(prog, *lay, dims); !why.empty()) return bad_input(why);
  const kernels::TpShard shard = held_shard(prog, *lay, dims);
  if (std::string why = kernels::validate_shard(dims, shard); !why.empty()) {
    return bad_input("device " + std::to_string(lay->device) +
                     ": its TP shard cannot be run: " + why);
  }
  if (!mesh && (kernels::kv_begin(dims, shard) != lay->kv_begin ||
                kernels::kv_end(dims, shard) != lay->kv_end)) {
    return failure("device " + std::to_string(lay->device) +
                   ": the program's KV-head range differs from the kernels' for the same heads");
  }
  // A sequence mesh's device holds the whole model and runs its token-wise ops on its shard
  // of each sequence (one sequence at a time).
  const int tokens = mesh ? sequence_shard(*mesh, lay->device) : prog.seq_len;
  shape = BlockShape{dims, shard, lay->micro_batch, tokens, bf16};
  rows = shape.tokens();
  hidden = dims.hidden;
  mlp_share = static_cast<std::size_t>(hidden) * (1 + dims.experts);
  layers = 0;  // the largest chunk's (slots hold one chunk of one micro-batch)
  for (int c = 0; c < num_chunks(*lay); ++c) {
    chunks.push_back(chunk_layout(*lay, c));
    layers = std::max(layers, chunks.back().layer_end - chunks.back().layer_begin);
  }
  rank_of_device.assign(prog.num_devices, -1);
  for (std::size_t r = 0; r < prog.devices.size(); ++r)
    rank_of_device[prog.devices[r].device] = static_cast<int>(r);
  // Pipelines take consecutive shares of the global batch, in pipeline order.
  std::map<int, int> batch_of;
  for (const auto& l : prog.devices) batch_of[l.pipeline] = l.micro_batch * l.micro_batches;
  for (const auto& [p, b] : batch_of) {
    if (p < lay->pipeline) first_sequence += b;
  }
  HEXI_TRY(setup_groups());
  HEXI_TRY(setup_params());
  HEXI_TRY(setup_buckets());
  HEXI_TRY(setup_slots());
  return mesh ? setup_sequence() : Status{};
}

Status RankRuntime::Impl::setup_groups() {
  // Every rank walks the groups in program order and joins those it belongs to: a
  // consistent global order, so group creation cannot deadlock.
  groups.resize(prog.groups.size());
  for (std::size_t g = 0; g < prog.groups.size(); ++g) {
    const auto& devs = prog.groups[g].devices;
    if (std::find(devs.begin(), devs.end(), lay->device) == devs.end()) continue;
    std::vector<int> members;
    for (int dv : devs) members.push_back(rank_of_device[dv]);
    progress.enter([g] { return "set-up: creating communicator group " + std::to_string(g); },
                   true);
    auto comm = world.subgroup(members);
    HEXI_TRY(comm);
    groups[g] = std::move(*comm);
  }
  // Point-to-point pairs of the whole program, in one global order.
  std::set<std::pair<int, int>> pairs;
  for (const Op& op : prog.ops) {
    if (op.kind == OpKind::kSend)
      pairs.insert({rank_of_device[op.device], rank_of_device[op.peer]});
  }
  progress.enter([] { return std::string("set-up: connecting point-to-point peers"); }, true);
  return world.connect_peers({pairs.begin(), pairs.end()});
}

Status RankRuntime::Impl::setup_params() {
  kernels::Params<float> host(held_layout(prog, *lay, dims));
  kernels::init_params(host, dims, opt.init);
  layout = host.layout;
  for (const auto& t : layout.tensors) offset_of[t.name] = t.offset;
  for (const auto& t : layout.tensors) {  // mlp_g: the router's gradient follows the gain's
    if (!t.name.ends_with(".router")) continue;
    const std::string gain = t.name.substr(0, t.name.size() - 6) + "mlp_norm";
    if (offset_of.at(gain) + hidden != t.offset)
      return failure(t.name + " does not follow its layer's mlp_norm in the parameter layout");
  }
  auto p = DeviceArray<float>::make(be, layout.total);
  HEXI_TRY(p);
  params = std::move(*p);
  auto g = DeviceArray<float>::make(be, layout.total);
  HEXI_TRY(g);
  grads = std::move(*g);
  HEXI_TRY(be.upload(params.get(), host.data.data(), params.bytes()));
  if (bf16) {
    auto c = DeviceArray<float>::make(be, layout.total);
    HEXI_TRY(c);
    compute_params = std::move(*c);
  }
  return be.zero(grads.get(), grads.bytes());
}

Status RankRuntime::Impl::setup_buckets() {
  // Ownership: replicated tensors belong to TP rank 0 (it broadcasts them after the
  // update), everything else to this device, unless a DP bucket says otherwise.
  owned.assign(layout.total, 1);
  std::vector<std::int64_t> rep;
  for (const auto& t : layout.tensors) {
    if (!t.replicated) continue;
    if (lay->tp_rank > 0) std::fill_n(owned.begin() + t.offset, t.size(), 0);
    for (std::size_t i = 0; i < t.size(); ++i)
      rep.push_back(static_cast<std::int64_t>(t.offset + i));
  }
  std::size_t flat_size = lay->tp > 1 ? rep.size() : 0;
  for (std::size_t b = 0; b < prog.buckets.size(); ++b) {
    const Bucket& bk = prog.buckets[b];
    const auto& devs = prog.groups[bk.group].devices;
    auto me = std::find(devs.begin(), devs.end(), lay->device);
    if (me == devs.end()) continue;
    BucketState st;
    st.comm = groups[bk.group].get();
    st.member = static_cast<int>(me - devs.begin());
    std::vector<std::int64_t> idx;
    for (const ParamSegment& seg : bk.segments) {
      auto part = segment_indices(layout, dims, seg, lay->experts >= 0);
      HEXI_TRY(part);
      idx.insert(idx.end(), part->begin(), part->end());
    }
    st.elements = idx.size();
    const std::size_t n = devs.size();
    // ZeRO-1: member i owns [i*E/n, (i+1)*E/n) (scheduler/program/program.hpp); ZeRO-0: everyone
    // all of it.
    for (std::size_t i = 0; i <= n; ++i) st.piece.push_back(i * st.elements / n);
    for (std::size_t i = 0; i < n; ++i)
      st.chunk = std::max(st.chunk, st.piece[i + 1] - st.piece[i]);
    for (auto i : idx) owned[i] = 0;
    const std::size_t lo = prog.zero_stage >= 1 ? st.piece[st.member] : 0;
    const std::size_t hi = prog.zero_stage >= 1 ? st.piece[st.member + 1] : st.elements;
    for (std::size_t i = lo; i < hi; ++i) owned[idx[i]] = 1;
    auto dev_idx = DeviceArray<std::int64_t>::make(be, idx.size());
    HEXI_TRY(dev_idx);
    HEXI_TRY(be.upload(dev_idx->get(), idx.data(), idx.size() * sizeof(std::int64_t)));
    st.idx = std::move(*dev_idx);
    // Staging: the packed bucket (ZeRO-0), or n padded chunks plus this member's (ZeRO-1).
    flat_size = std::max({flat_size, st.elements, (n + 1) * st.chunk});
    buckets.emplace(static_cast<int>(b), std::move(st));
  }
  if (lay->tp > 1) {
    auto r = DeviceArray<std::int64_t>::make(be, rep.size());
    HEXI_TRY(r);
    HEXI_TRY(be.upload(r->get(), rep.data(), rep.size() * sizeof(std::int64_t)));
    replicated_idx = std::move(*r);
    replicated_count = rep.size();
  }
  auto f = DeviceArray<float>::make(be, flat_size);
  HEXI_TRY(f);
  flat = std::move(*f);
  return setup_ownership();
}

Status RankRuntime::Impl::setup_ownership() {
  runs = masked_runs(layout, owned);
  std::size_t total = 0;
  for (const Run& r : runs) {
    run_moment.push_back(total);
    total += r.length;
  }
  auto m = DeviceArray<float>::make(be, total);
  HEXI_TRY(m);
  moment1 = std::move(*m);
  auto v = DeviceArray<float>::make(be, total);
  HEXI_TRY(v);
  moment2 = std::move(*v);
  HEXI_TRY(be.zero(moment1.get(), moment1.bytes()));
  return be.zero(moment2.get(), moment2.bytes());
}

Status RankRuntime::Impl::setup_slots() {
  // Live range of each (chunk, micro-batch) in this device's op list -> pool size.
  const int count = lay->op_end - lay->op_begin;
  const int keys = lay->micro_batches * static_cast<int>(chunks.size());
  std::vector<int> first(keys, -1), last(keys, -1);
  for (int i = 0; i < count; ++i) {
    const Op& op = prog.ops[lay->op_begin + i];
    if (op.micro_batch < 0) continue;
    if (op.micro_batch >= lay->micro_batches || op.chunk >= static_cast<int>(chunks.size()))
      return failure("op " + std::to_string(lay->op_begin + i) + ": micro-batch out of range");
    const int j = slot_key(op);
    if (first[j] < 0) first[j] = i;
    last[j] = i;
  }
  release_after.assign(count, -1);
  int live = 0, peak = 0;
  std::vector<int> delta(count + 1, 0);
  for (int j = 0; j < keys; ++j) {
    if (first[j] < 0) continue;
    delta[first[j]] += 1;
    delta[last[j] + 1] -= 1;
    release_after[last[j]] = j;
  }
  for (int i = 0; i < count; ++i) peak = std::max(peak, live += delta[i]);
  // An interleaved device keeps a buffer per (chunk, micro-batch): reusing one waits for its
  // outstanding sends, and an interleaved peer may post their receives only much later (MPI
  // rendezvous sends complete when received), which can deadlock.
  if (chunks.size() > 1) peak = keys;
  slot_of.assign(keys, -1);
  const std::size_t rh = static_cast<std::size_t>(rows) * hidden;
  auto alloc = [&](auto& a, std::size_t n) -> Status {
    auto r = std::remove_reference_t<decltype(a)>::make(be, n);
    HEXI_TRY(r);
    a = std::move(*r);
    return {};
  };
  slots.resize(peak);
  for (Slot& s : slots) {
    HEXI_TRY(alloc(s.resid, (2 * layers + 1) * rh));
    // Sequence meshes keep their attention state in SeqState.
    HEXI_TRY(alloc(s.attn_saved, mesh ? 0 : layers * kernels::attention_saved_size(shape)));
    HEXI_TRY(alloc(s.mlp_saved, layers * kernels::mlp_saved_size(shape)));
    HEXI_TRY(alloc(s.head_saved, lay->last ? kernels::head_saved_size(shape) : 0));
    HEXI_TRY(alloc(s.grad, rh));
    HEXI_TRY(alloc(s.tokens, rows));
    HEXI_TRY(alloc(s.targets, rows));
    HEXI_TRY(alloc(s.send_wire, bf16 ? 2 * rh : 0));
  }
  const std::size_t piece_rows = (rows + lay->tp - 1) / lay->tp;
  HEXI_TRY(alloc(partial, rh + mlp_share));
  HEXI_TRY(alloc(gather_in, piece_rows * hidden));
  HEXI_TRY(alloc(gather_out, lay->tp * piece_rows * hidden));
  HEXI_TRY(alloc(stats, 3 * static_cast<std::size_t>(rows)));
  HEXI_TRY(alloc(stats_all, 3 * static_cast<std::size_t>(rows) * lay->tp));
  HEXI_TRY(alloc(token_loss, rows));
  // Packed bf16 staging of every blocking transfer: TP all-reduces (R*h + h), boundary
  // all-gathers, receives (R*h), buckets and replicas (flat).
  const std::size_t wire = bf16 ? std::max({partial.size(), gather_out.size(), flat.size()}) : 0;
  HEXI_TRY(alloc(wire_in, wire));
  HEXI_TRY(alloc(wire_out, wire));
  host_tokens.resize(rows);
  host_targets.resize(rows);
  return {};
}

}  // namespace hexi::engine
