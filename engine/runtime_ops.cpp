// The op interpreter: one rank's op stream, in list order (semantics: runtime.hpp and
// scheduler/program/program.hpp).

#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <numeric>
#include <thread>

#include "engine/runtime_impl.hpp"

namespace hexi::engine {

namespace {

// This process's CPU time (s), all its threads (MPI's included): what an op cost the rank's
// CPU quota, pauses not counted.
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

std::string layer_name(int layer, const char* what) {
  return "layers." + std::to_string(layer) + "." + what;
}
}  // namespace

AttentionWeights<float> RankRuntime::Impl::attn_w(int l) const {
  return {param(layer_name(l, "attn_norm")), param(layer_name(l, "wq")), param(layer_name(l, "wk")),
          param(layer_name(l, "wv")), param(layer_name(l, "wo"))};
}
AttentionGrads<float> RankRuntime::Impl::attn_g(int l, float* norm_grad) const {
  return {norm_grad, grad(layer_name(l, "wq")), grad(layer_name(l, "wk")),
          grad(layer_name(l, "wv")), grad(layer_name(l, "wo"))};
}
namespace {
// A mixture of experts' routed and shared experts of layer l, through `at` (by tensor name).
template <class View, class At>
View with_experts(View v, int l, bool shared, At at) {
  v.e_gate = at(layer_name(l, "experts.w_gate"));
  v.e_up = at(layer_name(l, "experts.w_up"));
  v.e_down = at(layer_name(l, "experts.w_down"));
  if (shared) {
    v.s_gate = at(layer_name(l, "shared.w_gate"));
    v.s_up = at(layer_name(l, "shared.w_up"));
    v.s_down = at(layer_name(l, "shared.w_down"));
  }
  return v;
}
}  // namespace

MlpWeights<float> RankRuntime::Impl::mlp_w(int l) const {
  if (!dims.is_moe()) {
    return {param(layer_name(l, "mlp_norm")), param(layer_name(l, "w_gate")),
            param(layer_name(l, "w_up")), param(layer_name(l, "w_down"))};
  }
  MlpWeights<float> w;
  w.norm = param(layer_name(l, "mlp_norm"));
  w.router = param(layer_name(l, "router"));
  return with_experts(w, l, dims.shared_ffn > 0, [&](const std::string& n) { return param(n); });
}
MlpGrads<float> RankRuntime::Impl::mlp_g(int l, float* norm_grad) const {
  if (!dims.is_moe()) {
    return {norm_grad, grad(layer_name(l, "w_gate")), grad(layer_name(l, "w_up")),
            grad(layer_name(l, "w_down"))};
  }
  // The router's gradient follows the gain's, in the layout and in a TP rank's share of the
  // block's all-reduce (mlp_share).
  MlpGrads<float> g;
  g.norm = norm_grad;
  g.router = norm_grad + hidden;
  return with_experts(g, l, dims.shared_ffn > 0, [&](const std::string& n) { return grad(n); });
}
AttentionSaved<float> RankRuntime::Impl::attn_saved(Slot& s, int local) const {
  return kernels::carve_attention_saved(
      shape, s.attn_saved.get() + local * kernels::attention_saved_size(shape));
}
MlpSaved<float> RankRuntime::Impl::mlp_saved(Slot& s, int local) const {
  return kernels::carve_mlp_saved(shape,
                                  s.mlp_saved.get() + local * kernels::mlp_saved_size(shape));
}
HeadSaved<float> RankRuntime::Impl::head_saved(Slot& s) const {
  return kernels::carve_head_saved(shape, s.head_saved.get());
}

Result<StepStats> RankRuntime::Impl::step() {
  HEXI_TRY(be.zero(grads.get(), grads.bytes()));
  if (seq && prog.zero_stage >= 3)
    HEXI_TRY(be.zero(seq->zero3_grads.get(), seq->zero3_grads.bytes()));
  // bf16: the step's compute copy of the weights, which the backend's GEMMs may read as bf16
  // (Backend::bf16_weights) until the step ends, however it ends.
  struct Bf16WeightsScope {
    Backend* be = nullptr;
    ~Bf16WeightsScope() {
      if (be != nullptr) (void)be->bf16_weights(nullptr, 0);
    }
  } weights_scope;
  if (bf16) {
    HEXI_TRY(be.round_bf16(compute_params.get(), params.get(), params.size()));
    HEXI_TRY(be.bf16_weights(compute_params.get(), params.size()));
    weights_scope.be = &be;
  }
  be.clear_marks();
  loss_sum = loss_tokens = 0;
  pending = Pending{};
  pending_loss = -1;
  const auto wall0 = std::chrono::steady_clock::now();
  const int count = lay->op_end - lay->op_begin;
  const int step_now = steps;
  // On the cpu backend an op runs on this process's CPU: a compute op's CPU time is its work,
  // without the pauses of a CPU quota (the testbed), which calibration tells apart from the
  // wall time; a communication op's is what it spent of the quota (copies, reductions, the
  // polls of its waits), which the simulator charges a device under a quota.
  const bool cpu_times = be.name() == "cpu";
  std::vector<double> cpu_s(count, -1.0);
  for (int i = 0; i < count; ++i) {
    const int id = lay->op_begin + i;
    const Op& op = prog.ops[id];
    progress.enter(
        [this, id, step_now] {
          return "step " + std::to_string(step_now) + ", " + describe_op(prog, id);
        },
        op.kind != OpKind::kCompute);
    be.mark();
    const double cpu0 = cpu_times ? process_cpu_seconds() : 0.0;
    if (Status s = opt.fault.hits(world.rank(), step_now, i) ? inject_fault(i) : run_op(op);
        !s.ok()) {
      return Error{s.error().kind, "device " + std::to_string(lay->device) + ", step " +
                                       std::to_string(step_now) + ", " + describe_op(prog, id) +
                                       ": " + s.error().message};
    }
    if (cpu_times) cpu_s[i] = process_cpu_seconds() - cpu0;
    be.mark();
    if (release_after[i] >= 0) HEXI_TRY(release(release_after[i]));
  }
  if (pending.active || pending_loss >= 0) {
    return failure("device " + std::to_string(lay->device) +
                   ": the program ended with a block output that no TP collective reduced");
  }
  progress.enter([step_now] { return "step " + std::to_string(step_now) + ", completing sends"; },
                 true);
  for (Slot& s : slots) {
    for (auto& r : s.sends) HEXI_TRY(r->wait());
    s.sends.clear();
  }
  if (seq) {
    for (auto& out : seq->sends) HEXI_TRY(out.request->wait());
    seq->sends.clear();
  }
  HEXI_TRY(be.synchronize());
  auto times = be.mark_times();
  HEXI_TRY(times);
  StepStats st;
  st.step = step_now;
  st.loss_sum = loss_sum;
  st.loss_tokens = loss_tokens;
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  for (int i = 0; i < count; ++i)
    st.ops.push_back({lay->op_begin + i, (*times)[2 * i], (*times)[2 * i + 1], cpu_s[i]});
  ++steps;
  return st;
}

Status RankRuntime::Impl::inject_fault(int op_index) {
  switch (opt.fault.mode) {
    case Fault::Mode::kError:
      return failure("injected fault (HEXISIM_FAULT) at op index " + std::to_string(op_index));
    case Fault::Mode::kCrash:
      std::fflush(nullptr);
      std::raise(SIGKILL);
      break;
    case Fault::Mode::kHang:
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    case Fault::Mode::kNone:
    case Fault::Mode::kKillInSave:  // strikes in the checkpoint save, not in an op
      break;
  }
  return {};
}

Status RankRuntime::Impl::run_op(const Op& op) {
  switch (op.kind) {
    case OpKind::kCompute:
      return run_compute(op);
    case OpKind::kSend:
      return run_send(op);
    case OpKind::kRecv:
      return run_recv(op);
    case OpKind::kCollective:
      return run_collective(op);
  }
  return failure("unknown op kind");
}

Result<Slot*> RankRuntime::Impl::acquire(int key) {
  if (slot_of[key] >= 0) return &slots[slot_of[key]];
  const int mb = key % lay->micro_batches;
  // A free slot without outstanding sends if there is one (waiting for a send's receiver
  // could wait for this device), else the first free one.
  std::size_t pick = slots.size();
  for (std::size_t k = 0; k < slots.size(); ++k) {
    if (slots[k].micro_batch >= 0) continue;
    if (pick == slots.size() || (!slots[pick].sends.empty() && slots[k].sends.empty())) pick = k;
  }
  if (pick == slots.size()) {
    return failure("no free activation buffer for micro-batch " + std::to_string(mb) +
                   " (more micro-batches in flight than the program's schedule implies)");
  }
  Slot& s = slots[pick];
  for (auto& r : s.sends) HEXI_TRY(r->wait());  // the buffers are about to be overwritten
  s.sends.clear();
  s.micro_batch = key;
  slot_of[key] = static_cast<int>(pick);
  if (seq) {
    HEXI_TRY(seq_load_tokens(s, first_sequence + mb));
  } else if (lay->first || lay->last) {
    batch_tokens(data, prog.global_batch, steps, first_sequence + mb * lay->micro_batch,
                 lay->micro_batch, host_tokens.data(), host_targets.data());
    HEXI_TRY(be.upload(s.tokens.get(), host_tokens.data(), rows * sizeof(int)));
    HEXI_TRY(be.upload(s.targets.get(), host_targets.data(), rows * sizeof(int)));
  }
  return &s;
}

Result<Slot*> RankRuntime::Impl::slot(int key) {
  if (key < 0 || key >= static_cast<int>(slot_of.size()) || slot_of[key] < 0) {
    const int m = std::max(1, lay->micro_batches);
    return failure("micro-batch " + std::to_string(key % m) +
                   (chunks.size() > 1 ? " of chunk " + std::to_string(key / m) : "") +
                   " is not in flight on this device");
  }
  return &slots[slot_of[key]];
}

Status RankRuntime::Impl::release(int key) {
  // Outstanding sends are completed when the buffers are reused (acquire) or at the end
  // of the step, never here: waiting here would make every send blocking.
  slots[slot_of[key]].micro_batch = -1;
  slot_of[key] = -1;
  return {};
}

Status RankRuntime::Impl::finish_block(float* out, const float* residual) {
  const std::size_t rh = static_cast<std::size_t>(rows) * hidden;
  if (lay->tp == 1) return add_stored(out, residual, rh);
  pending = Pending{true, out, rh, residual, nullptr, nullptr};
  return {};
}

// A block's input gradient is in `partial` (and, with TP, its norm-gain share after it).
Status RankRuntime::Impl::finish_grad(Slot& s, float* norm_grad_target, std::size_t norm_count) {
  const std::size_t rh = static_cast<std::size_t>(rows) * hidden;
  if (lay->tp == 1) return add_stored(s.grad.get(), partial.get(), rh);
  pending = Pending{true,         partial.get(),    rh + norm_count, nullptr,
                    s.grad.get(), norm_grad_target, norm_count};
  return {};
}

Status RankRuntime::Impl::apply_pending(Communicator& comm) {
  if (!pending.active) return failure("TP all-reduce with no block output to reduce");
  const Pending p = pending;
  pending = Pending{};
  const std::size_t rh = static_cast<std::size_t>(rows) * hidden;
  HEXI_TRY(wire_all_reduce(comm, p.buf, p.count));
  if (p.add_from != nullptr) HEXI_TRY(add_stored(p.buf, p.add_from, rh));
  if (p.add_into != nullptr) HEXI_TRY(add_stored(p.add_into, p.buf, rh));
  if (p.norm_grad != nullptr) HEXI_TRY(be.add_inplace(p.norm_grad, p.buf + rh, p.norm_count));
  return {};
}

Status RankRuntime::Impl::run_compute(const Op& op) {
  switch (op.compute) {
    case ComputeKind::kEmbeddingFwd: {
      auto s = acquire(slot_key(op));
      HEXI_TRY(s);
      float* out = resid(**s, 0);
      HEXI_TRY(be.embedding_forward(shape, param("embedding"), (*s)->tokens.get(), out));
      if (lay->tp > 1)
        pending =
            Pending{true, out, static_cast<std::size_t>(rows) * hidden, nullptr, nullptr, nullptr};
      return {};
    }
    case ComputeKind::kAttnFwd:
    case ComputeKind::kMlpFwd:
      return block_forward(op, op.compute == ComputeKind::kAttnFwd);
    case ComputeKind::kAttnRecompute:
    case ComputeKind::kMlpRecompute:
      return block_recompute(op, op.compute == ComputeKind::kAttnRecompute);
    case ComputeKind::kHeadFwd:
      return head_fwd(op);
    case ComputeKind::kHeadBwd:
      return head_bwd(op);
    case ComputeKind::kMlpBwd:
    case ComputeKind::kAttnBwd:
      return block_backward(op, op.compute == ComputeKind::kAttnBwd);
    case ComputeKind::kEmbeddingBwd: {
      auto s = slot(slot_key(op));
      HEXI_TRY(s);
      return be.embedding_backward(shape, (*s)->tokens.get(), (*s)->grad.get(), grad("embedding"));
    }
    case ComputeKind::kOptimizer:
      return optimizer();
    case ComputeKind::kStageFwd:
    case ComputeKind::kStageBwd:
      break;
    default:  // sequence meshes
      if (seq) return seq_compute(op);
      return failure("a sequence-mesh op (" + std::string(to_string(op.compute)) +
                     ") in a pipeline program");
  }
  return failure("the engine runs layer-granularity ops only");
}

// Residual slots of a micro-batch: 2l = input of layer l's attention block, 2l + 1 = its
// MLP block's input, 2*layers = the stage's output.
Status RankRuntime::Impl::block_forward(const Op& op, bool attn) {
  auto s = slot(slot_key(op));
  HEXI_TRY(s);
  const int l = op.layer - chunk_begin(op);
  const int in = attn ? 2 * l : 2 * l + 1;
  float* x = resid(**s, in);
  float* y = resid(**s, in + 1);
  HEXI_TRY(attn ? be.attention_forward(shape, attn_w(op.layer), x, attn_saved(**s, l), y)
                : be.mlp_forward(shape, mlp_w(op.layer), x, mlp_saved(**s, l), y));
  return finish_block(y, x);
}

// Full recompute replays the block's forward (same inputs, same saved values); its TP
// all-reduce then reduces an output nobody reads, as in Megatron.
Status RankRuntime::Impl::block_recompute(const Op& op, bool attn) {
  auto s = slot(slot_key(op));
  HEXI_TRY(s);
  const int l = op.layer - chunk_begin(op);
  float* x = resid(**s, attn ? 2 * l : 2 * l + 1);
  HEXI_TRY(attn
               ? be.attention_forward(shape, attn_w(op.layer), x, attn_saved(**s, l), partial.get())
               : be.mlp_forward(shape, mlp_w(op.layer), x, mlp_saved(**s, l), partial.get()));
  if (lay->tp > 1)
    pending = Pending{true,    partial.get(), static_cast<std::size_t>(rows) * hidden,
                      nullptr, nullptr,       nullptr};
  return {};
}

Status RankRuntime::Impl::head_fwd(const Op& op) {
  auto s = slot(slot_key(op));
  HEXI_TRY(s);
  const auto hs = head_saved(**s);
  HEXI_TRY(be.head_forward(shape, {param("final_norm"), param("head")},
                           resid(**s, 2 * chunk_layers(op)), hs));
  HEXI_TRY(be.head_loss_partials(shape, hs, (*s)->targets.get()));  // with the local max
  if (lay->tp == 1) return finish_loss(**s);
  pending_loss = op.micro_batch;
  return be.pack_loss_stats(hs, rows, stats.get());
}

Status RankRuntime::Impl::head_bwd(const Op& op) {
  auto s = slot(slot_key(op));
  HEXI_TRY(s);
  const bool tp = lay->tp > 1;
  const std::size_t rh = static_cast<std::size_t>(rows) * hidden;
  float* norm_share = partial.get() + rh;
  // d(mean loss over the global batch)/d(token loss) = loss_scale / (b*s) (a sequence mesh's
  // device holds a shard of the micro-batch's b*s tokens).
  const double scale = lay->loss_scale / (static_cast<double>(lay->micro_batch) * prog.seq_len);
  float* dx = tp ? partial.get() : (*s)->grad.get();
  if (tp) HEXI_TRY(be.zero(norm_share, hidden * sizeof(float)));
  HEXI_TRY(be.head_backward(shape, {param("final_norm"), param("head")}, head_saved(**s),
                            resid(**s, 2 * chunk_layers(op)), (*s)->targets.get(), scale, dx,
                            {tp ? norm_share : grad("final_norm"), grad("head")}));
  if (!tp) return {};
  HEXI_TRY(be.zero((*s)->grad.get(), rh * sizeof(float)));
  return finish_grad(**s, grad("final_norm"), hidden);
}

Status RankRuntime::Impl::block_backward(const Op& op, bool attn) {
  auto s = slot(slot_key(op));
  HEXI_TRY(s);
  const int l = op.layer - chunk_begin(op);
  const bool tp = lay->tp > 1;
  float* norm_share = partial.get() + static_cast<std::size_t>(rows) * hidden;
  const std::string norm = layer_name(op.layer, attn ? "attn_norm" : "mlp_norm");
  const std::size_t share = attn ? static_cast<std::size_t>(hidden) : mlp_share;
  if (tp) HEXI_TRY(be.zero(norm_share, share * sizeof(float)));
  float* ng = tp ? norm_share : grad(norm);
  float* x = resid(**s, attn ? 2 * l : 2 * l + 1);
  const float* dy = (*s)->grad.get();
  HEXI_TRY(attn ? be.attention_backward(shape, attn_w(op.layer), attn_saved(**s, l), x, dy,
                                        partial.get(), attn_g(op.layer, ng))
                : be.mlp_backward(shape, mlp_w(op.layer), mlp_saved(**s, l), x, dy, partial.get(),
                                  mlp_g(op.layer, ng)));
  return finish_grad(**s, grad(norm), share);
}

Status RankRuntime::Impl::finish_loss(Slot& s) {
  HEXI_TRY(be.head_loss(shape, head_saved(s), token_loss.get()));
  if (lay->tp_rank != 0) return {};  // every TP rank has the same losses: count them once
  std::vector<float> host(rows);
  HEXI_TRY(be.download(host.data(), token_loss.get(), rows * sizeof(float)));
  loss_sum += std::accumulate(host.begin(), host.end(), 0.0);
  loss_tokens += rows;
  return {};
}

Status RankRuntime::Impl::loss_stats(const Op& op, Communicator& comm) {
  if (pending_loss != op.micro_batch)
    return failure("loss-statistics all-gather without a head forward before it");
  pending_loss = -1;
  auto s = slot(slot_key(op));
  HEXI_TRY(s);
  HEXI_TRY(comm.all_gather(stats.get(), stats_all.get(), 3 * static_cast<std::size_t>(rows),
                           DType::kF32));
  HEXI_TRY(be.combine_loss_stats(stats_all.get(), comm.size(), rows, head_saved(**s)));
  return finish_loss(**s);
}

Status RankRuntime::Impl::run_send(const Op& op) {
  if (is_ulysses(op.tensor) || is_ring(op.tensor)) {
    if (!seq) return failure("a sequence-mesh message in a pipeline program");
    return seq_send(op);
  }
  auto s = slot(slot_key(op));
  HEXI_TRY(s);
  const bool act = op.tensor == TensorKind::kActivation;
  auto row = local_row(op.rows_begin);  // a mesh device: among its own tokens
  HEXI_TRY(row);
  const float* src = (act ? resid(**s, 2 * chunk_layers(op)) : (*s)->grad.get()) +
                     static_cast<std::size_t>(*row) * hidden;
  const std::size_t count = static_cast<std::size_t>(op.rows_end - op.rows_begin) * hidden;
  std::uint16_t* stage = bf16 ? (*s)->send_wire.get() +
                                    (act ? 0 : rows) * static_cast<std::size_t>(hidden) +
                                    static_cast<std::size_t>(*row) * hidden
                              : nullptr;
  auto req = wire_isend(src, stage, count, rank_of_device[op.peer], 2 * op.tag + (act ? 0 : 1));
  HEXI_TRY(req);
  (*s)->sends.push_back(std::move(*req));
  return {};
}

Status RankRuntime::Impl::run_recv(const Op& op) {
  if (is_ulysses(op.tensor) || is_ring(op.tensor)) {
    if (!seq) return failure("a sequence-mesh message in a pipeline program");
    return seq_recv(op);
  }
  const bool act = op.tensor == TensorKind::kActivation;
  auto s = act ? acquire(slot_key(op)) : slot(slot_key(op));
  HEXI_TRY(s);
  auto row = local_row(op.rows_begin);  // a mesh device: among its own tokens
  HEXI_TRY(row);
  float* dst = (act ? resid(**s, 0) : (*s)->grad.get()) + static_cast<std::size_t>(*row) * hidden;
  const std::size_t count = static_cast<std::size_t>(op.rows_end - op.rows_begin) * hidden;
  return wire_recv(dst, count, rank_of_device[op.peer], 2 * op.tag + (act ? 0 : 1));
}

// The receiving TP group all-gathers its pieces: member i holds rows [i*R/t, (i+1)*R/t).
Status RankRuntime::Impl::boundary_gather(const Op& op, Communicator& comm) {
  auto s = slot(slot_key(op));
  HEXI_TRY(s);
  float* dst = op.tensor == TensorKind::kActivation ? resid(**s, 0) : (*s)->grad.get();
  const std::size_t t = comm.size(), h = hidden, r = rows;
  const std::size_t piece_rows = (r + t - 1) / t;
  auto lo = [&](std::size_t i) { return i * r / t; };
  const std::size_t me = comm.rank();
  HEXI_TRY(be.copy(gather_in.get(), dst + lo(me) * h, (lo(me + 1) - lo(me)) * h * sizeof(float)));
  HEXI_TRY(wire_all_gather(comm, gather_in.get(), gather_out.get(), piece_rows * h));
  for (std::size_t i = 0; i < t; ++i) {
    if (i == me) continue;
    HEXI_TRY(be.copy(dst + lo(i) * h, gather_out.get() + i * piece_rows * h,
                     (lo(i + 1) - lo(i)) * h * sizeof(float)));
  }
  return {};
}

Status RankRuntime::Impl::run_collective(const Op& op) {
  Communicator* comm = op.group >= 0 && op.group < static_cast<int>(groups.size())
                           ? groups[op.group].get()
                           : nullptr;
  if (comm == nullptr)
    return failure("this device is not a member of group " + std::to_string(op.group));
  switch (op.tensor) {
    case TensorKind::kActivation:
    case TensorKind::kActivationGrad:
      if (op.collective == Collective::kAllReduce) return apply_pending(*comm);
      if (op.collective == Collective::kAllGather) return boundary_gather(op, *comm);
      break;
    case TensorKind::kLossStats:
      if (op.collective == Collective::kAllGather) return loss_stats(op, *comm);
      break;
    case TensorKind::kGradBucket:
      return grad_bucket(op);
    case TensorKind::kWeightBucket:
      return weight_bucket(op);
    case TensorKind::kReplicas:
      return replicas(op, *comm);
    default:  // sequence-mesh tensors: refused at setup
      break;
  }
  return failure("the engine has no implementation of " + std::string(to_string(op.collective)) +
                 " on " + std::string(to_string(op.tensor)));
}

std::string describe_op(const Program& p, int id) {
  const Op& op = p.ops[id];
  std::string text = "op " + std::to_string(id) + " (";
  const std::string mb =
      op.micro_batch >= 0 ? " of micro-batch " + std::to_string(op.micro_batch) : "";
  switch (op.kind) {
    case OpKind::kCompute:
      text += std::string(to_string(op.compute));
      if (op.layer >= 0) text += " layer " + std::to_string(op.layer);
      text += op.micro_batch >= 0 ? ", micro-batch " + std::to_string(op.micro_batch) : "";
      break;
    case OpKind::kSend:
    case OpKind::kRecv:
      text += std::string(op.kind == OpKind::kSend ? "send " : "recv ") +
              std::string(to_string(op.tensor)) + " rows [" + std::to_string(op.rows_begin) + ", " +
              std::to_string(op.rows_end) + ")" + mb +
              (op.kind == OpKind::kSend ? " to device " : " from device ") +
              std::to_string(op.peer);
      break;
    case OpKind::kCollective: {
      text += std::string(to_string(op.collective)) + " " + std::string(to_string(op.tensor)) + mb +
              " on group " + std::to_string(op.group) + " [devices";
      for (int d : p.groups[op.group].devices) text += " " + std::to_string(d);
      text += "]";
      if (op.bucket >= 0) text += ", bucket " + std::to_string(op.bucket);
      break;
    }
  }
  return text + ")";
}

}  // namespace hexi::engine
