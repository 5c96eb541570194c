// Lowering sequence meshes: the program's structure, its bytes and FLOPs against the
// closed form's formulas, and its JSON round trip.

#include "scheduler/program/lower_sequence.hpp"

#include <gtest/gtest.h>

#include "scheduler/cost/all_to_all.hpp"
#include "scheduler/cost/sequence.hpp"
#include "scheduler/plan/sequence_layout.hpp"
#include "scheduler/plan/sequence_testing.hpp"

namespace hexi {
namespace {

using testing::catalog_model;
using testing::long_context;
using testing::mixed_cluster;

// Two groups of two H100 on two machines, uneven shards, heads split {16, 16} and {8, 24}
// (sub-rings [0, 8) [8, 16) [16, 32)), llama3-8b (32 heads, 8 kv), S = 32768, 2 layers.
struct Fixture {
  Cluster cluster = mixed_cluster({{"H100-SXM", 2, 2}});
  Model model = [] {
    Model m = catalog_model("llama3-8b");
    m.layers = 2;
    return m;
  }();
  SequenceLayout layout = [] {
    SequenceLayout l;
    l.groups.push_back({{0, 1}, 20480, {12288, 8192}, {16, 16}});
    l.groups.push_back({{2, 3}, 12288, {4096, 8192}, {8, 24}});
    return l;
  }();

