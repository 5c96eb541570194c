// Every CUDA kernel against its CPU reference, the CUDA blocks composed into the tiny
// Llama against the PyTorch oracle, and run-to-run determinism. Without a visible GPU
// every test reports SKIPPED with the reason (ctest label "cuda").
//
// Tolerances, |gpu - cpu| <= atol + eps * |cpu| per element (the CPU reference computes
// per-element math in double and rounds once):
// - copies and in-order sums (embedding, residual add): exact, eps = 0, atol = 0.
// - elementwise float math (SwiGLU, RoPE, AdamW): expf/sqrtf/sincos are within 2 ulp
//   and each element passes through a handful of float operations: eps = 1e-5,
//   atol = 1e-6 (values are O(1)).
// - reductions over a row (RMSNorm, cross-entropy) and FP32 GEMMs (cuBLAS, no TF32;
//   linear layers, attention, blocks): a different summation order gives errors of
//   ~sqrt(K) * 2^-24 of the row's magnitude for K-term sums (K <= 512 here):
//   eps = 1e-4, atol = 1e-4 * max|cpu| of the tensor. A wrong index, a missing scale or a
//   swapped operand gives O(1) relative errors, far outside these bounds.
#include "kernels/cuda_kernels.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/blocks_cpu.hpp"
#include "kernels/cpu_kernels.hpp"
#include "kernels/llama_model.hpp"
#include "kernels/oracle.hpp"
#include "kernels/params.hpp"
#include "kernels/test_util.hpp"

namespace hexi::kernels {
namespace {

using cuda::DeviceBuffer;
using testing::random_tokens;
using Floats = std::vector<float>;

// A host copy of parameters (aligned storage) for a DeviceBuffer.
Floats floats(const AlignedVector<float>& v) {
  return Floats(v.begin(), v.end());
}

Floats random(std::size_t n, std::uint64_t seed, double lo = -1, double hi = 1) {
  return testing::random_vector<float>(n, seed, lo, hi);
}

struct Tol {
  double atol_fraction;  // of max |reference|
  double eps;
};
constexpr Tol kExact{0, 0};
constexpr Tol kElementwise{1e-6, 1e-5};
constexpr Tol kReduction{1e-4, 1e-4};

void expect_close(const Floats& gpu, const Floats& cpu, Tol tol, const char* what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  double scale = 0;
  for (float v : cpu) scale = std::max(scale, double(std::abs(v)));
  const double atol = tol.atol_fraction * std::max(scale, 1.0);
  int failures = 0;
  for (std::size_t i = 0; i < cpu.size() && failures < 5; ++i) {
    if (std::abs(double(gpu[i]) - cpu[i]) > atol + tol.eps * std::abs(cpu[i])) {
      ADD_FAILURE() << what << "[" << i << "]: gpu " << gpu[i] << " cpu " << cpu[i];
      ++failures;
    }
  }
}

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = cuda::device_unavailable_reason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    ctx_ = std::make_unique<cuda::Context>();
  }
  Floats down(const DeviceBuffer<float>& b) {
    ctx_->synchronize();
    return b.download();
  }
  std::unique_ptr<cuda::Context> ctx_;
};

TEST_F(CudaKernels, Matmul) {
  const int n = 96, k = 80, m = 72;
  const Floats x = random(n * k, 1), w = random(m * k, 2), dout = random(n * m, 3);
  Floats out(n * m), dx(n * k), dw = random(m * k, 4);
  const Floats dw0 = dw;
  cpu::matmul_forward(out.data(), x.data(), w.data(), n, k, m);
  cpu::matmul_backward_input(dx.data(), dout.data(), w.data(), n, k, m, false);
  cpu::matmul_backward_weight(dw.data(), dout.data(), x.data(), n, k, m);
  DeviceBuffer<float> gx(x), gw(w), gdout(dout), gout(out.size()), gdx(dx.size()), gdw(dw0);
  cuda::matmul_forward(*ctx_, gout.get(), gx.get(), gw.get(), n, k, m);
  cuda::matmul_backward_input(*ctx_, gdx.get(), gdout.get(), gw.get(), n, k, m, false);
  cuda::matmul_backward_weight(*ctx_, gdw.get(), gdout.get(), gx.get(), n, k, m);
  expect_close(down(gout), out, kReduction, "out");
  expect_close(down(gdx), dx, kReduction, "dx");
  expect_close(down(gdw), dw, kReduction, "dw (accumulated)");
  cpu::matmul_backward_input(dx.data(), dout.data(), w.data(), n, k, m, true);
  cuda::matmul_backward_input(*ctx_, gdx.get(), gdout.get(), gw.get(), n, k, m, true);
  expect_close(down(gdx), dx, kReduction, "dx (accumulated)");
}

