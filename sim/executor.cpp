#include "sim/executor.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>

#include <simgrid/kernel/Timer.hpp>
#include <simgrid/kernel/resource/NetworkModelIntf.hpp>

namespace hexi::sim {

namespace sg4 = simgrid::s4u;
using simgrid::kernel::timer::Timer;

namespace {

// The latency factor of the next comm to start (read synchronously by CM02 in
// Comm::start through the hook below). One simulation per process (simulator.cpp).
double g_latency_factor = 1.0;

// Keeps finished comms alive until no SimGrid code can touch them any more:
// releasing one inside its own completion callback crashes SimGrid 3.32.
std::vector<sg4::CommPtr> g_graveyard;

// (source, destination, tag) of a message, exact (no packing that could collide).
struct MessageKey {
  int src, dst, tag;
  bool operator==(const MessageKey&) const = default;
};
struct MessageKeyHash {
  std::size_t operator()(const MessageKey& k) const {
    std::uint64_t h = static_cast<std::uint32_t>(k.src);
    h = h * 0x9E3779B97F4A7C15ULL + static_cast<std::uint32_t>(k.dst);
    h = h * 0x9E3779B97F4A7C15ULL + static_cast<std::uint32_t>(k.tag);
    return static_cast<std::size_t>(h ^ (h >> 29));
  }
};

}  // namespace

struct Executor::Instance {
  int group = -1;
  Collective collective = Collective::kAllReduce;
  double bytes = 0;
  std::vector<int> members;  // op ids, in group order
  int ready = 0;
  std::vector<Phase> phases;
  int phase = 0;
  double delay = 0;  // s before its first phase: members under a quota spending its CPU
};

struct Executor::Batch {
  int owner = -1;  // the send op, or the collective instance
  bool collective = false;
  double latency = 0;  // s charged to each flow before its bytes move
  double t0 = 0;
  std::vector<int> flows;
  Timer* timer = nullptr;  // while running uncontended
  int outstanding = 0;     // SimGrid comms still running
};

struct Executor::Flow {
  int batch = -1;
  const Route* route = nullptr;
  double bottleneck = 0;  // bytes/s of its route alone
  double wire = 0;        // bytes / its transport's efficiency: what SimGrid moves
  sg4::CommPtr comm;
};

std::vector<char> simulated_devices(const Program& program, int num_devices) {
  std::vector<char> out(num_devices, program.replicas.folded() ? 0 : 1);
  if (program.replicas.folded()) {
    for (const DeviceLayout& l : program.devices) out[l.device] = 1;
  }
  return out;
}

Executor::Executor(const Program& program, Platform& platform, const Cluster& cluster,
                   std::vector<double> duration, Algorithm algorithm, bool analytic_uncontended)
    : p_(program),
      platform_(platform),
      cluster_(cluster),
      duration_(std::move(duration)),
      algorithm_(algorithm),
      analytic_(analytic_uncontended) {
  sg4::Engine::get_instance()->get_netzone_root()->get_network_model()->set_lat_factor_cb(
      [](double, const sg4::Host*, const sg4::Host*, const std::vector<sg4::Link*>&,
         const std::unordered_set<sg4::NetZone*>&) { return g_latency_factor; });
  build_graph();
  simulated_ = simulated_devices(p_, cluster_.num_devices());
  // Each device's quota periods start at its own phase, spread by the golden ratio: the
  // testbed's cgroups start their period timers independently.
  quota_.resize(cluster_.num_devices());
  for (int d = 0; d < cluster_.num_devices(); ++d) {
    const GpuSpec& gpu = cluster_.gpu(d);
    if (!gpu.quota_pauses()) continue;
    const double phase = std::fmod(d * 0.6180339887498949, 1.0) * gpu.quota_period_s;
    quota_[d].emplace(gpu.quota_share, gpu.quota_period_s, phase);
  }
}

Executor::~Executor() {
  g_graveyard.clear();
}

void Executor::build_graph() {
  const int n = p_.num_ops();
  pending_.assign(n, 0);
  stream_next_.assign(n, -1);
  partner_.assign(n, -1);
  instance_of_.assign(n, -1);
  started_.assign(n, 0);
  const std::vector<int> stream_prev = stream_predecessors(p_);
  for (int id = 0; id < n; ++id) {
    if (stream_prev[id] >= 0) stream_next_[stream_prev[id]] = id;
  }
  // Successors in CSR form: deps reversed, then the stream successor.
  std::vector<int> count(n + 1, 0);
  for (int id = 0; id < n; ++id) {
    for (int d : p_.deps(id)) ++count[d];
    if (stream_prev[id] >= 0) ++count[stream_prev[id]];
    pending_[id] = static_cast<int>(p_.ops[id].deps_count) + (stream_prev[id] >= 0 ? 1 : 0);
  }
  succ_begin_.assign(n + 1, 0);
  for (int i = 0; i < n; ++i) succ_begin_[i + 1] = succ_begin_[i] + count[i];
  succ_.assign(succ_begin_[n], 0);
  std::vector<int> fill(succ_begin_.begin(), succ_begin_.end() - 1);
  for (int id = 0; id < n; ++id) {
    for (int d : p_.deps(id)) succ_[fill[d]++] = id;
    if (stream_prev[id] >= 0) succ_[fill[stream_prev[id]]++] = id;
  }
  // Rendezvous partners and collective instances (validate_program guarantees both exist).
  std::unordered_map<MessageKey, int, MessageKeyHash> sends;
  std::unordered_map<std::uint64_t, int> instances;
  for (int id = 0; id < n; ++id) {
    const Op& op = p_.ops[id];
    if (op.kind == OpKind::kSend) sends[{op.device, op.peer, op.tag}] = id;
  }
  for (int id = 0; id < n; ++id) {
    const Op& op = p_.ops[id];
    if (op.kind == OpKind::kRecv) {
      const int s = sends.at({op.peer, op.device, op.tag});
      partner_[id] = s;
      partner_[s] = id;
    } else if (op.kind == OpKind::kCollective) {
      auto [it, fresh] =
          instances.emplace((static_cast<std::uint64_t>(op.group) << 32) | op.instance,
                            static_cast<int>(instances_.size()));
      if (fresh) instances_.push_back({op.group, op.collective, op.bytes, {}, 0, {}, 0, 0.0});
      instance_of_[id] = it->second;
    }
  }
  for (auto& inst : instances_) inst.members.assign(p_.groups[inst.group].devices.size(), -1);
  for (int id = 0; id < n; ++id) {
    if (instance_of_[id] < 0) continue;
    Instance& inst = instances_[instance_of_[id]];
    const auto& devs = p_.groups[inst.group].devices;
    inst.members[std::find(devs.begin(), devs.end(), p_.ops[id].device) - devs.begin()] = id;
  }
}

ExecutionResult Executor::run() {
  const int n = p_.num_ops();
  r_.ready.assign(n, -1);
  r_.start.assign(n, -1);
  r_.end.assign(n, -1);
  r_.link_bytes.assign(platform_.links().size(), 0.0);
  active_.assign(platform_.links().size(), 0);
  holder_.assign(platform_.links().size(), -1);
  mark_.assign(platform_.links().size(), 0);
  for (int id = 0; id < n; ++id) {
    if (pending_[id] == 0) make_ready(id, 0.0);
  }
  drain();
  sg4::Activity::on_completion_cb([this](const sg4::Activity& a) {
    auto tag = reinterpret_cast<std::intptr_t>(a.get_data<void>());
    if (tag <= 0) return;
    on_flow_done(static_cast<int>(tag - 1), sg4::Engine::get_clock());
    drain();
  });
  sg4::Engine::get_instance()->run();
  g_graveyard.clear();
  for (int id = 0; id < n; ++id) {
    if (r_.end[id] < 0) r_.unfinished.push_back(id);
  }
  return std::move(r_);
}

void Executor::make_ready(int op, double t) {
  r_.ready[op] = t;
  queue_.push_back(op);
}

// Starts everything that became ready at the current time, in a fixed order.
void Executor::drain() {
  for (std::size_t i = 0; i < queue_.size(); ++i) {
    const int op = queue_[i];
    const double t = r_.ready[op];
    switch (p_.ops[op].kind) {
      case OpKind::kCompute:
        start_compute_chain(op, t);
        break;
      case OpKind::kSend:
      case OpKind::kRecv: {
        started_[op] = 1;
        const int other = partner_[op];
        if (started_[other]) {
          const bool send = p_.ops[op].kind == OpKind::kSend;
          start_transfer(send ? op : other, send ? other : op, t);
        }
        break;
      }
      case OpKind::kCollective: {
        Instance& inst = instances_[instance_of_[op]];
        if (++inst.ready == static_cast<int>(inst.members.size()))
          start_collective(instance_of_[op], t);
        break;
      }
    }
  }
  queue_.clear();
}

void Executor::complete(int op, double t) {
  r_.end[op] = t;
  for (int i = succ_begin_[op]; i < succ_begin_[op + 1]; ++i) {
    const int s = succ_[i];
    if (--pending_[s] == 0) make_ready(s, t);
  }
}

// ---- compute -----------------------------------------------------------------

void Executor::start_compute_chain(int op, double t) {
  int last = op;
  double when = t;
  std::optional<QuotaClock>& quota = quota_[p_.ops[op].device];
  while (true) {
    r_.start[last] = when;
    when = quota ? quota->run(when, duration_[last]) : when + duration_[last];
    r_.end[last] = when;
    // Extend while this op's only successor is the next compute op of its stream
    // and that op waits on nothing else.
    const int next = stream_next_[last];
    const bool only_next = succ_begin_[last + 1] - succ_begin_[last] == 1 && next >= 0 &&
                           succ_[succ_begin_[last]] == next;
    if (!only_next || p_.ops[next].kind != OpKind::kCompute || pending_[next] != 1) break;
    pending_[next] = 0;
    r_.ready[next] = when;
    last = next;
  }
  at(when, op, last);
}

void Executor::at(double time, int first, int last) {
  auto it = slot_at_.find(time);
  if (it != slot_at_.end()) {
    slots_[it->second].emplace_back(first, last);
    return;
  }
  int slot;
  if (free_slots_.empty()) {
    slot = static_cast<int>(slots_.size());
    slots_.emplace_back();
    slot_time_.push_back(time);
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
    slot_time_[slot] = time;
  }
  slots_[slot].emplace_back(first, last);
  slot_at_.emplace(time, slot);
  ++r_.timers;
  Timer::set(time, [this, slot] { fire(slot); });
}

void Executor::fire(int slot) {
  g_graveyard.clear();
  const double t = slot_time_[slot];
  slot_at_.erase(t);  // chains due now that are created while firing get a new timer
  std::vector<std::pair<int, int>> chains;
  chains.swap(slots_[slot]);
  free_slots_.push_back(slot);
  for (auto [first, last] : chains) complete(last, t);
  drain();
}

// ---- transfers -----------------------------------------------------------------

// The communication CPU law of `device` towards `peer`: its transport's, for its device type.
const CommCpuLaw& Executor::comm_cpu(int device, int peer) const {
  return cluster_.curve(cluster_.transport(device, peer)).cpu_of(cluster_.gpu(device).name);
}

// When `device` has spent the CPU of a communication op with `peer` of `bytes`, from t on:
// t unless it runs under a CPU quota and the transport costs CPU (the testbed's ranks).
double Executor::spend_comm_cpu(int device, int peer, double bytes, bool collective, double t) {
  std::optional<QuotaClock>& quota = quota_[device];
  if (!quota) return t;
  const double cpu = comm_cpu(device, peer).seconds(bytes, collective);
  return cpu > 0 ? quota->spend(t, cpu) : t;
}

// When `device`, waiting on a message from `peer` since `from`, notices it arrived at `until`:
// `until` unless it runs under a CPU quota and polls (the testbed's ranks), whose polls may
// spend its quota first (QuotaClock::wait).
double Executor::notice(int device, int peer, double from, double until) {
  std::optional<QuotaClock>& quota = quota_[device];
  if (!quota || peer == device) return until;
  const double rate = comm_cpu(device, peer).poll_fraction;
  return rate > 0 ? quota->wait(from, until, rate) : until;
}

void Executor::start_transfer(int send, int recv, double t) {
  r_.start[send] = r_.start[recv] = t;
  const Op& op = p_.ops[send];
  // The sender's copy out before the first byte moves.
  const double sent = spend_comm_cpu(op.device, op.peer, op.bytes, false, t);
  const int b = new_batch(send, false, cluster_.step_latency(op.device, op.peer) + (sent - t));
  add_flow(b, op.device, op.peer, op.bytes, op.bytes, send);
  launch(b, t);
}

void Executor::start_collective(int index, double t) {
  Instance& inst = instances_[index];
  for (int op : inst.members) r_.start[op] = t;
  std::vector<int> devices;
  for (int op : inst.members) devices.push_back(p_.ops[op].device);
  // A folded program's collective across pipelines runs its whole group's algorithm;
  // start_phase starts the flows leaving the simulated devices.
  const std::vector<int>& whole = p_.groups[inst.group].whole;
  inst.phases = expand_collective(inst.collective, whole.empty() ? devices : whole, inst.bytes,
                                  algorithm_, cluster_);
  inst.phase = 0;
  std::erase_if(inst.phases, [](const Phase& ph) { return ph.flows.empty(); });
  if (inst.phases.empty()) {
    for (int op : inst.members) complete(op, t);
    return;
  }
  // Members under a CPU quota spend the collective's CPU (copies, reductions) before it
  // moves: one paused member holds up the ring.
  inst.delay = 0;
  for (std::size_t k = 0; k < devices.size(); ++k) {
    const int next = devices[(k + 1) % devices.size()];
    if (next == devices[k]) continue;
    const double noticed = notice(devices[k], next, r_.ready[inst.members[k]], t);
    inst.delay =
        std::max(inst.delay, spend_comm_cpu(devices[k], next, inst.bytes, true, noticed) - t);
  }
  start_phase(index, t);
}

void Executor::start_phase(int index, double t) {
  Instance& inst = instances_[index];
  const Phase& ph = inst.phases[inst.phase];
  double latency = 0;
  if (ph.part_steps.empty()) {
    double hop = 0;
    for (const auto& f : ph.flows)
      hop = std::max(hop, cluster_.collective_step_latency(f.src, f.dst));
    latency = ph.latency_steps * hop;
  } else {
    std::vector<double> hop(ph.part_steps.size(), 0.0);
    for (const auto& f : ph.flows)
      hop[f.part] = std::max(hop[f.part], cluster_.collective_step_latency(f.src, f.dst));
    for (std::size_t k = 0; k < hop.size(); ++k) latency += ph.part_steps[k] * hop[k];
  }
  if (inst.phase == 0) latency += inst.delay;
  const int b = new_batch(index, true, latency);
  for (const auto& f : ph.flows) {
    if (simulated_[f.src]) add_flow(b, f.src, f.dst, f.bytes, f.message, inst.members.front());
  }
  launch(b, t);
}

int Executor::new_batch(int owner, bool collective, double latency) {
  batches_.push_back({owner, collective, latency, 0.0, {}, nullptr, 0});
  return static_cast<int>(batches_.size()) - 1;
}

void Executor::add_flow(int batch, int src, int dst, double bytes, double message, int trace_op) {
  const Route& route = platform_.route(src, dst);
  double bottleneck = 1e300;
  for (int l : route.links) {
    bottleneck = std::min(bottleneck, platform_.links()[l].simulated_Bps());
    r_.link_bytes[l] += bytes;
  }
  const int index = static_cast<int>(flows_.size());
  flows_.push_back(
      {batch, &route, bottleneck, bytes / cluster_.efficiency(src, dst, message), nullptr});
  r_.flows.push_back({src, dst, bytes, 0.0, -1.0, trace_op});
  batches_[batch].flows.push_back(index);
}

// Uncontended (no link shared with another flow, in or out of the batch): a timer.
// Otherwise: SimGrid comms, after materialising any uncontended batch in the way.
void Executor::launch(int b, double t) {
  batches_[b].t0 = t;
  bool alone = analytic_;
  ++stamp_;  // marks this batch's links, to see two of its flows share one
  for (int f : batches_[b].flows) {
    for (int l : flows_[f].route->links) {
      if (active_[l] > 0 || holder_[l] >= 0 || mark_[l] == stamp_) alone = false;
      mark_[l] = stamp_;
    }
  }
  if (alone) {
    launch_analytic(b, t);
    return;
  }
  for (int f : batches_[b].flows) {
    for (int l : flows_[f].route->links) {
      if (holder_[l] >= 0) materialise(holder_[l], t);
    }
  }
  Batch& batch = batches_[b];
  batch.outstanding = static_cast<int>(batch.flows.size());
  for (int f : batch.flows) {
    r_.flows[f].start = t;
    launch_comm(f, flows_[f].wire, batch.latency);
  }
}

void Executor::launch_analytic(int b, double t) {
  Batch& batch = batches_[b];
  double end = t;
  for (int f : batch.flows) {
    FlowRecord& rec = r_.flows[f];
    rec.start = t;
    rec.end = t + batch.latency + flows_[f].wire / flows_[f].bottleneck;
    end = std::max(end, rec.end);
    for (int l : flows_[f].route->links) holder_[l] = b;
  }
  ++r_.analytic_batches;
  ++r_.timers;
  batch.timer = Timer::set(end, [this, b, end] {
    g_graveyard.clear();
    Batch& done = batches_[b];
    done.timer = nullptr;
    for (int f : done.flows) {
      for (int l : flows_[f].route->links) holder_[l] = -1;
    }
    on_batch_done(b, end);
    drain();
  });
}

// An uncontended batch meets another flow at time t: what its flows have moved so
// far is known exactly; the rest continues as SimGrid comms.
void Executor::materialise(int b, double t) {
  Batch& batch = batches_[b];
  batch.timer->remove();
  batch.timer = nullptr;
  ++r_.materialised;
  for (int f : batch.flows) {
    for (int l : flows_[f].route->links) holder_[l] = -1;
  }
  const double latency_left = std::max(0.0, batch.t0 + batch.latency - t);
  const double moving_for = std::max(0.0, t - batch.t0 - batch.latency);
  batch.outstanding = 0;
  for (int f : batch.flows) {
    const double left = flows_[f].wire - moving_for * flows_[f].bottleneck;
    if (left < 0.5) continue;  // finished (its analytic end is already recorded)
    r_.flows[f].end = -1;
    ++batch.outstanding;
    launch_comm(f, left, latency_left);
  }
  if (batch.outstanding == 0) on_batch_done(b, t);
}

void Executor::launch_comm(int f, double bytes, double latency) {
  Flow& flow = flows_[f];
  for (int l : flow.route->links) ++active_[l];
  ++r_.comms;
  const FlowRecord& rec = r_.flows[f];
  auto [from, to] = platform_.endpoints(rec.src, rec.dst);
  // Charge exactly `latency`: CM02 multiplies the route's latency by this factor. Never
  // 0: CM02 gives a 0-latency comm a sharing weight that starves it (platform.hpp).
  g_latency_factor = std::max(latency, 1e-12) / flow.route->latency_s;
  sg4::CommPtr comm = sg4::Comm::sendto_init(from, to);
  comm->set_payload_size(static_cast<std::uint64_t>(std::max(1LL, std::llround(bytes))));
  comm->set_data(reinterpret_cast<void*>(static_cast<std::intptr_t>(f) + 1));
  flow.comm = comm;
  comm->start();
  g_latency_factor = 1.0;
}

void Executor::on_flow_done(int f, double t) {
  Flow& flow = flows_[f];
  for (int l : flow.route->links) --active_[l];
  r_.flows[f].end = t;
  if (flow.comm) g_graveyard.push_back(std::move(flow.comm));
  if (--batches_[flow.batch].outstanding == 0) on_batch_done(flow.batch, t);
}

void Executor::on_batch_done(int b, double t) {
  Batch& batch = batches_[b];
  std::vector<int>().swap(batch.flows);
  const int owner = batch.owner;
  if (!batch.collective) {
    complete(owner, t);
    // The receiver's copy in, once the bytes are there.
    const Op& op = p_.ops[owner];
    const double noticed = notice(op.peer, op.device, r_.ready[partner_[owner]], t);
    complete_at(partner_[owner], spend_comm_cpu(op.peer, op.device, op.bytes, false, noticed), t);
    return;
  }
  Instance& inst = instances_[owner];
  if (++inst.phase < static_cast<int>(inst.phases.size())) {
    start_phase(owner, t);
    return;
  }
  std::vector<Phase>().swap(inst.phases);
  const int n = static_cast<int>(inst.members.size());
  for (int k = 0; k < n; ++k) {
    const int op = inst.members[k];
    const int next = p_.ops[inst.members[(k + 1) % n]].device;
    complete_at(op, notice(p_.ops[op].device, next, r_.ready[op], t), t);
  }
}

// Completes `op` at `when`: now if that is `now`, else by a timer.
void Executor::complete_at(int op, double when, double now) {
  if (when > now) {
    at(when, op, op);
  } else {
    complete(op, now);
  }
}

}  // namespace hexi::sim