  TrainingConfig training(int zero, Recompute r) const {
    TrainingConfig t = long_context(32768, 2);
    t.zero_stage = zero;
    t.recompute = r;
    return t;
  }
};

double sum_bytes(const Program& p, OpKind kind, TensorKind tensor) {
  double sum = 0;
  for (const Op& op : p.ops) {
    if (op.kind == kind && op.tensor == tensor) sum += op.bytes;
  }
  return sum;
}

int count_compute(const Program& p, int device, ComputeKind kind) {
  int n = 0;
  for (const Op& op : p.ops)
    n += op.device == device && op.compute == kind && op.kind == OpKind::kCompute;
  return n;
}

TEST(LowerSequence, ProgramIsValidAndRoundTrips) {
  Fixture f;
  for (int zero : {0, 1, 3}) {
    for (Recompute r : {Recompute::kSelective, Recompute::kFull}) {
      const TrainingConfig t = f.training(zero, r);
      auto p = lower_sequence(f.layout, f.cluster, f.model, t, "test", "<layout>");
      ASSERT_TRUE(p.ok()) << p.error().message;
      ASSERT_TRUE(validate_program(*p, "<lowered>").ok());
      const std::string text = program_text(*p);
      auto back = program_from_json(Json::parse(text), "<round trip>");
      ASSERT_TRUE(back.ok()) << back.error().message;
      EXPECT_EQ(program_text(*back), text);
      ASSERT_TRUE(back->sequence.has_value());
      EXPECT_EQ(back->devices[2].seq_group, 1);
      EXPECT_EQ(back->devices[3].seq_rank, 1);
      // Lowering twice gives the same bytes.
      auto again = lower_sequence(f.layout, f.cluster, f.model, t, "test", "<layout>");
      EXPECT_EQ(program_text(*again), text);
    }
  }
}

TEST(LowerSequence, RingStepsPerLayerAndSequence) {
  Fixture f;
  const TrainingConfig t = f.training(1, Recompute::kFull);
  auto p = lower_sequence(f.layout, f.cluster, f.model, t, "test", "<layout>");
  ASSERT_TRUE(p.ok());
  // P = 2 steps per layer, 2 layers, 2 sequences; forward, replay and backward.
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(count_compute(*p, d, ComputeKind::kRingFwd), 2 * 2 * 2);
    EXPECT_EQ(count_compute(*p, d, ComputeKind::kRingRecompute), 2 * 2 * 2);
    EXPECT_EQ(count_compute(*p, d, ComputeKind::kRingBwd), 2 * 2 * 2);
    EXPECT_EQ(count_compute(*p, d, ComputeKind::kPreFwd), 2 * 2);
    EXPECT_EQ(count_compute(*p, d, ComputeKind::kOptimizer), 1);
  }
  double compute_ops = 0;
  for (const Op& op : p->ops) compute_ops += op.kind == OpKind::kCompute;
  EXPECT_EQ(compute_ops, sequence_compute_ops(f.layout, f.model, t));
}

TEST(LowerSequence, BytesMatchTheClosedFormsFormulas) {
  Fixture f;
  const TrainingConfig t = f.training(1, Recompute::kFull);
  auto p = lower_sequence(f.layout, f.cluster, f.model, t, "test", "<layout>");
  ASSERT_TRUE(p.ok());
  const AttentionShape a = attention_shape(f.model, t);
  const double passes = f.model.layers * t.global_batch;
  // Ulysses: every group's qkv and output matrices, forward and replay one way, backward the
  // other; sends and recvs agree.
  double qkv = 0, out = 0;
  for (const auto& g : f.layout.groups) {
    const UlyssesGroup u{g.shards, g.heads};
    qkv += ulysses_qkv_bytes(a, u).sum();
    out += ulysses_output_bytes(a, u).sum();
  }
  EXPECT_DOUBLE_EQ(sum_bytes(*p, OpKind::kSend, TensorKind::kQkv), 2 * passes * qkv);
  EXPECT_DOUBLE_EQ(sum_bytes(*p, OpKind::kSend, TensorKind::kAttnOut), 2 * passes * out);
  EXPECT_DOUBLE_EQ(sum_bytes(*p, OpKind::kSend, TensorKind::kAttnOutGrad), passes * out);
  EXPECT_DOUBLE_EQ(sum_bytes(*p, OpKind::kRecv, TensorKind::kQkvGrad), passes * qkv);
  // Ring: the sub-rings carry 2 + 2 + 4 kv heads from group 0 to 1 and back; each hop passes
  // every block but the receiver's (K, V: forward, replay, backward) and every block's dK, dV.
  const double S = 32768, kv_token = 2.0 * a.head_dim * a.bytes_per_element;
  const double kv = (8 * (S - 12288) + 8 * (S - 20480)) * kv_token;
  EXPECT_DOUBLE_EQ(sum_bytes(*p, OpKind::kSend, TensorKind::kKv), 3 * passes * kv);
  EXPECT_DOUBLE_EQ(sum_bytes(*p, OpKind::kRecv, TensorKind::kKvGrad),
                   passes * 2 * 8 * S * 2.0 * a.head_dim * a.grad_bytes_per_element);
}

// The ring steps' attention: FLOPs of the mirrored layout's causal pairs; bytes of the group's
// queries (forward: Q and O; backward also dO and dQ) at every step (one per group) and of the
// visiting block's K and V (backward also dK, dV), every block's kv heads once a pass.
TEST(LowerSequence, RingKernelsFlopsAndBytes) {
  Fixture f;
  const TrainingConfig t = f.training(0, Recompute::kSelective);
  auto p = lower_sequence(f.layout, f.cluster, f.model, t, "test", "<layout>");
  ASSERT_TRUE(p.ok());
  double forward = 0, backward = 0, forward_bytes = 0, backward_bytes = 0;
  for (const Op& op : p->ops) {
    if (op.kind != OpKind::kCompute) continue;
    if (op.compute == ComputeKind::kRingFwd) forward += p->shapes[op.shape].flops();
    if (op.compute == ComputeKind::kRingBwd) backward += p->shapes[op.shape].flops();
    for (const Kernel& k : p->shapes[op.shape].kernels) {
      if (k.name == "ring.attention") forward_bytes += k.bytes;
      if (k.name == "ring.attention.bwd") backward_bytes += k.bytes;
    }
  }
  const AttentionShape a = attention_shape(f.model, t);
  const double S = 32768, row = static_cast<double>(a.head_dim) * a.bytes_per_element;
  const double steps = static_cast<double>(f.layout.groups.size());
  double pairs_heads = 0;  // sum over devices: group pairs x query heads
  double bytes = 0;        // one pass, every device
  for (const auto& g : f.layout.groups) {
    int first = 0;
    for (int h : g.heads) {
      pairs_heads += static_cast<double>(mirrored_rank_pairs(32768, g.tokens)) * h;
      bytes += steps * 2 * g.tokens * h * row + 2 * S * kv_heads_needed(a, first, h) * row;
      first += h;
    }
  }
  const double passes = f.model.layers * t.global_batch;
  EXPECT_NEAR(forward / (passes * pairs_heads * 4 * 128), 1.0, 1e-12);
  EXPECT_NEAR(backward / forward, kFlashBackwardRatio, 1e-12);
  EXPECT_DOUBLE_EQ(forward_bytes, passes * bytes);
  EXPECT_DOUBLE_EQ(backward_bytes, 2 * forward_bytes);  // 4 Q-sized + 2 KV-sized, against 2 + 1
}

TEST(LowerSequence, ZeroThreeGathersEveryLayerTwiceAndScattersIt) {
  Fixture f;
  const TrainingConfig t = f.training(3, Recompute::kFull);
  auto p = lower_sequence(f.layout, f.cluster, f.model, t, "test", "<layout>");
  ASSERT_TRUE(p.ok());
  int gathers = 0, scatters = 0, reduces = 0;
  double gathered = 0;
  for (const Op& op : p->ops) {
    if (op.kind != OpKind::kCollective || op.device != 0) continue;
    gathers += op.collective == Collective::kAllGather;
    scatters += op.collective == Collective::kReduceScatter;
    reduces += op.collective == Collective::kAllReduce;
    if (op.collective == Collective::kAllGather) gathered += op.bytes;
  }
  // Per sequence: every layer and the embedding twice (forward, backward), the head once.
  EXPECT_EQ(gathers, 2 * (2 * 2 + 3));
  EXPECT_EQ(scatters, 2 * (2 + 2));
  EXPECT_EQ(reduces, 0);
  const double layers_bytes = 2.0 * f.model.layers * f.model.layer_params() * 2;
  EXPECT_GT(gathered, 2 * layers_bytes);
}

TEST(LowerSequence, BadLayoutIsBadInput) {
  Fixture f;
  SequenceLayout bad = f.layout;
  bad.groups[1].heads = {8, 16};  // 24 of 32 heads
  auto p =
      lower_sequence(bad, f.cluster, f.model, f.training(1, Recompute::kFull), "test", "<layout>");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("heads"), std::string::npos) << p.error().message;
}

