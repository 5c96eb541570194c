#include "scheduler/program/trace_schema.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "topologies/text.hpp"

namespace hexi {
inline namespace program {
namespace {

// The args object's members after "op" (see the header for the order).
std::string args_tail(const Op& op, const TraceOp& e) {
  std::string out;
  if (e.step >= 0) out += format(", \"step\": %d", e.step);
  if (op.kind != OpKind::kCompute) out += format(", \"bytes\": %.0f", e.bytes);
  if (e.posted_us >= 0) out += format(", \"posted_us\": %.3f", e.posted_us);
  if (e.folded_us >= 0) out += format(", \"folded_us\": %.3f", e.folded_us);
  if (op.kind == OpKind::kCollective) out += format(", \"group\": %d", op.group);
  return out;
}

}  // namespace

void TraceWriter::device(const Program& p, int device, const std::string& gpu_name) {
  const DeviceLayout* l = p.layout(device);
  raw(format(
      R"J({"name": "process_name", "ph": "M", "pid": %d, "args": {"name": "device %d %s (pipeline %d, stage %d, tp rank %d)"}})J",
      device, device, gpu_name.c_str(), l->pipeline, l->stage, l->tp_rank));
  raw(format(
      R"J({"name": "process_sort_index", "ph": "M", "pid": %d, "args": {"sort_index": %d}})J",
      device, device));
  for (Stream s : {Stream::kCompute, Stream::kP2p, Stream::kGather, Stream::kDp}) {
    raw(format(
        R"J({"name": "thread_name", "ph": "M", "pid": %d, "tid": %d, "args": {"name": "%s"}})J",
        device, static_cast<int>(s), std::string(to_string(s)).c_str()));
  }
}

void TraceWriter::op(const Program& p, const TraceOp& e) {
  const Op& op = p.ops[e.op];
  const std::string label = op_label(p, e.op);
  const int tid = static_cast<int>(op.stream);
  const std::string args = format("\"op\": %d", e.op) + args_tail(op, e);
  if (op.stream == Stream::kP2p) {
    raw(format(
        R"J({"name": "%s", "cat": "p2p", "ph": "b", "id": %d, "pid": %d, "tid": %d, "ts": %.3f, "args": {%s}})J",
        label.c_str(), e.op, e.device, tid, e.start_us, args.c_str()));
    raw(format(
        R"J({"name": "%s", "cat": "p2p", "ph": "e", "id": %d, "pid": %d, "tid": %d, "ts": %.3f})J",
        label.c_str(), e.op, e.device, tid, e.end_us));
    return;
  }
  const std::string cat =
      op.kind == OpKind::kCompute ? "compute" : std::string(to_string(op.stream));
  raw(format(
      R"J({"name": "%s", "cat": "%s", "ph": "X", "pid": %d, "tid": %d, "ts": %.3f, "dur": %.3f, "args": {%s}})J",
      label.c_str(), cat.c_str(), e.device, op.kind == OpKind::kCompute ? 0 : tid, e.start_us,
      e.end_us - e.start_us, args.c_str()));
}

void TraceWriter::raw(const std::string& event) {
  lines_ += event;
  lines_ += '\n';
}

std::string trace_document(const std::vector<std::string>& parts,
                           const std::optional<Json>& other_data) {
  std::string body;
  for (const std::string& lines : parts) {
    std::size_t start = 0;
    while (start < lines.size()) {
      std::size_t end = lines.find('\n', start);
      if (end == std::string::npos) end = lines.size();
      if (end > start) {
        body += body.empty() ? "\n" : ",\n";
        body.append(lines, start, end - start);
      }
      start = end + 1;
    }
  }
  std::string head = "{\"displayTimeUnit\": \"ms\", ";
  if (other_data) head += "\"otherData\": " + other_data->dump() + ", ";
  return head + "\"traceEvents\": [" + body + "\n]}\n";
}

Result<Trace> trace_from_json(const Json& json, const std::string& origin) {
  return load_with([&] {
    JsonNode doc(json, origin);
    doc.require_object();
    Trace t;
    if (auto od = doc.find("otherData")) t.other_data = od->json();
    const JsonNode events = doc.at("traceEvents");
    std::map<std::pair<int, int>, std::size_t> open;  // (pid, id) -> index of its "b"
    for (std::size_t i = 0; i < events.size(); ++i) {
      const JsonNode ev = events.at(i);
      const std::string ph = ev.str("ph");
      const auto args = ev.find("args");
      if (ph == "e") {
        const auto key = std::make_pair(static_cast<int>(ev.at("pid").integer()),
                                        static_cast<int>(ev.at("id").integer()));
        auto it = open.find(key);
        if (it == open.end()) ev.fail_message("an \"e\" event without its \"b\" (pid, id)");
        t.ops[it->second].end_us = ev.at("ts").number();
        open.erase(it);
        continue;
      }
      if ((ph != "X" && ph != "b") || !args || !args->has("op")) continue;
      TraceOp op;
      op.op = static_cast<int>(args->at("op").integer_in(0, 1LL << 40));
      op.device = static_cast<int>(ev.at("pid").integer());
      op.start_us = ev.at("ts").number();
      op.end_us = ph == "X" ? op.start_us + ev.at("dur").number() : op.start_us;
      op.step = static_cast<int>(args->integer_or("step", -1, 1LL << 40, -1));
      if (auto b = args->find("bytes")) op.bytes = b->number();
      if (auto v = args->find("posted_us")) op.posted_us = v->number();
      if (auto v = args->find("folded_us")) op.folded_us = v->number();
      if (ph == "b") open[{op.device, static_cast<int>(ev.at("id").integer())}] = t.ops.size();
      t.ops.push_back(op);
    }
    if (!open.empty()) {
      const TraceOp& o = t.ops[open.begin()->second];
      doc.fail_message("op " + std::to_string(o.op) + " on device " + std::to_string(o.device) +
                       ": a \"b\" event without its \"e\"");
    }
    return t;
  });
}

Result<Trace> load_trace(const std::string& path) {
  auto json = read_json_file(path);
  if (!json) return json.error();
  return trace_from_json(*json, path);
}

}  // namespace program
}  // namespace hexi
