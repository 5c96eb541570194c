#pragma once
// How a model is trained: batch, sequence, precision, optimizer, recompute,
// pipeline schedule. Every field has a documented default (README "Scenario file").

#include <string>

#include "topologies/enum_names.hpp"
#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi {

enum class Recompute {
  kNone,       // keep every activation
  kSelective,  // recompute the attention core (Korthikanti et al. 2022); implied by flash
  kFull,       // keep only each layer's input; recompute the whole layer in backward
};
inline constexpr auto kRecomputeNames = enum_names<Recompute>(
    {{Recompute::kNone, "none"}, {Recompute::kSelective, "selective"}, {Recompute::kFull, "full"}});
enum class PipelineSchedule { k1F1B, kGPipe };
inline constexpr auto kPipelineScheduleNames = enum_names<PipelineSchedule>(
    {{PipelineSchedule::k1F1B, "1f1b"}, {PipelineSchedule::kGPipe, "gpipe"}});
enum class AttentionKernel {
  kFlash,  // fused causal kernel: skips the masked half (x1/2 score FLOPs), no s^2 activations
  kDense,  // materialised scores: full s^2 FLOPs (Megatron's accounting), s^2 activations
};
inline constexpr auto kAttentionKernelNames = enum_names<AttentionKernel>(
    {{AttentionKernel::kFlash, "flash"}, {AttentionKernel::kDense, "dense"}});

std::string_view to_string(Recompute r);
std::string_view to_string(PipelineSchedule s);
std::string_view to_string(AttentionKernel k);

// The largest ZeRO stage that pipeline plans (HexiScale and its baselines) model.
inline constexpr int kMaxPlanZeroStage = 1;

struct TrainingConfig {
  int global_batch = 64;           // sequences per iteration
  int micro_batch = 1;             // sequences per micro-batch
  int seq_len = 4096;              // tokens per sequence
  std::string precision = "bf16";  // bf16 | fp16 | fp32 (activations, weights in compute)
  // 0: replicate optimizer state; 1: shard it over DP; 2 (+ gradients) and 3 (+ weights):
  // sequence layouts only (`hexisim seq`); pipeline plans refuse them (kMaxPlanZeroStage).
  int zero_stage = 1;
  Recompute recompute = Recompute::kSelective;
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  AttentionKernel attention = AttentionKernel::kFlash;
  bool sequence_parallel = false;  // Megatron SP: norms/dropout activations split over TP
  double reserve_gib = 1.5;        // per device: CUDA context, NCCL buffers, fragmentation

  int bytes_per_element() const { return precision == "fp32" ? 4 : 2; }
  double tokens_per_iteration() const { return static_cast<double>(global_batch) * seq_len; }
};

// Reads "none" | "selective" | "full" (InputError naming the node otherwise).
Recompute read_recompute(const JsonNode& node);
// Reads a "training" object; absent fields keep their defaults.
TrainingConfig read_training(const JsonNode& node);
Json to_json(const TrainingConfig& t);

// Bad input naming `origin` when the training's ZeRO stage is above kMaxPlanZeroStage:
// pipeline plans model ZeRO 0 and 1; stages 2 and 3 are for sequence layouts.
Status check_zero_stage(const TrainingConfig& t, const std::string& origin);

}  // namespace hexi
