// libFuzzer target: trace documents (trace_from_json: the simulator's and the engine's
// trace.json, read back by validation).

#include "scheduler/program/trace_schema.hpp"
#include "tests/fuzz/fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hexi;
  auto json = fuzz::parse(data, size);
  if (!json) return 0;
  auto trace = trace_from_json(*json, fuzz::kOrigin);
  if (!trace) return 0;
  for (const TraceOp& op : trace->ops) fuzz::check(op.op >= 0, "a trace op without an op id");
  return 0;
}
