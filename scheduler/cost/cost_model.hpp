#pragma once
// Closed-form cost model: the kernels of a Llama/GPT decoder with their
// FLOPs, HBM bytes and shapes, their time on a GPU (the shape-aware device model of
// topologies/profile.hpp), FLOP totals, and memory per device.
//
// Notation: b micro-batch, s sequence, h hidden, f ffn, a heads, k kv heads,
// d = h/a, kd = k*d, V vocab, L layers, t TP degree, e bytes per element,
// phi = the fraction of heads (and ffn columns, and vocab) a TP rank holds (1/t when even).
//
// Forward FLOPs of one layer (whole, phi = 1):
//   QKV 2bsh(h + 2kd) + scores&AV 4bs^2h * c + out-proj 2bsh^2 + MLP (SwiGLU 6bshf | GELU 4bshf)
// with c = 1/2 for the flash kernel (the causal mask skips half of the blocks) and
// c = 1 for the dense kernel (Megatron's accounting). Backward = 2x forward; full
// recompute adds one forward; selective recompute with the dense kernel adds the
// attention core's forward. Logits 2bshV.
//
// Element-wise kernels (bytes read + written, e per element): Llama norms, RoPE on q and k,
// SwiGLU, residual adds. GPT (learned positions, biases, dropout, GELU; Megatron's fused
// kernels): no RoPE; the QKV bias add (its own kernel); bias + GELU fused after fc1;
// bias + dropout + residual fused after out-proj and fc2 (plus a 1-byte mask per element);
// the dense kernel's attention dropout (mask + probabilities); the position embedding add
// and embedding dropout.
//
// Activation bytes of one layer per micro-batch (Korthikanti et al. 2022, "Reducing
// Activation Recomputation in Large Transformer Models", generalised to SwiGLU, GQA
// and the flash kernel; equal to their sbh(34 + 5as/h) for GPT shapes):
//   kept on every TP rank: 2 norm inputs, QKV input, MLP input (e*sbh each) + 2 dropout masks (sbh)
//   split over TP:        Q (e*sbh), K and V (e*s*b*kd each), out-proj input (e*sbh),
//                         MLP intermediates (GELU 2, SwiGLU 3 tensors of e*sbf)
//   attention core:       dense: softmax e*as^2b (+ dropout mask as^2b + output e*as^2b);
//                         flash: the fp32 log-sum-exp 4asb
// Sequence parallel splits everything over TP; selective recompute drops the dense
// core; full recompute keeps only the layer input (e*sbh).

#include <optional>
#include <string_view>
#include <vector>

#include "scenarios/model.hpp"
#include "scenarios/training.hpp"
#include "scheduler/cost/collectives.hpp"
#include "topologies/enum_names.hpp"
#include "topologies/gpu_catalog.hpp"
#include "topologies/json_input.hpp"
#include "topologies/profile.hpp"

