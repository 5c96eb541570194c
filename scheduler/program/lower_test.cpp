// Lowering plans into programs: op counts by hand for tiny plans, matched
// transfers, no cycles, DP buckets that cover every parameter, determinism.

#include "scheduler/program/lower.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "scheduler/plan/testing.hpp"
#include "scheduler/program/dp_buckets.hpp"

namespace hexi {
namespace {

using testing::make_cluster;
using testing::plan_from;
using testing::tiny_model;
using testing::tiny_training;
using testing::uniform_plan;

Program lower_ok(const Plan& plan, const Cluster& c, const Model& m, const TrainingConfig& t,
                 Granularity g = Granularity::kLayer) {
  LowerOptions o;
  o.granularity = g;
  auto p = lower_plan(plan, c, m, t, o, "<test plan>");
  if (!p) throw std::runtime_error(p.error().message);
  auto st = validate_program(*p, "<lowered>");
  EXPECT_TRUE(st.ok()) << st.error().message;
  return std::move(*p);
}

// Ops of one device whose kind (compute name, or "send"/"recv"/collective name) is `what`.
int count(const Program& p, int device, const std::string& what) {
  const DeviceLayout* l = p.layout(device);
  int n = 0;
  for (int id = l->op_begin; id < l->op_end; ++id) {
    const Op& op = p.ops[id];
    std::string k = op.kind == OpKind::kCompute      ? std::string(to_string(op.compute))
                    : op.kind == OpKind::kCollective ? std::string(to_string(op.collective))
                                                     : std::string(to_string(op.kind));
    n += k == what;
  }
  return n;
}

std::string order_text(const std::vector<std::pair<bool, int>>& order) {
  std::string s;
  for (auto [f, j] : order) s += (f ? "F" : "B") + std::to_string(j) + " ";
  return s;
}

TEST(PipelineOrder, OneFOneBWarmsUpThenAlternates) {
  // 4 stages, 6 micro-batches: stage 0 warms up with p-1 = 3 forwards.
  EXPECT_EQ(order_text(pipeline_order(PipelineSchedule::k1F1B, 0, 4, 6)),
            "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5 ");
  EXPECT_EQ(order_text(pipeline_order(PipelineSchedule::k1F1B, 3, 4, 6)),
            "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 ");
  // Fewer micro-batches than stages: warm-up is capped at m.
  EXPECT_EQ(order_text(pipeline_order(PipelineSchedule::k1F1B, 0, 4, 2)), "F0 F1 B0 B1 ");
  EXPECT_EQ(order_text(pipeline_order(PipelineSchedule::kGPipe, 1, 4, 3)), "F0 F1 F2 B0 B1 B2 ");
}

TEST(BoundaryPieces, ChunksFollowTheEstimateScheme) {
  // ts = 4 -> td = 2: chunk c of n = 2 from src rank c*4/2 to dst rank c.
  auto down = boundary_pieces(4, 2, 8);
  ASSERT_EQ(down.size(), 2u);
  EXPECT_EQ(down[0].src_rank, 0);
  EXPECT_EQ(down[1].src_rank, 2);
  EXPECT_EQ(down[1].dst_rank, 1);
  EXPECT_EQ(down[1].rows_begin, 4);
  EXPECT_EQ(down[1].rows_end, 8);
  // ts = 2 -> td = 4: each source sends its half as two quarter pieces.
  auto up = boundary_pieces(2, 4, 8);
  ASSERT_EQ(up.size(), 4u);
  EXPECT_EQ(up[1].src_rank, 0);
  EXPECT_EQ(up[2].src_rank, 1);
  EXPECT_EQ(up[3].rows_begin, 6);
  // Fewer rows than destinations: empty pieces are left out.
  EXPECT_EQ(boundary_pieces(1, 4, 2).size(), 2u);
}

TEST(Lower, TwoStagePipelineOpCountsByHand) {
  // 1 pipeline, 2 stages of TP 1, 4 layers, 2 micro-batches, one pipeline: no DP.
  Cluster c = make_cluster(1, 2);
  Model m = tiny_model();
  TrainingConfig t = tiny_training(2);
  Program p = lower_ok(uniform_plan(1, 2, 1, 4, 2), c, m, t);
  // Stage 0 per micro-batch: embedding + 2 x (attn, mlp) forward, the same backward,
  // one send (activation) and one recv (its gradient); then the optimizer.
  EXPECT_EQ(count(p, 0, "embedding.fwd"), 2);
  EXPECT_EQ(count(p, 0, "attn.fwd"), 4);
  EXPECT_EQ(count(p, 0, "mlp.bwd"), 4);
  EXPECT_EQ(count(p, 0, "send"), 2);
  EXPECT_EQ(count(p, 0, "recv"), 2);
  EXPECT_EQ(count(p, 0, "optimizer"), 1);
  EXPECT_EQ(p.layout(0)->op_end - p.layout(0)->op_begin, 2 * (5 + 5 + 2) + 1);
  EXPECT_EQ(count(p, 1, "head.fwd"), 2);
  EXPECT_EQ(count(p, 1, "head.bwd"), 2);
  EXPECT_EQ(p.layout(1)->op_end - p.layout(1)->op_begin, 2 * (5 + 5 + 2) + 1);
  EXPECT_EQ(count(p, 0, "all-reduce"), 0);
  EXPECT_TRUE(p.buckets.empty());
  // The forward of micro-batch 0 on stage 1 waits for its recv.
  const DeviceLayout* l1 = p.layout(1);
  const Op& recv = p.ops[l1->op_begin];
  EXPECT_EQ(recv.kind, OpKind::kRecv);
  EXPECT_EQ(recv.peer, 0);
  EXPECT_EQ(recv.bytes, 32.0 * 64 * 2);  // b*s*h*e
  auto deps = p.deps(l1->op_begin + 1);
  ASSERT_EQ(deps.size(), 1u);
  EXPECT_EQ(deps[0], l1->op_begin);
}

TEST(Lower, InterleavedPipelineRunsItsChunksOnTheSameDevices) {
  // 4 layers, device groups [0] (TP 1) and [1, 2] (TP 2), two chunks of one layer each:
  // device 0 holds layers 0 and 2 (embedding in chunk 0), devices 1-2 layers 1 and 3 (head
  // in chunk 1); 4 micro-batches.
  Cluster c = make_cluster(1, 3);
  Model m = tiny_model();
  TrainingConfig t = tiny_training(4);
  Plan plan = plan_from(Json::parse(R"({"version": 1, "pipelines": [{"batch": 4, "stages": [
      {"devices": [0], "layers": [0, 1]}, {"devices": [1, 2], "layers": [1, 2]},
      {"devices": [0], "layers": [2, 3]}, {"devices": [1, 2], "layers": [3, 4]}]}]})"));
  Program p = lower_ok(plan, c, m, t);
  const DeviceLayout* l0 = p.layout(0);
  ASSERT_EQ(l0->chunks.size(), 2u);
  EXPECT_EQ(l0->chunks[1].stage, 2);
  EXPECT_EQ(l0->chunks[1].layer_begin, 2);
  EXPECT_TRUE(l0->first && !l0->last && l0->chunks[0].first && !l0->chunks[1].first);
  EXPECT_TRUE(p.layout(1)->last && p.layout(1)->chunks[1].last);
  EXPECT_EQ(p.layout(1)->stages, 4);
  EXPECT_EQ(count(p, 0, "embedding.fwd"), 4);
  EXPECT_EQ(count(p, 0, "attn.fwd"), 8);  // 2 layers x 4 micro-batches
  EXPECT_EQ(count(p, 0, "head.fwd"), 0);
  EXPECT_EQ(count(p, 1, "head.fwd"), 4);
  EXPECT_EQ(count(p, 1, "attn.bwd"), 8);
  // Device 0 per micro-batch: activations of both chunks and the gradient of chunk 1 to the
  // TP-2 group (two pieces each); the activation of the wrap (stage 1 -> 2) and the gradients
  // of stages 1 and 3 back (one piece each from TP rank 0).
  EXPECT_EQ(count(p, 0, "send"), 4 * 6);
  EXPECT_EQ(count(p, 0, "recv"), 4 * 3);
  for (int id = l0->op_begin; id < l0->op_end; ++id) {
    const Op& op = p.ops[id];
    if (op.kind == OpKind::kCompute && op.layer >= 0) {
      EXPECT_EQ(op.chunk, op.layer / 2);
    }
  }
  // Parameters: both chunks' layers and the embedding, less than the whole model.
  Program single = lower_ok(uniform_plan(1, 1, 1, 4, 4), make_cluster(1, 1), m, t);
  EXPECT_GT(p.layout(0)->params, 0);
  EXPECT_LT(p.layout(0)->params, single.layout(0)->params);
  // Round trip: chunks and the ops' chunk survive.
  const std::string text = program_text(p);
  auto back = program_from_json(Json::parse(text), "<text>");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(program_text(*back), text);
  EXPECT_EQ(back->layout(0)->chunks.size(), 2u);
}