TEST_F(CudaKernels, RmsNorm) {
  const int n = 70, h = 200;  // rows not a multiple of the chunk, h not of the warp
  const Floats x = random(n * h, 5), w = random(h, 6, 0.5, 1.5), dout = random(n * h, 7);
  Floats out(n * h), rstd(n), dx(n * h), dw = random(h, 8);
  const Floats dw0 = dw;
  cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), n, h, 1e-5);
  cpu::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), n, h);
  DeviceBuffer<float> gx(x), gw(w), gdout(dout), gout(out.size()), grstd(n), gdx(dx.size()),
      gdw(dw0);
  cuda::rmsnorm_forward(*ctx_, gout.get(), grstd.get(), gx.get(), gw.get(), n, h, 1e-5);
  cuda::rmsnorm_backward(*ctx_, gdx.get(), gdw.get(), gdout.get(), gx.get(), gw.get(), grstd.get(),
                         n, h);
  expect_close(down(gout), out, kReduction, "out");
  expect_close(down(grstd), rstd, kReduction, "rstd");
  expect_close(down(gdx), dx, kReduction, "dx");
  expect_close(down(gdw), dw, kReduction, "dw");
}

TEST_F(CudaKernels, Rope) {
  const int b = 2, s = 33, heads = 3, d = 16;
  const Floats x = random(b * s * heads * d, 9);
  Floats fwd = x, bwd = x;
  cpu::rope_forward(fwd.data(), b, s, heads, d, 10000.0);
  cpu::rope_backward(bwd.data(), b, s, heads, d, 10000.0);
  DeviceBuffer<float> gf(x), gb(x);
  cuda::rope_forward(*ctx_, gf.get(), b, s, heads, d, 10000.0);
  cuda::rope_backward(*ctx_, gb.get(), b, s, heads, d, 10000.0);
  expect_close(down(gf), fwd, kElementwise, "forward");
  expect_close(down(gb), bwd, kElementwise, "backward");
}

// RoPE at explicit positions (a context-parallel shard's tokens), forward and backward.
TEST_F(CudaKernels, RopeAtPositions) {
  const int n = 7, heads = 3, d = 16;
  const std::vector<int> pos = {33, 2, 0, 17, 5, 40, 9};
  const Floats x = random(n * heads * d, 14);
  Floats fwd = x, bwd = x;
  cpu::rope_forward_at(fwd.data(), pos.data(), n, heads, d, 10000.0);
  cpu::rope_backward_at(bwd.data(), pos.data(), n, heads, d, 10000.0);
  DeviceBuffer<float> gf(x), gb(x);
  DeviceBuffer<int> gpos(pos);
  cuda::rope_forward_at(*ctx_, gf.get(), gpos.get(), n, heads, d, 10000.0);
  cuda::rope_backward_at(*ctx_, gb.get(), gpos.get(), n, heads, d, 10000.0);
  expect_close(down(gf), fwd, kElementwise, "forward");
  expect_close(down(gb), bwd, kElementwise, "backward");
}

// Strided copies (overwrite and accumulate) and fills: exact.
TEST_F(CudaKernels, Copy2dAndFill) {
  const std::size_t rows = 5, cols = 3, src_stride = 7, dst_stride = 4;
  const Floats src = random(rows * src_stride, 15), dst = random(rows * dst_stride, 16);
  Floats copied = dst, added = dst;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) {
      copied[r * dst_stride + c] = src[r * src_stride + 2 + c];
      added[r * dst_stride + c] += src[r * src_stride + 2 + c];
    }
  }
  DeviceBuffer<float> gsrc(src), gc(dst), ga(dst), gfill(9);
  cuda::copy_2d(*ctx_, gc.get(), dst_stride, gsrc.get() + 2, src_stride, rows, cols, false);
  cuda::copy_2d(*ctx_, ga.get(), dst_stride, gsrc.get() + 2, src_stride, rows, cols, true);
  cuda::fill(*ctx_, gfill.get(), 2.5f, 9);
  expect_close(down(gc), copied, kExact, "copy");
  expect_close(down(ga), added, kExact, "accumulate");
  expect_close(down(gfill), Floats(9, 2.5f), kExact, "fill");
}

