#include "studies/advise_bound.hpp"

#include <algorithm>
#include <limits>

#include "scheduler/cost/cost_model.hpp"

namespace hexi {
inline namespace studies {
namespace {

double compute_flops(const std::vector<Kernel>& ks) {
  double f = 0;
  for (const Kernel& k : ks) {
    if (k.cls != KernelClass::kElementwise) f += k.flops;
  }
  return f;
}

}  // namespace

double best_efficiency(const DeviceProfile& p, const Model& m) {
  constexpr double kLongest = 1e30;  // tokens: the sequence saturation term is 1
  return std::max({p.gemm_ceiling * std::max(1.0, p.gemm_misaligned),
                   attention_efficiency(p, false, kLongest, m.head_dim()),
                   attention_efficiency(p, true, kLongest, m.head_dim())});
}

double min_flops_per_token(const Model& m, const TrainingConfig& t) {
  const int b = t.micro_batch;
  double layer = 0;
  for (Block block : {Block::kAttention, Block::kMlp}) {
    layer += compute_flops(block_forward(m, t, block, b, 1.0)) +
             compute_flops(block_backward(m, t, block, b, 1.0, Recompute::kNone));
  }
  const double head =
      compute_flops(head_forward(m, t, b, 1.0)) + compute_flops(head_backward(m, t, b, 1.0));
  return (m.layers * layer + head) / (static_cast<double>(b) * t.seq_len);
}

double tokens_per_s_bound(const GpuSpec& gpu, const Profile& profile, const Model& m,
                          const TrainingConfig& t) {
  return gpu.flops() * best_efficiency(profile.device(gpu), m) / min_flops_per_token(m, t);
}

double layer_tokens_per_s_bound(const GpuSpec& gpu, const Profile& profile, const Model& m,
                                const TrainingConfig& t) {
  const DeviceProfile p = profile.device(gpu);
  const int b = t.micro_batch;
  double best = std::numeric_limits<double>::infinity();  // s per whole layer and micro-batch
  for (int k = 1; k <= m.heads; ++k) {
    const double phi = static_cast<double>(k) / m.heads;
    double s = 0;
    for (Block block : {Block::kAttention, Block::kMlp}) {
      s += kernels_time(block_forward(m, t, block, b, phi), gpu, p) +
           kernels_time(block_backward(m, t, block, b, phi, Recompute::kNone), gpu, p);
    }
    best = std::min(best, s / phi);
  }
  return static_cast<double>(b) * t.seq_len / (m.layers * best);
}

}  // namespace studies
}  // namespace hexi