TEST(Lower, TensorParallelCollectivesMatchTheEstimateCounts) {
  // 2 pipelines x 2 stages x TP 2, 4 layers, 2 micro-batches each.
  Cluster c = make_cluster(2, 4);
  Model m = tiny_model();
  TrainingConfig t = tiny_training(4);
  t.zero_stage = 0;
  Program p = lower_ok(uniform_plan(2, 2, 2, 4, 4), c, m, t);
  const int mb = 2, layers = 2;
  // Forward 2 per layer (+1 embedding on the first stage); backward 2 per layer
  // (+1 head on the last stage): CostModel::stage's counts.
  EXPECT_EQ(count(p, 0, "all-reduce"), mb * ((2 * layers + 1) + 2 * layers) + /*DP*/ 1);
  EXPECT_EQ(count(p, 2, "all-reduce"), mb * (2 * layers + (2 * layers + 1)) + 1);
  // Loss statistics (last stage) and the boundary all-gather (receiving side).
  EXPECT_EQ(count(p, 2, "all-gather"), mb * 2);
  EXPECT_EQ(count(p, 0, "all-gather"), mb);
  EXPECT_EQ(count(p, 2, "broadcast"), 1);
  // TP 2 -> TP 2: each rank sends its half of the rows to the same rank.
  const DeviceLayout* l = p.layout(0);
  for (int id = l->op_begin; id < l->op_end; ++id) {
    if (p.ops[id].kind == OpKind::kSend) {
      EXPECT_EQ(p.ops[id].peer, 2);
      EXPECT_EQ(p.ops[id].rows_end - p.ops[id].rows_begin, 16);
    }
  }
}