// The attention block split around its core (sequence meshes) on shuffled positions, against
// the CPU functions: reductions and GEMMs, kReduction.
TEST_F(CudaKernels, AttentionSplitMatchesCpu) {
  const LlamaDims dims{1, 32, 40, 8, 4, 24};
  const int n = 6, h = dims.hidden;
  const BlockShape sh{dims, full_shard(dims), 1, n};
  Params<float> p(stage_layout(dims, {0, 1, true, true, sh.shard})), g(p.layout);
  init_params(p, dims, {5, 0.25});
  const std::vector<int> pos = {4, 1, 5, 0, 3, 2};
  const Floats x = random(n * h, 17), datt = random(n * sh.q_width(), 18);
  Floats rstd(n), xn(n * h), q(n * sh.q_width()), k(n * sh.kv_width()), v(k.size());
  cpu::attention_qkv_forward(sh, attention_weights(p, 0), x.data(), pos.data(), rstd.data(),
                             xn.data(), q.data(), k.data(), v.data());
  Floats y(n * h), dq = q, dk = k, dx(n * h), datt_back(datt.size());
  cpu::attention_out_forward(sh, p.get("layers.0.wo"), q.data(), y.data());
  cpu::attention_out_backward(sh, p.get("layers.0.wo"), q.data(), x.data(), datt_back.data(),
                              attention_grads(g, 0).wo);
  cpu::attention_qkv_backward(sh, attention_weights(p, 0), x.data(), pos.data(), rstd.data(),
                              xn.data(), dq.data(), dk.data(), v.data(), dx.data(),
                              attention_grads(g, 0));
  DeviceBuffer<float> gp(floats(p.data)), gg(Floats(p.data.size(), 0.f)), gx(x), grstd(n),
      gxn(xn.size()), gq(q.size()), gk(k.size()), gv(v.size()), gy(y.size()), gdatt(datt.size()),
      gdx(dx.size());
  DeviceBuffer<int> gpos(pos);
  auto on = [&](DeviceBuffer<float>& b, const char* name) {
    return b.get() + p.layout.find(name)->offset;
  };
  const AttentionWeights<float> w{on(gp, "layers.0.attn_norm"), on(gp, "layers.0.wq"),
                                  on(gp, "layers.0.wk"), on(gp, "layers.0.wv"),
                                  on(gp, "layers.0.wo")};
  const AttentionGrads<float> wg{on(gg, "layers.0.attn_norm"), on(gg, "layers.0.wq"),
                                 on(gg, "layers.0.wk"), on(gg, "layers.0.wv"),
                                 on(gg, "layers.0.wo")};
  cuda::attention_qkv_forward(*ctx_, sh, w, gx.get(), gpos.get(), grstd.get(), gxn.get(), gq.get(),
                              gk.get(), gv.get());
  expect_close(down(gq), q, kReduction, "q");
  expect_close(down(gk), k, kReduction, "k");
  cuda::attention_out_forward(*ctx_, sh, w.wo, gq.get(), gy.get());
  expect_close(down(gy), y, kReduction, "y");
  cuda::attention_out_backward(*ctx_, sh, w.wo, gq.get(), gx.get(), gdatt.get(), wg.wo);
  expect_close(down(gdatt), datt_back, kReduction, "datt");
  cuda::attention_qkv_backward(*ctx_, sh, w, gx.get(), gpos.get(), grstd.get(), gxn.get(), gq.get(),
                               gk.get(), gv.get(), gdx.get(), wg);
  expect_close(down(gdx), dx, kReduction, "dx");
  expect_close(down(gg), floats(g.data), kReduction, "weight gradients");
}

