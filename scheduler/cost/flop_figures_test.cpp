// The FLOP conventions (flop_figures.hpp) with numbers checked by hand: hardware FLOPs
// equal model FLOPs without recompute, exceed them by one forward per layer under full
// recompute (4/3 on the layers), Megatron-LM's formula on a small shape, and the
// per-GPU figures as total FLOP/s over the GPUs used.
#include "scheduler/cost/flop_figures.hpp"

#include <gtest/gtest.h>

#include "scenarios/testing.hpp"
#include "scheduler/cost/cost_model.hpp"

namespace hexi {
namespace {

// tiny-llama-8l: 8 layers, h 64, ffn 172, 4 heads (2 kv), vocab 256.
const Model& small_llama() {
  return *testing::shipped_models().find("tiny-llama-8l");
}

TrainingConfig config(Recompute r, AttentionKernel a = AttentionKernel::kFlash) {
  TrainingConfig t;
  t.global_batch = 4;
  t.micro_batch = 1;
  t.seq_len = 32;
  t.recompute = r;
  t.attention = a;
  return t;
}

TEST(FlopFigures, HardwareEqualsModelFlopsWithoutRecompute) {
  // Selective recompute with the flash kernel recomputes nothing the FLOPs count
  // (the flash backward recomputes its blocks inside attention.bwd's 2x).
  const Model& m = small_llama();
  for (Recompute r : {Recompute::kNone, Recompute::kSelective}) {
    const TrainingConfig t = config(r);
    EXPECT_DOUBLE_EQ(iteration_flops(m, t), model_flops(m, t)) << to_string(r);
  }
}

TEST(FlopFigures, FullRecomputeAddsOneForwardPerLayer) {
  // Per layer: forward F, backward 2F, replayed forward F: hardware 4F, model 3F.
  // The head (logits) is never recomputed, so the ratio is 4/3 on the layers only.
  const Model& m = small_llama();
  const TrainingConfig t = config(Recompute::kFull);
  const double head = 3 * kernels_flops(head_forward(m, t, t.global_batch, 1.0));
  const double hw = iteration_flops(m, t), model = model_flops(m, t);
  EXPECT_NEAR((hw - head) / (model - head), 4.0 / 3.0, 1e-15);
  EXPECT_NEAR(hw - model, m.layers * layer_forward_flops(m, t, t.global_batch), 1e-6);
}

TEST(FlopFigures, SelectiveRecomputeWithTheDenseKernelReplaysTheAttentionCore) {
  // Dense kernel, c = 1: the core's forward is 4 B s^2 h = 4 * 4 * 32^2 * 64 FLOPs per layer,
  // replayed in each of the 8 layers.
  const Model& m = small_llama();
  const TrainingConfig t = config(Recompute::kSelective, AttentionKernel::kDense);
  EXPECT_DOUBLE_EQ(iteration_flops(m, t) - model_flops(m, t), 8 * 4.0 * 4 * 32 * 32 * 64);
}

TEST(FlopFigures, MegatronFormulaByHand) {
  // 96 B s L h^2 (1 + s/6h + V/16Lh) with B 4, s 32, L 8, h 64, V 256:
  // 96*4*32*8*64^2 = 402 653 184; x (1 + 32/384 + 256/8192)
  // = 402 653 184 + 33 554 432 + 12 582 912 = 448 790 528.
  EXPECT_DOUBLE_EQ(megatron_flops(small_llama(), 4, 32), 448790528.0);
}

TEST(FlopFigures, PerGpuFiguresAreTotalFlopsPerSecondOverTheGpusUsed) {
  // 4 GPUs used of a cluster with 8e15 FLOP/s summed peak, iteration 2 s.
  const Model& m = small_llama();
  const TrainingConfig t = config(Recompute::kFull);
  const double hw = iteration_flops(m, t), model = model_flops(m, t);
  const FlopFigures f = flop_figures(m, t, hw, 2.0, 8e15, 4);
  EXPECT_DOUBLE_EQ(f.hfu, hw / (2.0 * 8e15));
  EXPECT_DOUBLE_EQ(f.hardware_tflops_per_gpu, hw / (2.0 * 4 * 1e12));
  EXPECT_DOUBLE_EQ(f.model_tflops_per_gpu, model / (2.0 * 4 * 1e12));
  EXPECT_DOUBLE_EQ(f.megatron_tflops_per_gpu, 448790528.0 / (2.0 * 4 * 1e12));
  EXPECT_EQ(f.mfu_convention,
            "model FLOPs: 3x forward, no recompute, causal attention halved (flash kernel)");
  // No time, no figures (but the convention is still named).
  const FlopFigures none = flop_figures(m, t, hw, 0.0, 8e15, 4);
  EXPECT_EQ(none.hfu, 0.0);
  EXPECT_FALSE(none.mfu_convention.empty());
}

TEST(FlopFigures, JsonKeysRoundTrip) {
  const Model& m = small_llama();
  const TrainingConfig t = config(Recompute::kNone, AttentionKernel::kDense);
  const FlopFigures f = flop_figures(m, t, model_flops(m, t), 1.5, 1e15, 3);
  Json j = Json::object();
  f.add_to(j);
  for (const char* key : {"hfu", "hardware_tflops_per_gpu", "model_tflops_per_gpu",
                          "megatron_tflops_per_gpu", "mfu_convention"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["mfu_convention"],
            "model FLOPs: 3x forward, no recompute, attention not halved "
            "(dense kernel)");
  const FlopFigures back = FlopFigures::from_json(j);
  EXPECT_EQ(back.hfu, f.hfu);
  EXPECT_EQ(back.hardware_tflops_per_gpu, f.hardware_tflops_per_gpu);
  EXPECT_EQ(back.model_tflops_per_gpu, f.model_tflops_per_gpu);
  EXPECT_EQ(back.megatron_tflops_per_gpu, f.megatron_tflops_per_gpu);
  EXPECT_EQ(back.mfu_convention, f.mfu_convention);
}

}  // namespace
}  // namespace hexi
