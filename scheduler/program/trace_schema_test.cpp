// The one trace schema: what the writer emits is what the reader returns, op for op,
// for every op kind (compute "X", collective "X", p2p "b"/"e" pairs) and both writers'
// optional args (the engine's step, the simulator's posted_us and folded_us).

#include "scheduler/program/trace_schema.hpp"

#include <gtest/gtest.h>

#include "scheduler/plan/testing.hpp"
#include "scheduler/program/lower.hpp"

namespace hexi {
namespace {

using testing::make_cluster;
using testing::tiny_model;
using testing::tiny_training;
using testing::uniform_plan;

// A 2-stage x TP-2 pipeline: compute, TP all-reduces and stage-boundary sends/receives.
Program two_stage_program() {
  Cluster c = make_cluster(1, 4);
  auto p =
      lower_plan(uniform_plan(1, 2, 2, 4, 2), c, tiny_model(), tiny_training(2), {}, "plan.json");
  EXPECT_TRUE(p.ok());
  return std::move(*p);
}

// Op i runs [10 i, 10 i + 4] us; engine-like ops carry a step, simulator-like ones the
// simulator's extras.
std::vector<TraceOp> synthetic_ops(const Program& p, bool engine) {
  std::vector<TraceOp> out;
  for (int id = 0; id < p.num_ops(); ++id) {
    const Op& op = p.ops[id];
    TraceOp e;
    e.op = id;
    e.device = op.device;
    e.start_us = 10.0 * id;
    e.end_us = 10.0 * id + 4.0;
    e.bytes = op.kind == OpKind::kCompute ? 0 : 1000.0 + id;
    if (engine) e.step = 3;
    if (!engine && op.stream == Stream::kP2p) e.posted_us = 10.0 * id - 1.5;
    if (!engine && op.kind == OpKind::kCompute) e.folded_us = 0.25;
    out.push_back(e);
  }
  return out;
}

void expect_round_trip(bool engine) {
  const Program p = two_stage_program();
  const auto ops = synthetic_ops(p, engine);
  std::vector<std::string> parts;
  for (const auto& l : p.devices) {
    TraceWriter w;
    w.device(p, l.device, "A100");
    for (const auto& e : ops)
      if (e.device == l.device) w.op(p, e);
    parts.push_back(w.lines());
  }
  const std::string doc =
      trace_document(parts, engine ? std::optional<Json>(Json{{"steps", 1}}) : std::nullopt);
  auto trace = trace_from_json(Json::parse(doc), "trace.json");
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  ASSERT_EQ(trace->ops.size(), ops.size());
  int sends = 0, collectives = 0;
  for (const TraceOp& got : trace->ops) {
    const TraceOp& want = ops[got.op];
    EXPECT_EQ(got.device, want.device);
    EXPECT_DOUBLE_EQ(got.start_us, want.start_us);
    EXPECT_DOUBLE_EQ(got.end_us, want.end_us);
    EXPECT_EQ(got.step, want.step);
    EXPECT_DOUBLE_EQ(got.bytes, want.bytes);
    EXPECT_DOUBLE_EQ(got.posted_us, want.posted_us);
    EXPECT_DOUBLE_EQ(got.folded_us, want.folded_us);
    sends += p.ops[got.op].kind == OpKind::kSend;
    collectives += p.ops[got.op].kind == OpKind::kCollective;
  }
  EXPECT_GT(sends, 0);
  EXPECT_GT(collectives, 0);
  EXPECT_EQ(trace->other_data.value("steps", 0), engine ? 1 : 0);
}

TEST(TraceSchema, EngineTraceReadsBackOpForOp) {
  expect_round_trip(true);
}

TEST(TraceSchema, SimulatorTraceReadsBackOpForOp) {
  expect_round_trip(false);
}

TEST(TraceSchema, UnpairedAsyncEventsAreBadInput) {
  const Json no_begin = Json::parse(
      R"({"traceEvents": [{"name": "x", "ph": "e", "id": 4, "pid": 0, "tid": 1, "ts": 2}]})");
  auto a = trace_from_json(no_begin, "t.json");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message.find("without its \"b\""), std::string::npos) << a.error().message;
  const Json no_end = Json::parse(
      R"({"traceEvents": [{"name": "x", "ph": "b", "id": 4, "pid": 0, "tid": 1, "ts": 2, "args": {"op": 4}}]})");
  auto b = trace_from_json(no_end, "t.json");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("op 4 on device 0"), std::string::npos) << b.error().message;
}

