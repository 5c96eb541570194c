// Simulated against measured per op class (trace_compare.hpp): a simulated trace of a tiny
// 2-stage TP-2 plan against a "measured" trace made from it by hand, whose numbers are known.
#include "validation/trace_compare.hpp"

#include <gtest/gtest.h>

#include "scenarios/testing.hpp"
#include "scheduler/plan/testing.hpp"
#include "scheduler/program/lower.hpp"
#include "sim/simulator.hpp"

namespace hexi::validation {
namespace {

struct SimulatedRun {
  Program program;
  Trace simulated;
};

SimulatedRun simulated_run() {
  const Scenario sc = testing::tiny_scenario();
  const Plan plan = testing::plan_from(
      {{"version", 1},
       {"pipelines",
        Json::array({{{"batch", 8},
                      {"stages", Json::array({{{"devices", {0, 1}}, {"layers", {0, 4}}},
                                              {{"devices", {4, 5}}, {"layers", {4, 8}}}})}}})}});
  LowerOptions lo;
  lo.scenario = sc.name;
  auto program = lower_plan(plan, sc.cluster, sc.model, sc.training, lo, "<plan>");
  if (!program) throw std::runtime_error(program.error().message);
  SimOptions so;
  so.trace = true;
  auto out = simulate(*program, sc.cluster, sc.model, sc.training, sc.profile, so);
  if (!out) throw std::runtime_error(out.error().message);
  auto json = parse_json_text(out->trace_json, "sim trace");
  auto trace = trace_from_json(*json, "sim trace");
  if (!trace) throw std::runtime_error(trace.error().message);
  return {std::move(*program), std::move(*trace)};
}

// Steps of the simulated iteration, each op `scale` times as long (step 0 ten times: the
// warm-up the comparison leaves out), one after another.
Trace measured_from(const Trace& sim, int steps, double scale) {
  Trace m;
  double offset = 0;
  for (int s = 0; s < steps; ++s) {
    const double k = s == 0 ? 10 * scale : scale;
    double end = 0;
    for (TraceOp e : sim.ops) {
      e.step = s;
      e.start_us = offset + k * e.start_us;
      e.end_us = offset + k * e.end_us;
      end = std::max(end, e.end_us);
      m.ops.push_back(e);
    }
    offset = end + 100;
  }
  return m;
}

TEST(TraceCompare, MeasuredTwiceAsLongIsTwiceAsLongPerClass) {
  const SimulatedRun run = simulated_run();
  const Trace measured = measured_from(run.simulated, 4, 2.0);
  auto c = compare_traces(run.program, run.simulated, measured, "measured.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->measured_steps, 4);
  EXPECT_EQ(c->steps_used, 3);
  EXPECT_NEAR(c->measured_iteration_s, 2 * c->simulated_iteration_s,
              1e-9 * c->simulated_iteration_s);
  std::map<std::string, const OpClassTimes*> by;
  int ops = 0;
  for (const OpClassTimes& t : c->classes) {
    by[t.op_class] = &t;
    ops += t.ops;
    EXPECT_NEAR(t.measured_s, 2 * t.simulated_s, 1e-9 + 1e-9 * t.simulated_s) << t.op_class;
  }
  EXPECT_EQ(ops, c->ops);
  // Every op but the receives, in classes named as the program's ops are.
  int recvs = 0;
  for (const Op& op : run.program.ops) recvs += op.kind == OpKind::kRecv ? 1 : 0;
  EXPECT_EQ(c->ops, run.program.num_ops() - recvs);
  for (const char* name : {"attn.fwd", "mlp.bwd", "send activation", "send activation_grad",
                           "all-reduce activation", "optimizer"}) {
    ASSERT_TRUE(by.count(name)) << name;
    EXPECT_GT(by[name]->simulated_s, 0) << name;
  }
  EXPECT_EQ(by.count("recv activation"), 0u);
  // 8 micro-batches x 4 layers x 2 ranks x 2 stages.
  EXPECT_EQ(by["attn.fwd"]->ops, 8 * 4 * 2 * 2);
  const Json j = to_json(*c);
  EXPECT_EQ(j["classes"].size(), c->classes.size());
}

// A resumed run's trace numbers its steps from where it resumed, as high as an int goes: the
// same steps compare the same, at any offset (nothing is indexed by step number).
TEST(TraceCompare, StepsMayStartAnywhere) {
  const SimulatedRun run = simulated_run();
  const Trace from_zero = measured_from(run.simulated, 4, 2.0);
  for (int offset : {1000, 1000000000, 2147483646 - 3}) {
    Trace shifted = from_zero;
    for (TraceOp& e : shifted.ops) e.step += offset;
    auto a = measured_ops(run.program, from_zero, "a");
    auto b = measured_ops(run.program, shifted, "b");
    ASSERT_TRUE(a.ok() && b.ok()) << offset;
    EXPECT_EQ(b->steps, 4);
    EXPECT_EQ(b->first, 1);
    EXPECT_EQ(a->step_seconds, b->step_seconds) << offset;
    for (int op = 0; op < run.program.num_ops(); ++op) {
      ASSERT_EQ(a->by_op[op].size(), b->by_op[op].size()) << op;
    }
  }
}

TEST(TraceCompare, ATraceOfAnotherProgramIsRefused) {
  const SimulatedRun run = simulated_run();
  Trace measured = measured_from(run.simulated, 2, 1.0);
  Trace missing = measured;
  std::erase_if(missing.ops, [](const TraceOp& e) { return e.op == 3; });
  auto c = compare_traces(run.program, run.simulated, missing, "measured.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("measured.json: op 3 ("), std::string::npos)
      << c.error().message;
  measured.ops.front().op = run.program.num_ops();
  c = compare_traces(run.program, run.simulated, measured, "measured.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("is not an op of the simulated program"), std::string::npos)
      << c.error().message;
  c = compare_traces(run.program, run.simulated, Trace{}, "measured.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("no op of a training step"), std::string::npos);
}

// The same plan measured under another scenario (an fp32 run against a bf16 scenario, with
// the same ops but half the bytes; or one named otherwise) is another program: refused.
TEST(TraceCompare, ATraceOfAnotherScenarioIsRefused) {
  const SimulatedRun run = simulated_run();
  const Trace measured = measured_from(run.simulated, 2, 1.0);
  ASSERT_TRUE(measured_ops(run.program, measured, "m").ok());
  Trace fp32 = measured;
  int doubled = 0;
  for (TraceOp& e : fp32.ops) {
    if (run.program.ops[e.op].kind == OpKind::kCompute || e.bytes <= 0) continue;
    e.bytes *= 2;
    ++doubled;
  }
  ASSERT_GT(doubled, 0);
  auto c = measured_ops(run.program, fp32, "fp32.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(c.error().message.find("the trace was measured under another scenario"),
            std::string::npos)
      << c.error().message;
  ASSERT_FALSE(run.program.scenario.empty());
  Trace named = measured;
  named.other_data["scenario"] = run.program.scenario + "-bf16";
  c = measured_ops(run.program, named, "named.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("named.json: measured under scenario " + run.program.scenario +
                                   "-bf16, not " + run.program.scenario),
            std::string::npos)
      << c.error().message;
  named.other_data["scenario"] = run.program.scenario;
  EXPECT_TRUE(measured_ops(run.program, named, "m").ok());
}

}  // namespace
}  // namespace hexi::validation
