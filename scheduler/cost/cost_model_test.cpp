// The closed-form cost model pinned to published figures: Megatron-LM's FLOP formula,
// Korthikanti et al.'s activation bytes, Adam's 16 bytes per parameter.
#include "scheduler/cost/cost_model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

namespace hexi {
namespace {

Model gpt(int layers, int hidden, int heads, int vocab) {
  Model m;
  m.name = "gpt";
  m.layers = layers;
  m.hidden = hidden;
  m.ffn = 4 * hidden;
  m.heads = m.kv_heads = heads;
  m.vocab = vocab;
  m.max_seq = 2048;
  m.mlp = MlpKind::kGelu;
  m.bias = m.layer_norm = m.learned_positions = m.dropout = true;
  return m;
}

TrainingConfig megatron_config(int batch, int seq) {
  TrainingConfig t;
  t.global_batch = batch;
  t.seq_len = seq;
  t.recompute = Recompute::kFull;
  t.attention = AttentionKernel::kDense;
  return t;
}

TEST(CostModel, ReproducesMegatronFlopsForGptShapes) {
  // Narayanan et al. 2021, eq. 3: 96 B s L h^2 (1 + s/6h + V/16Lh) with full recompute.
  for (auto [m, batch, seq] : std::vector<std::tuple<Model, int, int>>{
           {gpt(96, 12288, 96, 51200), 1536, 2048},  // GPT-3 175B
           {gpt(24, 2048, 16, 51200), 512, 2048},    // GPT 1.3B
           {gpt(80, 8192, 64, 51200), 1024, 4096}}) {
    double ours = iteration_flops(m, megatron_config(batch, seq));
    double theirs = megatron_flops(m, batch, seq);
    std::printf(
        "Megatron FLOPs, GPT h=%d L=%d B=%d s=%d: ours %.6e, 96BsLh^2(1+s/6h+V/16Lh) %.6e, ratio "
        "%.15f\n",
        m.hidden, m.layers, batch, seq, ours, theirs, ours / theirs);
    EXPECT_NEAR(ours / theirs, 1.0, 1e-12) << m.hidden;
  }
  // Model FLOPs (no recompute): 72 B s L h^2 (1 + s/6h) + 6 B s h V.
  Model m = gpt(96, 12288, 96, 51200);
  const double B = 8, s = 2048, h = 12288;
  EXPECT_NEAR(model_flops(m, megatron_config(8, 2048)) /
                  (72 * B * s * 96 * h * h * (1 + s / (6 * h)) + 6 * B * s * h * 51200),
              1.0, 1e-12);
}

TEST(CostModel, LlamaLayerFlopsWithCausalFlashKernel) {
  Model m;
  m.layers = 32;
  m.hidden = 4096;
  m.ffn = 11008;
  m.heads = 32;
  m.kv_heads = 8;
  m.vocab = 32000;
  TrainingConfig t;
  t.seq_len = 4096;
  const double b = 2, s = 4096, h = 4096, f = 11008, kd = 8 * 128;
  // QKV 2bsh(h + 2kd) + (4bs^2h)/2 + out 2bsh^2 + SwiGLU 6bshf
  double expected =
      2 * b * s * h * (h + 2 * kd) + 2 * b * s * s * h + 2 * b * s * h * h + 6 * b * s * h * f;
  EXPECT_NEAR(layer_forward_flops(m, t, 2) / expected, 1.0, 1e-12);
  t.attention = AttentionKernel::kDense;
  EXPECT_NEAR(layer_forward_flops(m, t, 2) / (expected + 2 * b * s * s * h), 1.0, 1e-12);
  // Backward is twice the forward; full recompute adds a forward.
  t.attention = AttentionKernel::kFlash;
  double fwd = layer_forward_flops(m, t, 1);
  double bwd = kernels_flops(block_backward(m, t, Block::kAttention, 1, 1.0)) +
               kernels_flops(block_backward(m, t, Block::kMlp, 1, 1.0));
  EXPECT_NEAR(bwd / fwd, 2.0, 1e-12);
  t.recompute = Recompute::kFull;
  bwd = kernels_flops(block_backward(m, t, Block::kAttention, 1, 1.0)) +
        kernels_flops(block_backward(m, t, Block::kMlp, 1, 1.0));
  EXPECT_NEAR(bwd / fwd, 3.0, 1e-12);
  // A TP rank holding a quarter of the heads and ffn does a quarter of QKV/attention/MLP.
  EXPECT_NEAR(kernels_flops(block_forward(m, t, Block::kMlp, 1, 0.25)) /
                  kernels_flops(block_forward(m, t, Block::kMlp, 1, 1.0)),
              0.25, 1e-12);
}

// A 4-layer mixture of experts: `heads` heads of `hidden` / heads, experts of width `ffn`.
Model moe_model(int hidden, int ffn, int heads, Moe moe) {
  Model m;
  m.layers = 4;
  m.hidden = hidden;
  m.ffn = ffn;
  m.heads = m.kv_heads = heads;
  m.vocab = 1000;
  m.moe = moe;
  return m;
}

// A mixture-of-experts layer: the router (2bsh E) on every TP rank, each token's top_k experts
// (6bshf each) and the shared experts (6bsh f_s) split by the rank's column share; the
// backward twice the forward; the weights a TP rank holds; one device holding every
// parameter once.
TEST(CostModel, MixtureOfExpertsFlopsAndWeights) {
  Model m = moe_model(2048, 1408, 16, {64, 6, 2816});
  TrainingConfig t;
  t.seq_len = 4096;
  const double bs = 4096, h = 2048, f = 1408, fs = 2816, experts = 64, k = 6;
  for (double phi : {1.0, 0.25}) {
    const double expected = 2 * bs * h * experts + phi * (k * 6 * bs * h * f + 6 * bs * h * fs);
    EXPECT_NEAR(kernels_flops(block_forward(m, t, Block::kMlp, 1, phi)) / expected, 1.0, 1e-12)
        << phi;
    EXPECT_NEAR(kernels_flops(block_backward(m, t, Block::kMlp, 1, phi)) / (2 * expected), 1.0,
                1e-12)
        << phi;
  }
  // The grouped expert GEMMs are shaped per expert (bs k / E rows) and read every expert's
  // weights; their weight gradients read and write each expert's fp32 gradient.
  const auto fwd = block_forward(m, t, Block::kMlp, 1, 1.0);
  const auto gate_up = std::find_if(fwd.begin(), fwd.end(),
                                    [](const Kernel& g) { return g.name == "experts.gate_up"; });
  ASSERT_NE(gate_up, fwd.end());
  EXPECT_DOUBLE_EQ(gate_up->m, bs * k / experts);
  EXPECT_GE(gate_up->bytes, 2.0 * experts * h * 2 * f);
  const auto bwd = block_backward(m, t, Block::kMlp, 1, 1.0);
  const auto wgrad = std::find_if(
      bwd.begin(), bwd.end(), [](const Kernel& g) { return g.name == "experts.gate_up.wgrad"; });
  ASSERT_NE(wgrad, bwd.end());
  EXPECT_GE(wgrad->bytes, 8.0 * experts * h * 2 * f);
  // Weights: a rank holding a quarter of the columns holds a quarter of every expert but the
  // whole router; one device holds every parameter once.
  StageShape quarter;
  quarter.layer_end = 1;
  quarter.phi = 0.25;
  EXPECT_DOUBLE_EQ(stage_params(m, quarter),
                   0.25 * (m.attention_params() + m.mlp_params()) + m.norm_params() + h * experts);
  EXPECT_NEAR(stage_params(m, whole_model_shape(m, 1, std::nullopt)), m.params(), 1.0);
  // Activations grow with top_k (the experts' rows), not with the number of experts.
  const double four = activation_bytes_per_layer(m, t, 1, 1, 1.0);
  m.moe.experts = 128;
  EXPECT_NEAR(activation_bytes_per_layer(m, t, 1, 1, 1.0) - four, (2 + 4) * bs * 64, 1e-6);
}

// Expert parallelism over a TP group: a rank holding a fraction of the experts whole runs
// that fraction of the routed rows through full-width experts. Over the group the expert
// FLOPs are those of the column split; a rank with no expert runs only the router and the
// shared experts; weights and activations follow the rank's experts, not its columns.
TEST(CostModel, WholeExpertsPerRank) {
  Model m = moe_model(1024, 512, 8, {8, 2, 256});
  TrainingConfig t;
  t.seq_len = 1024;
  const double bs = 1024, h = 1024, f = 512, fs = 256;
  auto flops = [&](double phi, double experts) {
    return kernels_flops(block_forward(m, t, Block::kMlp, 1, phi, 1.0, experts));
  };
  const double router = 2 * bs * h * 8, shared = 6 * bs * h * fs;
  // Ranks of a TP-4 group holding 1, 2, 2 and 3 of the 8 experts (phi 1/4 each).
  double sum = 0;
  for (double experts : {1.0, 2.0, 2.0, 3.0}) {
    const double mine = flops(0.25, experts / 8);
    EXPECT_NEAR(mine / (router + 0.25 * shared + experts / 8 * 2 * 6 * bs * h * f), 1.0, 1e-12);
    sum += mine - router - 0.25 * shared;
  }
  EXPECT_NEAR(sum / (4 * (flops(0.25, -1) - router - 0.25 * shared)), 1.0, 1e-12);
  EXPECT_NEAR(flops(0.25, 0.0) / (router + 0.25 * shared), 1.0, 1e-12);
  // The grouped GEMM's shape: full expert width, bs k / E rows per expert.
  const auto fwd = block_forward(m, t, Block::kMlp, 1, 0.25, 1.0, 3.0 / 8);
  const auto gate_up = std::find_if(fwd.begin(), fwd.end(),
                                    [](const Kernel& g) { return g.name == "experts.gate_up"; });
  ASSERT_NE(gate_up, fwd.end());
  EXPECT_DOUBLE_EQ(gate_up->n, 2 * f);
  EXPECT_DOUBLE_EQ(gate_up->m, bs * 2 / 8);
  EXPECT_NEAR(
      kernels_flops(block_backward(m, t, Block::kMlp, 1, 0.25, Recompute::kNone, 1.0, 3.0 / 8)) /
          (2 * kernels_flops(fwd)),
      1.0, 1e-12);
  StageShape rank;
  rank.layer_end = 1;
  rank.phi = 0.25;
  rank.experts = 3.0 / 8;
  EXPECT_DOUBLE_EQ(stage_params(m, rank), 0.25 * (m.attention_params() + 3 * h * fs) +
                                              3 * 3 * h * f + m.norm_params() + h * 8);
  EXPECT_GT(activation_bytes_per_layer(m, t, 1, 4, 0.25, Recompute::kNone, 3.0 / 8),
            activation_bytes_per_layer(m, t, 1, 4, 0.25, Recompute::kNone, 1.0 / 8));
}

// Router load: dropless with imbalance I, a rank holding experts whole also runs the busiest
// expert's excess (I - 1) bs k / E rows; a rank holding every expert by columns runs the same
// rows whatever the skew; a capacity factor C pads every expert to C bs k / E rows, both ways.
TEST(CostModel, RouterImbalanceAndCapacityFactor) {
  Model m = moe_model(1024, 512, 8, {8, 2, 0});
  TrainingConfig t;
  t.seq_len = 1024;
  const double bs = 1024, h = 1024, f = 512, router = 2 * bs * h * 8, mean = bs * 2 / 8;
  const double per_row = 6 * h * f;  // an expert's FLOPs per row at full width
  auto experts_flops = [&](double phi, double experts) {
    return kernels_flops(block_forward(m, t, Block::kMlp, 1, phi, 1.0, experts)) - router;
  };
  const double columns = experts_flops(0.5, -1), whole = experts_flops(0.5, 3.0 / 8);
  m.moe.imbalance = 1.5;
  EXPECT_DOUBLE_EQ(experts_flops(0.5, -1), columns);
  EXPECT_NEAR(experts_flops(0.5, 3.0 / 8) - whole, 0.5 * mean * per_row, 1e-6 * whole);
  EXPECT_DOUBLE_EQ(experts_flops(0.5, 0.0), 0.0);                 // no expert, no excess
  EXPECT_DOUBLE_EQ(experts_flops(1.0, 1.0), 8 * mean * per_row);  // every expert: every row
  m.moe.capacity_factor = 1.25;
  EXPECT_NEAR(experts_flops(0.5, -1) / (1.25 * columns), 1.0, 1e-12);
  EXPECT_NEAR(experts_flops(0.5, 3.0 / 8) / (3 * 1.25 * mean * per_row), 1.0, 1e-12);
  // Activations follow the rows: 3.75 means padded against 3.5 dropless (3 + the excess).
  const double padded = activation_bytes_per_layer(m, t, 1, 2, 0.5, Recompute::kNone, 3.0 / 8);
  m.moe.capacity_factor = 0;
  EXPECT_GT(padded, activation_bytes_per_layer(m, t, 1, 2, 0.5, Recompute::kNone, 3.0 / 8));
}

TEST(CostModel, KorthikantiActivationBytes) {
  // Korthikanti et al. 2022, table 2, bytes per layer for GPT with fp16 and dropout.
  Model m = gpt(96, 12288, 96, 51200);
  const double s = 2048, b = 2, h = 12288, a = 96, sbh = s * b * h;
  TrainingConfig t;
  t.seq_len = 2048;
  t.attention = AttentionKernel::kDense;
  t.recompute = Recompute::kNone;
  std::printf(
      "Korthikanti bytes/layer (GPT-3, s=2048, b=2), no parallelism: %.4e vs sbh(34+5as/h) %.4e\n",
      activation_bytes_per_layer(m, t, 2, 1, 1.0), sbh * (34 + 5 * a * s / h));
  EXPECT_NEAR(activation_bytes_per_layer(m, t, 2, 1, 1.0) / (sbh * (34 + 5 * a * s / h)), 1.0,
              1e-12);
  for (int tp : {2, 4, 8}) {  // tensor parallel
    std::printf("Korthikanti bytes/layer, TP %d: %.4e vs sbh(10+24/t+5as/ht) %.4e\n", tp,
                activation_bytes_per_layer(m, t, 2, tp, 1.0 / tp),
                sbh * (10 + 24.0 / tp + 5 * a * s / (h * tp)));
    EXPECT_NEAR(activation_bytes_per_layer(m, t, 2, tp, 1.0 / tp) /
                    (sbh * (10 + 24.0 / tp + 5 * a * s / (h * tp))),
                1.0, 1e-12);
  }
  t.sequence_parallel = true;  // + sequence parallel + selective recompute
  t.recompute = Recompute::kSelective;
  std::printf("Korthikanti bytes/layer, TP 8 + SP + selective: %.4e vs 34sbh/t %.4e\n",
              activation_bytes_per_layer(m, t, 2, 8, 1.0 / 8), sbh * 34 / 8);
  EXPECT_NEAR(activation_bytes_per_layer(m, t, 2, 8, 1.0 / 8) / (sbh * 34 / 8), 1.0, 1e-12);
  t.sequence_parallel = false;  // full recompute keeps the layer input
  t.recompute = Recompute::kFull;
  std::printf("Korthikanti bytes/layer, full recompute: %.4e vs 2sbh %.4e\n",
              activation_bytes_per_layer(m, t, 2, 8, 1.0 / 8), 2 * sbh);
  EXPECT_NEAR(activation_bytes_per_layer(m, t, 2, 8, 1.0 / 8) / (2 * sbh), 1.0, 1e-12);
}

TEST(CostModel, AdamSixteenBytesPerParameterAndZero1) {
  Model m = gpt(4, 1024, 8, 1000);
  m.dropout = false;
  TrainingConfig t;
  t.zero_stage = 0;
  StageShape whole;
  whole.layer_end = 4;
  whole.first = whole.last = true;
  MemoryBreakdown mem = device_memory(m, t, whole);
  // One device holding everything holds every parameter once (tied table counted once).
  const double params = stage_params(m, whole);
  EXPECT_NEAR(params, m.params(), 1.0);
  EXPECT_DOUBLE_EQ(mem.weights + mem.gradients + mem.optimizer, 16 * params);
  t.zero_stage = 1;
  whole.dp = 4;
  mem = device_memory(m, t, whole);
  EXPECT_DOUBLE_EQ(mem.weights + mem.gradients + mem.optimizer, (4 + 12.0 / 4) * params);
  EXPECT_DOUBLE_EQ(mem.reserve, 1.5 * kGiB);
}

TEST(CostModel, InFlightMicroBatches) {
  EXPECT_EQ(in_flight_micro_batches(PipelineSchedule::k1F1B, 0, 4, 8), 4);
  EXPECT_EQ(in_flight_micro_batches(PipelineSchedule::k1F1B, 3, 4, 8), 1);
  EXPECT_EQ(in_flight_micro_batches(PipelineSchedule::k1F1B, 0, 4, 2), 2);
  EXPECT_EQ(in_flight_micro_batches(PipelineSchedule::kGPipe, 3, 4, 8), 8);
}

TEST(CostModel, KernelTimeIsARoofline) {
  GpuSpec gpu;
  gpu.tflops = 1;         // 1 TFLOP/s
  gpu.memory_GBps = 100;  // 100 GB/s
  const DeviceProfile ideal = DeviceProfile::constant(1.0, 1.0, 1.0, 0.0);
  // 1 TFLOP on a 1 TFLOP/s GPU takes exactly 1 s.
  EXPECT_DOUBLE_EQ(kernel_time({"gemm", KernelClass::kGemm, 1e12, 1e9}, gpu, ideal), 1.0);
  // A memory-bound kernel: 200 GB at 100 GB/s.
  EXPECT_DOUBLE_EQ(kernel_time({"copy", KernelClass::kElementwise, 0, 200e9}, gpu, ideal), 2.0);
  const DeviceProfile half = DeviceProfile::constant(0.5, 0.25, 0.5, 1e-3);
  EXPECT_DOUBLE_EQ(kernel_time({"gemm", KernelClass::kGemm, 1e12, 1e9}, gpu, half), 2.001);
  EXPECT_DOUBLE_EQ(kernel_time({"attn", KernelClass::kAttention, 1e12, 1e9}, gpu, half), 4.001);
}

}  // namespace
}  // namespace hexi
