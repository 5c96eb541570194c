// Blockwise attention (attention_blockwise.hpp) against the dense reference kernels
// (attention_forward / attention_backward of cpu_kernels.hpp): one block holding the whole
// sequence, a zig-zag ring of uneven shards, shuffled positions, fully masked blocks.
//
// Tolerance per element: |blockwise - dense| <= atol + eps * |dense| with atol = eps *
// max|dense| of the tensor. Both sides sum the same products in different orders (tiles of
// 64 keys, online rescaling, merges of partial results) and use different exp
// implementations, so they differ by rounding only: a K-term sum in float carries ~sqrt(K) *
// 2^-24 of the row's magnitude (K <= 400 keys here: ~1e-6; measured: at most 6 % of the tolerance),
// so float gets eps = 1e-5; double gets eps = 1e-12 (~1e4 x its 2^-53). A wrong mask, a missing
// rescale or a dropped block gives O(1) relative errors.
#include "kernels/attention_blockwise.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/cpu_kernels.hpp"
#include "kernels/test_util.hpp"

namespace hexi::kernels::cpu {
namespace {

template <class T>
constexpr double kEps = std::is_same_v<T, float> ? 1e-5 : 1e-12;

template <class T>
void expect_close(const std::vector<T>& got, const std::vector<T>& ref, double eps,
                  const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double scale = 0;
  for (T x : ref) scale = std::max(scale, std::abs(double(x)));
  const double atol = eps * scale;
  int failures = 0;
  for (std::size_t i = 0; i < ref.size() && failures < 5; ++i) {
    const double diff = std::abs(double(got[i]) - double(ref[i]));
    if (!(diff <= atol + eps * std::abs(double(ref[i])))) {  // NaN fails too
      ADD_FAILURE() << what << "[" << i << "]: blockwise " << got[i] << " dense " << ref[i];
      ++failures;
    }
  }
}

// One sequence of s tokens: inputs, the dense reference's results and the reference
// log-sum-exp (double loops).
template <class T>
struct Dense {
  int s, hq, hk, d;
  std::vector<T> q, k, v, dout;  // (s, hq, d), (s, hk, d), (s, hk, d), (s, hq, d)
  std::vector<T> out, lse, dq, dk, dv;

  Dense(int s_, int hq_, int hk_, int d_, std::uint64_t seed)
      : s(s_),
        hq(hq_),
        hk(hk_),
        d(d_),
        // q and k in [-2, 2): scores up to ~ +-16 / sqrt(d), peaked softmax rows whose maximum
        // moves from tile to tile (the online rescaling matters).
        q(testing::random_vector<T>(std::size_t(s) * hq * d, seed, -2, 2)),
        k(testing::random_vector<T>(std::size_t(s) * hk * d, seed + 1, -2, 2)),
        v(testing::random_vector<T>(std::size_t(s) * hk * d, seed + 2)),
        dout(testing::random_vector<T>(q.size(), seed + 3)),
        out(q.size()),
        lse(std::size_t(s) * hq),
        dq(q.size()),
        dk(k.size()),
        dv(v.size()) {
    std::vector<T> probs(std::size_t(hq) * s * s);
    attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), 1, s, hq, hk, d);
    attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                       probs.data(), 1, s, hq, hk, d);
    for (int t = 0; t < s; ++t)
      for (int j = 0; j < hq; ++j) lse[std::size_t(t) * hq + j] = T(reference_lse(t, j));
  }
  double reference_lse(int t, int j) const {
    const int kh = j / (hq / hk);
    std::vector<double> x(t + 1);
    for (int c = 0; c <= t; ++c) {
      double dot = 0;
      for (int e = 0; e < d; ++e)
        dot += double(q[(std::size_t(t) * hq + j) * d + e]) * k[(std::size_t(c) * hk + kh) * d + e];
      x[c] = dot / std::sqrt(double(d));
    }
    const double mx = *std::max_element(x.begin(), x.end());
    double sum = 0;
    for (double xi : x) sum += std::exp(xi - mx);
    return mx + std::log(sum);
  }
};