TEST(BoundaryPieces, SequenceParallelRanksKeepTheirTokenShards) {
  // Equal degrees: rank i sends its own shard to rank i.
  auto same = boundary_pieces(2, 2, 8, true);
  ASSERT_EQ(same.size(), 2u);
  EXPECT_EQ(same[1].src_rank, 1);
  EXPECT_EQ(same[1].dst_rank, 1);
  EXPECT_EQ(same[1].rows_begin, 4);
  // ts = 4 -> td = 2: both quarters of a destination's half, from their two owners.
  auto down = boundary_pieces(4, 2, 8, true);
  ASSERT_EQ(down.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(down[k].src_rank, k);
    EXPECT_EQ(down[k].dst_rank, k / 2);
    EXPECT_EQ(down[k].rows_begin, 2 * k);
    EXPECT_EQ(down[k].rows_end, 2 * k + 2);
  }
  // ts = 3 -> td = 2 over 12 rows: shards [0,4) [4,8) [8,12) onto [0,6) [6,12).
  auto odd = boundary_pieces(3, 2, 12, true);
  ASSERT_EQ(odd.size(), 4u);
  const int expect[4][4] = {{0, 0, 0, 4}, {1, 0, 4, 6}, {1, 1, 6, 8}, {2, 1, 8, 12}};
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(odd[k].src_rank, expect[k][0]) << k;
    EXPECT_EQ(odd[k].dst_rank, expect[k][1]) << k;
    EXPECT_EQ(odd[k].rows_begin, expect[k][2]) << k;
    EXPECT_EQ(odd[k].rows_end, expect[k][3]) << k;
  }
  // Every row once.
  int rows = 0;
  for (const Piece& pc : odd) rows += pc.rows_end - pc.rows_begin;
  EXPECT_EQ(rows, 12);
}

TEST(Lower, SequenceParallelTurnsAllReducesIntoReduceScattersAndAllGathers) {
  // The plan of TensorParallelCollectivesMatchTheEstimateCounts, with sequence parallelism.
  Cluster c = make_cluster(2, 4);
  Model m = tiny_model();
  TrainingConfig t = tiny_training(4);
  t.zero_stage = 0;
  const Program plain = lower_ok(uniform_plan(2, 2, 2, 4, 4), c, m, t);
  t.sequence_parallel = true;
  const Program sp = lower_ok(uniform_plan(2, 2, 2, 4, 4), c, m, t);
  const int mb = 2, layers = 2;
  for (int d : {0, 2}) {
    // Each TP all-reduce is a reduce-scatter; only the DP all-reduce stays.
    EXPECT_EQ(count(sp, d, "reduce-scatter"), count(plain, d, "all-reduce") - 1) << d;
    EXPECT_EQ(count(sp, d, "all-reduce"), 1) << d;
  }
  // All-gathers: one before each block, forward and backward, before the head (last stage)
  // and the embedding's backward (first stage); the last stage's loss statistics. No
  // boundary all-gather: the receiving ranks keep their shards.
  EXPECT_EQ(count(sp, 0, "all-gather"), mb * (2 * layers + 2 * layers + 1));
  EXPECT_EQ(count(sp, 2, "all-gather"), mb * (2 * layers + 1 + 2 * layers + 1));
  // The forward of one layer on device 0, in order.
  std::vector<std::string> seen;
  const DeviceLayout* l = sp.layout(0);
  for (int id = l->op_begin; id < l->op_end && seen.size() < 8; ++id) {
    const Op& op = sp.ops[id];
    if (op.micro_batch != 0) continue;
    if (op.kind == OpKind::kCompute) seen.emplace_back(to_string(op.compute));
    if (op.kind == OpKind::kCollective) seen.emplace_back(to_string(op.collective));
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"embedding.fwd", "reduce-scatter", "all-gather",
                                            "attn.fwd", "reduce-scatter", "all-gather", "mlp.fwd",
                                            "reduce-scatter"}));
  // The norms and residual adds run on half the tokens; the GEMMs on all of them.
  for (const Shape& s : sp.shapes) {
    if (s.kind != ComputeKind::kAttnFwd) continue;
    for (const Kernel& k : s.kernels) {
      const double tokens = s.micro_batch * t.seq_len;
      if (k.name == "attn_norm") {
        EXPECT_DOUBLE_EQ(k.bytes, 2.0 * t.bytes_per_element() * tokens / 2 * m.hidden);
      }
      if (k.name == "qkv") {
        EXPECT_DOUBLE_EQ(k.m, tokens);
      }
    }
  }
  // Boundary sends: TP 2 -> TP 2, each rank its own half of the rows, as without it.
  for (int id = l->op_begin; id < l->op_end; ++id) {
    if (sp.ops[id].kind == OpKind::kSend) {
      EXPECT_EQ(sp.ops[id].peer, 2);
      EXPECT_EQ(sp.ops[id].rows_end - sp.ops[id].rows_begin, 16);
    }
  }
}

