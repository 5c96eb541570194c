#include "kernels/blocks.hpp"

namespace hexi::kernels {
namespace {

using std::size_t;

// Hands out consecutive sub-buffers of one allocation.
template <class T>
struct Carver {
  T* next;
  T* take(size_t count) {
    T* p = next;
    next += count;
    return p;
  }
};

size_t n_of(const BlockShape& s) {
  return static_cast<size_t>(s.tokens());
}

}  // namespace

size_t attention_saved_size(const BlockShape& s) {
  const size_t n = n_of(s);
  return n + n * s.dims.hidden + 2 * n * s.q_width() + 2 * n * s.kv_width() +
         static_cast<size_t>(s.batch) * s.q_heads() * s.seq * s.seq;
}

size_t mlp_saved_size(const BlockShape& s) {
  const size_t n = n_of(s);
  if (!s.dims.is_moe()) return n + n * s.dims.hidden + 3 * n * s.ffn();
  const size_t k = s.dims.top_k;
  return n + n * s.dims.hidden + 3 * n * s.shared() + n * s.dims.experts + 2 * n * k +
         3 * n * k * s.ffn() + n * k * s.dims.hidden;
}

size_t head_saved_size(const BlockShape& s) {
  const size_t n = n_of(s);
  return n + n * s.dims.hidden + n * s.vocab() + n + 2 * n;
}

template <class T>
AttentionSaved<T> carve_attention_saved(const BlockShape& s, T* base) {
  const size_t n = n_of(s);
  Carver<T> c{base};
  AttentionSaved<T> a;
  a.rstd = c.take(n);
  a.xn = c.take(n * s.dims.hidden);
  a.q = c.take(n * s.q_width());
  a.k = c.take(n * s.kv_width());
  a.v = c.take(n * s.kv_width());
  a.probs = c.take(static_cast<size_t>(s.batch) * s.q_heads() * s.seq * s.seq);
  a.att = c.take(n * s.q_width());
  return a;
}

template <class T>
MlpSaved<T> carve_mlp_saved(const BlockShape& s, T* base) {
  const size_t n = n_of(s);
  Carver<T> c{base};
  MlpSaved<T> m;
  m.rstd = c.take(n);
  m.xn = c.take(n * s.dims.hidden);
  if (!s.dims.is_moe()) {
    m.gate = c.take(n * s.ffn());
    m.up = c.take(n * s.ffn());
    m.act = c.take(n * s.ffn());
    return m;
  }
  const size_t k = s.dims.top_k;
  m.gate = c.take(n * s.shared());
  m.up = c.take(n * s.shared());
  m.act = c.take(n * s.shared());
  m.probs = c.take(n * s.dims.experts);
  m.chosen = c.take(n * k);
  m.gates = c.take(n * k);
  m.e_gate = c.take(n * k * s.ffn());
  m.e_up = c.take(n * k * s.ffn());
  m.e_act = c.take(n * k * s.ffn());
  m.e_out = c.take(n * k * s.dims.hidden);
  return m;
}

template <class T>
HeadSaved<T> carve_head_saved(const BlockShape& s, T* base) {
  const size_t n = n_of(s);
  Carver<T> c{base};
  HeadSaved<T> h;
  h.rstd = c.take(n);
  h.xn = c.take(n * s.dims.hidden);
  h.logits = c.take(n * s.vocab());
  h.row_max = c.take(n);
  h.partials = c.take(2 * n);
  return h;
}

#define HEXI_INSTANTIATE(T)                                                   \
  template AttentionSaved<T> carve_attention_saved<T>(const BlockShape&, T*); \
  template MlpSaved<T> carve_mlp_saved<T>(const BlockShape&, T*);             \
  template HeadSaved<T> carve_head_saved<T>(const BlockShape&, T*);
HEXI_INSTANTIATE(float)
HEXI_INSTANTIATE(double)
#undef HEXI_INSTANTIATE

}  // namespace hexi::kernels