// Rows `tokens` (indices into a (s, heads, d) tensor) gathered into a (tokens.size(), heads, d)
// block, and scattered back (+=).
template <class T>
std::vector<T> gather(const std::vector<T>& x, const std::vector<int>& tokens, int width) {
  std::vector<T> out(tokens.size() * width);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    std::copy_n(x.begin() + std::size_t(tokens[i]) * width, width, out.begin() + i * width);
  return out;
}
template <class T>
void scatter_add(std::vector<T>& x, const std::vector<T>& block, const std::vector<int>& tokens,
                 int width) {
  for (std::size_t i = 0; i < tokens.size(); ++i)
    for (int e = 0; e < width; ++e) x[std::size_t(tokens[i]) * width + e] += block[i * width + e];
}

// The tokens of each rank in the mirrored (zig-zag) layout: rank i holds L_i / 2 tokens of
// the front half (in rank order from the start) and L_i / 2 of the back half (mirrored, in
// rank order from the end).
std::vector<std::vector<int>> mirrored_shards(const std::vector<int>& lengths) {
  const int s = std::accumulate(lengths.begin(), lengths.end(), 0);
  std::vector<std::vector<int>> shards;
  int front = 0, back = s;
  for (int len : lengths) {
    std::vector<int> tokens;
    for (int t = front; t < front + len / 2; ++t) tokens.push_back(t);
    for (int t = back - len / 2; t < back; ++t) tokens.push_back(t);
    front += len / 2;
    back -= len / 2;
    shards.push_back(tokens);
  }
  return shards;
}

template <class T>
class BlockwiseAttention : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(BlockwiseAttention, Types);

TYPED_TEST(BlockwiseAttention, OneBlockOfTheWholeSequenceEqualsDense) {
  using T = TypeParam;
  struct Heads {
    int hq, hk;
  };
  // 150 tokens: tiles of 64, 64 and 22 (a ragged last tile); MHA, GQA and MQA.
  for (const Heads h : {Heads{2, 2}, Heads{4, 2}, Heads{4, 1}}) {
    const int s = 150, d = 16;
    const Dense<T> ref(s, h.hq, h.hk, d, 100 + h.hq * 10 + h.hk);
    std::vector<int> pos(s);
    std::iota(pos.begin(), pos.end(), 0);
    const AttentionBlockPair pair{s, s, h.hq, h.hk, d, pos.data(), pos.data()};
    std::vector<T> out(ref.out.size()), lse(ref.lse.size());
    std::vector<T> dq(ref.dq.size()), dk(ref.dk.size()), dv(ref.dv.size());
    blockwise_attention_forward(out.data(), lse.data(), ref.q.data(), ref.k.data(), ref.v.data(),
                                pair);
    blockwise_attention_backward(dq.data(), dk.data(), dv.data(), ref.dout.data(), ref.q.data(),
                                 ref.k.data(), ref.v.data(), out.data(), lse.data(), pair);
    const std::string heads = " hq " + std::to_string(h.hq) + " hk " + std::to_string(h.hk);
    expect_close(out, ref.out, kEps<T>, "out" + heads);
    expect_close(lse, ref.lse, kEps<T>, "lse" + heads);
    expect_close(dq, ref.dq, kEps<T>, "dq" + heads);
    expect_close(dk, ref.dk, kEps<T>, "dk" + heads);
    expect_close(dv, ref.dv, kEps<T>, "dv" + heads);
  }
}