TEST(Lower, SequenceParallelFoldsAsManyRingStepsAsItRuns) {
  Cluster c = make_cluster(2, 4);
  Model m = tiny_model();
  TrainingConfig t = tiny_training(4);
  t.sequence_parallel = true;
  Program p = lower_ok(uniform_plan(2, 2, 2, 4, 4), c, m, t, Granularity::kStage);
  for (int d : {0, 2}) {
    const DeviceLayout* l = p.layout(d);
    for (int id = l->op_begin; id < l->op_end; ++id) {
      const Op& op = p.ops[id];
      if (op.kind != OpKind::kCompute || op.folded < 0) continue;
      const Fold& f = p.folds[op.folded];
      EXPECT_EQ(f.collective, Collective::kAllGather);
      // 2 layers: 4 per layer, and one more at the embedding (first stage) or the head (last).
      EXPECT_EQ(f.count, 4 * 2 + 1) << d;
    }
  }
}

TEST(Lower, ReshardingBetweenStagesOfDifferentTp) {
  // One pipeline: stage 0 TP 2 (devices 0, 1) -> stage 1 TP 4 (devices 2..5).
  Cluster c = make_cluster(1, 8);
  Model m = tiny_model(4, 4);
  TrainingConfig t = tiny_training(1);
  Plan plan = plan_from({{"version", 1},
                         {"pipelines",
                          {{{"batch", 1},
                            {"stages",
                             {{{"devices", {0, 1}}, {"layers", {0, 2}}},
                              {{"devices", {2, 3, 4, 5}}, {"layers", {2, 4}}}}}}}}});
  Program p = lower_ok(plan, c, m, t);
  // Forward: rank 0 sends quarter pieces 0 and 1 to devices 2 and 3.
  std::map<int, std::vector<int>> peers;
  for (const auto& op : p.ops) {
    if (op.kind == OpKind::kSend && op.tensor == TensorKind::kActivation)
      peers[op.device].push_back(op.peer);
  }
  EXPECT_EQ(peers[0], (std::vector<int>{2, 3}));
  EXPECT_EQ(peers[1], (std::vector<int>{4, 5}));
  // Backward: TP 4 -> TP 2, pieces from ranks 0 and 2 of the TP-4 group.
  std::map<int, std::vector<int>> grads;
  for (const auto& op : p.ops) {
    if (op.kind == OpKind::kSend && op.tensor == TensorKind::kActivationGrad)
      grads[op.device].push_back(op.peer);
  }
  EXPECT_EQ(grads.size(), 2u);
  EXPECT_EQ(grads[2], (std::vector<int>{0}));
  EXPECT_EQ(grads[4], (std::vector<int>{1}));
}

TEST(Lower, UnevenBatchesPerPipelineAndLossScale) {
  Cluster c = make_cluster(1, 2);
  Model m = tiny_model();
  TrainingConfig t = tiny_training(4);
  Plan plan = plan_from({{"version", 1},
                         {"pipelines",
                          {{{"batch", 3}, {"stages", {{{"devices", {0}}, {"layers", {0, 4}}}}}},
                           {{"batch", 1}, {"stages", {{{"devices", {1}}, {"layers", {0, 4}}}}}}}}});
  Program p = lower_ok(plan, c, m, t);
  EXPECT_EQ(count(p, 0, "head.fwd"), 3);
  EXPECT_EQ(count(p, 1, "head.fwd"), 1);
  EXPECT_DOUBLE_EQ(p.layout(0)->loss_scale, 0.25);
  EXPECT_DOUBLE_EQ(p.layout(1)->loss_scale, 0.25);
  EXPECT_EQ(p.layout(0)->micro_batches, 3);
}

TEST(DpBuckets, EqualLayoutsGiveOneBucketPerRankCoveringEveryParameter) {
  Model m = tiny_model();
  Plan plan = uniform_plan(2, 2, 2, 4, 4);
  DpBuckets b = plan_dp_buckets(plan, m, 1, 8);
  double covered = 0;
  for (const auto& bk : b.buckets) covered += bk.elements;
  EXPECT_DOUBLE_EQ(covered, m.params());  // every element synchronised exactly once
  for (int d = 0; d < 8; ++d) EXPECT_EQ(b.device_buckets[d].size(), 1u) << "device " << d;
  // ZeRO-1: owned parameters add up to the model.
  EXPECT_DOUBLE_EQ(std::accumulate(b.owned_params.begin(), b.owned_params.end(), 0.0), m.params());
}

// Under ZeRO 0 and 1, `plan`'s DP buckets synchronise every parameter of `m` exactly once, and
// under ZeRO-1 the parameters the devices own add up to the model.
void expect_buckets_cover_the_model(const Plan& plan, const Model& m) {
  for (int zero : {0, 1}) {
    DpBuckets b = plan_dp_buckets(plan, m, zero, 8);
    double covered = 0;
    for (const auto& bk : b.buckets) covered += bk.elements;
    EXPECT_DOUBLE_EQ(covered, m.params()) << "ZeRO " << zero;
    if (zero == 1) {
      EXPECT_DOUBLE_EQ(std::accumulate(b.owned_params.begin(), b.owned_params.end(), 0.0),
                       m.params());
    }
  }
}

