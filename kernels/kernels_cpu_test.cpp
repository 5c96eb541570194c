// CPU reference kernels: forward against hand-computed cases, backward against finite
// differences in double precision (test_util.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu_kernels.hpp"
#include "kernels/test_util.hpp"

namespace hexi::kernels::cpu {
namespace {

using testing::dot;
using testing::expect_gradient;
using testing::random_tokens;
using testing::random_vector;
using Vec = std::vector<double>;

TEST(Matmul, HandCase) {
  // x (1, 2) = [1 2]; w (3, 2) rows [1 0], [0 1], [1 1] -> out = [1 2 3].
  const std::vector<float> x{1, 2}, w{1, 0, 0, 1, 1, 1};
  std::vector<float> out(3);
  matmul_forward(out.data(), x.data(), w.data(), 1, 2, 3);
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3}));
  // dx = dout w = [1 1 1] w = [2 2]; dw += dout^T x accumulates onto 1s.
  const std::vector<float> dout{1, 1, 1};
  std::vector<float> dx(2, 5.f), dw(6, 1.f);
  matmul_backward_input(dx.data(), dout.data(), w.data(), 1, 2, 3, false);
  EXPECT_EQ(dx, (std::vector<float>{2, 2}));
  matmul_backward_input(dx.data(), dout.data(), w.data(), 1, 2, 3, true);
  EXPECT_EQ(dx, (std::vector<float>{4, 4}));
  matmul_backward_weight(dw.data(), dout.data(), x.data(), 1, 2, 3);
  EXPECT_EQ(dw, (std::vector<float>{2, 3, 2, 3, 2, 3}));
}

TEST(Matmul, BackwardMatchesFiniteDifferences) {
  const int n = 3, k = 4, m = 5;
  Vec x = random_vector(n * k, 1), w = random_vector(m * k, 2), r = random_vector(n * m, 3);
  Vec out(n * m), dx(n * k), dw(m * k, 0.0);
  auto loss = [&] {
    matmul_forward(out.data(), x.data(), w.data(), n, k, m);
    return dot(out, r);
  };
  matmul_backward_input(dx.data(), r.data(), w.data(), n, k, m, false);
  matmul_backward_weight(dw.data(), r.data(), x.data(), n, k, m);
  expect_gradient(loss, x, dx, "dx");
  expect_gradient(loss, w, dw, "dw");
}

TEST(RmsNorm, HandCase) {
  // x = [3 4]: mean(x^2) = 12.5, so with eps = 0 out = [3, 4] / sqrt(12.5) * [1, 2].
  const std::vector<double> x{3, 4}, w{1, 2};
  std::vector<double> out(2), rstd(1);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), 1, 2, 0.0);
  EXPECT_NEAR(rstd[0], 1 / std::sqrt(12.5), 1e-15);
  EXPECT_NEAR(out[0], 3 / std::sqrt(12.5), 1e-15);
  EXPECT_NEAR(out[1], 8 / std::sqrt(12.5), 1e-15);
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  const int n = 3, h = 6;
  Vec x = random_vector(n * h, 4), w = random_vector(h, 5, 0.5, 1.5), r = random_vector(n * h, 6);
  Vec out(n * h), rstd(n), dx(n * h), dw(h, 0.0);
  auto loss = [&] {
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), n, h, 1e-5);
    return dot(out, r);
  };
  loss();
  rmsnorm_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), n, h);
  expect_gradient(loss, x, dx, "dx");
  expect_gradient(loss, w, dw, "dw");
}

TEST(Rope, HandCase) {
  // d = 2: one pair (x0, x1) turned by t * theta^0 = t radians at position t.
  std::vector<double> x{1, 0, 1, 0, 1, 0};  // (b 1, s 3, heads 1, d 2)
  rope_forward(x.data(), 1, 3, 1, 2, 10000.0);
  for (int t = 0; t < 3; ++t) {
    EXPECT_NEAR(x[2 * t], std::cos(t), 1e-15);
    EXPECT_NEAR(x[2 * t + 1], std::sin(t), 1e-15);
  }
  rope_backward(x.data(), 1, 3, 1, 2, 10000.0);  // the inverse rotation
  for (int t = 0; t < 3; ++t) {
    EXPECT_NEAR(x[2 * t], 1.0, 1e-15);
    EXPECT_NEAR(x[2 * t + 1], 0.0, 1e-15);
  }
}

