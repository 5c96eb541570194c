#include "kernels/params.hpp"

#include <cmath>
#include <stdexcept>

namespace hexi::kernels {
namespace {

// Tensors of one layer: attention (5), mlp_norm, and the MLP (3) or a mixture of experts'
// router, routed experts (3) and shared experts (3, when it has some).
int tensors_per_layer(const LlamaDims& d) {
  if (!d.is_moe()) return 9;
  return 10 + (d.shared_ffn > 0 ? 3 : 0);
}
constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;

enum class Init { kMatrix, kResidualOut, kNormGain };

struct Builder {
  ParamLayout layout;

  // Adds rows [r0, r0+rows) x cols [c0, c0+cols) of a (full_rows, full_cols) tensor. A
  // vector (a norm gain) is replicated and not decayed; `replicated` marks a replicated
  // matrix (the router).
  void add(std::string name, int id, int full_rows, int full_cols, int r0, int rows, int c0,
           int cols, bool vector, bool replicated = false) {
    TensorInfo t;
    t.name = std::move(name);
    t.id = id;
    t.full_rows = full_rows;
    t.full_cols = full_cols;
    t.row_begin = r0;
    t.rows = rows;
    t.col_begin = c0;
    t.cols = cols;
    t.offset = layout.total;
    t.decay = !vector;
    t.replicated = vector || replicated;
    layout.total += t.size();
    layout.tensors.push_back(std::move(t));
  }
};

std::string layer_name(int l, const char* what) {
  return "layers." + std::to_string(l) + "." + what;
}

void add_layer(Builder& b, const LlamaDims& d, const TpShard& s, int l) {
  const int h = d.hidden, hd = d.head_dim(), id = 1 + l * tensors_per_layer(d);
  const int q0 = s.head_begin * hd, qn = s.heads() * hd;
  const int k0 = kv_begin(d, s) * hd, kn = (kv_end(d, s) - kv_begin(d, s)) * hd;
  const int f0 = s.ffn_begin, fn = s.ffn();
  b.add(layer_name(l, "attn_norm"), id + 0, 1, h, 0, 1, 0, h, true);
  b.add(layer_name(l, "wq"), id + 1, d.heads * hd, h, q0, qn, 0, h, false);
  b.add(layer_name(l, "wk"), id + 2, d.kv_heads * hd, h, k0, kn, 0, h, false);
  b.add(layer_name(l, "wv"), id + 3, d.kv_heads * hd, h, k0, kn, 0, h, false);
  b.add(layer_name(l, "wo"), id + 4, h, d.heads * hd, 0, h, q0, qn, false);
  b.add(layer_name(l, "mlp_norm"), id + 5, 1, h, 0, 1, 0, h, true);
  if (d.is_moe()) {
    // Routed experts as (E, f*h) and (E*h, f): a rank's experts by columns, or a range of
    // whole experts, is one block of each.
    const int E = d.experts, e0 = s.expert_begin, en = s.experts(), f = d.ffn;
    b.add(layer_name(l, "router"), id + 6, E, h, 0, E, 0, h, false, true);
    b.add(layer_name(l, "experts.w_gate"), id + 7, E, f * h, e0, en, f0 * h, fn * h, false);
    b.add(layer_name(l, "experts.w_up"), id + 8, E, f * h, e0, en, f0 * h, fn * h, false);
    b.add(layer_name(l, "experts.w_down"), id + 9, E * h, f, e0 * h, en * h, f0, fn, false);
    if (d.shared_ffn > 0) {
      const int fs = d.shared_ffn, s0 = s.shared_begin, sn = s.shared();
      b.add(layer_name(l, "shared.w_gate"), id + 10, fs, h, s0, sn, 0, h, false);
      b.add(layer_name(l, "shared.w_up"), id + 11, fs, h, s0, sn, 0, h, false);
      b.add(layer_name(l, "shared.w_down"), id + 12, h, fs, 0, h, s0, sn, false);
    }
    return;
  }
  b.add(layer_name(l, "w_gate"), id + 6, d.ffn, h, f0, fn, 0, h, false);
  b.add(layer_name(l, "w_up"), id + 7, d.ffn, h, f0, fn, 0, h, false);
  b.add(layer_name(l, "w_down"), id + 8, h, d.ffn, 0, h, f0, fn, false);
}

// splitmix64's output function (Steele et al. 2014) of one counter value.
std::uint64_t splitmix64(std::uint64_t x) {
  std::uint64_t z = x + kGolden;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1) with 24 bits, a pure function of (seed, tensor id, element).
double hash_uniform(std::uint64_t seed, int id, std::uint64_t element) {
  const std::uint64_t u =
      splitmix64(seed * kGolden + (static_cast<std::uint64_t>(id) << 32) + element) >> 40;
  return (static_cast<double>(u) - 8388608.0) / 8388608.0;
}

Init init_kind(const TensorInfo& t) {
  if (!t.decay) return Init::kNormGain;
  const bool out_proj = t.name.ends_with(".wo") || t.name.ends_with(".w_down");
  return out_proj ? Init::kResidualOut : Init::kMatrix;
}

double init_value(Init kind, double r, const LlamaDims& d, const InitConfig& c) {
  switch (kind) {
    case Init::kNormGain:
      return 1.0 + c.norm_jitter * r;
    case Init::kResidualOut:
      return r / 32.0 / std::sqrt(2.0 * d.layers);
    case Init::kMatrix:
      break;
  }
  return r / 32.0;
}

const TensorInfo& find_or_throw(const ParamLayout& l, std::string_view name) {
  const TensorInfo* t = l.find(name);
  if (!t) throw std::out_of_range("no parameter tensor named " + std::string(name));
  return *t;
}

// Calls f(part_index, full_index) for every element of `part` inside `full_t`.
template <class F>
void for_each_in_full(const TensorInfo& part, const TensorInfo& full_t, F f) {
  if (full_t.rows != part.full_rows || full_t.cols != part.full_cols)
    throw std::invalid_argument("tensor " + part.name + " is not whole in the full layout");
  for (int r = 0; r < part.rows; ++r)
    for (int c = 0; c < part.cols; ++c)
      f(part.offset + static_cast<std::size_t>(r) * part.cols + c,
        full_t.offset + static_cast<std::size_t>(part.row_begin + r) * full_t.cols +
            part.col_begin + c);
}

}  // namespace

const TensorInfo* ParamLayout::find(std::string_view name) const {
  for (const TensorInfo& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

StageSpec whole_model(const LlamaDims& d) {
  return {0, d.layers, true, true, full_shard(d)};
}

ParamLayout model_layout(const LlamaDims& d) {
  return stage_layout(d, whole_model(d));
}

ParamLayout stage_layout(const LlamaDims& d, const StageSpec& s) {
  Builder b;
  const int h = d.hidden, v0 = s.shard.vocab_begin, vn = s.shard.vocab();
  if (s.embedding) b.add("embedding", 0, d.vocab, h, v0, vn, 0, h, false);
  for (int l = s.layer_begin; l < s.layer_end; ++l) add_layer(b, d, s.shard, l);
  if (s.head) {
    const int id = 1 + d.layers * tensors_per_layer(d);
    b.add("final_norm", id, 1, h, 0, 1, 0, h, true);
    b.add("head", id + 1, d.vocab, h, v0, vn, 0, h, false);
  }
  return std::move(b.layout);
}

template <class T>
T* Params<T>::get(std::string_view name) {
  return get(find_or_throw(layout, name));
}
template <class T>
const T* Params<T>::get(std::string_view name) const {
  return get(find_or_throw(layout, name));
}

template <class T>
AttentionWeights<T> attention_weights(const Params<T>& p, int l) {
  return {p.get(layer_name(l, "attn_norm")), p.get(layer_name(l, "wq")), p.get(layer_name(l, "wk")),
          p.get(layer_name(l, "wv")), p.get(layer_name(l, "wo"))};
}
template <class T>
AttentionGrads<T> attention_grads(Params<T>& g, int l) {
  return {g.get(layer_name(l, "attn_norm")), g.get(layer_name(l, "wq")), g.get(layer_name(l, "wk")),
          g.get(layer_name(l, "wv")), g.get(layer_name(l, "wo"))};
}
// The MLP's tensors of layer l as a dense MLP or a mixture of experts (blocks.hpp); those
// the layout lacks (the other kind's, or shared experts) are null.
template <class View, class P>
View mlp_view(P& p, int l) {
  const auto at = [&](const char* what) -> decltype(p.get(std::string_view{})) {
    const TensorInfo* t = p.layout.find(layer_name(l, what));
    return t ? p.get(*t) : nullptr;
  };
  View v;
  v.norm = p.get(layer_name(l, "mlp_norm"));
  v.w_gate = at("w_gate");
  v.w_up = at("w_up");
  v.w_down = at("w_down");
  v.router = at("router");
  v.e_gate = at("experts.w_gate");
  v.e_up = at("experts.w_up");
  v.e_down = at("experts.w_down");
  v.s_gate = at("shared.w_gate");
  v.s_up = at("shared.w_up");
  v.s_down = at("shared.w_down");
  return v;
}

template <class T>
MlpWeights<T> mlp_weights(const Params<T>& p, int l) {
  return mlp_view<MlpWeights<T>>(p, l);
}
template <class T>
MlpGrads<T> mlp_grads(Params<T>& g, int l) {
  return mlp_view<MlpGrads<T>>(g, l);
}
template <class T>
HeadWeights<T> head_weights(const Params<T>& p) {
  return {p.get("final_norm"), p.get("head")};
}
template <class T>
HeadGrads<T> head_grads(Params<T>& g) {
  return {g.get("final_norm"), g.get("head")};
}

template <class T>
void init_params(Params<T>& p, const LlamaDims& d, const InitConfig& c) {
  for (const TensorInfo& t : p.layout.tensors) {
    const Init kind = init_kind(t);
    T* out = p.get(t);
    for (int r = 0; r < t.rows; ++r) {
      for (int col = 0; col < t.cols; ++col) {
        const std::uint64_t e =
            static_cast<std::uint64_t>(t.row_begin + r) * t.full_cols + t.col_begin + col;
        const double value = init_value(kind, hash_uniform(c.seed, t.id, e), d, c);
        out[static_cast<std::size_t>(r) * t.cols + col] = static_cast<T>(value);
      }
    }
  }
}

template <class T>
void copy_from_full(const Params<T>& full, Params<T>& part) {
  for (const TensorInfo& t : part.layout.tensors)
    for_each_in_full(t, find_or_throw(full.layout, t.name),
                     [&](std::size_t i, std::size_t j) { part.data[i] = full.data[j]; });
}

template <class T>
void add_into_full(const Params<T>& part, Params<T>& full) {
  for (const TensorInfo& t : part.layout.tensors)
    for_each_in_full(t, find_or_throw(full.layout, t.name),
                     [&](std::size_t i, std::size_t j) { full.data[j] += part.data[i]; });
}

#define HEXI_INSTANTIATE(T)                                                      \
  template struct Params<T>;                                                     \
  template AttentionWeights<T> attention_weights<T>(const Params<T>&, int);      \
  template AttentionGrads<T> attention_grads<T>(Params<T>&, int);                \
  template MlpWeights<T> mlp_weights<T>(const Params<T>&, int);                  \
  template MlpGrads<T> mlp_grads<T>(Params<T>&, int);                            \
  template HeadWeights<T> head_weights<T>(const Params<T>&);                     \
  template HeadGrads<T> head_grads<T>(Params<T>&);                               \
  template void init_params<T>(Params<T>&, const LlamaDims&, const InitConfig&); \
  template void copy_from_full<T>(const Params<T>&, Params<T>&);                 \
  template void add_into_full<T>(const Params<T>&, Params<T>&);
HEXI_INSTANTIATE(float)
HEXI_INSTANTIATE(double)
#undef HEXI_INSTANTIATE

}  // namespace hexi::kernels
