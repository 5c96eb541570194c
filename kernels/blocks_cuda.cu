// The TP-shard blocks on the GPU: the same composition as blocks_cpu.cpp, with the
// backward temporaries from the stream-ordered pool.
#include "kernels/cuda_common.cuh"

namespace hexi::kernels::cuda {
namespace {

std::size_t elems(int rows, int cols) {
  return static_cast<std::size_t>(rows) * cols;
}

}  // namespace

void attention_block_forward(Context& c, const BlockShape& sh, const AttentionWeights<float>& w,
                             const float* x, const AttentionSaved<float>& sv, float* y_partial) {
  const int n = sh.tokens(), h = sh.dims.hidden, d = sh.head_dim();
  const int hq = sh.q_heads(), hk = sh.kv_heads();
  rmsnorm_forward(c, sv.xn, sv.rstd, x, w.norm, n, h, sh.dims.norm_eps);
  matmul_forward(c, sv.q, sv.xn, w.wq, n, h, sh.q_width());
  matmul_forward(c, sv.k, sv.xn, w.wk, n, h, sh.kv_width());
  matmul_forward(c, sv.v, sv.xn, w.wv, n, h, sh.kv_width());
  rope_forward(c, sv.q, sh.batch, sh.seq, hq, d, sh.dims.rope_theta);
  rope_forward(c, sv.k, sh.batch, sh.seq, hk, d, sh.dims.rope_theta);
  attention_forward(c, sv.att, sv.probs, sv.q, sv.k, sv.v, sh.batch, sh.seq, hq, hk, d);
  matmul_forward(c, y_partial, sv.att, w.wo, n, sh.q_width(), h);
}

void attention_block_backward(Context& c, const BlockShape& sh, const AttentionWeights<float>& w,
                              const AttentionSaved<float>& sv, const float* x, const float* dy,
                              float* dx_partial, const AttentionGrads<float>& g) {
  const int n = sh.tokens(), h = sh.dims.hidden, d = sh.head_dim();
  const int hq = sh.q_heads(), hk = sh.kv_heads(), qw = sh.q_width(), kw = sh.kv_width();
  detail::Temp datt(c, elems(n, qw)), dq(c, elems(n, qw)), dk(c, elems(n, kw)), dv(c, elems(n, kw)),
      dxn(c, elems(n, h));
  matmul_backward_input(c, datt.get(), dy, w.wo, n, qw, h, false);
  matmul_backward_weight(c, g.wo, dy, sv.att, n, qw, h);
  attention_backward(c, dq.get(), dk.get(), dv.get(), datt.get(), sv.q, sv.k, sv.v, sv.probs,
                     sh.batch, sh.seq, hq, hk, d);
  rope_backward(c, dq.get(), sh.batch, sh.seq, hq, d, sh.dims.rope_theta);
  rope_backward(c, dk.get(), sh.batch, sh.seq, hk, d, sh.dims.rope_theta);
  matmul_backward_input(c, dxn.get(), dq.get(), w.wq, n, h, qw, false);
  matmul_backward_input(c, dxn.get(), dk.get(), w.wk, n, h, kw, true);
  matmul_backward_input(c, dxn.get(), dv.get(), w.wv, n, h, kw, true);
  matmul_backward_weight(c, g.wq, dq.get(), sv.xn, n, h, qw);
  matmul_backward_weight(c, g.wk, dk.get(), sv.xn, n, h, kw);
  matmul_backward_weight(c, g.wv, dv.get(), sv.xn, n, h, kw);
  rmsnorm_backward(c, dx_partial, g.norm, dxn.get(), x, w.norm, sv.rstd, n, h);
}

void mlp_block_forward(Context& c, const BlockShape& sh, const MlpWeights<float>& w, const float* x,
                       const MlpSaved<float>& sv, float* y_partial) {
  const int n = sh.tokens(), h = sh.dims.hidden, f = sh.ffn();
  rmsnorm_forward(c, sv.xn, sv.rstd, x, w.norm, n, h, sh.dims.norm_eps);
  matmul_forward(c, sv.gate, sv.xn, w.w_gate, n, h, f);
  matmul_forward(c, sv.up, sv.xn, w.w_up, n, h, f);
  swiglu_forward(c, sv.act, sv.gate, sv.up, elems(n, f));
  matmul_forward(c, y_partial, sv.act, w.w_down, n, f, h);
}

void mlp_block_backward(Context& c, const BlockShape& sh, const MlpWeights<float>& w,
                        const MlpSaved<float>& sv, const float* x, const float* dy,
                        float* dx_partial, const MlpGrads<float>& g) {
  const int n = sh.tokens(), h = sh.dims.hidden, f = sh.ffn();
  detail::Temp dact(c, elems(n, f)), dgate(c, elems(n, f)), dup(c, elems(n, f)),
      dxn(c, elems(n, h));
  matmul_backward_input(c, dact.get(), dy, w.w_down, n, f, h, false);
  matmul_backward_weight(c, g.w_down, dy, sv.act, n, f, h);
  swiglu_backward(c, dgate.get(), dup.get(), dact.get(), sv.gate, sv.up, elems(n, f));
  matmul_backward_input(c, dxn.get(), dgate.get(), w.w_gate, n, h, f, false);
  matmul_backward_input(c, dxn.get(), dup.get(), w.w_up, n, h, f, true);
  matmul_backward_weight(c, g.w_gate, dgate.get(), sv.xn, n, h, f);
  matmul_backward_weight(c, g.w_up, dup.get(), sv.xn, n, h, f);
  rmsnorm_backward(c, dx_partial, g.norm, dxn.get(), x, w.norm, sv.rstd, n, h);
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
  rmsnorm_forward(c, sv.xn, sv.rstd, x, w.norm, n, h, sh.dims.norm_eps);
  matmul_forward(c, sv.logits, sv.xn, w.w, n, h, sh.vocab());
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
  cross_entropy_backward(c, dlogits.get(), sv.logits, sv.row_max, sv.partials, targets, n, vl,
                         sh.shard.vocab_begin, loss_scale);
  matmul_backward_weight(c, g.w, dlogits.get(), sv.xn, n, h, vl);
  matmul_backward_input(c, dxn.get(), dlogits.get(), w.w, n, h, vl, false);
  rmsnorm_backward(c, dx_partial, g.norm, dxn.get(), x, w.norm, sv.rstd, n, h);
}

}  // namespace hexi::kernels::cuda