TEST(LowerSequence, TensorGroupsGatherAndScatterInsteadOfAllToAlls) {
  // The fixture's second group tensor-parallel: its devices (2, 3) send no all-to-all, run
  // two all-gathers and two reduce-scatters of the group's padded hidden states per layer and
  // pass (forward, backward; the replay under full recompute), keep the ring, and hold their
  // share of the weights; the gradient buckets follow the head intervals' holders.
  Fixture f;
  f.layout.groups[1].tensor = true;
  for (const Recompute r : {Recompute::kSelective, Recompute::kFull}) {
    const TrainingConfig t = f.training(1, r);
    auto p = lower_sequence(f.layout, f.cluster, f.model, t, "test", "<layout>");
    ASSERT_TRUE(p.ok()) << p.error().message;
    ASSERT_TRUE(validate_program(*p, "<lowered>").ok());
    const double bytes = 2.0 * 8192 * f.model.hidden * 2;  // n max s_i h e
    const int passes = r == Recompute::kFull ? 3 : 2;
    for (int d = 0; d < 4; ++d) {
      int a2a = 0, gathers = 0, scatters = 0;
      for (const Op& op : p->ops) {
        if (op.device != d) continue;
        a2a += op.kind == OpKind::kSend && op.tensor == TensorKind::kQkv;
        if (op.kind != OpKind::kCollective || op.stream != Stream::kCompute) continue;
        EXPECT_EQ(op.bytes, bytes);
        EXPECT_EQ(p->groups[op.group].kind, GroupKind::kTp);
        gathers += op.collective == Collective::kAllGather;
        scatters += op.collective == Collective::kReduceScatter;
      }
      const bool tensor = d >= 2;
      EXPECT_EQ(a2a, tensor ? 0 : f.model.layers * t.global_batch * (passes - 1)) << "device " << d;
      EXPECT_EQ(gathers, tensor ? 2 * passes * f.model.layers * t.global_batch : 0);
      EXPECT_EQ(scatters, gathers);
      // The ring still runs on every device: P steps per layer and pass.
      EXPECT_EQ(count_compute(*p, d, ComputeKind::kRingFwd), 2 * f.model.layers * t.global_batch);
    }
    const DeviceLayout& l = *std::find_if(p->devices.begin(), p->devices.end(),
                                          [](const DeviceLayout& x) { return x.device == 3; });
    EXPECT_EQ(l.tp, 2);
    EXPECT_EQ(l.tp_rank, 1);
    EXPECT_DOUBLE_EQ(l.phi, 24.0 / 32);
    EXPECT_EQ(l.head_begin, 8);
    EXPECT_EQ(l.head_end, 32);
    EXPECT_DOUBLE_EQ(l.params, member_params(f.model, f.layout.groups[1], 1));
    // Device 3's gradient pieces: heads [8, 16) with devices 0, 1 (and 3), [16, 32) likewise,
    // the replicated norms with everyone; never with device 2.
    for (const Bucket& b : p->buckets) {
      const std::vector<int>& members = p->groups[b.group].devices;
      const bool has2 = std::find(members.begin(), members.end(), 2) != members.end();
      const bool has3 = std::find(members.begin(), members.end(), 3) != members.end();
      if (members.size() < 4) {
        EXPECT_FALSE(has2 && has3);
      }
    }
  }
}

}  // namespace
}  // namespace hexi