// Runs a ring over the shards: every rank's queries against every rank's keys (forward merged
// with attention_merge in ring order, backward summed), results scattered into whole-sequence
// tensors.
template <class T>
struct Ring {
  std::vector<T> out, lse, dq, dk, dv;
  Ring(const Dense<T>& ref, const std::vector<std::vector<int>>& shards, bool bf16 = false)
      : out(ref.out.size()),
        lse(ref.lse.size()),
        dq(ref.dq.size()),
        dk(ref.dk.size()),
        dv(ref.dv.size()) {
    const int ranks = static_cast<int>(shards.size()), hq = ref.hq, hk = ref.hk, d = ref.d;
    auto pair_of = [&](int i, int j) {
      return AttentionBlockPair{static_cast<int>(shards[i].size()),
                                static_cast<int>(shards[j].size()),
                                hq,
                                hk,
                                d,
                                shards[i].data(),
                                shards[j].data()};
    };
    for (int i = 0; i < ranks; ++i) {
      const auto& mine = shards[i];
      const auto q = gather(ref.q, mine, hq * d), dout = gather(ref.dout, mine, hq * d);
      // The accumulator starts as "no key seen": out 0, lse -inf.
      std::vector<T> o(mine.size() * hq * d),
          l(mine.size() * hq, -std::numeric_limits<T>::infinity());
      for (int step = 0; step < ranks; ++step) {
        const int j = (i - step + ranks) % ranks;  // K/V of rank j arrive at step
        const auto k = gather(ref.k, shards[j], hk * d), v = gather(ref.v, shards[j], hk * d);
        std::vector<T> ob(o.size()), lb(l.size());
        blockwise_attention_forward(ob.data(), lb.data(), q.data(), k.data(), v.data(),
                                    pair_of(i, j), bf16);
        attention_merge(o.data(), l.data(), ob.data(), lb.data(), static_cast<int>(mine.size()), hq,
                        d);
      }
      if (bf16) round_bf16(o.data(), o.size());
      std::vector<T> dqi(o.size());
      for (int step = 0; step < ranks; ++step) {
        const int j = (i - step + ranks) % ranks;
        const auto k = gather(ref.k, shards[j], hk * d), v = gather(ref.v, shards[j], hk * d);
        std::vector<T> dkj(k.size()), dvj(v.size());
        blockwise_attention_backward(dqi.data(), dkj.data(), dvj.data(), dout.data(), q.data(),
                                     k.data(), v.data(), o.data(), l.data(), pair_of(i, j), bf16);
        scatter_add(dk, dkj, shards[j], hk * d);
        scatter_add(dv, dvj, shards[j], hk * d);
      }
      scatter_add(out, o, mine, hq * d);
      scatter_add(lse, l, mine, hq);
      scatter_add(dq, dqi, mine, hq * d);
    }
  }
};

TYPED_TEST(BlockwiseAttention, UnevenZigZagRingEqualsDense) {
  using T = TypeParam;
  // 400 tokens on 3 ranks with 5:3:2 shares (200, 120, 80 tokens), each rank holding two
  // mirrored chunks: rank 0 [0, 100) + [300, 400), rank 1 [100, 160) + [240, 300), rank 2
  // [160, 200) + [200, 240). The 9 block pairs are diagonal, full, half and empty; query
  // tiles straddle the two chunks of a rank. GQA: 4 query heads on 2 KV heads.
  const Dense<T> ref(400, 4, 2, 16, 200);
  const auto shards = mirrored_shards({200, 120, 80});
  ASSERT_EQ(shards[2], [] {
    std::vector<int> t(80);
    std::iota(t.begin(), t.end(), 160);
    return t;
  }());
  const Ring<T> ring(ref, shards);
  expect_close(ring.out, ref.out, kEps<T>, "out");
  expect_close(ring.lse, ref.lse, kEps<T>, "lse");
  expect_close(ring.dq, ref.dq, kEps<T>, "dq");
  expect_close(ring.dk, ref.dk, kEps<T>, "dk");
  expect_close(ring.dv, ref.dv, kEps<T>, "dv");
}

TYPED_TEST(BlockwiseAttention, ShuffledPositionsEqualDense) {
  using T = TypeParam;
  // One block whose rows hold the tokens in a random order: every tile pair mixes visible and
  // invisible pairs, so the mask is applied element by element everywhere.
  const int s = 200, hq = 4, hk = 2, d = 8;
  const Dense<T> ref(s, hq, hk, d, 300);
  std::vector<int> order(s);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(301));
  const Ring<T> ring(ref, {order});
  expect_close(ring.out, ref.out, kEps<T>, "out");
  expect_close(ring.dq, ref.dq, kEps<T>, "dq");
  expect_close(ring.dk, ref.dk, kEps<T>, "dk");
  expect_close(ring.dv, ref.dv, kEps<T>, "dv");
}

