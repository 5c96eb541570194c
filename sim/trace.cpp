// Chrome trace-event writer (opens in Perfetto / chrome://tracing). Written by
// hand with fixed formatting so that the same run gives the same bytes.

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <numeric>

#include "sim/metrics.hpp"

namespace hexi::sim {
namespace {

constexpr int kLinkTracks = 256;  // counter tracks for the busiest links at most
constexpr int kLinksPid = 1 << 30;

class Writer {
 public:
  void event(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    char buf[512];
    va_list args;
    va_start(args, fmt);
    int n = std::vsnprintf(buf, sizeof buf, fmt, args);
    va_end(args);
    out_ += first_ ? "\n" : ",\n";
    first_ = false;
    out_.append(buf, std::min<int>(n, sizeof buf - 1));
  }
  std::string finish() {
    return "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [" + out_ + "\n]}\n";
  }

 private:
  std::string out_;
  bool first_ = true;
};

int tid_of(Stream s) {
  return static_cast<int>(s);
}

void device_tracks(Writer& w, const RunInputs& in, const DeviceLayout& l) {
  w.event(
      R"J({"name": "process_name", "ph": "M", "pid": %d, "args": {"name": "device %d %s (pipeline %d, stage %d, tp rank %d)"}})J",
      l.device, l.device, in.cluster.gpu(l.device).name.c_str(), l.pipeline, l.stage, l.tp_rank);
  w.event(R"J({"name": "process_sort_index", "ph": "M", "pid": %d, "args": {"sort_index": %d}})J",
          l.device, l.device);
  for (Stream s : {Stream::kCompute, Stream::kP2p, Stream::kGather, Stream::kDp}) {
    w.event(R"J({"name": "thread_name", "ph": "M", "pid": %d, "tid": %d, "args": {"name": "%s"}})J",
            l.device, tid_of(s), std::string(to_string(s)).c_str());
  }
}

void device_ops(Writer& w, const RunInputs& in, const DeviceLayout& l, const ExecutionResult& r) {
  const Program& p = in.program;
  for (int id = l.op_begin; id < l.op_end; ++id) {
    const Op& op = p.ops[id];
    const std::string label = op_label(p, id);
    const double begin =
        op.kind == OpKind::kCollective && op.stream == Stream::kCompute ? r.ready[id] : r.start[id];
    const double ts = begin * 1e6, dur = (r.end[id] - begin) * 1e6;
    if (op.stream == Stream::kP2p) {
      w.event(
          R"J({"name": "%s", "cat": "p2p", "ph": "b", "id": %d, "pid": %d, "tid": %d, "ts": %.3f, "args": {"op": %d, "bytes": %.0f, "posted_us": %.3f}})J",
          label.c_str(), id, l.device, tid_of(op.stream), ts, id, op.bytes, r.ready[id] * 1e6);
      w.event(
          R"J({"name": "%s", "cat": "p2p", "ph": "e", "id": %d, "pid": %d, "tid": %d, "ts": %.3f})J",
          label.c_str(), id, l.device, tid_of(op.stream), r.end[id] * 1e6);
    } else if (op.kind == OpKind::kCompute) {
      w.event(
          R"J({"name": "%s", "cat": "compute", "ph": "X", "pid": %d, "tid": 0, "ts": %.3f, "dur": %.3f, "args": {"op": %d, "folded_us": %.3f}})J",
          label.c_str(), l.device, ts, dur, id, in.folded[id] * 1e6);
    } else {
      w.event(
          R"J({"name": "%s", "cat": "%s", "ph": "X", "pid": %d, "tid": %d, "ts": %.3f, "dur": %.3f, "args": {"op": %d, "bytes": %.0f, "group": %d}})J",
          label.c_str(), std::string(to_string(op.stream)).c_str(), l.device, tid_of(op.stream), ts,
          dur, id, op.bytes, op.group);
    }
  }
}

// Counter tracks: flows in flight on the busiest links.
void link_tracks(Writer& w, const RunInputs& in, const ExecutionResult& r) {
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
  w.event(
      R"J({"name": "process_name", "ph": "M", "pid": %d, "args": {"name": "links (flows in flight)"}})J",
      kLinksPid);
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
    w.event(R"J({"name": "%s", "ph": "C", "pid": %d, "ts": %.3f, "args": {"flows": %d}})J",
            in.links[c.link].name.c_str(), kLinksPid, c.t * 1e6, active[c.link]);
  }
}

}  // namespace

std::string make_trace(const RunInputs& in, const ExecutionResult& r) {
  Writer w;
  for (const auto& l : in.program.devices) {
    device_tracks(w, in, l);
    device_ops(w, in, l, r);
  }
  link_tracks(w, in, r);
  return w.finish();
}

}  // namespace hexi::sim