// A GPT-style model (biases, LayerNorm with its bias, GELU MLP, learned positions, tied
// embeddings): its buckets cover every parameter too, biases and norms included.
TEST(DpBuckets, AGptStyleModelIsCoveredToo) {
  Model m = tiny_model();
  m.bias = true;
  m.layer_norm = true;
  m.learned_positions = true;
  m.tied_embeddings = true;
  m.mlp = MlpKind::kGelu;
  expect_buckets_cover_the_model(uniform_plan(2, 2, 2, 4, 4), m);
}

// A mixture of experts (every expert split by columns over TP, shared experts, a replicated
// router): its buckets cover every parameter once, under uneven TP degrees too.
TEST(DpBuckets, AMixtureOfExpertsIsCoveredToo) {
  Model m = tiny_model(2, 2);
  m.moe = {6, 2, 96};
  const Plan uneven = plan_from(
      {{"version", 1},
       {"pipelines",
        {{{"batch", 1}, {"stages", {{{"devices", {0, 1}}, {"layers", {0, 2}}}}}},
         {{"batch", 1}, {"stages", {{{"devices", {2, 3, 4, 5}}, {"layers", {0, 2}}}}}}}}});
  expect_buckets_cover_the_model(uniform_plan(2, 2, 2, 2, 4), m);
  expect_buckets_cover_the_model(uneven, m);
  // Whole experts per device (expert_split), unevenly and differently in the two pipelines.
  Plan whole = uneven;
  whole.pipelines[0].stages[0].expert_split = {4, 2};
  whole.pipelines[1].stages[0].expert_split = {1, 2, 0, 3};
  expect_buckets_cover_the_model(whole, m);
  // Device 0 (experts 0-3) shares expert 3 with device 5 (experts 3-5), whose heads and
  // columns it does not share, and nothing with device 4 (no expert, head 2).
  DpBuckets b = plan_dp_buckets(whole, m, 0, 8);
  std::set<std::vector<int>> groups_of_0;
  for (int bk : b.device_buckets[0]) groups_of_0.insert(b.groups[b.buckets[bk].group]);
  EXPECT_TRUE(groups_of_0.count({0, 5}));
  EXPECT_FALSE(groups_of_0.count({0, 4}));
}

