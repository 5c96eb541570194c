#pragma once
// Throughput in the conventions users compare against, from one iteration's FLOPs and time.
//
//   hardware FLOPs H: what the GPUs execute: forward + backward + recompute (each stage's
//     own choice), attention as the kernel runs it (c = 1/2 with the causal flash kernel,
//     c = 1 with the dense one; cost_model.hpp)
//   model FLOPs M: 3 x forward, no recompute (PaLM's MFU, Chowdhery et al. 2022, app. B),
//     attention counted like H (c = 1/2 with the flash kernel: "causal attention halved")
//   Megatron FLOPs G: Megatron-LM's published formula (Narayanan et al. 2021, eq. 3),
//     96 B s L h^2 (1 + s/6h + V/16Lh): GPT shapes (ffn 4h, no GQA, no SwiGLU), full
//     recompute and the full s^2 of attention (not halved), whatever the plan runs; the
//     figure Megatron-LM's tables print as TFLOP/s per GPU
//   MFU = M / (T x P), HFU = H / (T x P)   T iteration time (s), P the cluster's summed peak
//   X TFLOP/s per GPU = X / (T x n) / 1e12  n the GPUs the plan uses: on a mixed cluster the
//     mean over its GPUs (total FLOP/s / n), not any one GPU type's figure
// With no recompute H = M; with full recompute every layer adds one forward, so
// H / M = 4/3 for the layers (the head is never recomputed).

#include <string>

#include "scenarios/model.hpp"
#include "scenarios/training.hpp"
#include "topologies/json_input.hpp"

namespace hexi {
inline namespace cost {

// MFU itself stays with the estimate and the report (their `mfu`, computed as above).
struct FlopFigures {
  double hfu = 0;                      // hardware FLOPs / (T x P)
  double hardware_tflops_per_gpu = 0;  // H / (T x n), TFLOP/s
  double model_tflops_per_gpu = 0;     // M / (T x n), TFLOP/s
  double megatron_tflops_per_gpu = 0;  // G / (T x n), TFLOP/s
  std::string mfu_convention;          // mfu_convention(t)

  // Adds the keys above to a report or estimate object.
  void add_to(Json& j) const;
  // Reads the keys written by add_to.
  static FlopFigures from_json(const Json& j);
};

// How M and H count attention: "causal attention halved" (flash) or "attention not halved".
std::string attention_convention(const TrainingConfig& t);
// What M counts, in words: "model FLOPs: 3x forward, no recompute, causal attention halved
// (flash kernel)".
std::string mfu_convention(const TrainingConfig& t);

// The figures of one iteration of `seconds` that executes `hardware_flops` on `gpus`
// GPUs of a cluster whose summed peak is `peak_flops` (FLOP/s). All 0 when seconds <= 0.
FlopFigures flop_figures(const Model& m, const TrainingConfig& t, double hardware_flops,
                         double seconds, double peak_flops, int gpus);

}  // namespace cost
}  // namespace hexi
