#include "sim/executor.hpp"

#include <algorithm>
#include <cmath>
#include <map>
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

}  // namespace

struct Executor::Instance {
  int group = -1;
  Collective collective = Collective::kAllReduce;
  double bytes = 0;
  std::vector<int> members;  // op ids, in group order
  int ready = 0;
  std::vector<Phase> phases;
  int phase = 0;
  int outstanding = 0;
};

struct Executor::Flow {
  int owner = -1;  // the send op, or the collective instance
  bool collective = false;
  sg4::CommPtr comm;
};

Executor::Executor(const Program& program, Platform& platform, const Cluster& cluster,
                   std::vector<double> duration, Algorithm algorithm)
    : p_(program),
      platform_(platform),
      cluster_(cluster),
      duration_(std::move(duration)),
      algorithm_(algorithm) {
  sg4::Engine::get_instance()->get_netzone_root()->get_network_model()->set_lat_factor_cb(
      [](double, const sg4::Host*, const sg4::Host*, const std::vector<sg4::Link*>&,
         const std::unordered_set<sg4::NetZone*>&) { return g_latency_factor; });
  build_graph();
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
  std::vector<int> stream_prev(n, -1);
  for (const auto& l : p_.devices) {
    std::map<std::tuple<int, int, int>, int> last;  // (stream, peer, kind) -> previous op
    for (int id = l.op_begin; id < l.op_end; ++id) {
      const Op& op = p_.ops[id];
      const bool p2p = op.stream == Stream::kP2p;
      auto key = std::make_tuple(static_cast<int>(op.stream), p2p ? op.peer : -1,
                                 p2p ? static_cast<int>(op.kind) : -1);
      auto [it, fresh] = last.emplace(key, id);
      if (!fresh) {
        stream_prev[id] = it->second;
        stream_next_[it->second] = id;
        it->second = id;
      }
    }
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
  // Rendezvous partners.
  std::map<std::tuple<int, int, int>, int> sends;
  std::map<std::pair<int, int>, int> instances;
  for (int id = 0; id < n; ++id) {
    const Op& op = p_.ops[id];
    if (op.kind == OpKind::kSend) sends[{op.device, op.peer, op.tag}] = id;
  }
  for (int id = 0; id < n; ++id) {
    const Op& op = p_.ops[id];
    if (op.kind == OpKind::kRecv) {
      int s = sends.at({op.peer, op.device, op.tag});
      partner_[id] = s;
      partner_[s] = id;
    } else if (op.kind == OpKind::kCollective) {
      auto [it, fresh] = instances.emplace(std::make_pair(op.group, op.instance),
                                           static_cast<int>(instances_.size()));
      if (fresh) instances_.push_back({op.group, op.collective, op.bytes, {}, 0, {}, 0, 0});
      instance_of_[id] = it->second;
    }
  }
  // Members in group order.
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

void Executor::start_compute_chain(int op, double t) {
  int last = op;
  double at = t;
  while (true) {
    r_.start[last] = at;
    at += duration_[last];
    r_.end[last] = at;
    // Extend while this op's only successor is the next compute op of its stream
    // and that op waits on nothing else.
    const int next = stream_next_[last];
    const bool only_next = succ_begin_[last + 1] - succ_begin_[last] == 1 && next >= 0 &&
                           succ_[succ_begin_[last]] == next;
    if (!only_next || p_.ops[next].kind != OpKind::kCompute || pending_[next] != 1) break;
    pending_[next] = 0;
    r_.ready[next] = at;
    last = next;
  }
  ++r_.timers;
  const double end = at;
  Timer::set(end, [this, last, end] {
    g_graveyard.clear();
    complete(last, end);
    drain();
  });
}

void Executor::start_transfer(int send, int recv, double t) {
  r_.start[send] = r_.start[recv] = t;
  const Op& op = p_.ops[send];
  start_flow(op.device, op.peer, op.bytes, platform_.route(op.device, op.peer).latency_s, send,
             false, send);
}

void Executor::start_collective(int index, double t) {
  Instance& inst = instances_[index];
  for (int op : inst.members) r_.start[op] = t;
  std::vector<int> devices;
  for (int op : inst.members) devices.push_back(p_.ops[op].device);
  inst.phases = expand_collective(inst.collective, devices, inst.bytes, algorithm_, cluster_);
  inst.phase = 0;
  std::erase_if(inst.phases, [](const Phase& ph) { return ph.flows.empty(); });
  if (inst.phases.empty()) {
    for (int op : inst.members) complete(op, t);
    return;
  }
  start_phase(index, t);
}

void Executor::start_phase(int index, double t) {
  (void)t;
  Instance& inst = instances_[index];
  const Phase& ph = inst.phases[inst.phase];
  double hop = 0;
  for (const auto& f : ph.flows) hop = std::max(hop, platform_.route(f.src, f.dst).latency_s);
  inst.outstanding = static_cast<int>(ph.flows.size());
  for (const auto& f : ph.flows)
    start_flow(f.src, f.dst, f.bytes, ph.latency_steps * hop, index, true, inst.members.front());
}

// One SimGrid comm; `latency` is what the flow must be charged before its bytes move.
void Executor::start_flow(int src, int dst, double bytes, double latency, int owner,
                          bool collective, int trace_op) {
  const Route& route = platform_.route(src, dst);
  const int index = static_cast<int>(flows_.size());
  flows_.push_back({owner, collective, nullptr});
  const double now = sg4::Engine::get_clock();
  r_.flows.push_back({src, dst, bytes, now, -1, trace_op});
  for (int l : route.links) r_.link_bytes[l] += bytes;
  auto [from, to] = platform_.endpoints(src, dst);
  const auto size = static_cast<std::uint64_t>(std::llround(bytes));
  if (size == 0 || route.latency_s <= 0) {
    // SimGrid never starts a 0-byte comm, and a 0-latency route cannot be scaled:
    // such flows are timers of their latency (plus bytes at the route's bottleneck).
    double bw = 1e300;
    for (int l : route.links) bw = std::min(bw, platform_.links()[l].bandwidth_Bps);
    ++r_.timers;
    Timer::set(now + latency + bytes / bw, [this, index] {
      g_graveyard.clear();
      on_flow_done(index, sg4::Engine::get_clock());
      drain();
    });
    return;
  }
  ++r_.comms;
  g_latency_factor = latency / route.latency_s;
  sg4::CommPtr comm = sg4::Comm::sendto_init(from, to);
  comm->set_payload_size(size);
  comm->set_data(reinterpret_cast<void*>(static_cast<std::intptr_t>(index) + 1));
  flows_[index].comm = comm;
  comm->start();
  g_latency_factor = 1.0;
}

void Executor::on_flow_done(int index, double t) {
  Flow& f = flows_[index];
  r_.flows[index].end = t;
  if (f.comm) g_graveyard.push_back(std::move(f.comm));
  if (!f.collective) {
    complete(f.owner, t);
    complete(partner_[f.owner], t);
    return;
  }
  Instance& inst = instances_[f.owner];
  if (--inst.outstanding > 0) return;
  if (++inst.phase < static_cast<int>(inst.phases.size())) {
    start_phase(f.owner, t);
    return;
  }
  inst.phases.clear();
  inst.phases.shrink_to_fit();
  for (int op : inst.members) complete(op, t);
}

}  // namespace hexi::sim
