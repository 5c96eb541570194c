#include "scheduler/cost/cost_model.hpp"

#include <algorithm>
#include <cmath>

#include "topologies/enum_names.hpp"

namespace hexi {
inline namespace cost {
namespace {

// A GEMM (m x k) * (k x n): 2mkn FLOPs, reads both operands and writes the result.
Kernel gemm(std::string_view name, double m, double n, double k, double e) {
  Kernel g{name, KernelClass::kGemm, 2 * m * n * k, e * (m * k + k * n + m * n)};
  g.m = m;
  g.n = n;
  g.k = k;
  return g;
}

Kernel elementwise(std::string_view name, double bytes) {
  return {name, KernelClass::kElementwise, 0, bytes};
}

// `groups` GEMMs of one shape (m x k) * (k x n), one kernel (a grouped GEMM: the experts of
// an MoE layer, each on its own tokens and weights). The device model reads one group's shape.
Kernel grouped_gemm(std::string_view name, double groups, double m, double n, double k, double e) {
  Kernel g = gemm(name, m, n, k, e);
  g.flops *= groups;
  g.bytes *= groups;
  return g;
}

// The backward of a GEMM Y = X W, X (m x k), W (k x n): the input gradient
// dX = dY W^T (m x n)(n x k), as many FLOPs and bytes as the forward, and the weight gradient
// dW = X^T dY (k x m)(m x n), as many FLOPs, accumulated into the fp32 gradient buffer
// (Megatron's gradient-accumulation fusion, main_grad; the engine's GEMM with beta 1): it
// reads X and dY at e bytes per element and reads and writes dW at 4 bytes each. A grouped
// GEMM's backward is `groups` of these.
void gemm_backward(std::vector<Kernel>& out, const Kernel& fwd, double e, std::string_view dgrad,
                   std::string_view wgrad, double groups = 1) {
  Kernel d = fwd, w = fwd;
  d.name = dgrad;
  d.n = fwd.k;
  d.k = fwd.n;
  w.name = wgrad;
  w.m = fwd.k;
  w.k = fwd.m;
  w.bytes = groups * (e * (fwd.m * fwd.k + fwd.m * fwd.n) + 2 * 4 * fwd.k * fwd.n);
  out.push_back(d);
  out.push_back(w);
}

// A copy of `k` under another (static) name: a recomputed forward kernel.
Kernel renamed(const Kernel& k, std::string_view name) {
  Kernel out = k;
  out.name = name;
  return out;
}

double causal_factor(const TrainingConfig& t) {
  return t.attention == AttentionKernel::kFlash ? 0.5 : 1.0;
}

Kernel attention_core(const Model& m, const TrainingConfig& t, int b, double phi) {
  const double e = t.bytes_per_element(), s = t.seq_len, h = m.hidden, kd = m.kv_dim();
  double flops = 4.0 * b * s * s * h * phi * causal_factor(t);
  double bytes = e * b * s * phi * (2 * h + 2 * kd);  // read q, k, v; write o
  Kernel k{"attention", KernelClass::kAttention, flops, bytes};
  if (t.attention == AttentionKernel::kDense) {
    k.score_bytes = 4 * e * b * m.heads * phi * s * s;  // write scores, softmax r+w, read in AV
    k.bytes += k.score_bytes;
  }
  k.m = b * m.heads * phi;
  k.n = s;
  k.k = m.head_dim();
  return k;
}

// Megatron's fused bias + dropout + residual add: reads the block output and the residual,
// writes the sum (e bytes each) and, with dropout, a 1-byte mask per element.
Kernel residual(const Model& m, std::string_view plain, std::string_view fused, double e,
                double elements) {
  if (!m.bias && !m.dropout) return elementwise(plain, 3 * e * elements);
  return elementwise(fused, (3 * e + (m.dropout ? 1 : 0)) * elements);
}

// What a TP rank computes of an MoE layer's routed experts for bs tokens: `groups` experts
// (grouped GEMMs) of `width` columns each, on `rows` token rows in all.
//   - Dropless routing: bs k rows over all experts, mean bs k / E each. A rank holding every
//     expert (by columns or whole) runs them all whatever the skew. A rank holding a share
//     of the experts whole runs its share of the mean rows plus the busiest expert's excess
//     (imbalance - 1) bs k / E: the layer waits for the rank that holds it, and which
//     expert is busiest changes from layer to layer and step to step.
//   - A capacity factor C: every expert is padded to C bs k / E rows.
struct ExpertWork {
  double groups, width, rows;
};
ExpertWork expert_work(const Model& m, double bs, double phi, double experts) {
  const double all = m.moe.experts, mean = bs * m.moe.top_k / all;
  const double groups = experts < 0 ? all : experts * all;
  const double width = experts < 0 ? phi * m.ffn : m.ffn;
  if (m.moe.capacity_factor > 0) return {groups, width, groups * m.moe.capacity_factor * mean};
  if (experts < 0) return {groups, width, all * mean};
  const double excess = groups > 0 ? (m.moe.imbalance - 1) * mean : 0;
  return {groups, width, std::min(groups * mean + excess, all * mean)};
}

// An MoE block's forward on a TP rank, for bs tokens, `mine` of them its own (sequence
// parallelism). The router runs on every token on every rank; each token's row is copied to
// its top_k experts (permute), the rank's experts run as grouped GEMMs on their rows
// (expert_work: the mean, the busiest expert's excess or the capacity), and their outputs
// are weighted and summed back per token
// (unpermute; Megatron-LM's all-gather dispatcher, whose communication is the TP group's, as
// for a dense MLP). The rank holds phi of every expert's columns, or `experts` of the
// experts whole; phi of the shared experts' columns.
std::vector<Kernel> moe_forward(const Model& m, const TrainingConfig& t, double bs, double phi,
                                double mine, double experts) {
  const double e = t.bytes_per_element(), h = m.hidden, all = m.moe.experts;
  const ExpertWork w = expert_work(m, bs, phi, experts);
  const double per_expert = w.groups > 0 ? w.rows / w.groups : 0;
  std::vector<Kernel> out{elementwise("mlp_norm", 2 * e * mine * h), gemm("router", bs, all, h, e),
                          elementwise("router_topk", bs * all * (e + 4) + 8 * bs * m.moe.top_k)};
  if (w.groups > 0) {
    out.push_back(elementwise("permute", 2 * e * w.rows * h));
    out.push_back(grouped_gemm("experts.gate_up", w.groups, per_expert, 2 * w.width, h, e));
    out.push_back(elementwise("swiglu", 3 * e * w.rows * w.width));
    out.push_back(grouped_gemm("experts.down", w.groups, per_expert, h, w.width, e));
  }
  out.push_back(elementwise("unpermute", e * (2 * w.rows + bs) * h));
  if (m.moe.shared_ffn > 0) {
    const double fs = m.moe.shared_ffn;
    out.push_back(gemm("shared.gate_up", bs, 2 * phi * fs, h, e));
    out.push_back(elementwise("swiglu", 3 * e * bs * phi * fs));
    out.push_back(gemm("shared.down", bs, h, phi * fs, e));
  }
  out.push_back(residual(m, "mlp_residual", "mlp_bias_dropout_add", e, mine * h));
  return out;
}

}  // namespace

std::string_view to_string(KernelClass c) {
  return kKernelClassNames.name(c);
}

std::string_view to_string(Block b) {
  return kBlockNames.name(b);
}

double token_share(const TrainingConfig& t, int tp) {
  return t.sequence_parallel && tp > 1 ? 1.0 / tp : 1.0;
}

std::vector<Kernel> block_forward(const Model& m, const TrainingConfig& t, Block block, int b,
                                  double phi, double share, double experts) {
  const double e = t.bytes_per_element(), bs = static_cast<double>(b) * t.seq_len;
  const double h = m.hidden, f = m.ffn, kd = m.kv_dim();
  const double mine = share * bs;  // tokens of the norms and residual adds
  if (block == Block::kAttention) {
    std::vector<Kernel> out{elementwise("attn_norm", 2 * e * mine * h),
                            gemm("qkv", bs, phi * (h + 2 * kd), h, e)};
    if (m.bias) out.push_back(elementwise("qkv_bias", 2 * e * bs * phi * (h + 2 * kd)));
    // Learned positions are added once, at the embedding: no rotary embedding per layer.
    if (!m.learned_positions) out.push_back(elementwise("rope", 2 * e * bs * phi * (h + kd)));
    out.push_back(attention_core(m, t, b, phi));
    if (m.dropout && t.attention == AttentionKernel::kDense) {
      // Dropout of the materialised probabilities: read, write, 1-byte mask (the flash
      // kernel drops inside the kernel).
      const double s = t.seq_len;
      out.push_back(elementwise("attn_dropout", (2 * e + 1) * b * m.heads * phi * s * s));
    }
    out.push_back(gemm("out_proj", bs, h, phi * h, e));
    out.push_back(residual(m, "attn_residual", "attn_bias_dropout_add", e, mine * h));
    return out;
  }
  if (m.is_moe()) return moe_forward(m, t, bs, phi, mine, experts);
  if (m.mlp == MlpKind::kSwiGlu) {
    return {elementwise("mlp_norm", 2 * e * mine * h), gemm("gate_up", bs, 2 * phi * f, h, e),
            elementwise("swiglu", 3 * e * bs * phi * f), gemm("down", bs, h, phi * f, e),
            residual(m, "mlp_residual", "mlp_bias_dropout_add", e, mine * h)};
  }
  // GELU MLP; with biases, Megatron fuses fc1's bias add into the GELU kernel.
  return {elementwise("mlp_norm", 2 * e * mine * h), gemm("fc1", bs, phi * f, h, e),
          elementwise(m.bias ? "bias_gelu" : "gelu", 2 * e * bs * phi * f),
          gemm("fc2", bs, h, phi * f, e),
          residual(m, "mlp_residual", "mlp_bias_dropout_add", e, mine * h)};
}

std::vector<Kernel> block_backward(const Model& m, const TrainingConfig& t, Block block, int b,
                                   double phi) {
  return block_backward(m, t, block, b, phi, t.recompute);
}

int recompute_all_reduces(Recompute r) {
  return r == Recompute::kFull ? 2 : 0;
}

TpCollectives tp_collectives(const TrainingConfig& t, int layers, bool first, bool last,
                             bool forward, Recompute r) {
  const int all_reduces = forward ? 2 * layers + (first ? 1 : 0)
                                  : (2 + recompute_all_reduces(r)) * layers + (last ? 1 : 0);
  if (!t.sequence_parallel) return {Collective::kAllReduce, all_reduces};
  const int gathers = forward ? all_reduces - (first ? 1 : 0) + (last ? 1 : 0)
                              : all_reduces - (last ? 1 : 0) + (first ? 1 : 0);
  return {Collective::kAllGather, all_reduces + gathers};
}

std::vector<Kernel> block_backward(const Model& m, const TrainingConfig& t, Block block, int b,
                                   double phi, Recompute r, double share, double experts) {
  std::vector<Kernel> fwd = block_forward(m, t, block, b, phi, share, experts);
  const double e = t.bytes_per_element();
  std::vector<Kernel> out;
  if (r == Recompute::kFull) {
    for (const auto& k : fwd) out.push_back(renamed(k, "recompute"));
  } else if (r == Recompute::kSelective && block == Block::kAttention &&
             t.attention == AttentionKernel::kDense) {
    out.push_back(renamed(attention_core(m, t, b, phi), "recompute"));
  }
  // Walk the forward in reverse; names stay static strings.
  for (auto it = fwd.rbegin(); it != fwd.rend(); ++it) {
    const Kernel& k = *it;
    if (k.cls == KernelClass::kGemm) {
      std::string_view n = k.name;
      if (n == "qkv") gemm_backward(out, k, e, "qkv.dgrad", "qkv.wgrad");
      if (n == "out_proj") gemm_backward(out, k, e, "out_proj.dgrad", "out_proj.wgrad");
      if (n == "gate_up") gemm_backward(out, k, e, "gate_up.dgrad", "gate_up.wgrad");
      if (n == "down") gemm_backward(out, k, e, "down.dgrad", "down.wgrad");
      if (n == "fc1") gemm_backward(out, k, e, "fc1.dgrad", "fc1.wgrad");
      if (n == "fc2") gemm_backward(out, k, e, "fc2.dgrad", "fc2.wgrad");
      if (n == "router") gemm_backward(out, k, e, "router.dgrad", "router.wgrad");
      if (n == "shared.gate_up")
        gemm_backward(out, k, e, "shared.gate_up.dgrad", "shared.gate_up.wgrad");
      if (n == "shared.down") gemm_backward(out, k, e, "shared.down.dgrad", "shared.down.wgrad");
      const double groups = expert_work(m, 0, phi, experts).groups;
      if (n == "experts.gate_up")
        gemm_backward(out, k, e, "experts.gate_up.dgrad", "experts.gate_up.wgrad", groups);
      if (n == "experts.down")
        gemm_backward(out, k, e, "experts.down.dgrad", "experts.down.wgrad", groups);
    } else if (k.cls == KernelClass::kAttention) {
      Kernel bwd = renamed(k, "attention.bwd");
      bwd.flops = 2 * k.flops;
      bwd.bytes = 2 * k.bytes;
      bwd.score_bytes = 2 * k.score_bytes;
      bwd.backward = true;
      out.push_back(bwd);
    } else {
      out.push_back({"elementwise.bwd", k.cls, 0, 2 * k.bytes});
    }
  }
  return out;
}

std::vector<Kernel> embedding_forward(const Model& m, const TrainingConfig& t, int b,
                                      double share) {
  const double e = t.bytes_per_element(), bsh = static_cast<double>(b) * t.seq_len * m.hidden;
  std::vector<Kernel> out{elementwise("embedding", 2 * e * bsh)};  // gather rows, write
  // GPT: add the position rows (read both, write the sum), then dropout (+ a 1-byte mask)
  // on the rank's tokens (after the reduce-scatter under sequence parallelism).
  if (m.learned_positions) out.push_back(elementwise("position_add", 3 * e * bsh));
  if (m.dropout) out.push_back(elementwise("embedding_dropout", (2 * e + 1) * share * bsh));
  return out;
}

std::vector<Kernel> embedding_backward(const Model& m, const TrainingConfig& t, int b,
                                       double share) {
  const double e = t.bytes_per_element(), bsh = static_cast<double>(b) * t.seq_len * m.hidden;
  std::vector<Kernel> out;
  if (m.dropout) out.push_back(elementwise("embedding_dropout.bwd", (2 * e + 1) * share * bsh));
  // The position table's gradient: the output gradient summed over the batch.
  if (m.learned_positions) out.push_back(elementwise("position_add.bwd", 2 * e * bsh));
  out.push_back(elementwise("embedding.bwd", 3 * e * bsh));  // scatter-add into the table
  return out;
}

// The logits GEMM (bs x h)(h x v). Megatron pads the vocabulary to a multiple of 128 x TP
// (--make-vocab-size-divisible-by), so the shape the device model sees is the padded
// width (no misalignment for GPT-2's 50257); FLOPs and bytes stay the real vocabulary's.
namespace {
Kernel logits(double bs, double v, double h, double e) {
  Kernel k = gemm("logits", bs, v, h, e);
  k.n = std::ceil(v / 128) * 128;
  return k;
}
}  // namespace

std::vector<Kernel> head_forward(const Model& m, const TrainingConfig& t, int b, double phi,
                                 double share) {
  const double e = t.bytes_per_element(), bs = static_cast<double>(b) * t.seq_len;
  const double h = m.hidden, v = phi * m.vocab;
  return {elementwise("final_norm", 2 * e * share * bs * h), logits(bs, v, h, e),
          elementwise("cross_entropy", bs * v * (e + 4))};
}

std::vector<Kernel> head_backward(const Model& m, const TrainingConfig& t, int b, double phi,
                                  double share) {
  const double e = t.bytes_per_element(), bs = static_cast<double>(b) * t.seq_len;
  const double h = m.hidden, v = phi * m.vocab;
  std::vector<Kernel> out{elementwise("cross_entropy.bwd", bs * v * (e + 4))};
  gemm_backward(out, logits(bs, v, h, e), e, "logits.dgrad", "logits.wgrad");
  out.push_back(elementwise("final_norm.bwd", 4 * e * share * bs * h));
  return out;
}

namespace {

// x / (x + half): 1 for an unknown (0) size or no half point.
double saturation(double x, double half) {
  return x > 0 ? x / (x + half) : 1.0;
}

// A whole-number dimension that is not a multiple of 8 elements (16 bytes at 2 bytes each).
bool misaligned(double x) {
  return x > 0 && x == std::floor(x) && std::fmod(x, 8.0) != 0;
}

}  // namespace

double gemm_efficiency(const DeviceProfile& p, int sms, double m, double n, double k) {
  double eff = p.gemm_ceiling;
  if (p.gemm_tile_m > 0 && p.gemm_tile_n > 0 && sms > 0 && m > 0 && n > 0) {
    // The last wave of tiles keeps only some SMs busy; partial tiles compute padding.
    const double tiles = std::ceil(m / p.gemm_tile_m) * std::ceil(n / p.gemm_tile_n);
    const double waves = std::ceil(tiles / sms);
    eff *= m * n / (waves * sms * p.gemm_tile_m * p.gemm_tile_n);
  }
  eff *= saturation(k, p.gemm_k_half) * saturation(m, p.gemm_m_half);
  if (misaligned(m) || misaligned(n) || misaligned(k)) eff *= p.gemm_misaligned;
  return eff;
}

double attention_efficiency(const DeviceProfile& p, bool backward, double seq, double head_dim) {
  double eff = backward ? p.attention_bwd : p.attention_fwd;
  eff *= saturation(seq, backward ? p.attention_s_half_bwd : p.attention_s_half_fwd);
  const double dh = p.attention_d_half;
  if (head_dim > 0 && dh > 0) eff *= saturation(head_dim, dh) / saturation(128, dh);
  return eff;
}

double kernel_time(const Kernel& k, const GpuSpec& gpu, const DeviceProfile& p) {
  const double bandwidth = gpu.memory_GBps * 1e9 * p.memory_efficiency;  // bytes/s
  if (k.cls == KernelClass::kElementwise) return p.kernel_overhead_s + k.bytes / bandwidth;
  if (k.cls == KernelClass::kAttention && k.score_bytes > 0) {
    // Dense path: score GEMMs (inner dimension the head dim), softmax and copies in turn.
    const double eff =
        p.gemm_ceiling * saturation(k.k, p.gemm_k_half) * saturation(k.n, p.gemm_m_half);
    const double traffic =
        k.backward ? p.attention_dense_traffic_bwd : p.attention_dense_traffic_fwd;
    const double bytes =
        p.attention_dense_token_traffic * (k.bytes - k.score_bytes) + traffic * k.score_bytes;
    return p.kernel_overhead_s + k.flops / (gpu.flops() * eff) + bytes / bandwidth;
  }
  const double eff = k.cls == KernelClass::kGemm ? gemm_efficiency(p, gpu.sms, k.m, k.n, k.k)
                                                 : attention_efficiency(p, k.backward, k.n, k.k);
  return p.kernel_overhead_s + std::max(k.flops / (gpu.flops() * eff), k.bytes / bandwidth);
}

double kernels_time(const std::vector<Kernel>& ks, const GpuSpec& gpu, const DeviceProfile& p) {
  double sum = 0;
  for (const auto& k : ks) sum += kernel_time(k, gpu, p);
  return sum;
}

double kernels_flops(const std::vector<Kernel>& ks) {
  double sum = 0;
  for (const auto& k : ks) sum += k.flops;
  return sum;
}

double layer_forward_flops(const Model& m, const TrainingConfig& t, int b) {
  return kernels_flops(block_forward(m, t, Block::kAttention, b, 1.0)) +
         kernels_flops(block_forward(m, t, Block::kMlp, b, 1.0));
}

double iteration_flops(const Model& m, const TrainingConfig& t) {
  const int b = t.global_batch;
  double layer = kernels_flops(block_forward(m, t, Block::kAttention, b, 1.0)) +
                 kernels_flops(block_forward(m, t, Block::kMlp, b, 1.0)) +
                 kernels_flops(block_backward(m, t, Block::kAttention, b, 1.0)) +
                 kernels_flops(block_backward(m, t, Block::kMlp, b, 1.0));
  double head =
      kernels_flops(head_forward(m, t, b, 1.0)) + kernels_flops(head_backward(m, t, b, 1.0));
  return m.layers * layer + head;
}

double model_flops(const Model& m, const TrainingConfig& t) {
  return 3 * (m.layers * layer_forward_flops(m, t, t.global_batch) +
              kernels_flops(head_forward(m, t, t.global_batch, 1.0)));
}

double megatron_flops(const Model& m, double batch, double seq) {
  const double h = m.hidden, L = m.layers, V = m.vocab;
  return 96 * batch * seq * L * h * h * (1 + seq / (6 * h) + V / (16 * L * h));
}

double hidden_bytes(const Model& m, const TrainingConfig& t, int b) {
  return static_cast<double>(t.bytes_per_element()) * b * t.seq_len * m.hidden;
}

double activation_bytes_per_layer(const Model& m, const TrainingConfig& t, int b, int tp,
                                  double phi) {
  return activation_bytes_per_layer(m, t, b, tp, phi, t.recompute);
}

double activation_bytes_per_layer(const Model& m, const TrainingConfig& t, int b, int tp,
                                  double phi, Recompute r, double experts) {
  const double e = t.bytes_per_element(), s = t.seq_len, h = m.hidden, f = m.ffn;
  const double kd = m.kv_dim(), a = m.heads;
  const double sbh = s * b * h;
  const double sp_div = t.sequence_parallel ? tp : 1;
  if (r == Recompute::kFull) return e * sbh / sp_div;
  double kept = e * sbh * 4 + (m.dropout ? 2 * sbh : 0);
  double split =
      e * (2 * sbh + 2 * s * b * kd) + e * s * b * f * (m.mlp == MlpKind::kSwiGlu ? 3 : 2);
  double whole = 0;  // on every rank, whole
  if (m.is_moe()) {
    // The rank's experts' gate, up and SwiGLU outputs for their rows and the shared experts'
    // (phi of their columns); the permuted input rows and the experts' output rows (the
    // weighted sum's backward needs them) and the router's logits and probabilities.
    const ExpertWork w = expert_work(m, s * b, phi, experts);
    split = e * (2 * sbh + 2 * s * b * kd) + 3 * e * s * b * m.moe.shared_ffn;
    whole = 3 * e * w.rows * w.width + 2 * e * w.rows * h + (e + 4) * s * b * m.moe.experts;
  }
  double core = 0;
  if (t.attention == AttentionKernel::kFlash) {
    core = 4 * a * s * b;
  } else if (r == Recompute::kNone) {
    core = (e + (m.dropout ? 1 + e : 0)) * a * s * s * b;
  }
  return kept / sp_div + whole + (split + core) * phi;
}

StageShape whole_model_shape(const Model& m, int micro_batch, std::optional<Recompute> r) {
  StageShape whole;
  whole.layer_end = m.layers;
  whole.first = whole.last = true;
  whole.micro_batch = micro_batch;
  whole.recompute = r;
  return whole;
}

int in_flight_micro_batches(PipelineSchedule s, int stage, int stages, int micro_batches) {
  if (s == PipelineSchedule::kGPipe) return micro_batches;
  return std::min(stages - stage, micro_batches);
}

double stage_params(const Model& m, const StageShape& s) {
  const double layers = s.layer_end - s.layer_begin;
  double p = layers * ((m.attention_params() + m.mlp_params()) * s.phi + m.norm_params() +
                       m.router_params());
  if (m.is_moe() && s.experts >= 0) {  // whole experts instead of phi of each one's columns
    const double routed = 3.0 * m.hidden * m.ffn * m.moe.experts;
    p += layers * routed * (s.experts - s.phi);
  }
  const double table = static_cast<double>(m.vocab) * m.hidden;
  if (s.first) p += table * s.phi + (m.embedding_params() - table);  // positions replicated
  if (s.last) {
    double final_norm = static_cast<double>(m.hidden) * (m.layer_norm ? 2 : 1);
    p += final_norm + table * s.phi;  // untied head, or the tied copy of the embedding
  }
  if (s.first && s.last && m.tied_embeddings) p -= table * s.phi;  // one copy when shared in place
  return p;
}

MemoryBreakdown device_memory(const Model& m, const TrainingConfig& t, const StageShape& s) {
  MemoryBreakdown mem;
  const double params = stage_params(m, s);
  const double e = t.bytes_per_element();
  // Mixed-precision Adam: 16 bytes/param = e weights + e grads + fp32 master/moments.
  mem.weights = e * params;
  mem.gradients = e * params;
  const double optimizer_bytes = 16 - 2 * e;
  mem.optimizer = optimizer_bytes * params / (t.zero_stage >= 1 ? s.dp : 1);
  const double layers = s.layer_end - s.layer_begin;
  mem.activations = layers * s.in_flight *
                    activation_bytes_per_layer(m, t, s.micro_batch, s.tp, s.phi,
                                               s.recompute.value_or(t.recompute), s.experts);
  if (s.first)
    mem.activations += s.in_flight * hidden_bytes(m, t, s.micro_batch);  // embedding output
  if (s.last) {
    mem.logits = static_cast<double>(s.micro_batch) * t.seq_len * m.vocab * s.phi * (e + 4);
  }
  mem.reserve = t.reserve_gib * kGiB;
  return mem;
}

Json MemoryBreakdown::to_json() const {
  return {{"weights_gib", weights / kGiB},     {"gradients_gib", gradients / kGiB},
          {"optimizer_gib", optimizer / kGiB}, {"activations_gib", activations / kGiB},
          {"logits_gib", logits / kGiB},       {"reserve_gib", reserve / kGiB},
          {"total_gib", total() / kGiB}};
}

}  // namespace cost
}  // namespace hexi