void check_attention(cuda::Context& ctx, int b, int s, int hq, int hk, int d) {
  const Floats q = random(b * s * hq * d, 10), k = random(b * s * hk * d, 11),
               v = random(b * s * hk * d, 12), dout = random(q.size(), 13);
  Floats out(q.size()), probs(std::size_t(b) * hq * s * s), dq(q.size()), dk(k.size()),
      dv(v.size());
  cpu::attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), b, s, hq, hk, d);
  cpu::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                          v.data(), probs.data(), b, s, hq, hk, d);
  DeviceBuffer<float> gq(q), gk(k), gv(v), gdout(dout), gout(out.size()), gp(probs.size()),
      gdq(dq.size()), gdk(dk.size()), gdv(dv.size());
  cuda::attention_forward(ctx, gout.get(), gp.get(), gq.get(), gk.get(), gv.get(), b, s, hq, hk, d);
  cuda::attention_backward(ctx, gdq.get(), gdk.get(), gdv.get(), gdout.get(), gq.get(), gk.get(),
                           gv.get(), gp.get(), b, s, hq, hk, d);
  ctx.synchronize();
  expect_close(gout.download(), out, kReduction, "out");
  expect_close(gp.download(), probs, kReduction, "probs");
  expect_close(gdq.download(), dq, kReduction, "dq");
  expect_close(gdk.download(), dk, kReduction, "dk");
  expect_close(gdv.download(), dv, kReduction, "dv");
}

TEST_F(CudaKernels, AttentionGroupedQuery) {
  check_attention(*ctx_, 2, 40, 4, 2, 16);
}
TEST_F(CudaKernels, AttentionMultiHead) {
  check_attention(*ctx_, 3, 17, 2, 2, 8);
}
TEST_F(CudaKernels, AttentionOneKvHeadForAll) {
  check_attention(*ctx_, 1, 64, 4, 1, 32);
}

TEST_F(CudaKernels, SwiGluAddAdamW) {
  const std::size_t n = 5000;
  const Floats gate = random(n, 14, -4, 4), up = random(n, 15), dout = random(n, 16);
  Floats out(n), dgate(n), dup(n);
  cpu::swiglu_forward(out.data(), gate.data(), up.data(), n);
  cpu::swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), n);
  DeviceBuffer<float> gg(gate), gu(up), gd(dout), go(n), gdg(n), gdu(n);
  cuda::swiglu_forward(*ctx_, go.get(), gg.get(), gu.get(), n);
  cuda::swiglu_backward(*ctx_, gdg.get(), gdu.get(), gd.get(), gg.get(), gu.get(), n);
  expect_close(down(go), out, kElementwise, "swiglu");
  expect_close(down(gdg), dgate, kElementwise, "dgate");
  expect_close(down(gdu), dup, kElementwise, "dup");

  Floats y = up;
  cpu::add_inplace(y.data(), gate.data(), n);
  cuda::add_inplace(*ctx_, gu.get(), gg.get(), n);
  expect_close(down(gu), y, kExact, "add");

  Floats p = random(n, 17), m(n, 0.f), v(n, 0.f);
  DeviceBuffer<float> gp(p), gm(m), gv(v);
  for (int step = 1; step <= 3; ++step) {
    cpu::adamw_update(p.data(), dout.data(), m.data(), v.data(), n, 1e-3, 0.9, 0.95, 1e-8, 0.1,
                      step);
    cuda::adamw_update(*ctx_, gp.get(), gd.get(), gm.get(), gv.get(), n, 1e-3, 0.9, 0.95, 1e-8, 0.1,
                       step);
  }
  expect_close(down(gp), p, kElementwise, "adamw param");
  expect_close(down(gm), m, kElementwise, "adamw m");
  expect_close(down(gv), v, kElementwise, "adamw v");
}

TEST_F(CudaKernels, EmbeddingShard) {
  const int n = 300, h = 48, v0 = 10, v1 = 40;  // tokens in [0, 50): some outside
  const std::vector<int> tokens = random_tokens(n, 50, 18);
  const Floats table = random((v1 - v0) * h, 19), dout = random(n * h, 20);
  Floats out(n * h), dtable = random(table.size(), 21);
  const Floats dtable0 = dtable;
  cpu::embedding_forward(out.data(), tokens.data(), table.data(), n, h, v0, v1);
  cpu::embedding_backward(dtable.data(), dout.data(), tokens.data(), n, h, v0, v1);
  DeviceBuffer<int> gtok(tokens);
  DeviceBuffer<float> gtable(table), gdout(dout), gout(out.size()), gdt(dtable0);
  cuda::embedding_forward(*ctx_, gout.get(), gtok.get(), gtable.get(), n, h, v0, v1);
  cuda::embedding_backward(*ctx_, gdt.get(), gdout.get(), gtok.get(), n, h, v0, v1);
  expect_close(down(gout), out, kExact, "forward");
  expect_close(down(gdt), dtable, kExact, "backward");  // same order of additions
}

