// TP-shard blocks: backward against finite differences (double), and tensor-parallel
// runs -- the block protocol of blocks.hpp with the all-reduces done by hand -- against
// the single-process model, for even, uneven and KV-replicating shards.
#include "kernels/blocks_cpu.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention_blockwise.hpp"
#include "kernels/bf16.hpp"
#include "kernels/cpu_kernels.hpp"
#include "kernels/llama_model.hpp"
#include "kernels/params.hpp"
#include "kernels/test_util.hpp"

namespace hexi::kernels {
namespace {

using testing::dot;
using testing::expect_gradient;
using testing::random_tokens;
using testing::random_vector;
using Vec = std::vector<double>;

// Small enough for finite differences over every weight: 4 query heads on 2 KV heads.
LlamaDims small_dims(int layers = 1) {
  return {layers, 16, 20, 4, 2, 24};
}

// The same with a mixture of experts: 5 routed experts of width 20 (top 2), shared experts of
// width 6.
LlamaDims moe_dims() {
  LlamaDims d = small_dims();
  d.experts = 5;
  d.top_k = 2;
  d.shared_ffn = 6;
  return d;
}

// Parameters of layer 0 (and the embedding and head) on one shard, jittered norms.
Params<double> shard_params(const LlamaDims& d, const TpShard& s, int layers = 1) {
  Params<double> p(stage_layout(d, {0, layers, true, true, s}));
  init_params(p, d, {42, 0.25});
  return p;
}

TEST(AttentionBlock, BackwardMatchesFiniteDifferences) {
  const LlamaDims d = small_dims();
  const BlockShape sh{d, full_shard(d), 2, 3};
  Params<double> p = shard_params(d, sh.shard), g(p.layout);
  Vec x = random_vector(sh.tokens() * d.hidden, 30), r = random_vector(x.size(), 31);
  Vec saved_buf(attention_saved_size(sh)), y(x.size()), dx(x.size());
  const auto saved = carve_attention_saved(sh, saved_buf.data());
  auto loss = [&] {
    cpu::attention_block_forward(sh, attention_weights(p, 0), x.data(), saved, y.data());
    return dot(y, r);
  };
  loss();
  cpu::attention_block_backward(sh, attention_weights(p, 0), saved, x.data(), r.data(), dx.data(),
                                attention_grads(g, 0));
  expect_gradient(loss, x, dx, "dx");
  expect_gradient(loss, p.data, g.data, "attention weights");
}

void expect_mlp_backward_matches_finite_differences(const LlamaDims& d) {
  const BlockShape sh{d, full_shard(d), 2, 3};
  Params<double> p = shard_params(d, sh.shard), g(p.layout);
  Vec x = random_vector(sh.tokens() * d.hidden, 32), r = random_vector(x.size(), 33);
  Vec saved_buf(mlp_saved_size(sh)), y(x.size()), dx(x.size());
  const auto saved = carve_mlp_saved(sh, saved_buf.data());
  auto loss = [&] {
    cpu::mlp_block_forward(sh, mlp_weights(p, 0), x.data(), saved, y.data());
    return dot(y, r);
  };
  loss();
  cpu::mlp_block_backward(sh, mlp_weights(p, 0), saved, x.data(), r.data(), dx.data(),
                          mlp_grads(g, 0));
  expect_gradient(loss, x, dx, "dx");
  expect_gradient(loss, p.data, g.data, "mlp weights");
}

TEST(MlpBlock, BackwardMatchesFiniteDifferences) {
  expect_mlp_backward_matches_finite_differences(small_dims());
}

// The router's softmax, top-k gates and the experts' rows (routing is piecewise constant:
// the finite differences' steps stay inside one routing of these 6 tokens).
TEST(MlpBlock, MixtureOfExpertsBackwardMatchesFiniteDifferences) {
  expect_mlp_backward_matches_finite_differences(moe_dims());
}

TEST(Head, BackwardMatchesFiniteDifferences) {
  const LlamaDims d = small_dims();
  const BlockShape sh{d, full_shard(d), 2, 3};
  Params<double> p = shard_params(d, sh.shard), g(p.layout);
  Vec x = random_vector(sh.tokens() * d.hidden, 34), dx(x.size()), loss_i(sh.tokens());
  const std::vector<int> targets = random_tokens(sh.tokens(), d.vocab, 35);
  Vec saved_buf(head_saved_size(sh));
  const auto saved = carve_head_saved(sh, saved_buf.data());
  const double scale = 0.25;
  auto loss = [&] {
    cpu::head_forward(sh, head_weights(p), x.data(), saved);
    cpu::head_loss_partials(sh, saved, targets.data());
    cpu::head_loss(sh, saved, loss_i.data());
    double sum = 0;
    for (double l : loss_i) sum += l;
    return scale * sum;
  };
  loss();
  cpu::head_backward(sh, head_weights(p), saved, x.data(), targets.data(), scale, dx.data(),
                     head_grads(g));
  expect_gradient(loss, x, dx, "dx");
  expect_gradient(loss, p.data, g.data, "head weights");
}

// ---- tensor parallelism emulated in one process -------------------------------------

struct Rank {
  BlockShape shape;
  Params<double> p, g;
  Vec attn, mlp, head;  // saved activations (one layer)
  Vec partial;          // (n, h) this rank's partial output / dx
};

void all_reduce_sum(std::vector<Rank>& ranks, Vec& out) {
  std::fill(out.begin(), out.end(), 0.0);
  for (const Rank& r : ranks)
    for (std::size_t i = 0; i < out.size(); ++i) out[i] += r.partial[i];
}

// One forward + backward of a 1-layer model across `shards`, communicating as the
// engine will (blocks.hpp). Returns the loss; `full_grads` receives the summed gradients.
double run_tensor_parallel(const LlamaDims& d, const std::vector<TpShard>& shards,
                           const Params<double>& full, const std::vector<int>& tokens,
                           const std::vector<int>& targets, int b, int s,
                           Params<double>& full_grads) {
  std::vector<Rank> ranks;
  for (const TpShard& sh : shards) {
    Rank r{
        {d, sh, b, s}, Params<double>(stage_layout(d, {0, 1, true, true, sh})), {}, {}, {}, {}, {}};
    r.g = Params<double>(r.p.layout);
    copy_from_full(full, r.p);
    r.attn.resize(attention_saved_size(r.shape));
    r.mlp.resize(mlp_saved_size(r.shape));
    r.head.resize(head_saved_size(r.shape));
    r.partial.resize(std::size_t(b) * s * d.hidden);
    ranks.push_back(std::move(r));
  }
  const int n = b * s;
  const std::size_t nh = std::size_t(n) * d.hidden;
  Vec x0(nh), x1(nh), x2(nh), sum(nh);
  for (Rank& r : ranks)
    cpu::embedding_block_forward(r.shape, r.p.get("embedding"), tokens.data(), r.partial.data());
  all_reduce_sum(ranks, x0);
  for (Rank& r : ranks)
    cpu::attention_block_forward(r.shape, attention_weights(r.p, 0), x0.data(),
                                 carve_attention_saved(r.shape, r.attn.data()), r.partial.data());
  all_reduce_sum(ranks, x1);
  cpu::add_inplace(x1.data(), x0.data(), nh);
  for (Rank& r : ranks)
    cpu::mlp_block_forward(r.shape, mlp_weights(r.p, 0), x1.data(),
                           carve_mlp_saved(r.shape, r.mlp.data()), r.partial.data());
  all_reduce_sum(ranks, x2);
  cpu::add_inplace(x2.data(), x1.data(), nh);

  // Head: all-reduce MAX of the row maxima, then SUM of the partials.
  Vec gmax(n, -INFINITY), gpart(2 * n, 0.0), loss(n);
  for (Rank& r : ranks) {
    const auto hs = carve_head_saved(r.shape, r.head.data());
    cpu::head_forward(r.shape, head_weights(r.p), x2.data(), hs);
    for (int i = 0; i < n; ++i) gmax[i] = std::max(gmax[i], hs.row_max[i]);
  }
  for (Rank& r : ranks) {
    const auto hs = carve_head_saved(r.shape, r.head.data());
    std::copy(gmax.begin(), gmax.end(), hs.row_max);
    cpu::head_loss_partials(r.shape, hs, targets.data());
    for (int i = 0; i < 2 * n; ++i) gpart[i] += hs.partials[i];
  }
  for (Rank& r : ranks)
    std::copy(gpart.begin(), gpart.end(), carve_head_saved(r.shape, r.head.data()).partials);
  cpu::head_loss(ranks[0].shape, carve_head_saved(ranks[0].shape, ranks[0].head.data()),
                 loss.data());

  // Backward: dx = dy + all_reduce(dx_partial) around each block.
  Vec dx(nh);
  for (Rank& r : ranks)
    cpu::head_backward(r.shape, head_weights(r.p), carve_head_saved(r.shape, r.head.data()),
                       x2.data(), targets.data(), 1.0 / n, r.partial.data(), head_grads(r.g));
  all_reduce_sum(ranks, dx);
  for (Rank& r : ranks)
    cpu::mlp_block_backward(r.shape, mlp_weights(r.p, 0), carve_mlp_saved(r.shape, r.mlp.data()),
                            x1.data(), dx.data(), r.partial.data(), mlp_grads(r.g, 0));
  all_reduce_sum(ranks, sum);
  cpu::add_inplace(dx.data(), sum.data(), nh);
  for (Rank& r : ranks)
    cpu::attention_block_backward(r.shape, attention_weights(r.p, 0),
                                  carve_attention_saved(r.shape, r.attn.data()), x0.data(),
                                  dx.data(), r.partial.data(), attention_grads(r.g, 0));
  all_reduce_sum(ranks, sum);
  cpu::add_inplace(dx.data(), sum.data(), nh);
  for (Rank& r : ranks)
    cpu::embedding_block_backward(r.shape, tokens.data(), dx.data(), r.g.get("embedding"));

  // Summing every rank's gradients adds the partial norm and replicated-KV gradients.
  // ... and of a mixture of experts' router.
  for (const Rank& r : ranks) add_into_full(r.g, full_grads);
  double total = 0;
  for (double l : loss) total += l;
  return total / n;
}

void expect_tp_matches_single_process(const std::vector<TpShard>& shards,
                                      const LlamaDims& d = small_dims()) {
  const int b = 2, s = 5;
  for (const TpShard& sh : shards) ASSERT_EQ(validate_shard(d, sh), "");
  Params<double> full(model_layout(d)), single_grads(full.layout), tp_grads(full.layout);
  init_params(full, d, {7, 0.25});
  const std::vector<int> tokens = random_tokens(b * s, d.vocab, 40);
  const std::vector<int> targets = random_tokens(b * s, d.vocab, 41);
  LlamaModel<double> model(d, b, s);
  const double single = model.forward_backward(full, tokens.data(), targets.data(), single_grads);
  const double tp = run_tensor_parallel(d, shards, full, tokens, targets, b, s, tp_grads);
  // Same math in a different summation order, in double: agreement to ~1e-15 relative.
  EXPECT_NEAR(tp, single, 1e-12);
  for (const TensorInfo& t : full.layout.tensors)
    for (std::size_t i = 0; i < t.size(); ++i)
      ASSERT_NEAR(tp_grads.get(t)[i], single_grads.get(t)[i], 1e-12) << t.name << "[" << i << "]";
}

TEST(TensorParallel, EvenSplitOfTwoMatchesSingleProcess) {
  const LlamaDims d = small_dims();
  expect_tp_matches_single_process({tp_shard(d, 0, 2), tp_shard(d, 1, 2)});
}

TEST(TensorParallel, FourRanksReplicatingKvHeadsMatchSingleProcess) {
  const LlamaDims d = small_dims();  // 2 KV heads on 4 ranks: each KV head on 2 ranks
  std::vector<TpShard> shards;
  for (int r = 0; r < 4; ++r) shards.push_back(tp_shard(d, r, 4));
  expect_tp_matches_single_process(shards);
}

TEST(TensorParallel, UnevenShardsMatchSingleProcess) {
  // Rank 0: KV group 0 (2 heads), 7 FFN columns, 5 vocabulary rows; ranks 1 and 2 split
  // group 1 (replicating KV head 1) and the rest of the FFN and vocabulary unevenly.
  expect_tp_matches_single_process(
      {{0, 2, 0, 7, 0, 5}, {2, 3, 7, 8, 5, 20}, {3, 4, 8, 20, 20, 24}});
}

// bf16 (blocks.hpp "Precision"): with bf16 weights and inputs, every tensor a block writes
// -- saved activations, outputs, input gradients -- holds bf16 values, while the weight
// gradients accumulate in float32 (some elements are not bf16 values); the float32 result
// of the same block is within bf16 rounding of the bf16 one.
TEST(Bf16Blocks, WriteBf16ValuesAndAccumulateWeightGradientsInFloat32) {
  const LlamaDims d{1, 64, 172, 4, 2, 96};
  const BlockShape f32{d, full_shard(d), 2, 16}, b16{d, full_shard(d), 2, 16, true};
  Params<float> p(stage_layout(d, {0, 1, true, true, f32.shard}));
  init_params(p, d, {5, 0.25});
  std::vector<float> x = random_vector<float>(f32.tokens() * d.hidden, 40);
  std::vector<float> dy = random_vector<float>(x.size(), 41);
  round_bf16(p.data.data(), p.data.size());
  for (std::vector<float>* v : {&x, &dy}) round_bf16(v->data(), v->size());
  auto bf16_values = [](const float* v, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      if (v[i] != round_bf16(v[i])) return false;
    }
    return true;
  };
  std::vector<float> y32(x.size());
  {
    std::vector<float> saved(attention_saved_size(f32));
    cpu::attention_block_forward(f32, attention_weights(p, 0), x.data(),
                                 carve_attention_saved(f32, saved.data()), y32.data());
  }
  std::vector<float> saved(attention_saved_size(b16)), y(x.size()), dx(x.size());
  Params<float> g(p.layout);
  const auto sv = carve_attention_saved(b16, saved.data());
  cpu::attention_block_forward(b16, attention_weights(p, 0), x.data(), sv, y.data());
  cpu::attention_block_backward(b16, attention_weights(p, 0), sv, x.data(), dy.data(), dx.data(),
                                attention_grads(g, 0));
  const std::size_t n = b16.tokens();
  EXPECT_TRUE(bf16_values(sv.xn, n * d.hidden));
  EXPECT_TRUE(bf16_values(sv.q, n * b16.q_width()));
  EXPECT_TRUE(bf16_values(sv.k, n * b16.kv_width()));
  EXPECT_TRUE(bf16_values(sv.v, n * b16.kv_width()));
  EXPECT_TRUE(bf16_values(sv.probs, std::size_t(b16.batch) * b16.q_heads() * b16.seq * b16.seq));
  EXPECT_TRUE(bf16_values(sv.att, n * b16.q_width()));
  EXPECT_TRUE(bf16_values(y.data(), y.size()));
  EXPECT_TRUE(bf16_values(dx.data(), dx.size()));
  const TensorInfo* wq = g.layout.find("layers.0.wq");
  EXPECT_FALSE(bf16_values(g.get(*wq), wq->size())) << "weight gradients rounded to bf16";
  double scale = 0, err = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    scale = std::max(scale, double(std::abs(y32[i])));
    err = std::max(err, double(std::abs(y[i] - y32[i])));
  }
  EXPECT_GT(err, 0) << "the bf16 block computed in float32";
  EXPECT_LT(err, 2e-2 * scale) << "beyond bf16 rounding (u = 2^-9) of a few tensors";
}

