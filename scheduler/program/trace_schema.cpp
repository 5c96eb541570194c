#include "scheduler/program/trace_schema.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <utility>

#include "topologies/text.hpp"

namespace hexi {
inline namespace program {
namespace {

// Op ids, device ids (pid), event ids and steps are ints: larger values are bad input, not
// wrapped. A step is at most one below the largest so that step + 1 still counts steps.
constexpr std::int64_t kMaxId = std::numeric_limits<std::int32_t>::max() - 1;

// A JSON string literal (quoted, escaped; bytes that are not UTF-8 become U+FFFD): names
// come from cluster files and may hold quotes, backslashes or anything else.
std::string quoted(const std::string& text) {
  return dump_json(Json(text));
}

// Microseconds with three decimals from whole nanoseconds: an event's ts and ts + dur
// round the same way, so a slice never overlaps the next one by a rounding nanosecond.
std::int64_t ns(double us) {
  return std::llround(us * 1000.0);
}
std::string us_text(std::int64_t nanoseconds) {
  const char* sign = nanoseconds < 0 ? "-" : "";
  const auto magnitude = static_cast<long long>(nanoseconds < 0 ? -nanoseconds : nanoseconds);
  return format("%s%lld.%03lld", sign, magnitude / 1000, magnitude % 1000);
}

// The args object's members after "op" (see the header for the order).
std::string args_tail(const Op& op, const TraceOp& e) {
  std::string out;
  if (e.step >= 0) out += format(", \"step\": %d", e.step);
  if (op.kind != OpKind::kCompute) out += format(", \"bytes\": %.0f", e.bytes);
  if (e.posted_us >= 0) out += format(", \"posted_us\": %.3f", e.posted_us);
  if (e.folded_us >= 0) out += format(", \"folded_us\": %.3f", e.folded_us);
  if (e.cpu_us >= 0) out += format(", \"cpu_us\": %.3f", e.cpu_us);
  if (op.kind == OpKind::kCollective) out += format(", \"group\": %d", op.group);
  return out;
}

}  // namespace

void TraceWriter::device(const Program& p, int device, const std::string& gpu_name) {
  const DeviceLayout* l = p.layout(device);
  const std::string name =
      format("device %d ", device) + gpu_name +
      format(" (pipeline %d, stage %d, tp rank %d)", l->pipeline, l->stage, l->tp_rank);
  raw(format(R"J({"name": "process_name", "ph": "M", "pid": %d, "args": {"name": )J", device) +
      quoted(name) + "}}");
  raw(format(
      R"J({"name": "process_sort_index", "ph": "M", "pid": %d, "args": {"sort_index": %d}})J",
      device, device));
  for (Stream s : {Stream::kCompute, Stream::kP2p, Stream::kGather, Stream::kDp}) {
    raw(format(R"J({"name": "thread_name", "ph": "M", "pid": %d, "tid": %d, "args": {"name": )J",
               device, static_cast<int>(s)) +
        quoted(std::string(to_string(s))) + "}}");
  }
}

void TraceWriter::op(const Program& p, const TraceOp& e) {
  const Op& op = p.ops[e.op];
  const std::string name = "{\"name\": " + quoted(op_label(p, e.op));
  const int tid = static_cast<int>(op.stream);
  const std::string args = format("\"op\": %d", e.op) + args_tail(op, e);
  const std::int64_t start = ns(e.start_us), end = ns(e.end_us);
  if (op.stream == Stream::kP2p) {
    raw(name +
        format(R"J(, "cat": "p2p", "ph": "b", "id": %d, "pid": %d, "tid": %d, "ts": )J", e.op,
               e.device, tid) +
        us_text(start) + ", \"args\": {" + args + "}}");
    raw(name +
        format(R"J(, "cat": "p2p", "ph": "e", "id": %d, "pid": %d, "tid": %d, "ts": )J", e.op,
               e.device, tid) +
        us_text(end) + "}");
    return;
  }
  const std::string cat =
      op.kind == OpKind::kCompute ? "compute" : std::string(to_string(op.stream));
  raw(name + ", \"cat\": " + quoted(cat) +
      format(R"J(, "ph": "X", "pid": %d, "tid": %d, "ts": )J", e.device,
             op.kind == OpKind::kCompute ? 0 : tid) +
      us_text(start) + ", \"dur\": " + us_text(end - start) + ", \"args\": {" + args + "}}");
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
  if (other_data) head += "\"otherData\": " + dump_json(*other_data) + ", ";
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
        const auto key = std::make_pair(static_cast<int>(ev.at("pid").integer_in(0, kMaxId)),
                                        static_cast<int>(ev.at("id").integer_in(0, kMaxId)));
        auto it = open.find(key);
        if (it == open.end()) ev.fail_message("an \"e\" event without its \"b\" (pid, id)");
        t.ops[it->second].end_us = ev.at("ts").number();
        open.erase(it);
        continue;
      }
      if ((ph != "X" && ph != "b") || !args || !args->has("op")) continue;
      TraceOp op;
      op.op = static_cast<int>(args->at("op").integer_in(0, kMaxId));
      op.device = static_cast<int>(ev.at("pid").integer_in(0, kMaxId));
      op.start_us = ev.at("ts").number();
      op.end_us = ph == "X" ? op.start_us + ev.at("dur").number() : op.start_us;
      op.step = static_cast<int>(args->integer_or("step", -1, kMaxId, -1));
      if (auto b = args->find("bytes")) op.bytes = b->number();
      if (auto v = args->find("posted_us")) op.posted_us = v->number();
      if (auto v = args->find("folded_us")) op.folded_us = v->number();
      if (auto v = args->find("cpu_us")) op.cpu_us = v->number();
      if (ph == "b") {
        open[{op.device, static_cast<int>(ev.at("id").integer_in(0, kMaxId))}] = t.ops.size();
      }
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