TEST_F(CudaKernels, CrossEntropyShard) {
  const int n = 50, vl = 700, v0 = 300;  // targets in [0, 1200): some in the shard
  const Floats logits = random(n * vl, 22, -6, 6);
  const std::vector<int> targets = random_tokens(n, 1200, 23);
  Floats max(n), part(2 * n), loss(n), dl(n * vl);
  cpu::logits_row_max(max.data(), logits.data(), n, vl);
  cpu::cross_entropy_partials(part.data(), logits.data(), max.data(), targets.data(), n, vl, v0);
  cpu::cross_entropy_loss(loss.data(), max.data(), part.data(), n);
  cpu::cross_entropy_backward(dl.data(), logits.data(), max.data(), part.data(), targets.data(), n,
                              vl, v0, 0.5);
  DeviceBuffer<float> gl(logits), gmax(n), gpart(2 * n), gloss(n), gdl(dl.size());
  DeviceBuffer<int> gt(targets);
  cuda::logits_row_max(*ctx_, gmax.get(), gl.get(), n, vl);
  cuda::cross_entropy_partials(*ctx_, gpart.get(), gl.get(), gmax.get(), gt.get(), n, vl, v0);
  cuda::cross_entropy_loss(*ctx_, gloss.get(), gmax.get(), gpart.get(), n);
  cuda::cross_entropy_backward(*ctx_, gdl.get(), gl.get(), gmax.get(), gpart.get(), gt.get(), n, vl,
                               v0, 0.5);
  expect_close(down(gmax), max, kExact, "row max");
  expect_close(down(gpart), part, kReduction, "partials");
  expect_close(down(gloss), loss, kReduction, "loss");
  expect_close(down(gdl), dl, kReduction, "dlogits");
}

// ---- the tiny Llama composed from the CUDA blocks -------------------------------------

// Single-process forward + backward on the GPU, the same composition as LlamaModel.
class CudaLlama {
 public:
  CudaLlama(cuda::Context& c, const LlamaDims& d, int b, int s)
      : c_(c),
        d_(d),
        layout_(model_layout(d)),
        sh_{d, full_shard(d), b, s},
        n_(b * s),
        nh_(std::size_t(n_) * d.hidden),
        attn_(d.layers * attention_saved_size(sh_)),
        mlp_(d.layers * mlp_saved_size(sh_)),
        head_(head_saved_size(sh_)),
        resid_((2 * d.layers + 1) * nh_),
        dx_(nh_),
        dblock_(nh_),
        loss_(n_) {}

  // Returns the mean loss over the b*s tokens and its gradients (model layout).
  float step(const Params<float>& host_params, const std::vector<int>& tokens,
             const std::vector<int>& targets, Floats& grads_out) {
    DeviceBuffer<float> p(floats(host_params.data)), g(host_params.data.size());
    DeviceBuffer<int> tok(tokens), tgt(targets);
    g.zero();
    forward(p, tok, tgt);
    backward(p, g, tok, tgt);
    c_.synchronize();
    grads_out = g.download();
    double sum = 0;
    for (float l : loss_.download()) sum += l;
    return static_cast<float>(sum / n_);
  }