// The attention block split around its core (sequence meshes): qkv on tokens stored in a
// shuffled order with their positions, the blockwise core in two key blocks merged by
// log-sum-exp, Wo -- equals attention_block_forward on the sequence in order, row for row,
// forward and backward (in double: exact up to summation order).
TEST(AttentionSplit, QkvBlockwiseCoreAndOutputEqualTheBlock) {
  const LlamaDims d = small_dims();
  const int n = 6, h = d.hidden, hd = d.head_dim(), hq = d.heads, hk = d.kv_heads;
  const BlockShape sh{d, full_shard(d), 1, n};
  Params<double> p = shard_params(d, sh.shard), g_ref(p.layout), g(p.layout);
  const Vec x = random_vector(n * h, 40), dy = random_vector(n * h, 41);
  // The block on positions 0..n-1.
  Vec saved_buf(attention_saved_size(sh)), y_ref(x.size()), dx_ref(x.size());
  const auto saved = carve_attention_saved(sh, saved_buf.data());
  cpu::attention_block_forward(sh, attention_weights(p, 0), x.data(), saved, y_ref.data());
  cpu::attention_block_backward(sh, attention_weights(p, 0), saved, x.data(), dy.data(),
                                dx_ref.data(), attention_grads(g_ref, 0));
  // Row r of the split holds the token at position pos[r].
  const std::vector<int> pos = {4, 1, 5, 0, 3, 2};
  auto permuted = [&](const Vec& v) {
    Vec out(v.size());
    for (int r = 0; r < n; ++r) std::copy_n(&v[pos[r] * h], h, &out[r * h]);
    return out;
  };
  const Vec xs = permuted(x), dys = permuted(dy);
  Vec rstd(n), xn(n * h), q(n * hq * hd), k(n * hk * hd), v(n * hk * hd);
  cpu::attention_qkv_forward(sh, attention_weights(p, 0), xs.data(), pos.data(), rstd.data(),
                             xn.data(), q.data(), k.data(), v.data());
  // Keys in two blocks (rows [0, 2) and [2, n)), merged.
  Vec att(n * hq * hd), lse(n * hq), part(att.size()), part_lse(lse.size());
  const AttentionBlockPair first{n, 2, hq, hk, hd, pos.data(), pos.data()};
  const AttentionBlockPair second{n, n - 2, hq, hk, hd, pos.data(), pos.data() + 2};
  const std::size_t kv_row = static_cast<std::size_t>(hk) * hd;
  cpu::blockwise_attention_forward(att.data(), lse.data(), q.data(), k.data(), v.data(), first);
  cpu::blockwise_attention_forward(part.data(), part_lse.data(), q.data(), k.data() + 2 * kv_row,
                                   v.data() + 2 * kv_row, second);
  cpu::attention_merge(att.data(), lse.data(), part.data(), part_lse.data(), n, hq, hd);
  Vec y(n * h), datt(att.size()), dq(q.size()), dk(k.size()), dv(v.size()), dx(n * h);
  cpu::attention_out_forward(sh, p.get("layers.0.wo"), att.data(), y.data());
  const Vec y_want = permuted(y_ref), dx_want = permuted(dx_ref);
  for (int i = 0; i < n * h; ++i) EXPECT_NEAR(y[i], y_want[i], 1e-12) << "y " << i;
  const auto grads = attention_grads(g, 0);
  cpu::attention_out_backward(sh, p.get("layers.0.wo"), att.data(), dys.data(), datt.data(),
                              grads.wo);
  cpu::blockwise_attention_backward(dq.data(), dk.data(), dv.data(), datt.data(), q.data(),
                                    k.data(), v.data(), att.data(), lse.data(), first);
  cpu::blockwise_attention_backward(dq.data(), dk.data() + 2 * kv_row, dv.data() + 2 * kv_row,
                                    datt.data(), q.data(), k.data() + 2 * kv_row,
                                    v.data() + 2 * kv_row, att.data(), lse.data(), second);
  cpu::attention_qkv_backward(sh, attention_weights(p, 0), xs.data(), pos.data(), rstd.data(),
                              xn.data(), dq.data(), dk.data(), dv.data(), dx.data(), grads);
  for (int i = 0; i < n * h; ++i) EXPECT_NEAR(dx[i], dx_want[i], 1e-12) << "dx " << i;
  for (std::size_t i = 0; i < g.data.size(); ++i)
    EXPECT_NEAR(g.data[i], g_ref.data[i], 1e-12) << "weight gradient " << i;
}

}  // namespace
}  // namespace hexi::kernels

