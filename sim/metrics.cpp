#include "sim/metrics.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

namespace hexi::sim {
namespace {

// Micro-batches alive at once: from the start of a micro-batch's first forward op
// to the end of its last backward op; a micro-batch in two chunks of an interleaved
// pipeline counts twice. `per_chunk`: the micro-batches of each chunk at the first point
// where their activation bytes peak (chunk_activation_bytes).
int max_in_flight(const RunInputs& in, const DeviceLayout& l, const ExecutionResult& r,
                  std::vector<int>* per_chunk) {
  const std::vector<double> bytes = chunk_activation_bytes(in.model, in.training, l);
  std::map<std::pair<int, int>, std::pair<double, double>>
      span;  // (chunk, micro-batch) -> (first forward start, last backward end)
  for (int id = l.op_begin; id < l.op_end; ++id) {
    const Op& op = in.program.ops[id];
    if (op.kind != OpKind::kCompute || op.micro_batch < 0) continue;
    auto [it, fresh] =
        span.emplace(std::make_pair(op.chunk, op.micro_batch), std::make_pair(1e300, -1.0));
    if (is_forward(op.compute)) it->second.first = std::min(it->second.first, r.start[id]);
    if (is_backward(op.compute)) it->second.second = std::max(it->second.second, r.end[id]);
  }
  // (time, +1 start / -1 end, chunk): ends sort before starts at equal times
  std::vector<std::tuple<double, int, int>> events;
  for (const auto& [key, s] : span) {
    events.emplace_back(s.first, 1, key.first);
    events.emplace_back(s.second, -1, key.first);
  }
  std::sort(events.begin(), events.end());
  std::vector<int> now(static_cast<std::size_t>(num_chunks(l)), 0);
  if (per_chunk != nullptr) *per_chunk = now;
  int alive = 0, peak = 0;
  double most = 0;
  for (auto [t, d, c] : events) {
    now[static_cast<std::size_t>(c)] += d;
    peak = std::max(peak, alive += d);
    double held = 0;  // summed afresh: equal holdings compare equal
    for (std::size_t k = 0; k < now.size(); ++k) held += now[k] * bytes[k];
    if (held > most) {
      most = held;
      if (per_chunk != nullptr) *per_chunk = now;
    }
  }
  return peak;
}

// Splits a device's compute-stream time into busy / exposed comm / bubble / idle.
void stream_breakdown(const RunInputs& in, const DeviceLayout& l, const ExecutionResult& r,
                      double iteration, DeviceMetrics& m) {
  double prev_end = 0;
  for (int id = l.op_begin; id < l.op_end; ++id) {
    const Op& op = in.program.ops[id];
    m.finish_s = std::max(m.finish_s, r.end[id]);
    if (op.stream != Stream::kCompute) continue;
    const double begin = op.kind == OpKind::kCompute ? r.start[id] : r.ready[id];
    const double gap = std::max(0.0, begin - prev_end);
    // The gap is charged to what the op waited for last.
    int waited = -1;
    for (int d : in.program.deps(id)) {
      if (waited < 0 || r.end[d] > r.end[waited]) waited = d;
    }
    const Stream s = waited >= 0 ? in.program.ops[waited].stream : Stream::kCompute;
    const TensorKind tensor = waited >= 0 ? in.program.ops[waited].tensor : TensorKind::kActivation;
    const bool p2p = s == Stream::kP2p && in.program.ops[waited].kind != OpKind::kCompute;
    if (p2p && is_ulysses(tensor)) {
      m.exposed_comm_s += gap;
      m.ulysses_wait_s += gap;
    } else if (p2p && is_ring(tensor)) {
      m.exposed_comm_s += gap;
      m.ring_wait_s += gap;
    } else if (s == Stream::kP2p || s == Stream::kGather) {
      m.bubble_s += gap;
    } else if (s == Stream::kDp) {
      m.exposed_comm_s += gap;
      m.dp_wait_s += gap;
    } else {
      m.idle_s += gap;
    }
    if (op.kind == OpKind::kCompute) {
      m.busy_s += in.duration[id] - in.folded[id];
      m.exposed_comm_s += in.folded[id];
    } else {
      m.exposed_comm_s += r.end[id] - begin;
    }
    prev_end = r.end[id];
  }
  m.idle_s += std::max(0.0, iteration - prev_end);
}

// What a device of a sequence mesh holds (`d`, the layout's memory model of that device,
// scheduler/hexiseq): model states, activations, ring and all-to-all buffers, reserve, logits.
void sequence_memory(const DeviceMemory& d, DeviceMetrics& m) {
  m.peak_memory_bytes = d.total();
  m.memory = {{"weights", d.mesh.states.weights},
              {"gradients", d.mesh.states.gradients},
              {"optimizer", d.mesh.states.optimizer},
              {"activations", d.mesh.activations},
              {"ring_buffers", d.mesh.ring_buffers},
              {"ulysses_buffers", d.mesh.ulysses_buffers},
              {"reserve", d.mesh.reserve},
              {"logits", d.logits},
              {"total", d.total()}};
}

// `sequence`: a sequence mesh's memory per device (layout_memory), empty otherwise.
DeviceMetrics device_metrics(const RunInputs& in, const DeviceLayout& l, const ExecutionResult& r,
                             double iteration, int dp, const std::vector<DeviceMemory>& sequence) {
  DeviceMetrics m;
  m.device = l.device;
  m.gpu = in.cluster.gpu(l.device).name;
  m.pipeline = l.pipeline;
  m.stage = l.stage;
  m.tp_rank = l.tp_rank;
  stream_breakdown(in, l, r, iteration, m);
  std::vector<int> chunk_in_flight;
  m.max_in_flight = max_in_flight(in, l, r, &chunk_in_flight);
  if (in.program.sequence) {
    m.sequence_group = l.seq_group;
    m.capacity_bytes = in.cluster.device_memory_bytes(l.device);
    for (const DeviceMemory& d : sequence) {
      if (d.device == l.device) sequence_memory(d, m);
    }
    return m;
  }
  const SequenceLayout* mesh = in.program.mesh_of(l);  // a mesh stage of a pipeline plan
  if (mesh) m.sequence_group = l.seq_group;
  MemoryBreakdown mem =
      mesh               ? mesh_stage_memory(*mesh, l.device, in.model, in.training,
                                             stage_shape(l, m.max_in_flight, dp))
      : l.chunks.empty() ? device_memory(in.model, in.training, stage_shape(l, m.max_in_flight, dp))
                         : chunked_memory(in.model, in.training, l, chunk_in_flight, dp);
  // The optimizer state this device really updates (ZeRO-1 shards of its buckets).
  if (in.training.zero_stage >= 1)
    mem.optimizer = (16.0 - 2 * in.training.bytes_per_element()) * l.owned_params;
  m.peak_memory_bytes = mem.total();
  m.capacity_bytes = in.cluster.device_memory_bytes(l.device);
  m.memory = mem.to_json();
  return m;
}

// FLOPs the program's compute ops execute (recompute included): hardware FLOPs.
double program_flops(const Program& p) {
  std::vector<double> per_shape(p.shapes.size());
  for (std::size_t i = 0; i < p.shapes.size(); ++i) per_shape[i] = p.shapes[i].flops();
  double sum = 0;
  for (const Op& op : p.ops) {
    if (op.kind == OpKind::kCompute) sum += per_shape[op.shape];
  }
  return sum;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", bytes / kGiB);
  return buf;
}

}  // namespace

SimReport make_report(const RunInputs& in, const ExecutionResult& r) {
  const Program& p = in.program;
  SimReport rep;
  rep.scenario = p.scenario;
  rep.cluster = in.cluster.name();
  rep.model = in.model.name;
  rep.fidelity = std::string(to_string(p.granularity));
  rep.schedule = std::string(to_string(p.schedule));
  // A plan with repeated device groups runs interleaved 1F1B (scheduler/plan/plan.hpp).
  if (std::any_of(p.devices.begin(), p.devices.end(),
                  [](const DeviceLayout& l) { return !l.chunks.empty(); })) {
    rep.schedule = "interleaved 1f1b";
  }
  // A folded program runs a 1/factor share of the plan's devices and compute ops.
  const int factor = p.replicas.factor();
  rep.devices_used = static_cast<int>(p.devices.size()) * factor;
  rep.replicas = {p.replicas.pipelines, p.replicas.simulated, p.replicas.why_not, {}, {}};
  rep.ops = p.num_ops();
  for (int id = 0; id < p.num_ops(); ++id) {
    rep.iteration_time_s = std::max(rep.iteration_time_s, r.end[id]);
    const Op& op = p.ops[id];
    if (op.kind == OpKind::kCompute && is_backward(op.compute))
      rep.pipeline_s = std::max(rep.pipeline_s, r.end[id]);
  }
  const double t = rep.iteration_time_s;
  const double flops = model_flops(in.model, in.training);
  if (t > 0) {
    rep.tokens_per_s = in.training.tokens_per_iteration() / t;
    rep.achieved_pflops = flops / t / 1e15;
    rep.mfu = flops / (t * in.cluster.peak_flops());
  }
  rep.figures = flop_figures(in.model, in.training, program_flops(p) * factor, t,
                             in.cluster.peak_flops(), rep.devices_used);
  rep.comms = r.comms;
  rep.timers = r.timers;
  rep.analytic_batches = r.analytic_batches;
  rep.materialised = r.materialised;
  rep.activities = r.comms + r.timers;
  int dp = p.replicas.pipelines;
  for (const auto& l : p.devices) dp = std::max(dp, l.pipeline + 1);
  const std::vector<DeviceMemory> sequence =
      p.sequence ? layout_memory(*p.sequence, in.model, in.training, in.cluster)
                 : std::vector<DeviceMemory>{};
  for (const auto& l : p.devices) {
    DeviceMetrics m = device_metrics(in, l, r, t, dp, sequence);
    if (m.peak_memory_bytes > m.capacity_bytes) {
      rep.feasible = false;
      rep.problems.push_back("device " + std::to_string(m.device) + " (" + m.gpu + ", pipeline " +
                             std::to_string(m.pipeline) + " stage " + std::to_string(m.stage) +
                             ") needs " + gib(m.peak_memory_bytes) + " GiB of " +
                             gib(m.capacity_bytes) + " GiB with " +
                             std::to_string(m.max_in_flight) + " micro-batches in flight");
    }
    rep.devices.push_back(std::move(m));
  }
  for (std::size_t i = 0; i < in.links.size(); ++i) {
    if (r.link_bytes[i] <= 0) continue;
    const LinkInfo& l = in.links[i];
    const double bytes = r.link_bytes[i] / l.share;  // with the images a folded link carries
    rep.links.push_back({l.name, std::string(to_string(l.kind)), l.bandwidth_Bps, bytes,
                         t > 0 ? bytes / (l.bandwidth_Bps * t) : 0});
  }
  return rep;
}

}  // namespace hexi::sim
