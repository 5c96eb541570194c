#include "scheduler/cost/flop_figures.hpp"

#include "scheduler/cost/cost_model.hpp"

namespace hexi {
inline namespace cost {

void FlopFigures::add_to(Json& j) const {
  j["hfu"] = hfu;
  j["hardware_tflops_per_gpu"] = hardware_tflops_per_gpu;
  j["model_tflops_per_gpu"] = model_tflops_per_gpu;
  j["megatron_tflops_per_gpu"] = megatron_tflops_per_gpu;
  j["mfu_convention"] = mfu_convention;
}

FlopFigures FlopFigures::from_json(const Json& j) {
  FlopFigures f;
  f.hfu = j.at("hfu").get<double>();
  f.hardware_tflops_per_gpu = j.at("hardware_tflops_per_gpu").get<double>();
  f.model_tflops_per_gpu = j.at("model_tflops_per_gpu").get<double>();
  f.megatron_tflops_per_gpu = j.at("megatron_tflops_per_gpu").get<double>();
  f.mfu_convention = j.at("mfu_convention").get<std::string>();
  return f;
}

std::string attention_convention(const TrainingConfig& t) {
  return t.attention == AttentionKernel::kFlash ? "causal attention halved"
                                                : "attention not halved";
}

std::string mfu_convention(const TrainingConfig& t) {
  return "model FLOPs: 3x forward, no recompute, " + attention_convention(t) +
         (t.attention == AttentionKernel::kFlash ? " (flash kernel)" : " (dense kernel)");
}

FlopFigures flop_figures(const Model& m, const TrainingConfig& t, double hardware_flops,
                         double seconds, double peak_flops, int gpus) {
  FlopFigures f;
  f.mfu_convention = mfu_convention(t);
  if (seconds <= 0 || gpus <= 0) return f;
  const double model = model_flops(m, t);
  const double megatron = megatron_flops(m, t.global_batch, t.seq_len);
  f.hfu = hardware_flops / (seconds * peak_flops);
  const double per_gpu = 1e12 * seconds * gpus;  // FLOP per TFLOP/s per GPU
  f.hardware_tflops_per_gpu = hardware_flops / per_gpu;
  f.model_tflops_per_gpu = model / per_gpu;
  f.megatron_tflops_per_gpu = megatron / per_gpu;
  return f;
}

}  // namespace cost
}  // namespace hexi