namespace hexi {
inline namespace cost {

enum class KernelClass { kGemm, kAttention, kElementwise };
inline constexpr auto kKernelClassNames =
    enum_names<KernelClass>({{KernelClass::kGemm, "gemm"},
                             {KernelClass::kAttention, "attention"},
                             {KernelClass::kElementwise, "elementwise"}});
std::string_view to_string(KernelClass c);

// One kernel on one device for one micro-batch.
struct Kernel {
  std::string_view name;  // static string, e.g. "qkv", "qkv.dgrad"
  KernelClass cls = KernelClass::kElementwise;
  double flops = 0;  // FLOP
  double bytes = 0;  // HBM bytes read + written
  // The shape the device model reads; 0 where unknown (the class's large-shape rate).
  // gemm: (m x k)(k x n); attention: m = sequences x heads, n = sequence length, k = head dim.
  double m = 0, n = 0, k = 0;
  double score_bytes = 0;  // dense attention: the s^2 scores' share of `bytes`; 0: flash
  bool backward = false;   // attention: the backward kernel
};

// A decoder layer is two blocks, each ending in a TP all-reduce (Megatron).
enum class Block { kAttention, kMlp };
inline constexpr auto kBlockNames =
    enum_names<Block>({{Block::kAttention, "attn"}, {Block::kMlp, "mlp"}});
std::string_view to_string(Block b);

// The share of a micro-batch's tokens that a TP rank's token-wise kernels (norms, residual
// adds, dropout) run on: 1, or 1/tp under sequence parallelism (Megatron-LM's: the
// activations between the TP regions are split by tokens over the group).
double token_share(const TrainingConfig& t, int tp);

// Kernels of one block's forward / backward on one TP rank holding `phi` of the
// heads and ffn columns and `share` of the tokens of its token-wise kernels (token_share).
// A mixture of experts' rank holds `experts` of the routed experts whole (a fraction,
// Stage::expert_share), or, when negative, phi of every expert's columns.
// Backward includes recompute: `r` (a stage's own choice), or the training config's when
// not given.
std::vector<Kernel> block_forward(const Model& m, const TrainingConfig& t, Block block, int b,
                                  double phi, double share = 1.0, double experts = -1);
std::vector<Kernel> block_backward(const Model& m, const TrainingConfig& t, Block block, int b,
                                   double phi);
std::vector<Kernel> block_backward(const Model& m, const TrainingConfig& t, Block block, int b,
                                   double phi, Recompute r, double share = 1.0,
                                   double experts = -1);
// TP all-reduces per layer that recompute adds to the backward (full: the replayed
// forward's two; none / selective: 0). Under sequence parallelism each is a reduce-scatter
// and an all-gather: the same bytes and ring steps.
int recompute_all_reduces(Recompute r);
// The TP collectives of one micro-batch through a stage of `layers` layers (forward or
// backward), each of the whole b*s*h activation: all-reduces, 2 per layer (+ recompute's in
// the backward) and 1 after the embedding (first stage, forward) or the head (last stage,
// backward); under sequence parallelism a reduce-scatter where each all-reduce was and an
// all-gather before every block, the head (forward) or the embedding (backward), counted
// together as all-gathers (in a ring each costs what an all-gather does).
struct TpCollectives {
  Collective kind = Collective::kAllReduce;
  int count = 0;
};
TpCollectives tp_collectives(const TrainingConfig& t, int layers, bool first, bool last,
                             bool forward, Recompute r);
// Token (+ position) embedding, first stage. Vocab-parallel: a rank holds phi of the table;
// GPT's embedding dropout runs on `share` of the tokens.
std::vector<Kernel> embedding_forward(const Model& m, const TrainingConfig& t, int b,
                                      double share = 1.0);
std::vector<Kernel> embedding_backward(const Model& m, const TrainingConfig& t, int b,
                                       double share = 1.0);
// Final norm (on `share` of the tokens), logits (vocab-parallel, phi of V) and
// cross-entropy, last stage.
std::vector<Kernel> head_forward(const Model& m, const TrainingConfig& t, int b, double phi,
                                 double share = 1.0);
std::vector<Kernel> head_backward(const Model& m, const TrainingConfig& t, int b, double phi,
                                  double share = 1.0);

// Efficiencies (fractions of peak tensor FLOP/s) of the device model, topologies/profile.hpp.
double gemm_efficiency(const DeviceProfile& p, int sms, double m, double n, double k);
double attention_efficiency(const DeviceProfile& p, bool backward, double seq, double head_dim);
// time = overhead + max(FLOPs / (peak * eff(shape)), bytes / (HBM * memory_eff))  (s);
// the dense attention path adds its GEMM and memory times (separate kernels).
double kernel_time(const Kernel& k, const GpuSpec& gpu, const DeviceProfile& p);
double kernels_time(const std::vector<Kernel>& ks, const GpuSpec& gpu, const DeviceProfile& p);
double kernels_flops(const std::vector<Kernel>& ks);

// FLOPs of one whole layer's forward for micro-batch b (phi = 1).
double layer_forward_flops(const Model& m, const TrainingConfig& t, int b);
// Hardware FLOPs of one iteration (global batch), including recompute.
double iteration_flops(const Model& m, const TrainingConfig& t);
// Model FLOPs of one iteration: 3x forward, no recompute (the numerator of MFU).
double model_flops(const Model& m, const TrainingConfig& t);
// Megatron-LM's closed form for GPT with full recompute (Narayanan et al. 2021):
// 96 B s L h^2 (1 + s/6h + V/16Lh).
double megatron_flops(const Model& m, double batch, double seq);

// Bytes of the tensor that crosses a TP all-reduce or a stage boundary: b*s*h*e.
double hidden_bytes(const Model& m, const TrainingConfig& t, int b);

// Activation bytes one TP rank keeps for one layer and one micro-batch, under the
// training config's recompute or an explicit `r`.
double activation_bytes_per_layer(const Model& m, const TrainingConfig& t, int b, int tp,
                                  double phi);
double activation_bytes_per_layer(const Model& m, const TrainingConfig& t, int b, int tp,
                                  double phi, Recompute r, double experts = -1);

// What one device of a stage holds.
struct StageShape {
  int layer_begin = 0;
  int layer_end = 0;
  bool first = false;  // holds the embedding
  bool last = false;   // holds the head and computes the loss
  int tp = 1;
  double phi = 1.0;     // fraction of heads / ffn / vocab on this device
  double experts = -1;  // fraction of the routed experts held whole; < 0: phi of each one
  int in_flight = 1;    // micro-batches whose activations are alive at the peak
  int dp = 1;           // data-parallel replicas (ZeRO-1 shards optimizer state over them)
  int micro_batch = 1;
  std::optional<Recompute> recompute;  // the stage's choice; absent: the training config's
};

// The whole model as one stage on one device (every layer, the embedding and the head):
// the shape of memory lower bounds.
StageShape whole_model_shape(const Model& m, int micro_batch, std::optional<Recompute> r);

// Micro-batches a stage keeps alive: 1F1B min(p - stage, m), GPipe m.
int in_flight_micro_batches(PipelineSchedule s, int stage, int stages, int micro_batches);

struct MemoryBreakdown {
  double weights = 0;      // bytes
  double gradients = 0;    // bytes
  double optimizer = 0;    // bytes (fp32 master + Adam moments, / dp under ZeRO-1)
  double activations = 0;  // bytes, all in-flight micro-batches
  double logits = 0;       // bytes, last stage: logits + fp32 softmax of one micro-batch
  double reserve = 0;      // bytes, fixed per device
  double total() const { return weights + gradients + optimizer + activations + logits + reserve; }
  // Adds another chunk's memory held by the same device (interleaved 1F1B): every term
  // summed but the reserve, which is per device.
  void add_chunk(const MemoryBreakdown& m) {
    weights += m.weights;
    gradients += m.gradients;
    optimizer += m.optimizer;
    activations += m.activations;
    logits += m.logits;
    reserve = m.reserve;
  }
  Json to_json() const;  // in GiB
};

// Parameters a device holds (its layers' TP shards, norms replicated, embedding/head).
double stage_params(const Model& m, const StageShape& s);
MemoryBreakdown device_memory(const Model& m, const TrainingConfig& t, const StageShape& s);

constexpr double kGiB = 1073741824.0;

}  // namespace cost
}  // namespace hexi