// Every pipeline-stage device of a mixture of experts gets its routed experts (whole after
// its TP group's lower ranks', or all of them where split by columns) and its shared-expert
// columns, written and read back; a dense model's devices get neither.
TEST(Lower, AMixtureOfExpertsRecordsEachDevicesExperts) {
  Model m = tiny_model(2, 2);
  m.moe = {6, 2, 96};
  const Json two_pipelines = {
      {"version", 1},
      {"pipelines",
       {{{"batch", 1}, {"stages", {{{"devices", {0, 1}}, {"layers", {0, 2}}}}}},
        {{"batch", 1}, {"stages", {{{"devices", {2, 3, 4, 5}}, {"layers", {0, 2}}}}}}}}};
  const Cluster c = make_cluster(1, 6);
  const TrainingConfig t = tiny_training(2);
  using Range = std::optional<std::pair<int, int>>;
  auto ranges = [](const Program& p, Range DeviceLayout::*field) {
    std::vector<Range> out;
    for (int d = 0; d < 6; ++d) out.push_back(p.layout(d)->*field);
    return out;
  };
  // Shared columns by heads, as the DP buckets cut them: 96 * [a0, a1) / 4.
  const std::vector<Range> shared{std::pair{0, 48},  std::pair{48, 96}, std::pair{0, 24},
                                  std::pair{24, 48}, std::pair{48, 72}, std::pair{72, 96}};
  Plan whole = plan_from(two_pipelines);
  whole.pipelines[0].stages[0].expert_split = {4, 2};
  whole.pipelines[1].stages[0].expert_split = {1, 2, 0, 3};
  const Program p = lower_ok(whole, c, m, t);
  EXPECT_EQ(ranges(p, &DeviceLayout::routed_experts),
            (std::vector<Range>{std::pair{0, 4}, std::pair{4, 6}, std::pair{0, 1}, std::pair{1, 3},
                                std::pair{3, 3}, std::pair{3, 6}}));
  EXPECT_EQ(ranges(p, &DeviceLayout::shared_ffn), shared);
  auto back = program_from_json(to_json(p), "<round trip>");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(ranges(*back, &DeviceLayout::routed_experts), ranges(p, &DeviceLayout::routed_experts));
  EXPECT_EQ(ranges(*back, &DeviceLayout::shared_ffn), shared);
  // Every expert split by columns: each device holds all six (its ffn range of each).
  const Program columns = lower_ok(plan_from(two_pipelines), c, m, t);
  EXPECT_EQ(ranges(columns, &DeviceLayout::routed_experts), std::vector<Range>(6, std::pair{0, 6}));
  const Program dense = lower_ok(plan_from(two_pipelines), c, tiny_model(2, 2), t);
  EXPECT_EQ(ranges(dense, &DeviceLayout::routed_experts), std::vector<Range>(6));
  EXPECT_FALSE(to_json(dense).dump().find("routed_experts") != std::string::npos);
  // A range that is not one is refused, naming the key.
  Json bad = to_json(p);
  bad["devices"][0]["routed_experts"] = {3, 1};
  auto refused = program_from_json(bad, "p.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("routed_experts"), std::string::npos)
      << refused.error().message;
}

TEST(DpBuckets, DifferentTpDegreesSplitTheSmallerShard) {
  // Pipeline A: TP 2 (devices 0, 1); pipeline B: TP 4 (2..5), kv heads 2 < 4 (replicated in B).
  Model m = tiny_model(2, 2);
  Plan plan = plan_from(
      {{"version", 1},
       {"pipelines",
        {{{"batch", 1}, {"stages", {{{"devices", {0, 1}}, {"layers", {0, 2}}}}}},
         {{"batch", 1}, {"stages", {{{"devices", {2, 3, 4, 5}}, {"layers", {0, 2}}}}}}}}});
  DpBuckets b = plan_dp_buckets(plan, m, 0, 6);
  double covered = 0;
  for (const auto& bk : b.buckets) covered += bk.elements;
  EXPECT_DOUBLE_EQ(covered, m.params());
  // A's rank 0 shard meets B's ranks 0 and 1 separately (FlashFlex: max_tp/tp = 2 pieces)
  // and the kv head they share with B's ranks 0 and 1 together.
  std::vector<std::vector<int>> groups_of_0;
  for (int bk : b.device_buckets[0]) groups_of_0.push_back(b.groups[b.buckets[bk].group]);
  EXPECT_NE(std::find(groups_of_0.begin(), groups_of_0.end(), std::vector<int>{0, 2}),
            groups_of_0.end());
  EXPECT_NE(std::find(groups_of_0.begin(), groups_of_0.end(), std::vector<int>{0, 3}),
            groups_of_0.end());
  EXPECT_NE(std::find(groups_of_0.begin(), groups_of_0.end(), std::vector<int>{0, 2, 3}),
            groups_of_0.end());
}

TEST(Lower, FullRecomputeReplaysTheForward) {
  Cluster c = make_cluster(1, 2);
  Model m = tiny_model();
  TrainingConfig t = tiny_training(1);
  t.recompute = Recompute::kFull;
  Program p = lower_ok(uniform_plan(1, 1, 2, 4, 1), c, m, t);
  EXPECT_EQ(count(p, 0, "attn.recompute"), 4);
  EXPECT_EQ(count(p, 0, "mlp.recompute"), 4);
  // Forward 2*4 + 1, backward (2 + 2)*4 + 1 all-reduces.
  EXPECT_EQ(count(p, 0, "all-reduce"), 9 + 17);
}

TEST(Lower, StageGranularityFusesAndFoldsIntraMachineTp) {
  Cluster c = make_cluster(2, 4);
  Model m = tiny_model();
  TrainingConfig t = tiny_training(4);
  Program p = lower_ok(uniform_plan(2, 2, 2, 4, 4), c, m, t, Granularity::kStage);
  EXPECT_EQ(count(p, 0, "stage.fwd"), 2);
  EXPECT_EQ(count(p, 0, "stage.bwd"), 2);
  EXPECT_EQ(count(p, 0, "attn.fwd"), 0);
  const DeviceLayout* l = p.layout(0);
  for (int id = l->op_begin; id < l->op_end; ++id) {
    const Op& op = p.ops[id];
    if (op.kind == OpKind::kCompute && op.compute == ComputeKind::kStageFwd) {
      ASSERT_GE(op.folded, 0);
      EXPECT_EQ(p.folds[op.folded].count, 2 * 2 + 1);
    }
  }
  // The folds survive the program file, the first (index 0) included.
  ASSERT_FALSE(p.folds.empty());
  const std::string text = program_text(p);
  auto back = program_from_json(Json::parse(text), "<round trip>");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(program_text(*back), text);
  int first_fold = 0;
  for (const Op& op : back->ops) first_fold += op.kind == OpKind::kCompute && op.folded == 0;
  EXPECT_GT(first_fold, 0);
}

TEST(Lower, GPipeAndManyShapesStayAcyclic) {
  Cluster c = make_cluster(2, 8);
  Model m = tiny_model(8, 4);
  TrainingConfig t = tiny_training(8);
  t.schedule = PipelineSchedule::kGPipe;
  Plan plan = plan_from({{"version", 1},
                         {"pipelines",
                          {{{"batch", 6},
                            {"stages",
                             {{{"devices", {0, 1, 2, 3}}, {"layers", {0, 3}}},
                              {{"devices", {4}}, {"layers", {3, 5}}},
                              {{"devices", {5, 6}}, {"layers", {5, 8}}, {"head_split", {3, 1}}}}}},
                           {{"batch", 2},
                            {"stages",
                             {{{"devices", {8, 9}}, {"layers", {0, 6}}},
                              {{"devices", {10}}, {"layers", {6, 8}}}}}}}}});
  Program p = lower_ok(plan, c, m, t);
  EXPECT_GT(p.num_ops(), 0);
  EXPECT_EQ(p.layout(5)->head_end - p.layout(5)->head_begin, 3);
}

TEST(Lower, DeterministicAndRoundTripsThroughJson) {
  Cluster c = make_cluster(2, 4);
  Model m = tiny_model();
  TrainingConfig t = tiny_training(4);
  Plan plan = uniform_plan(2, 2, 2, 4, 4);
  std::string a = program_text(lower_ok(plan, c, m, t));
  std::string b = program_text(lower_ok(plan, c, m, t));
  EXPECT_EQ(a, b);
  auto back = program_from_json(Json::parse(a), "<text>");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(program_text(*back), a);
  // The shapes the device model times kernels by travel with them.
  int gemms = 0, attention_bwd = 0;
  for (const auto& s : back->shapes) {
    for (const auto& k : s.kernels) {
      gemms += k.cls == KernelClass::kGemm && k.m > 0 && k.n > 0 && k.k > 0;
      attention_bwd += k.cls == KernelClass::kAttention && k.backward && k.n == t.seq_len;
    }
  }
  EXPECT_GT(gemms, 0);
  EXPECT_GT(attention_bwd, 0);
}

TEST(Lower, PlanThatDoesNotMatchTheClusterIsBadInput) {
  Cluster c = make_cluster(1, 2);
  Model m = tiny_model();
  auto p = lower_plan(uniform_plan(1, 2, 2, 4, 2), c, m, tiny_training(2), {}, "plan.json");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(p.error().message.find("device 2 does not exist"), std::string::npos)
      << p.error().message;
}

// A global batch of 2^24 in micro-batches of 1 used to plan in 0.35 s and then run out of
// memory while lowering; the bound refuses it before anything is allocated.
TEST(Lower, ProgramsTooLargeToHoldAreRefusedUpFront) {
  Cluster c = make_cluster(1, 2);
  Model m = tiny_model();
  const int batch = 1 << 24;
  const Plan plan = uniform_plan(1, 2, 1, 4, batch);
  EXPECT_DOUBLE_EQ(min_compute_ops(plan, Granularity::kLayer), 2.0 * batch * 4);
  EXPECT_DOUBLE_EQ(min_compute_ops(plan, Granularity::kStage), 2.0 * batch * 2);
  auto p = lower_plan(plan, c, m, tiny_training(batch), {}, "plan.json");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(p.error().message.find("plan.json: the program would hold at least 1.34e+08 compute "
                                   "ops (16777216 sequences in micro-batches of 1 on 2 devices"),
            std::string::npos)
      << p.error().message;
}

TEST(Lower, ProgramRecordsWhatItWasLoweredFrom) {
  Cluster c = make_cluster(1, 2);
  Model m = tiny_model();
  const Program p = lower_ok(uniform_plan(1, 2, 1, 4, 2), c, m, tiny_training(2));
  EXPECT_TRUE(check_program_inputs(p, m, tiny_training(2), "p.json").ok());
  auto other_batch = check_program_inputs(p, m, tiny_training(4), "p.json");
  ASSERT_FALSE(other_batch.ok());
  EXPECT_NE(other_batch.error().message.find("p.json: lowered for another training config"),
            std::string::npos);
  Model wider = m;
  wider.ffn *= 2;
  auto other_model = check_program_inputs(p, wider, tiny_training(2), "p.json");
  ASSERT_FALSE(other_model.ok());
  EXPECT_NE(other_model.error().message.find("lowered for model"), std::string::npos);
  // The digests survive the file.
  auto back = program_from_json(Json::parse(program_text(p)), "p.json");
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(check_program_inputs(*back, m, tiny_training(2), "p.json").ok());
  Program old = p;
  old.model_digest.clear();
  EXPECT_FALSE(check_program_inputs(old, m, tiny_training(2), "p.json").ok());
}

// A TP-2 stage then a sequence mesh stage (devices 2, 3 with 12 + 8 tokens; device 4 with
// 12), next to a TP-2 pipeline: S = 32 tokens, tiny model (4 layers, 4 heads, 2 kv).
Plan mesh_plan() {
  return plan_from(Json::parse(R"({"version": 1, "pipelines": [
    {"batch": 2, "stages": [
      {"devices": [0, 1], "layers": [0, 2]},
      {"layers": [2, 4], "sequence": {"groups": [
        {"devices": [2, 3], "tokens": 20, "shards": [12, 8], "heads": [2, 2]},
        {"devices": [4], "tokens": 12, "shards": [12], "heads": [4]}]}}]},
    {"batch": 2, "stages": [{"devices": [5, 6], "layers": [0, 4]}]}]})"));
}