TYPED_TEST(BlockwiseAttention, ASingleVisibleKeyGivesItsValue) {
  using T = TypeParam;
  // One query at position 63 against keys at 63..126: only key 0 is visible (its position
  // equals the query's, the boundary of the causal mask), so out = v_0 for both query heads
  // of the group and lse = q . k_0 / sqrt(d).
  const int n = 64, hq = 2, hk = 1, d = 4;
  std::vector<int> q_pos{63}, kv_pos(n);
  std::iota(kv_pos.begin(), kv_pos.end(), 63);
  const std::vector<T> q{1, 2, 3, 4, -1, 0, 1, 0};
  const auto k = testing::random_vector<T>(std::size_t(n) * hk * d, 700);
  const auto v = testing::random_vector<T>(k.size(), 701);
  std::vector<T> out(q.size()), lse(hq);
  blockwise_attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(),
                              AttentionBlockPair{1, n, hq, hk, d, q_pos.data(), kv_pos.data()});
  for (int j = 0; j < hq; ++j) {
    T dot = 0;
    for (int e = 0; e < d; ++e) dot += q[j * d + e] * k[e];
    EXPECT_NEAR(lse[j], dot / 2, 1e-6) << j;
    for (int e = 0; e < d; ++e) EXPECT_EQ(out[j * d + e], v[e]) << j;
  }
}

TYPED_TEST(BlockwiseAttention, FullyMaskedBlockIsANoOp) {
  using T = TypeParam;
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  // Queries at positions 0..69 against keys at 100..169: no visible pair.
  const int n = 70, hq = 4, hk = 2, d = 16;
  std::vector<int> q_pos(n), kv_pos(n);
  std::iota(q_pos.begin(), q_pos.end(), 0);
  std::iota(kv_pos.begin(), kv_pos.end(), 100);
  const AttentionBlockPair pair{n, n, hq, hk, d, q_pos.data(), kv_pos.data()};
  const auto q = testing::random_vector<T>(std::size_t(n) * hq * d, 400);
  const auto k = testing::random_vector<T>(std::size_t(n) * hk * d, 401);
  const auto v = testing::random_vector<T>(k.size(), 402);
  std::vector<T> out(q.size(), T(7)), lse(std::size_t(n) * hq, T(7));  // overwritten
  blockwise_attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), pair);
  EXPECT_EQ(out, std::vector<T>(q.size(), T(0)));
  EXPECT_EQ(lse, std::vector<T>(lse.size(), kNegInf));

  // Merging it into a partial result changes nothing, bit for bit.
  auto acc = testing::random_vector<T>(q.size(), 403);
  auto acc_lse = testing::random_vector<T>(lse.size(), 404);
  const auto acc0 = acc, acc_lse0 = acc_lse;
  attention_merge(acc.data(), acc_lse.data(), out.data(), lse.data(), n, hq, d);
  EXPECT_EQ(acc, acc0);
  EXPECT_EQ(acc_lse, acc_lse0);
  // Merging a partial result into it copies the partial result.
  attention_merge(out.data(), lse.data(), acc.data(), acc_lse.data(), n, hq, d);
  EXPECT_EQ(out, acc0);
  EXPECT_EQ(lse, acc_lse0);

  // The backward adds exactly nothing (finite final lse: the rows see keys of other blocks).
  auto dq = testing::random_vector<T>(q.size(), 405), dk = testing::random_vector<T>(k.size(), 406),
       dv = testing::random_vector<T>(v.size(), 407);
  const auto dq0 = dq, dk0 = dk, dv0 = dv;
  blockwise_attention_backward(dq.data(), dk.data(), dv.data(), acc.data(), q.data(), k.data(),
                               v.data(), acc.data(), acc_lse.data(), pair);
  EXPECT_EQ(dq, dq0);
  EXPECT_EQ(dk, dk0);
  EXPECT_EQ(dv, dv0);
}

