// The engine's measured trace: op times relative to the run's time zero, read back by the
// one trace schema's reader (validation and calibrate meet the simulator's ops by these).

#include <gtest/gtest.h>

#include "engine/engine_testing.hpp"
#include "engine/trace.hpp"
#include "scheduler/program/trace_schema.hpp"

namespace hexi::engine {
namespace {

TEST(Trace, OpTimesAreMicrosecondsSinceTheRunsTimeZero) {
  auto program = lower_shipped("tiny-llama-cpu", "tiny-single.json");
  ASSERT_TRUE(program.ok()) << program.error().message;
  int compute = -1;
  for (int i = 0; i < program->num_ops() && compute < 0; ++i) {
    if (program->ops[i].kind == OpKind::kCompute) compute = i;
  }
  ASSERT_GE(compute, 0);
  // A steady clock reads thousands of seconds; the run started at t0.
  const double t0 = 4321.0;
  StepStats step;
  step.step = 2;
  step.ops = {{compute, t0 + 0.5, t0 + 0.75, 0.125}};
  const std::string lines = trace_events(*program, 0, "cpu-100", {step}, t0);
  auto trace = trace_from_json(Json::parse(trace_document({lines})), "trace");
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  ASSERT_EQ(trace->ops.size(), 1u);
  const TraceOp& op = trace->ops[0];
  EXPECT_EQ(op.op, compute);
  EXPECT_EQ(op.device, 0);
  EXPECT_EQ(op.step, 2);
  // Written with three decimals of a microsecond: exact for these binary fractions.
  EXPECT_EQ(op.start_us, 500000.0);
  EXPECT_EQ(op.end_us, 750000.0);
  EXPECT_EQ(op.cpu_us, 125000.0);
}

}  // namespace
}  // namespace hexi::engine