namespace hexi::kernels {
namespace {

// A mixture of experts over TP ranks: every expert by columns (uneven), and whole experts
// unevenly (3 + 0 + 2: a rank may hold none) with the shared experts by columns. Three
// ranks with heads 2, 1, 1 (rank 0 whole KV group 0) and uneven vocabulary rows.
std::vector<TpShard> three_moe_shards(const LlamaDims& d) {
  std::vector<TpShard> shards;
  for (int r = 0; r < 3; ++r) shards.push_back(tp_shard(d, r, 3));
  shards[0].head_end = shards[1].head_begin = 2;
  shards[1].head_end = shards[2].head_begin = 3;
  return shards;
}

TEST(TensorParallel, MixtureOfExpertsByColumnsMatchesSingleProcess) {
  const LlamaDims d = moe_dims();
  expect_tp_matches_single_process(three_moe_shards(d), d);
}

TEST(TensorParallel, MixtureOfExpertsWithWholeExpertsMatchesSingleProcess) {
  const LlamaDims d = moe_dims();
  std::vector<TpShard> shards = three_moe_shards(d);
  const int experts[][2] = {{0, 3}, {3, 3}, {3, 5}};
  for (int r = 0; r < 3; ++r) {
    shards[r].ffn_begin = 0;
    shards[r].ffn_end = d.ffn;
    shards[r].expert_begin = experts[r][0];
    shards[r].expert_end = experts[r][1];
  }
  expect_tp_matches_single_process(shards, d);
}

}  // namespace
}  // namespace hexi::kernels