TYPED_TEST(BlockwiseAttention, RowsThatSeeNoKeyGiveMinusInfinityAndZero) {
  using T = TypeParam;
  // Half a block: queries at 0..99, keys at 50..149; query rows 0..49 see no key (lse -inf,
  // out 0, never NaN; the backward gives them dq = 0), rows 50..99 see keys 50..t: the dense
  // attention of tokens 50..99 as a sequence of their own, keys 100..149 get no gradient.
  const int n = 100, hq = 2, hk = 1, d = 4;
  const Dense<T> ref(50, hq, hk, d, 500);  // tokens 50..99 as a sequence of their own
  std::vector<int> q_pos(n), kv_pos(n);
  std::iota(q_pos.begin(), q_pos.end(), 0);
  std::iota(kv_pos.begin(), kv_pos.end(), 50);
  auto q = testing::random_vector<T>(std::size_t(n) * hq * d, 501);
  std::copy(ref.q.begin(), ref.q.end(), q.begin() + std::size_t(50) * hq * d);
  auto k = testing::random_vector<T>(std::size_t(n) * hk * d, 502),
       v = testing::random_vector<T>(k.size(), 503);
  std::copy(ref.k.begin(), ref.k.end(), k.begin());
  std::copy(ref.v.begin(), ref.v.end(), v.begin());
  const AttentionBlockPair pair{n, n, hq, hk, d, q_pos.data(), kv_pos.data()};
  std::vector<T> out(q.size()), lse(std::size_t(n) * hq);
  blockwise_attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), pair);
  const std::size_t half = std::size_t(50) * hq;
  for (std::size_t i = 0; i < half; ++i) EXPECT_EQ(lse[i], -std::numeric_limits<T>::infinity());
  for (std::size_t i = 0; i < half * d; ++i) EXPECT_EQ(out[i], T(0));
  expect_close(std::vector<T>(out.begin() + half * d, out.end()), ref.out, kEps<T>, "out");
  expect_close(std::vector<T>(lse.begin() + half, lse.end()), ref.lse, kEps<T>, "lse");

  auto dout = testing::random_vector<T>(q.size(), 504);
  std::copy(ref.dout.begin(), ref.dout.end(), dout.begin() + half * d);
  std::vector<T> dq(q.size()), dk(k.size()), dv(v.size());
  blockwise_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                               v.data(), out.data(), lse.data(), pair);
  for (std::size_t i = 0; i < half * d; ++i) EXPECT_EQ(dq[i], T(0));
  expect_close(std::vector<T>(dq.begin() + half * d, dq.end()), ref.dq, kEps<T>, "dq");
  const std::size_t kv_half = std::size_t(50) * hk * d;
  for (std::size_t i = kv_half; i < dk.size(); ++i) EXPECT_EQ(dk[i], T(0));
  for (std::size_t i = kv_half; i < dv.size(); ++i) EXPECT_EQ(dv[i], T(0));
  expect_close(std::vector<T>(dk.begin(), dk.begin() + kv_half), ref.dk, kEps<T>, "dk");
  expect_close(std::vector<T>(dv.begin(), dv.begin() + kv_half), ref.dv, kEps<T>, "dv");
}

// max |x - truth| / max |truth|: the error of a tensor relative to its scale.
double relative_error(const std::vector<float>& x, const std::vector<float>& truth) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    err = std::max(err, std::abs(double(x[i]) - truth[i]));
    scale = std::max(scale, std::abs(double(truth[i])));
  }
  return err / scale;
}

