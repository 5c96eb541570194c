// The TP-shard blocks on the GPU: the same composition as blocks_cpu.cpp, with the
// backward temporaries from the stream-ordered pool.
#include "kernels/cuda_common.cuh"

namespace hexi::kernels::cuda {
namespace {

std::size_t elems(int rows, int cols) {
  return static_cast<std::size_t>(rows) * cols;
}

// Mixed precision (sh.bf16, blocks.hpp): the block's GEMMs run as cuBLAS bf16 GEMMs with
// fp32 compute while it lives, and stored() rounds the tensors the block writes to bf16.
class Precision {
 public:
  Precision(Context& c, const BlockShape& sh) : c_(c), sh_(sh), was_(c.bf16_gemm()) {
    c.set_bf16_gemm(sh.bf16);
  }
  ~Precision() { c_.set_bf16_gemm(was_); }
  Precision(const Precision&) = delete;
  Precision& operator=(const Precision&) = delete;
  void stored(float* x, std::size_t n) const {
    if (sh_.bf16) round_bf16(c_, x, x, n);
  }

 private:
  Context& c_;
  const BlockShape& sh_;
  bool was_;
};

}  // namespace

void attention_block_forward(Context& c, const BlockShape& sh, const AttentionWeights<float>& w,
                             const float* x, const AttentionSaved<float>& sv, float* y_partial) {
  const int n = sh.tokens(), h = sh.dims.hidden, d = sh.head_dim();
  const int hq = sh.q_heads(), hk = sh.kv_heads();
  const Precision p(c, sh);
  rmsnorm_forward(c, sv.xn, sv.rstd, x, w.norm, n, h, sh.dims.norm_eps);
  p.stored(sv.xn, elems(n, h));
  matmul_forward(c, sv.q, sv.xn, w.wq, n, h, sh.q_width());
  matmul_forward(c, sv.k, sv.xn, w.wk, n, h, sh.kv_width());
  matmul_forward(c, sv.v, sv.xn, w.wv, n, h, sh.kv_width());
  p.stored(sv.v, elems(n, sh.kv_width()));
  rope_forward(c, sv.q, sh.batch, sh.seq, hq, d, sh.dims.rope_theta);
  rope_forward(c, sv.k, sh.batch, sh.seq, hk, d, sh.dims.rope_theta);
  p.stored(sv.q, elems(n, sh.q_width()));
  p.stored(sv.k, elems(n, sh.kv_width()));
  attention_forward(c, sv.att, sv.probs, sv.q, sv.k, sv.v, sh.batch, sh.seq, hq, hk, d, sh.bf16);
  matmul_forward(c, y_partial, sv.att, w.wo, n, sh.q_width(), h);
  p.stored(y_partial, elems(n, h));
}

void attention_block_backward(Context& c, const BlockShape& sh, const AttentionWeights<float>& w,
                              const AttentionSaved<float>& sv, const float* x, const float* dy,
                              float* dx_partial, const AttentionGrads<float>& g) {
  const int n = sh.tokens(), h = sh.dims.hidden, d = sh.head_dim();
  const int hq = sh.q_heads(), hk = sh.kv_heads(), qw = sh.q_width(), kw = sh.kv_width();
  detail::Temp datt(c, elems(n, qw)), dq(c, elems(n, qw)), dk(c, elems(n, kw)), dv(c, elems(n, kw)),
      dxn(c, elems(n, h));
  const Precision p(c, sh);
  matmul_backward_input(c, datt.get(), dy, w.wo, n, qw, h, false);
  p.stored(datt.get(), elems(n, qw));
  matmul_backward_weight(c, g.wo, dy, sv.att, n, qw, h);
  attention_backward(c, dq.get(), dk.get(), dv.get(), datt.get(), sv.q, sv.k, sv.v, sv.probs,
                     sh.batch, sh.seq, hq, hk, d, sh.bf16);
  rope_backward(c, dq.get(), sh.batch, sh.seq, hq, d, sh.dims.rope_theta);
  rope_backward(c, dk.get(), sh.batch, sh.seq, hk, d, sh.dims.rope_theta);
  p.stored(dq.get(), elems(n, qw));
  p.stored(dk.get(), elems(n, kw));
  matmul_backward_input(c, dxn.get(), dq.get(), w.wq, n, h, qw, false);
  matmul_backward_input(c, dxn.get(), dk.get(), w.wk, n, h, kw, true);
  matmul_backward_input(c, dxn.get(), dv.get(), w.wv, n, h, kw, true);
  p.stored(dxn.get(), elems(n, h));
  matmul_backward_weight(c, g.wq, dq.get(), sv.xn, n, h, qw);
  matmul_backward_weight(c, g.wk, dk.get(), sv.xn, n, h, kw);
  matmul_backward_weight(c, g.wv, dv.get(), sv.xn, n, h, kw);
  rmsnorm_backward(c, dx_partial, g.norm, dxn.get(), x, w.norm, sv.rstd, n, h);
  p.stored(dx_partial, elems(n, h));
}

void attention_qkv_forward(Context& c, const BlockShape& sh, const AttentionWeights<float>& w,
                           const float* x, const int* pos, float* rstd, float* xn, float* q,
                           float* k, float* v) {
  const int n = sh.tokens(), h = sh.dims.hidden, d = sh.head_dim();
  const Precision p(c, sh);
  rmsnorm_forward(c, xn, rstd, x, w.norm, n, h, sh.dims.norm_eps);
  matmul_forward(c, q, xn, w.wq, n, h, sh.q_width());
  matmul_forward(c, k, xn, w.wk, n, h, sh.kv_width());
  matmul_forward(c, v, xn, w.wv, n, h, sh.kv_width());
  rope_forward_at(c, q, pos, n, sh.q_heads(), d, sh.dims.rope_theta);
  rope_forward_at(c, k, pos, n, sh.kv_heads(), d, sh.dims.rope_theta);
}

void attention_qkv_backward(Context& c, const BlockShape& sh, const AttentionWeights<float>& w,
                            const float* x, const int* pos, const float* rstd, const float* xn,
                            float* dq, float* dk, const float* dv, float* dx_partial,
                            const AttentionGrads<float>& g) {
  const int n = sh.tokens(), h = sh.dims.hidden, d = sh.head_dim();
  const int qw = sh.q_width(), kw = sh.kv_width();
  detail::Temp dxn(c, elems(n, h));
  const Precision p(c, sh);
  rope_backward_at(c, dq, pos, n, sh.q_heads(), d, sh.dims.rope_theta);
  rope_backward_at(c, dk, pos, n, sh.kv_heads(), d, sh.dims.rope_theta);
  matmul_backward_input(c, dxn.get(), dq, w.wq, n, h, qw, false);
  matmul_backward_input(c, dxn.get(), dk, w.wk, n, h, kw, true);
  matmul_backward_input(c, dxn.get(), dv, w.wv, n, h, kw, true);
  matmul_backward_weight(c, g.wq, dq, xn, n, h, qw);
  matmul_backward_weight(c, g.wk, dk, xn, n, h, kw);
  matmul_backward_weight(c, g.wv, dv, xn, n, h, kw);
  rmsnorm_backward(c, dx_partial, g.norm, dxn.get(), x, w.norm, rstd, n, h);
}

void attention_out_forward(Context& c, const BlockShape& sh, const float* wo, const float* att,
                           float* y) {
  const Precision p(c, sh);
  matmul_forward(c, y, att, wo, sh.tokens(), sh.q_width(), sh.dims.hidden);
}

void attention_out_backward(Context& c, const BlockShape& sh, const float* wo, const float* att,
                            const float* dy, float* datt, float* dwo) {
  const int n = sh.tokens(), h = sh.dims.hidden, qw = sh.q_width();
  const Precision p(c, sh);
  matmul_backward_input(c, datt, dy, wo, n, qw, h, false);
  matmul_backward_weight(c, dwo, dy, att, n, qw, h);
}

void mlp_block_forward(Context& c, const BlockShape& sh, const MlpWeights<float>& w, const float* x,
                       const MlpSaved<float>& sv, float* y_partial) {
  const int n = sh.tokens(), h = sh.dims.hidden, f = sh.ffn();
  const Precision p(c, sh);
  rmsnorm_forward(c, sv.xn, sv.rstd, x, w.norm, n, h, sh.dims.norm_eps);
  p.stored(sv.xn, elems(n, h));
  matmul_forward(c, sv.gate, sv.xn, w.w_gate, n, h, f);
  matmul_forward(c, sv.up, sv.xn, w.w_up, n, h, f);
  p.stored(sv.gate, elems(n, f));
  p.stored(sv.up, elems(n, f));
  swiglu_forward(c, sv.act, sv.gate, sv.up, elems(n, f));
  p.stored(sv.act, elems(n, f));
  matmul_forward(c, y_partial, sv.act, w.w_down, n, f, h);
  p.stored(y_partial, elems(n, h));
}

void mlp_block_backward(Context& c, const BlockShape& sh, const MlpWeights<float>& w,
                        const MlpSaved<float>& sv, const float* x, const float* dy,
                        float* dx_partial, const MlpGrads<float>& g) {
  const int n = sh.tokens(), h = sh.dims.hidden, f = sh.ffn();
  detail::Temp dact(c, elems(n, f)), dgate(c, elems(n, f)), dup(c, elems(n, f)),
      dxn(c, elems(n, h));
  const Precision p(c, sh);
  matmul_backward_input(c, dact.get(), dy, w.w_down, n, f, h, false);
  p.stored(dact.get(), elems(n, f));
  matmul_backward_weight(c, g.w_down, dy, sv.act, n, f, h);
  swiglu_backward(c, dgate.get(), dup.get(), dact.get(), sv.gate, sv.up, elems(n, f));
  p.stored(dgate.get(), elems(n, f));
  p.stored(dup.get(), elems(n, f));
  matmul_backward_input(c, dxn.get(), dgate.get(), w.w_gate, n, h, f, false);
  matmul_backward_input(c, dxn.get(), dup.get(), w.w_up, n, h, f, true);
  p.stored(dxn.get(), elems(n, h));
  matmul_backward_weight(c, g.w_gate, dgate.get(), sv.xn, n, h, f);
  matmul_backward_weight(c, g.w_up, dup.get(), sv.xn, n, h, f);
  rmsnorm_backward(c, dx_partial, g.norm, dxn.get(), x, w.norm, sv.rstd, n, h);
  p.stored(dx_partial, elems(n, h));
}

void embedding_block_forward(Context& c, const BlockShape& sh, const float* table,
                             const int* tokens, float* out_partial) {
  embedding_forward(c, out_partial, tokens, table, sh.tokens(), sh.dims.hidden,
                    sh.shard.vocab_begin, sh.shard.vocab_end);
}

void embedding_block_backward(Context& c, const BlockShape& sh, const int* tokens,
                              const float* dout, float* dtable) {
  embedding_backward(c, dtable, dout, tokens, sh.tokens(), sh.dims.hidden, sh.shard.vocab_begin,
                     sh.shard.vocab_end);
}

void head_forward(Context& c, const BlockShape& sh, const HeadWeights<float>& w, const float* x,
                  const HeadSaved<float>& sv) {
  const int n = sh.tokens(), h = sh.dims.hidden;
  const Precision p(c, sh);
  rmsnorm_forward(c, sv.xn, sv.rstd, x, w.norm, n, h, sh.dims.norm_eps);
  p.stored(sv.xn, elems(n, h));
  matmul_forward(c, sv.logits, sv.xn, w.w, n, h, sh.vocab());
  p.stored(sv.logits, elems(n, sh.vocab()));
  logits_row_max(c, sv.row_max, sv.logits, n, sh.vocab());
}

void head_loss_partials(Context& c, const BlockShape& sh, const HeadSaved<float>& sv,
                        const int* targets) {
  cross_entropy_partials(c, sv.partials, sv.logits, sv.row_max, targets, sh.tokens(), sh.vocab(),
                         sh.shard.vocab_begin);
}

void head_loss(Context& c, const BlockShape& sh, const HeadSaved<float>& sv, float* loss) {
  cross_entropy_loss(c, loss, sv.row_max, sv.partials, sh.tokens());
}

void head_backward(Context& c, const BlockShape& sh, const HeadWeights<float>& w,
                   const HeadSaved<float>& sv, const float* x, const int* targets,
                   double loss_scale, float* dx_partial, const HeadGrads<float>& g) {
  const int n = sh.tokens(), h = sh.dims.hidden, vl = sh.vocab();
  detail::Temp dlogits(c, elems(n, vl)), dxn(c, elems(n, h));
  const Precision p(c, sh);
  cross_entropy_backward(c, dlogits.get(), sv.logits, sv.row_max, sv.partials, targets, n, vl,
                         sh.shard.vocab_begin, loss_scale);
  p.stored(dlogits.get(), elems(n, vl));
  matmul_backward_weight(c, g.w, dlogits.get(), sv.xn, n, h, vl);
  matmul_backward_input(c, dxn.get(), dlogits.get(), w.w, n, h, vl, false);
  p.stored(dxn.get(), elems(n, h));
  rmsnorm_backward(c, dx_partial, g.norm, dxn.get(), x, w.norm, sv.rstd, n, h);
  p.stored(dx_partial, elems(n, h));
}

}  // namespace hexi::kernels::cuda