// Op ids, devices, event ids and steps are ints: a value past the largest is bad input naming
// its JSON path, never wrapped (and a step leaves room for step + 1).
TEST(TraceSchema, IdsAndStepsPastAnIntAreBadInput) {
  for (const char* args : {R"({"op": 2147483653})", R"({"op": 1, "step": 2147483647})",
                           R"({"op": 1, "step": 4294967296})"}) {
    const Json doc = Json::parse(
        std::string(R"({"traceEvents": [{"name": "x", "ph": "X", "pid": 0, "tid": 1, "ts": 2, )") +
        R"("dur": 1, "args": )" + args + "}]}");
    auto t = trace_from_json(doc, "t.json");
    ASSERT_FALSE(t.ok()) << args;
    EXPECT_EQ(t.error().kind, ErrorKind::kBadInput);
    EXPECT_NE(t.error().message.find("t.json"), std::string::npos) << t.error().message;
    EXPECT_NE(t.error().message.find("/traceEvents/0/args/"), std::string::npos)
        << t.error().message;
  }
  const Json pid = Json::parse(
      R"({"traceEvents": [{"name": "x", "ph": "X", "pid": 4294967296, "tid": 1, "ts": 2, "dur": 1, "args": {"op": 1}}]})");
  EXPECT_FALSE(trace_from_json(pid, "t.json").ok());
  const Json largest = Json::parse(
      R"({"traceEvents": [{"name": "x", "ph": "X", "pid": 0, "tid": 1, "ts": 2, "dur": 1, "args": {"op": 1, "step": 2147483646}}]})");
  auto ok = trace_from_json(largest, "t.json");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->ops.at(0).step, 2147483646);
}

// Names come from cluster files: a quote, a backslash or 600 characters used to give
// invalid JSON (a 512-byte printf buffer, no escaping).
TEST(TraceSchema, AnyGpuNameGivesValidJson) {
  const Program p = two_stage_program();
  const std::string name = "A\"100\\ " + std::string(600, 'x');
  TraceWriter w;
  w.device(p, 0, name);
  auto doc = parse_json_text(trace_document({w.lines()}), "t.json");
  ASSERT_TRUE(doc.ok()) << doc.error().message;
  EXPECT_EQ((*doc)["traceEvents"][0]["args"]["name"],
            "device 0 " + name + " (pipeline 0, stage 0, tp rank 0)");
}

// ts and dur used to be rounded separately, so 8-12 % of slices overlapped the next by
// 1 ns and Perfetto dropped them. Both come from whole nanoseconds now: ts + dur of one
// op is exactly the ts of an op that starts when it ends.
TEST(TraceSchema, SlicesEndExactlyWhereTheNextStarts) {
  const Program p = two_stage_program();
  const DeviceLayout* l = p.layout(0);
  TraceWriter w;
  double t = 0.0004;  // odd sub-nanosecond boundaries
  std::vector<double> bounds;
  for (int id = l->op_begin; id < l->op_end; ++id) {
    if (p.ops[id].stream == Stream::kP2p) continue;
    TraceOp e;
    e.op = id;
    e.device = 0;
    e.start_us = t;
    t += 1.0 / 3.0 + 0.0007 * id;
    e.end_us = t;
    w.op(p, e);
    bounds.push_back(t);
  }
  const Json doc = Json::parse(trace_document({w.lines()}));
  const Json& events = doc["traceEvents"];
  ASSERT_GE(events.size(), 3u);
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    const auto ns = [](const Json& v) { return std::llround(v.get<double>() * 1000); };
    EXPECT_EQ(ns(events[i]["ts"]) + ns(events[i]["dur"]), ns(events[i + 1]["ts"])) << i;
  }
}

}  // namespace
}  // namespace hexi