TEST(Lower, MeshStageInsideAPipeline) {
  Cluster c = make_cluster(1, 8);
  Model m = tiny_model();
  TrainingConfig t = tiny_training(4, 1, 32);
  const Plan plan = mesh_plan();
  Program p = lower_ok(plan, c, m, t);
  // Round trip and determinism.
  const std::string text = program_text(p);
  auto back = program_from_json(Json::parse(text), "<round trip>");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(program_text(*back), text);
  EXPECT_EQ(program_text(lower_ok(plan, c, m, t)), text);
  // Boundary bytes per destination, per micro-batch: a mesh device's own rows forward
  // (12, 8, 12 rows of 64 x 2 bytes), every TP rank the whole 32 rows of gradients back.
  const double row = 64.0 * t.bytes_per_element();
  std::map<std::pair<int, int>, double> forward, back_grads;  // (device, micro-batch) -> bytes
  for (const Op& op : p.ops) {
    if (op.kind != OpKind::kRecv) continue;
    if (op.tensor == TensorKind::kActivation) forward[{op.device, op.micro_batch}] += op.bytes;
    if (op.tensor == TensorKind::kActivationGrad)
      back_grads[{op.device, op.micro_batch}] += op.bytes;
  }
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ((forward[{2, j}]), 12 * row);
    EXPECT_EQ((forward[{3, j}]), 8 * row);
    EXPECT_EQ((forward[{4, j}]), 12 * row);
    EXPECT_EQ((back_grads[{0, j}]), 32 * row);
    EXPECT_EQ((back_grads[{1, j}]), 32 * row);
  }
  // Two recvs per mesh device and micro-batch forward (front and back rows), 6 per TP rank
  // back (3 devices' front and back rows); no all-gather completes them.
  std::map<std::pair<int, TensorKind>, int> recvs;
  for (const Op& op : p.ops) recvs[{op.device, op.tensor}] += op.kind == OpKind::kRecv;
  EXPECT_EQ((recvs[{2, TensorKind::kActivation}]), 2 * 2);
  EXPECT_EQ((recvs[{0, TensorKind::kActivationGrad}]), 6 * 2);
  EXPECT_EQ(count(p, 0, "all_gather"), 0);
  // The mesh runs its layers' ring (2 groups: 2 steps per layer) for each micro-batch, and
  // the head on its tokens; the TP stage the embedding.
  int ring = 0;
  for (const Op& op : p.ops) {
    ring += op.device == 4 && op.kind == OpKind::kCompute && op.compute == ComputeKind::kRingFwd;
  }
  EXPECT_EQ(ring, 2 * 2 * 2);
  EXPECT_EQ(count(p, 4, "head.fwd"), 2);
  EXPECT_EQ(count(p, 0, "embedding.fwd"), 2);
  const DeviceLayout* l = p.layout(4);
  EXPECT_EQ(l->seq_group, 1);
  EXPECT_EQ(l->layer_begin, 2);
  EXPECT_TRUE(l->last);
  EXPECT_EQ(l->micro_batches, 2);
  // DP across the layouts: layers 2-3 are held whole by each mesh device and in halves by
  // devices 5 and 6 (their rings: the mesh and one of them); layers 0-1 by 0|5 and 1|6.
  auto has_group = [&](std::vector<int> members) {
    return std::any_of(p.groups.begin(), p.groups.end(),
                       [&](const Group& g) { return g.devices == members; });
  };
  EXPECT_TRUE(has_group({2, 3, 4, 5}));
  EXPECT_TRUE(has_group({2, 3, 4, 6}));
  EXPECT_TRUE(has_group({0, 5}));
  EXPECT_TRUE(has_group({1, 6}));
  // Every element of the model synchronised: the mesh devices own the stage's weights whole.
  DpBuckets b = plan_dp_buckets(plan, m, 0, 8);
  EXPECT_DOUBLE_EQ(b.owned_params[2], b.owned_params[4]);
}

