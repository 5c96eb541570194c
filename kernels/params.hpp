#pragma once
// Parameters of a Llama decoder, or of the part one device holds (a stage's layers on
// one TP shard), as named tensors in one flat buffer (like llm.c's ParameterTensors):
// one allocation for the weights, one for the gradients, two for AdamW's moments, and a
// layout that says where each tensor is and which part of the full tensor it holds.
//
// Tensor names and order of the full model (layout version 1; the oracle file and
// checkpoints use these names):
//   embedding                 (V, h)
//   layers.{l}.attn_norm      (h)
//   layers.{l}.wq             (a*d, h)
//   layers.{l}.wk, .wv        (k*d, h)
//   layers.{l}.wo             (h, a*d)
//   layers.{l}.mlp_norm       (h)
//   layers.{l}.w_gate, .w_up  (f, h)
//   layers.{l}.w_down         (h, f)
//   or, for a mixture of experts (E routed experts, shared experts of width F):
//   layers.{l}.router         (E, h)        replicated
//   layers.{l}.experts.w_gate, .experts.w_up  (E, f*h)  expert e's (f, h) matrix in row e
//   layers.{l}.experts.w_down (E*h, f)      expert e's (h, f) matrix in rows [e*h, (e+1)*h)
//   layers.{l}.shared.w_gate, .shared.w_up  (F, h)      when F > 0
//   layers.{l}.shared.w_down  (h, F)
//   final_norm                (h)
//   head                      (V, h)        (untied from the embedding)

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/aligned.hpp"
#include "kernels/blocks.hpp"
#include "kernels/shapes.hpp"

namespace hexi::kernels {

inline constexpr int kLayoutVersion = 1;

// One tensor of a layout: a (rows, cols) block of the full (full_rows, full_cols)
// tensor starting at (row_begin, col_begin). A vector is (1, n).
struct TensorInfo {
  std::string name;
  int id = 0;  // index of the tensor in the full model's layout (its init stream)
  int rows = 0;
  int cols = 0;
  int full_rows = 0;
  int full_cols = 0;
  int row_begin = 0;
  int col_begin = 0;
  std::size_t offset = 0;   // elements into the flat buffer
  bool decay = true;        // AdamW weight decay applies (matrices; not norm gains)
  bool replicated = false;  // the whole tensor on every TP rank (norm gains)

  std::size_t size() const { return static_cast<std::size_t>(rows) * cols; }
};

struct ParamLayout {
  std::vector<TensorInfo> tensors;
  std::size_t total = 0;  // elements

  const TensorInfo* find(std::string_view name) const;  // nullptr when absent
};

// What one device holds: layers [layer_begin, layer_end) of the model on one TP shard,
// plus the embedding (first stage) and final norm + head (last stage), vocab-sharded.
struct StageSpec {
  int layer_begin = 0;
  int layer_end = 0;
  bool embedding = false;
  bool head = false;
  TpShard shard;
};
StageSpec whole_model(const LlamaDims& d);  // every layer, embedding, head, full_shard

ParamLayout model_layout(const LlamaDims& d);  // == stage_layout(d, whole_model(d))
ParamLayout stage_layout(const LlamaDims& d, const StageSpec& s);

// A flat buffer with its layout.
template <class T>
struct Params {
  ParamLayout layout;
  AlignedVector<T> data;  // 64-byte aligned: the same bits from the same inputs (aligned.hpp)

  Params() = default;
  explicit Params(ParamLayout l) : layout(std::move(l)), data(layout.total, T(0)) {}

  T* get(const TensorInfo& t) { return data.data() + t.offset; }
  const T* get(const TensorInfo& t) const { return data.data() + t.offset; }
  T* get(std::string_view name);              // throws std::out_of_range when absent
  const T* get(std::string_view name) const;  // throws std::out_of_range when absent
  void zero() { std::fill(data.begin(), data.end(), T(0)); }
};

// Views of layer `l` (a global layer index held by the layout) for the block functions.
template <class T>
AttentionWeights<T> attention_weights(const Params<T>& p, int layer);
template <class T>
AttentionGrads<T> attention_grads(Params<T>& g, int layer);
template <class T>
MlpWeights<T> mlp_weights(const Params<T>& p, int layer);
template <class T>
MlpGrads<T> mlp_grads(Params<T>& g, int layer);
template <class T>
HeadWeights<T> head_weights(const Params<T>& p);
template <class T>
HeadGrads<T> head_grads(Params<T>& g);

// Deterministic initialisation from a seed ("hash-uniform-v1", reproduced bit for bit by
// scripts/make_oracle.py). Element e (row-major index in the full tensor) of tensor id t
// gets u = (splitmix64(seed * 0x9E3779B97F4A7C15 + (t << 32) + e) >> 40) in [0, 2^24)
// mapped to r = (u - 2^23) / 2^23 in [-1, 1); then, computed in double and rounded once:
//   matrices          r / 32                      (std 0.018, about GPT-2's 0.02)
//   wo, w_down        r / 32 / sqrt(2 * layers)   (GPT-2's residual-branch scaling)
//   norm gains        1 + norm_jitter * r         (1 for training; the oracle perturbs
//                                                   them so their gradients are tested)
// A shard initialises its own part only (no full model needed), equal to the
// corresponding part of the full model's initialisation.
struct InitConfig {
  std::uint64_t seed = 1234;
  double norm_jitter = 0.0;
};
template <class T>
void init_params(Params<T>& p, const LlamaDims& d, const InitConfig& c);

// Copies each tensor of `part` from the matching block of `full` (same names).
template <class T>
void copy_from_full(const Params<T>& full, Params<T>& part);
// Adds each tensor of `part` into the matching block of `full`. Summing the gradients
// of every rank of a TP group this way yields the full gradient, including the partial
// sums of replicated norm gains and KV heads (blocks.hpp).
template <class T>
void add_into_full(const Params<T>& part, Params<T>& full);

}  // namespace hexi::kernels