 private:
  static std::string layer(int l, const char* what) {
    return "layers." + std::to_string(l) + "." + what;
  }
  float* at(DeviceBuffer<float>& buf, const std::string& name) {
    return buf.get() + layout_.find(name)->offset;
  }
  float* slot(int i) { return resid_.get() + i * nh_; }
  AttentionSaved<float> attn(int l) {
    return carve_attention_saved(sh_, attn_.get() + l * attention_saved_size(sh_));
  }
  MlpSaved<float> mlp(int l) { return carve_mlp_saved(sh_, mlp_.get() + l * mlp_saved_size(sh_)); }
  HeadSaved<float> head() { return carve_head_saved(sh_, head_.get()); }
  // Weight and gradient views of one buffer (AttentionGrads has the same member order).
  template <class V>
  V attn_view(DeviceBuffer<float>& b, int l) {
    return {at(b, layer(l, "attn_norm")), at(b, layer(l, "wq")), at(b, layer(l, "wk")),
            at(b, layer(l, "wv")), at(b, layer(l, "wo"))};
  }
  template <class V>
  V mlp_view(DeviceBuffer<float>& b, int l) {
    return {at(b, layer(l, "mlp_norm")), at(b, layer(l, "w_gate")), at(b, layer(l, "w_up")),
            at(b, layer(l, "w_down"))};
  }

  void forward(DeviceBuffer<float>& p, DeviceBuffer<int>& tok, DeviceBuffer<int>& tgt) {
    cuda::embedding_block_forward(c_, sh_, at(p, "embedding"), tok.get(), slot(0));
    for (int l = 0; l < d_.layers; ++l) {
      cuda::attention_block_forward(c_, sh_, attn_view<AttentionWeights<float>>(p, l), slot(2 * l),
                                    attn(l), slot(2 * l + 1));
      cuda::add_inplace(c_, slot(2 * l + 1), slot(2 * l), nh_);
      cuda::mlp_block_forward(c_, sh_, mlp_view<MlpWeights<float>>(p, l), slot(2 * l + 1), mlp(l),
                              slot(2 * l + 2));
      cuda::add_inplace(c_, slot(2 * l + 2), slot(2 * l + 1), nh_);
    }
    const HeadWeights<float> hw{at(p, "final_norm"), at(p, "head")};
    cuda::head_forward(c_, sh_, hw, slot(2 * d_.layers), head());
    cuda::head_loss_partials(c_, sh_, head(), tgt.get());
    cuda::head_loss(c_, sh_, head(), loss_.get());
  }

  void backward(DeviceBuffer<float>& p, DeviceBuffer<float>& g, DeviceBuffer<int>& tok,
                DeviceBuffer<int>& tgt) {
    const HeadWeights<float> hw{at(p, "final_norm"), at(p, "head")};
    const HeadGrads<float> hg{at(g, "final_norm"), at(g, "head")};
    cuda::head_backward(c_, sh_, hw, head(), slot(2 * d_.layers), tgt.get(), 1.0 / n_, dx_.get(),
                        hg);
    for (int l = d_.layers - 1; l >= 0; --l) {
      cuda::mlp_block_backward(c_, sh_, mlp_view<MlpWeights<float>>(p, l), mlp(l), slot(2 * l + 1),
                               dx_.get(), dblock_.get(), mlp_view<MlpGrads<float>>(g, l));
      cuda::add_inplace(c_, dx_.get(), dblock_.get(), nh_);
      cuda::attention_block_backward(c_, sh_, attn_view<AttentionWeights<float>>(p, l), attn(l),
                                     slot(2 * l), dx_.get(), dblock_.get(),
                                     attn_view<AttentionGrads<float>>(g, l));
      cuda::add_inplace(c_, dx_.get(), dblock_.get(), nh_);
    }
    cuda::embedding_block_backward(c_, sh_, tok.get(), dx_.get(), at(g, "embedding"));
  }

  cuda::Context& c_;
  LlamaDims d_;
  ParamLayout layout_;
  BlockShape sh_;
  int n_;
  std::size_t nh_;
  DeviceBuffer<float> attn_, mlp_, head_, resid_, dx_, dblock_, loss_;
};