TEST(Rope, PairsElementIWithIPlusHalf) {
  // d = 4, position 1: pair (x0, x2) turns by 1 rad, pair (x1, x3) by 10000^(-1/2) rad.
  std::vector<double> x{9, 9, 9, 9, 1, 0, 0, 0};  // (b 1, s 2, heads 1, d 4)
  rope_forward(x.data(), 1, 2, 1, 4, 10000.0);
  EXPECT_EQ(x[0], 9.0);  // position 0 is not rotated
  EXPECT_NEAR(x[4], std::cos(1.0), 1e-15);
  EXPECT_NEAR(x[6], std::sin(1.0), 1e-15);
  EXPECT_EQ(x[5], 0.0);
  EXPECT_EQ(x[7], 0.0);
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  const int b = 2, s = 3, heads = 2, d = 4;
  Vec x = random_vector(b * s * heads * d, 7), r = random_vector(x.size(), 8);
  auto loss = [&] {
    Vec y = x;
    rope_forward(y.data(), b, s, heads, d, 10000.0);
    return dot(y, r);
  };
  Vec dx = r;
  rope_backward(dx.data(), b, s, heads, d, 10000.0);
  expect_gradient(loss, x, dx, "dx");
}

TEST(Attention, HandCase) {
  // s = 2, d = 1, one head. Causal: token 0 sees only itself -> out0 = v0. Token 1 has
  // scores q1*k0 = q1*k1 = 0 (q1 = 0) -> equal weights -> out1 = (v0 + v1) / 2.
  const std::vector<double> q{1, 0}, k{2, 3}, v{10, 20};
  std::vector<double> out(2), probs(4);
  attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), 1, 2, 1, 1, 1);
  EXPECT_DOUBLE_EQ(out[0], 10.0);
  EXPECT_DOUBLE_EQ(out[1], 15.0);
  EXPECT_EQ(probs, (std::vector<double>{1, 0, 0.5, 0.5}));
}

TEST(Attention, GroupedQueryEqualsRepeatedKvHeads) {
  // hq = 4 query heads on hk = 2 KV heads == 4 KV heads where heads 0,1 copy KV head 0
  // and heads 2,3 copy KV head 1.
  const int b = 2, s = 5, d = 4;
  Vec q = random_vector(b * s * 4 * d, 9), k = random_vector(b * s * 2 * d, 10),
      v = random_vector(b * s * 2 * d, 11);
  Vec k4(b * s * 4 * d), v4(b * s * 4 * d);
  for (int tok = 0; tok < b * s; ++tok)
    for (int j = 0; j < 4; ++j)
      for (int e = 0; e < d; ++e) {
        k4[(tok * 4 + j) * d + e] = k[(tok * 2 + j / 2) * d + e];
        v4[(tok * 4 + j) * d + e] = v[(tok * 2 + j / 2) * d + e];
      }
  Vec out_gqa(q.size()), out_mha(q.size()), p1(b * 4 * s * s), p2(p1.size());
  attention_forward(out_gqa.data(), p1.data(), q.data(), k.data(), v.data(), b, s, 4, 2, d);
  attention_forward(out_mha.data(), p2.data(), q.data(), k4.data(), v4.data(), b, s, 4, 4, d);
  for (std::size_t i = 0; i < q.size(); ++i) EXPECT_NEAR(out_gqa[i], out_mha[i], 1e-14);
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  const int b = 2, s = 4, hq = 4, hk = 2, d = 3;
  Vec q = random_vector(b * s * hq * d, 12), k = random_vector(b * s * hk * d, 13),
      v = random_vector(b * s * hk * d, 14), r = random_vector(q.size(), 15);
  Vec out(q.size()), probs(b * hq * s * s);
  auto loss = [&] {
    attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), b, s, hq, hk, d);
    return dot(out, r);
  };
  loss();
  Vec dq(q.size()), dk(k.size(), 7.0), dv(v.size(), 7.0);  // overwritten, not accumulated
  attention_backward(dq.data(), dk.data(), dv.data(), r.data(), q.data(), k.data(), v.data(),
                     probs.data(), b, s, hq, hk, d);
  expect_gradient(loss, q, dq, "dq");
  expect_gradient(loss, k, dk, "dk");
  expect_gradient(loss, v, dv, "dv");
}

