#include "engine/trace.hpp"

#include <cstring>

#include "engine/check.hpp"

namespace hexi::engine {

namespace {

// Bytes the engine moves for a communication op: the program's count. The engine runs at
// the program's precision (4-byte float32 or 2-byte bf16 elements on the wire,
// runtime_wire.cpp); loss statistics are float32 in both, as the program counts them.
double engine_bytes(const Op& op) {
  return op.kind == OpKind::kCompute ? 0.0 : op.bytes;
}

}  // namespace

std::string trace_events(const Program& p, int device, const std::string& device_name,
                         const std::vector<StepStats>& steps, double t0) {
  TraceWriter w;
  w.device(p, device, device_name);
  for (const StepStats& st : steps) {
    for (const OpTime& t : st.ops) {
      TraceOp e;
      e.op = t.op;
      e.device = device;
      e.start_us = (t.start_s - t0) * 1e6;
      e.end_us = (t.end_s - t0) * 1e6;
      e.step = st.step;
      e.bytes = engine_bytes(p.ops[t.op]);
      if (t.cpu_s >= 0) e.cpu_us = t.cpu_s * 1e6;
      w.op(p, e);
    }
  }
  return w.lines();
}

Result<std::vector<std::string>> gather_strings(Communicator& world, const std::string& mine) {
  const int n = world.size();
  std::int32_t size = static_cast<std::int32_t>(mine.size());
  std::vector<std::int32_t> sizes(n);
  HEXI_TRY(world.all_gather(&size, sizes.data(), 1, DType::kI32));
  auto words = [](std::int32_t bytes) { return static_cast<std::size_t>((bytes + 3) / 4); };
  std::vector<std::string> out;
  if (world.rank() != 0) {
    std::vector<std::int32_t> packed(words(size));
    if (size > 0) std::memcpy(packed.data(), mine.data(), mine.size());
    auto req = world.isend(packed.data(), packed.size(), DType::kI32, 0, 0x7ff0);
    HEXI_TRY(req);
    HEXI_TRY((*req)->wait());
    return out;
  }
  out.push_back(mine);
  for (int r = 1; r < n; ++r) {
    std::vector<std::int32_t> packed(words(sizes[r]));
    HEXI_TRY(world.recv(packed.data(), packed.size(), DType::kI32, r, 0x7ff0));
    out.emplace_back(reinterpret_cast<const char*>(packed.data()), sizes[r]);
  }
  return out;
}

std::string op_class(const Program& p, const Op& op) {
  switch (op.kind) {
    case OpKind::kCompute:
      return std::string(to_string(op.compute));
    case OpKind::kSend:
    case OpKind::kRecv:
      return std::string(to_string(op.kind)) + " " + std::string(to_string(op.tensor));
    case OpKind::kCollective:
      return std::string(to_string(op.collective)) + " " + std::string(to_string(op.tensor));
  }
  (void)p;
  return "?";
}

OpClasses op_classes(const Program& p, const std::vector<StepStats>& steps) {
  OpClasses out;
  for (const StepStats& st : steps) {
    for (const OpTime& t : st.ops) {
      const Op& op = p.ops[t.op];
      OpClassStats& c = out[op_class(p, op)];
      c.count += 1;
      c.seconds += t.end_s - t.start_s;
      if (op.kind == OpKind::kCompute && op.shape >= 0) c.flops += p.shapes[op.shape].flops();
      c.bytes += engine_bytes(op);
    }
  }
  return out;
}

void merge(OpClasses& into, const OpClasses& from) {
  for (const auto& [name, c] : from) {
    OpClassStats& d = into[name];
    d.count += c.count;
    d.seconds += c.seconds;
    d.flops += c.flops;
    d.bytes += c.bytes;
  }
}

Json to_json(const OpClasses& classes) {
  Json out = Json::object();
  for (const auto& [name, c] : classes) {
    out[name] = {
        {"count", c.count}, {"seconds", c.seconds}, {"flops", c.flops}, {"bytes", c.bytes}};
  }
  return out;
}

OpClasses op_classes_from_json(const Json& json) {
  OpClasses out;
  for (const auto& [name, c] : json.items()) {
    out[name] = {c.value("count", 0), c.value("seconds", 0.0), c.value("flops", 0.0),
                 c.value("bytes", 0.0)};
  }
  return out;
}

}  // namespace hexi::engine