TEST(BlockwiseAttentionBf16, RingIsAsAccurateAsTheDenseBf16Kernel) {
  // bf16 rounds different intermediates than the dense bf16 kernel (P and dS before their
  // GEMMs; the dense kernel also rounds S and dP, and its P is normalised), so the two are not
  // comparable element by element. Checked instead against the float32 dense result (exact
  // to ~1e-6 here, far below bf16's 2^-9): the bf16 ring, with its merged output and summed
  // gradients rounded once, is at most 1.5x as far from it as the dense bf16 kernel is
  // (measured: 0.6x to 1.3x; a missing rescale or a wrong rounding gives >> 2x), and before
  // that final rounding its gradients differ from the float32 ring's by more than 1e-4 (the
  // internal roundings happen: the float32 ring is within ~1e-7).
  const int s = 400, hq = 4, hk = 2, d = 16;
  const Dense<float> ref(s, hq, hk, d, 600);
  Dense<float> dense_bf16 = ref;
  std::vector<float> probs(std::size_t(hq) * s * s);
  attention_forward(dense_bf16.out.data(), probs.data(), ref.q.data(), ref.k.data(), ref.v.data(),
                    1, s, hq, hk, d, /*bf16=*/true);
  attention_backward(dense_bf16.dq.data(), dense_bf16.dk.data(), dense_bf16.dv.data(),
                     ref.dout.data(), ref.q.data(), ref.k.data(), ref.v.data(), probs.data(), 1, s,
                     hq, hk, d, /*bf16=*/true);
  Ring<float> ring(ref, mirrored_shards({200, 120, 80}), /*bf16=*/true);
  for (auto* g : {&ring.dq, &ring.dk, &ring.dv}) round_bf16(g->data(), g->size());
  struct Case {
    const char* what;
    const std::vector<float>&blockwise, &dense, &truth;
  };
  for (const Case& c :
       {Case{"out", ring.out, dense_bf16.out, ref.out}, Case{"dq", ring.dq, dense_bf16.dq, ref.dq},
        Case{"dk", ring.dk, dense_bf16.dk, ref.dk}, Case{"dv", ring.dv, dense_bf16.dv, ref.dv}}) {
    const double blockwise = relative_error(c.blockwise, c.truth);
    const double dense = relative_error(c.dense, c.truth);
    std::printf("bf16 %s: relative error blockwise %.3g, dense %.3g\n", c.what, blockwise, dense);
    EXPECT_LE(blockwise, 1.5 * dense) << c.what;
  }
}

TEST(BlockwiseAttentionBf16, RoundsPInTheForwardAndPAndDsInTheBackward) {
  // The same block in float32 and bf16 mode, the backward from the same (float32) out and lse:
  // out differs only through the rounded P of P V, dv only through P of P^T dO, dq and dk only
  // through dS. Each rounding moves the result by ~2^-9 relative (measured 1e-3 to 4e-3); the
  // float32 results stay within ~1e-7 of each other, so > 1e-4 shows each rounding happened.
  const int s = 150, hq = 4, hk = 2, d = 16;
  const Dense<float> ref(s, hq, hk, d, 800);
  std::vector<int> pos(s);
  std::iota(pos.begin(), pos.end(), 0);
  const AttentionBlockPair pair{s, s, hq, hk, d, pos.data(), pos.data()};
  struct Result {
    std::vector<float> out, lse, dq, dk, dv;
  };
  Result r[2];
  for (bool bf16 : {false, true}) {
    Result& x = r[bf16];
    x = {ref.out, ref.lse, ref.dq, ref.dk, ref.dv};
    for (auto* t : {&x.dq, &x.dk, &x.dv}) std::fill(t->begin(), t->end(), 0.f);
    blockwise_attention_forward(x.out.data(), x.lse.data(), ref.q.data(), ref.k.data(),
                                ref.v.data(), pair, bf16);
    blockwise_attention_backward(x.dq.data(), x.dk.data(), x.dv.data(), ref.dout.data(),
                                 ref.q.data(), ref.k.data(), ref.v.data(), ref.out.data(),
                                 ref.lse.data(), pair, bf16);
  }
  for (auto [what, a, b] :
       {std::tuple{"out", &r[0].out, &r[1].out}, std::tuple{"dq", &r[0].dq, &r[1].dq},
        std::tuple{"dk", &r[0].dk, &r[1].dk}, std::tuple{"dv", &r[0].dv, &r[1].dv}}) {
    const double diff = relative_error(*b, *a);
    EXPECT_GT(diff, 1e-4) << what;
    EXPECT_LT(diff, 1e-2) << what;
  }
  EXPECT_LT(relative_error(r[1].lse, r[0].lse), 1e-6);  // rounding P changes no row sum
}

}  // namespace
}  // namespace hexi::kernels::cpu
