// The simulated trace, in the one trace schema (scheduler/program/trace_schema.hpp),
// plus counter tracks of the busiest links.

#include <algorithm>
#include <numeric>

#include "scheduler/program/trace_schema.hpp"
#include "sim/metrics.hpp"
#include "topologies/text.hpp"

namespace hexi::sim {
namespace {

constexpr int kLinkTracks = 256;  // counter tracks for the busiest links at most
constexpr int kLinksPid = 1 << 30;

void device_ops(TraceWriter& w, const RunInputs& in, const DeviceLayout& l,
                const ExecutionResult& r) {
  const Program& p = in.program;
  w.device(p, l.device, in.cluster.gpu(l.device).name);
  for (int id = l.op_begin; id < l.op_end; ++id) {
    const Op& op = p.ops[id];
    // A collective on the compute stream is drawn from when it was ready (it waits there).
    const double begin =
        op.kind == OpKind::kCollective && op.stream == Stream::kCompute ? r.ready[id] : r.start[id];
    TraceOp e;
    e.op = id;
    e.device = l.device;
    e.start_us = begin * 1e6;
    e.end_us = r.end[id] * 1e6;
    e.bytes = op.bytes;
    if (op.stream == Stream::kP2p) e.posted_us = r.ready[id] * 1e6;
    if (op.kind == OpKind::kCompute) e.folded_us = in.folded[id] * 1e6;
    w.op(p, e);
  }
}

// Counter tracks: flows in flight on the busiest links.
void link_tracks(TraceWriter& w, const RunInputs& in, const ExecutionResult& r) {
  std::vector<int> order(in.links.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return r.link_bytes[a] > r.link_bytes[b]; });
  std::vector<char> tracked(in.links.size(), 0);
  int tracks = 0;
  for (int l : order) {
    if (tracks == kLinkTracks || r.link_bytes[l] <= 0) break;
    tracked[l] = 1;
    ++tracks;
  }
  if (tracks == 0) return;
  w.raw(format(
      R"J({"name": "process_name", "ph": "M", "pid": %d, "args": {"name": "links (flows in flight)"}})J",
      kLinksPid));
  struct Change {
    double t;
    int delta;
    int link;
    bool operator<(const Change& o) const {
      return t != o.t ? t < o.t : delta != o.delta ? delta < o.delta : link < o.link;
    }
  };
  std::vector<Change> changes;
  for (const auto& f : r.flows) {
    for (int l : in.platform->route(f.src, f.dst).links) {
      if (!tracked[l]) continue;
      changes.push_back({f.start, 1, l});
      changes.push_back({f.end, -1, l});
    }
  }
  std::sort(changes.begin(), changes.end());
  std::vector<int> active(in.links.size(), 0);
  for (const auto& c : changes) {
    active[c.link] += c.delta;
    // Link names come from machine names in the cluster file: escaped as JSON.
    w.raw("{\"name\": " + dump_json(Json(in.links[c.link].name)) +
          format(R"J(, "ph": "C", "pid": %d, "ts": %.3f, "args": {"flows": %d}})J", kLinksPid,
                 c.t * 1e6, active[c.link]));
  }
}

}  // namespace

std::string make_trace(const RunInputs& in, const ExecutionResult& r) {
  TraceWriter w;
  for (const auto& l : in.program.devices) device_ops(w, in, l, r);
  link_tracks(w, in, r);
  return trace_document({w.lines()});
}

}  // namespace hexi::sim