TEST(Lower, MeshStageAtStageGranularityRunsOneOpPerPass) {
  // mesh_plan() at stage granularity: each mesh device runs one op per micro-batch and pass
  // (its compute inside the pass, the rest folded: Fold::mesh), between the same boundary
  // messages as at layer granularity; the program round-trips.
  Cluster c = make_cluster(1, 8);
  Model m = tiny_model();
  TrainingConfig t = tiny_training(4, 1, 32);
  LowerOptions o;
  o.granularity = Granularity::kStage;
  auto p = lower_plan(mesh_plan(), c, m, t, o, "<plan>");
  ASSERT_TRUE(p.ok()) << p.error().message;
  for (int d : {2, 3, 4}) {
    int fwd = 0, bwd = 0, recvs = 0;
    for (const Op& op : p->ops) {
      if (op.device != d) continue;
      recvs += op.kind == OpKind::kRecv;
      if (op.kind != OpKind::kCompute || op.folded < 0) continue;
      const Fold& f = p->folds[op.folded];
      EXPECT_EQ(f.mesh, 0);
      EXPECT_EQ(f.layers, 2);
      EXPECT_TRUE(f.last);
      EXPECT_FALSE(f.first);
      (f.forward ? fwd : bwd) += 1;
      EXPECT_EQ(op.compute, f.forward ? ComputeKind::kStageFwd : ComputeKind::kStageBwd);
    }
    EXPECT_EQ(fwd, 2) << "device " << d;
    EXPECT_EQ(bwd, 2) << "device " << d;
    EXPECT_EQ(recvs, 2 * 2) << "device " << d;  // front and back rows, per micro-batch
  }
  // Devices 2 and 4 differ in heads (2 of 4, 4 of 4): their passes' attention FLOPs too.
  auto pass_flops = [&](int d) {
    for (const Op& op : p->ops) {
      if (op.device == d && op.compute == ComputeKind::kStageFwd)
        return p->shapes[op.shape].flops();
    }
    return 0.0;
  };
  EXPECT_LT(pass_flops(2), pass_flops(4));
  const std::string text = program_text(*p);
  auto back = program_from_json(Json::parse(text), "<round trip>");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(program_text(*back), text);
  ASSERT_TRUE(validate_program(*p, "<lowered>").ok());
}

}  // namespace
}  // namespace hexi