TEST(SwiGlu, HandCaseAndFiniteDifferences) {
  const std::vector<double> g0{0.0, 2.0}, u0{5.0, 3.0};
  std::vector<double> o(2);
  swiglu_forward(o.data(), g0.data(), u0.data(), 2);
  EXPECT_EQ(o[0], 0.0);                                      // silu(0) = 0
  EXPECT_NEAR(o[1], 2.0 / (1 + std::exp(-2.0)) * 3, 1e-15);  // 2 sigmoid(2) * 3
  const std::size_t n = 12;
  Vec gate = random_vector(n, 16, -3, 3), up = random_vector(n, 17), r = random_vector(n, 18);
  Vec out(n), dgate(n), dup(n);
  auto loss = [&] {
    swiglu_forward(out.data(), gate.data(), up.data(), n);
    return dot(out, r);
  };
  swiglu_backward(dgate.data(), dup.data(), r.data(), gate.data(), up.data(), n);
  expect_gradient(loss, gate, dgate, "dgate");
  expect_gradient(loss, up, dup, "dup");
}

TEST(Embedding, VocabShardLooksUpItsRowsOnly) {
  // Shard holding vocabulary rows [2, 4) of a (V, 2) table: rows "20 21" and "30 31".
  const std::vector<float> table{20, 21, 30, 31};
  const std::vector<int> tokens{3, 0, 2};
  std::vector<float> out(6, -1.f);
  embedding_forward(out.data(), tokens.data(), table.data(), 3, 2, 2, 4);
  EXPECT_EQ(out, (std::vector<float>{30, 31, 0, 0, 20, 21}));
  std::vector<float> dtable(4, 1.f);
  const std::vector<float> dout{1, 2, 3, 4, 5, 6};
  embedding_backward(dtable.data(), dout.data(), tokens.data(), 3, 2, 2, 4);
  EXPECT_EQ(dtable, (std::vector<float>{6, 7, 2, 3}));  // row 2 += [5 6], row 3 += [1 2]
}

TEST(Embedding, RepeatedTokensAccumulate) {
  const std::vector<double> table{1, 2};
  const std::vector<int> tokens{0, 0, 0};
  const std::vector<double> dout{1, 1, 2, 2, 3, 3};
  std::vector<double> dtable(2, 0.0);
  embedding_backward(dtable.data(), dout.data(), tokens.data(), 3, 2, 0, 1);
  EXPECT_EQ(dtable, (std::vector<double>{6, 6}));
}

// Full-vocabulary loss from one shard holding all columns.
double full_loss(const Vec& logits, const std::vector<int>& targets, int n, int V, Vec& max,
                 Vec& partials) {
  Vec loss(n);
  logits_row_max(max.data(), logits.data(), n, V);
  cross_entropy_partials(partials.data(), logits.data(), max.data(), targets.data(), n, V, 0);
  cross_entropy_loss(loss.data(), max.data(), partials.data(), n);
  double sum = 0;
  for (double l : loss) sum += l;
  return sum;
}

TEST(CrossEntropy, UniformLogitsGiveLogV) {
  const int n = 2, V = 8;
  Vec logits(n * V, 3.0), max(n), partials(2 * n);
  EXPECT_NEAR(full_loss(logits, {1, 7}, n, V, max, partials), 2 * std::log(8.0), 1e-14);
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  const int n = 3, V = 7;
  Vec logits = random_vector(n * V, 19, -4, 4), max(n), partials(2 * n), dlogits(n * V);
  const std::vector<int> targets{0, 6, 3};
  auto loss = [&] { return 0.5 * full_loss(logits, targets, n, V, max, partials); };
  loss();
  cross_entropy_backward(dlogits.data(), logits.data(), max.data(), partials.data(), targets.data(),
                         n, V, 0, 0.5);
  expect_gradient(loss, logits, dlogits, "dlogits");
}