TEST_F(CudaKernels, TinyLlamaMatchesTheCpuReferenceAndTorch) {
  Oracle o;
  std::string error;
  ASSERT_TRUE(load_oracle(default_oracle_path(), o, error)) << error;
  Params<float> p(model_layout(o.dims)), cpu_grads(p.layout);
  init_params(p, o.dims, o.init);
  LlamaModel<float> cpu_model(o.dims, o.batch, o.seq);
  const float cpu_loss =
      cpu_model.forward_backward(p, o.tokens.data(), o.targets.data(), cpu_grads);
  CudaLlama gpu(*ctx_, o.dims, o.batch, o.seq);
  Floats gpu_grads, again;
  const float gpu_loss = gpu.step(p, o.tokens, o.targets, gpu_grads);
  EXPECT_NEAR(gpu_loss, cpu_loss, 2e-5);
  EXPECT_NEAR(gpu_loss, o.loss, 2e-5);
  for (const TensorInfo& t : p.layout.tensors) {
    const Floats g(gpu_grads.begin() + t.offset, gpu_grads.begin() + t.offset + t.size());
    const Floats c(cpu_grads.get(t), cpu_grads.get(t) + t.size());
    expect_close(g, c, kReduction, t.name.c_str());
    expect_close(g, o.tensors.at("grad/" + t.name), kReduction, ("torch " + t.name).c_str());
  }
  // Determinism: no atomics, fixed reduction orders -> identical bits on a rerun.
  const float loss2 = gpu.step(p, o.tokens, o.targets, again);
  EXPECT_EQ(loss2, gpu_loss);
  EXPECT_TRUE(again == gpu_grads);
}

// bf16 blocks (blocks.hpp "Precision") against the CPU's bf16 emulation: the same rounding
// points, but cuBLAS bf16 GEMMs sum in another order than the CPU's float32 GEMMs, so a
// stored tensor may round one bf16 ulp (2^-8 relative) apart and carry that on.
constexpr Tol kBf16{2e-2, 2e-2};

void attention_block_matches_cpu(cuda::Context& ctx, bool bf16) {
  // TP rank 3 of 4 on tiny-llama: one query head on a replicated KV head, FFN [129, 172).
  const LlamaDims d{4, 64, 172, 4, 2, 256};
  const BlockShape sh{d, tp_shard(d, 3, 4), 2, 32, bf16};
  const Tol tol = bf16 ? kBf16 : kReduction;
  Params<float> p(stage_layout(d, {0, 1, false, false, sh.shard})), cg(p.layout);
  init_params(p, d, {3, 0.1});
  Floats x = random(std::size_t(sh.tokens()) * d.hidden, 24), dy = random(x.size(), 25);
  if (bf16) {  // bf16 runs hand the blocks bf16 weights and inputs
    round_bf16(p.data.data(), p.data.size());
    for (Floats* v : {&x, &dy}) round_bf16(v->data(), v->size());
  }
  Floats saved(attention_saved_size(sh)), y(x.size()), dx(x.size());
  cpu::attention_block_forward(sh, attention_weights(p, 0), x.data(),
                               carve_attention_saved(sh, saved.data()), y.data());
  cpu::attention_block_backward(sh, attention_weights(p, 0),
                                carve_attention_saved(sh, saved.data()), x.data(), dy.data(),
                                dx.data(), attention_grads(cg, 0));
  DeviceBuffer<float> gp(floats(p.data)), gg(p.data.size()), gx(x), gdy(dy), gsaved(saved.size()),
      gy(y.size()), gdx(dx.size());
  gg.zero();
  const auto at = [&](DeviceBuffer<float>& b, const char* name) {
    return b.get() + p.layout.find(std::string("layers.0.") + name)->offset;
  };
  const AttentionWeights<float> w{at(gp, "attn_norm"), at(gp, "wq"), at(gp, "wk"), at(gp, "wv"),
                                  at(gp, "wo")};
  const AttentionGrads<float> g{at(gg, "attn_norm"), at(gg, "wq"), at(gg, "wk"), at(gg, "wv"),
                                at(gg, "wo")};
  const auto sv = carve_attention_saved(sh, gsaved.get());
  cuda::attention_block_forward(ctx, sh, w, gx.get(), sv, gy.get());
  cuda::attention_block_backward(ctx, sh, w, sv, gx.get(), gdy.get(), gdx.get(), g);
  ctx.synchronize();
  expect_close(gy.download(), y, tol, "y_partial");
  expect_close(gdx.download(), dx, tol, "dx_partial");
  const Floats grads = gg.download();
  for (const TensorInfo& t : p.layout.tensors) {
    const Floats gt(grads.begin() + t.offset, grads.begin() + t.offset + t.size());
    expect_close(gt, Floats(cg.get(t), cg.get(t) + t.size()), tol, t.name.c_str());
  }
}

