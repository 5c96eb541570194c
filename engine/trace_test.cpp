// The engine's measured trace: op times relative to the run's time zero, read back by the
// one trace schema's reader (validation and calibrate meet the simulator's ops by these).

#include <gtest/gtest.h>

#include "engine/check.hpp"
#include "engine/comm_fake.hpp"
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
  // CPU time: measured, measured as none (a compute op shorter than the clock's tick), absent.
  step.ops = {{compute, t0 + 0.5, t0 + 0.75, 0.125},
              {compute, t0 + 1.0, t0 + 1.25, 0.0},
              {compute, t0 + 1.5, t0 + 1.75, -1.0}};
  const std::string lines = trace_events(*program, 0, "cpu-100", {step}, t0);
  auto trace = trace_from_json(Json::parse(trace_document({lines})), "trace");
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  ASSERT_EQ(trace->ops.size(), 3u);
  const TraceOp& op = trace->ops[0];
  EXPECT_EQ(op.op, compute);
  EXPECT_EQ(op.device, 0);
  EXPECT_EQ(op.step, 2);
  // Written with three decimals of a microsecond: exact for these binary fractions.
  EXPECT_EQ(op.start_us, 500000.0);
  EXPECT_EQ(op.end_us, 750000.0);
  EXPECT_EQ(op.cpu_us, 125000.0);
  EXPECT_EQ(trace->ops[1].cpu_us, 0.0);
  EXPECT_LT(trace->ops[2].cpu_us, 0.0) << "absent";
}

TEST(Trace, RankZeroGathersEveryRanksEventsInRankOrder) {
  std::vector<std::vector<std::string>> got(3);
  const std::vector<Status> status = run_fake_world(3, [&](Communicator& world) -> Status {
    // Lengths that are not whole words, and an empty part.
    const std::string mine =
        world.rank() == 1 ? "" : std::string(5 + world.rank(), 'a' + world.rank());
    auto all = gather_strings(world, mine);
    HEXI_TRY(all);
    got[world.rank()] = *all;
    return {};
  });
  for (const Status& s : status) ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(got[0], (std::vector<std::string>{"aaaaa", "", "ccccccc"}));
  EXPECT_TRUE(got[1].empty());
  EXPECT_TRUE(got[2].empty());
}

}  // namespace
}  // namespace hexi::engine