TEST(CrossEntropy, VocabShardsCombineToTheFullLoss) {
  // Two shards of columns [0, 3) and [3, 7); the all-reduces are done by hand here.
  const int n = 4, V = 7, split = 3;
  const Vec logits = random_vector(n * V, 20, -4, 4);
  const std::vector<int> targets = random_tokens(n, V, 21);
  Vec fmax(n), fpart(2 * n), fdl(n * V);
  const double expected = full_loss(logits, targets, n, V, fmax, fpart);
  cross_entropy_backward(fdl.data(), logits.data(), fmax.data(), fpart.data(), targets.data(), n, V,
                         0, 1.0);
  Vec shard[2], max[2], part[2];
  const int begin[2] = {0, split}, width[2] = {split, V - split};
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < width[r]; ++j) shard[r].push_back(logits[i * V + begin[r] + j]);
    max[r].resize(n);
    logits_row_max(max[r].data(), shard[r].data(), n, width[r]);
  }
  Vec gmax(n), gpart(2 * n, 0.0), loss(n);
  for (int i = 0; i < n; ++i) gmax[i] = std::max(max[0][i], max[1][i]);  // all-reduce MAX
  for (int r = 0; r < 2; ++r) {
    part[r].resize(2 * n);
    cross_entropy_partials(part[r].data(), shard[r].data(), gmax.data(), targets.data(), n,
                           width[r], begin[r]);
    for (int i = 0; i < 2 * n; ++i) gpart[i] += part[r][i];  // all-reduce SUM
  }
  cross_entropy_loss(loss.data(), gmax.data(), gpart.data(), n);
  EXPECT_NEAR(loss[0] + loss[1] + loss[2] + loss[3], expected, 1e-12);
  for (int r = 0; r < 2; ++r) {
    Vec dl(n * width[r]);
    cross_entropy_backward(dl.data(), shard[r].data(), gmax.data(), gpart.data(), targets.data(), n,
                           width[r], begin[r], 1.0);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < width[r]; ++j)
        EXPECT_NEAR(dl[i * width[r] + j], fdl[i * V + begin[r] + j], 1e-14);
  }
}

TEST(AdamW, FirstStepMovesByLrTowardsMinusTheGradientSign) {
  // Step 1: m_hat = g and v_hat = g^2, so the update is lr * g / (|g| + eps) = lr*sign(g)
  // (to 1e-8 relative); weight decay first shrinks the parameter by lr * wd.
  std::vector<double> p{1.0, 1.0, -2.0}, g{0.5, -3.0, 0.0}, m(3, 0.0), v(3, 0.0);
  adamw_update(p.data(), g.data(), m.data(), v.data(), 3, 0.1, 0.9, 0.95, 1e-8, 0.5, 1);
  EXPECT_NEAR(p[0], 1.0 * (1 - 0.05) - 0.1, 1e-8);
  EXPECT_NEAR(p[1], 1.0 * (1 - 0.05) + 0.1, 1e-8);
  EXPECT_DOUBLE_EQ(p[2], -2.0 * (1 - 0.05));  // zero gradient: decay only
  EXPECT_NEAR(m[0], 0.05, 1e-15);             // (1 - beta1) g
  EXPECT_NEAR(v[1], 0.05 * 9, 1e-15);         // (1 - beta2) g^2
}

TEST(AdamW, SecondStepUsesBiasCorrectedMoments) {
  std::vector<double> p{0.0}, m{0.0}, v{0.0};
  const std::vector<double> g1{1.0}, g2{-1.0};
  adamw_update(p.data(), g1.data(), m.data(), v.data(), 1, 0.01, 0.9, 0.99, 0.0, 0.0, 1);
  adamw_update(p.data(), g2.data(), m.data(), v.data(), 1, 0.01, 0.9, 0.99, 0.0, 0.0, 2);
  // m = 0.9*0.1 - 0.1 = -0.01, m_hat = -0.01/0.19; v = 0.99*0.01 + 0.01 = 0.0199,
  // v_hat = 0.0199/(1 - 0.9801) = 1.
  const double m_hat = -0.01 / 0.19, v_hat = 0.0199 / (1 - 0.99 * 0.99);
  EXPECT_NEAR(p[0], -0.01 - 0.01 * m_hat / std::sqrt(v_hat), 1e-15);
}

}  // namespace
}  // namespace hexi::kernels::cpu