TEST_F(CudaKernels, ReplicatedKvShardBlockMatchesCpu) {
  attention_block_matches_cpu(*ctx_, false);
}

TEST_F(CudaKernels, Bf16AttentionBlockMatchesCpuEmulation) {
  attention_block_matches_cpu(*ctx_, true);
}

// Context::set_bf16_weights: with the weights' bf16 copy registered, the bf16 GEMMs read
// weight operands from it instead of converting them; the same bf16 numbers, so the block's
// outputs and gradients are bit-identical to the converting path, and again after dropping it.
TEST_F(CudaKernels, Bf16WeightCopyGivesTheSameBits) {
  const LlamaDims d{4, 64, 172, 4, 2, 256};
  const BlockShape sh{d, tp_shard(d, 1, 2), 2, 32, true};
  Params<float> p(stage_layout(d, {0, 1, false, false, sh.shard}));
  init_params(p, d, {5, 0.1});
  Floats x = random(std::size_t(sh.tokens()) * d.hidden, 26), dy = random(x.size(), 27);
  round_bf16(p.data.data(), p.data.size());
  for (Floats* v : {&x, &dy}) round_bf16(v->data(), v->size());
  DeviceBuffer<float> gp(floats(p.data)), gx(x), gdy(dy);
  const auto at = [&](float* base, const char* name) {
    return base + p.layout.find(std::string("layers.0.") + name)->offset;
  };
  // y, dx and the weight gradients of one forward + backward of the MLP and attention blocks.
  const auto run = [&] {
    DeviceBuffer<float> gg(p.data.size()), saved(attention_saved_size(sh) + mlp_saved_size(sh)),
        y(x.size()), dx(x.size()), y2(x.size()), dx2(x.size());
    gg.zero();
    float* w = gp.get();
    float* g = gg.get();
    const auto sa = carve_attention_saved(sh, saved.get());
    const auto sm = carve_mlp_saved(sh, saved.get() + attention_saved_size(sh));
    const AttentionWeights<float> aw{at(w, "attn_norm"), at(w, "wq"), at(w, "wk"), at(w, "wv"),
                                     at(w, "wo")};
    const AttentionGrads<float> ag{at(g, "attn_norm"), at(g, "wq"), at(g, "wk"), at(g, "wv"),
                                   at(g, "wo")};
    const MlpWeights<float> mw{at(w, "mlp_norm"), at(w, "w_gate"), at(w, "w_up"), at(w, "w_down")};
    const MlpGrads<float> mg{at(g, "mlp_norm"), at(g, "w_gate"), at(g, "w_up"), at(g, "w_down")};
    cuda::attention_block_forward(*ctx_, sh, aw, gx.get(), sa, y.get());
    cuda::attention_block_backward(*ctx_, sh, aw, sa, gx.get(), gdy.get(), dx.get(), ag);
    cuda::mlp_block_forward(*ctx_, sh, mw, gx.get(), sm, y2.get());
    cuda::mlp_block_backward(*ctx_, sh, mw, sm, gx.get(), gdy.get(), dx2.get(), mg);
    ctx_->synchronize();
    return std::vector<Floats>{y.download(), dx.download(), y2.download(), dx2.download(),
                               gg.download()};
  };
  const auto converting = run();
  ctx_->set_bf16_weights(gp.get(), p.data.size());
  const auto from_copy = run();
  ctx_->set_bf16_weights(nullptr, 0);
  const auto dropped = run();
  for (std::size_t i = 0; i < converting.size(); ++i) {
    EXPECT_TRUE(from_copy[i] == converting[i]) << "output " << i;
    EXPECT_TRUE(dropped[i] == converting[i]) << "output " << i;
  }
  EXPECT_NE(converting[0], Floats(x.size(), 0.0f));
}

TEST(CudaDevice, ReasonIsEmptyOrExplainsWhy) {
  const std::string reason = cuda::device_unavailable_reason();
  if (!reason.empty()) {
    EXPECT_EQ(reason.rfind("no CUDA device: ", 0), 0u) << reason;
    GTEST_SKIP() << reason;
  }
  int count = 0;
  EXPECT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_GT(count, 0);
}

}  // namespace
}  // namespace hexi::kernels
