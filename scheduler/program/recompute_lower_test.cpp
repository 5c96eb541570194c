// Per-stage activation recompute in the lowering: recompute ops, TP all-reduces and
// backward shapes follow each stage's choice; the program file keeps it.
#include <gtest/gtest.h>

#include "scheduler/plan/testing.hpp"
#include "scheduler/program/lower.hpp"

namespace hexi {
namespace {

TEST(RecomputeLowering, RecomputeOpsFollowEachStage) {
  const Cluster c = testing::make_cluster(1, 4, "A100-SXM-80GB");
  const Model m = testing::tiny_model(4);
  TrainingConfig t = testing::tiny_training(4);
  t.recompute = Recompute::kSelective;
  t.attention = AttentionKernel::kDense;
  const Plan plan =
      testing::plan_from({{"version", 1},
                          {"pipelines",
                           {{{"batch", 4},
                             {"stages",
                              {{{"devices", {0, 1}}, {"layers", {0, 1}}, {"recompute", "full"}},
                               {{"devices", {2}}, {"layers", {1, 3}}},
                               {{"devices", {3}}, {"layers", {3, 4}}, {"recompute", "none"}}}}}}}});
  auto prog = lower_plan(plan, c, m, t, LowerOptions{}, "<plan>");
  ASSERT_TRUE(prog.ok()) << prog.error().message;
  ASSERT_TRUE(validate_program(*prog, "<lowered>").ok());
  auto ops_of = [&](int device, ComputeKind kind) {
    const DeviceLayout* l = prog->layout(device);
    int n = 0;
    for (int id = l->op_begin; id < l->op_end; ++id) {
      const Op& op = prog->ops[id];
      n += op.kind == OpKind::kCompute && op.compute == kind;
    }
    return n;
  };
  auto all_reduces = [&](int device) {
    const DeviceLayout* l = prog->layout(device);
    int n = 0;
    for (int id = l->op_begin; id < l->op_end; ++id) {
      const Op& op = prog->ops[id];
      n += op.kind == OpKind::kCollective && op.collective == Collective::kAllReduce &&
           op.group == l->tp_group;
    }
    return n;
  };
  // 4 micro-batches; the TP-2 stage holds 1 layer under full recompute: each backward
  // replays both blocks with their all-reduces (2 forward + 2 replayed + 2 backward,
  // + 1 for the vocab-parallel embedding on the first stage).
  EXPECT_EQ(ops_of(0, ComputeKind::kAttnRecompute), 4);
  EXPECT_EQ(ops_of(0, ComputeKind::kMlpRecompute), 4);
  EXPECT_EQ(all_reduces(0), 4 * (2 + 2 + 2 + 1));
  EXPECT_EQ(ops_of(2, ComputeKind::kAttnRecompute), 0);
  EXPECT_EQ(ops_of(3, ComputeKind::kAttnRecompute), 0);
  EXPECT_EQ(prog->layout(0)->recompute, Recompute::kFull);
  EXPECT_EQ(prog->layout(2)->recompute, Recompute::kSelective);
  EXPECT_EQ(prog->layout(3)->recompute, Recompute::kNone);
  // Selective under the dense kernel recomputes the attention core inside the
  // backward op; none does not: the backward shapes differ.
  auto bwd_flops = [&](int device) {
    const DeviceLayout* l = prog->layout(device);
    for (int id = l->op_begin; id < l->op_end; ++id) {
      const Op& op = prog->ops[id];
      if (op.kind == OpKind::kCompute && op.compute == ComputeKind::kAttnBwd)
        return prog->shapes[op.shape].flops();
    }
    return 0.0;
  };
  EXPECT_GT(bwd_flops(2), bwd_flops(3));
  // The program file keeps each device's recompute.
  auto back = program_from_json(to_json(*prog), "<json>");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(program_text(*back), program_text(*prog));
  EXPECT_EQ(back->layout(0)->recompute, Recompute::kFull);
  EXPECT_EQ(stage_shape(*back->layout(3)).recompute, Recompute::kNone);
}

}  // namespace
}  // namespace hexi
