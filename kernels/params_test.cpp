#include "kernels/params.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/optimizer.hpp"

namespace hexi::kernels {
namespace {

LlamaDims tiny_dims() {
  return {4, 64, 172, 4, 2, 256};
}

TEST(Params, TinyLlamaLayout) {
  const ParamLayout l = model_layout(tiny_dims());
  // embedding + head 2*256*64; per layer 2 norms 2*64, wq, wo 64*64 each, wk, wv 32*64
  // each, three FFN matrices 172*64 each.
  const std::size_t per_layer = 2 * 64 + 2 * 64 * 64 + 2 * 32 * 64 + 3 * 172 * 64;
  EXPECT_EQ(l.total, 2 * 256 * 64 + 4 * per_layer + 64);
  EXPECT_EQ(l.tensors.size(), 1u + 4 * 9 + 2);
  EXPECT_EQ(l.tensors.front().name, "embedding");
  EXPECT_EQ(l.tensors[1].name, "layers.0.attn_norm");
  EXPECT_EQ(l.tensors.back().name, "head");
  const TensorInfo* wk = l.find("layers.2.wk");
  ASSERT_NE(wk, nullptr);
  EXPECT_EQ(wk->rows, 32);
  EXPECT_EQ(wk->cols, 64);
  EXPECT_TRUE(wk->decay);
  EXPECT_FALSE(l.find("final_norm")->decay);
  EXPECT_TRUE(l.find("final_norm")->replicated);
  EXPECT_EQ(l.find("nope"), nullptr);
}

TEST(Params, StageLayoutHoldsItsShard) {
  const LlamaDims d = tiny_dims();
  const StageSpec spec{1, 3, false, true, tp_shard(d, 3, 4)};
  const ParamLayout l = stage_layout(d, spec);
  EXPECT_EQ(l.find("embedding"), nullptr);
  EXPECT_EQ(l.find("layers.0.wq"), nullptr);
  const TensorInfo* wq = l.find("layers.2.wq");
  ASSERT_NE(wq, nullptr);
  EXPECT_EQ(wq->rows, 16);  // one query head of 16
  EXPECT_EQ(wq->row_begin, 48);
  const TensorInfo* wk = l.find("layers.2.wk");  // replicated KV head 1
  EXPECT_EQ(wk->rows, 16);
  EXPECT_EQ(wk->row_begin, 16);
  const TensorInfo* wo = l.find("layers.1.wo");
  EXPECT_EQ(wo->cols, 16);
  EXPECT_EQ(wo->col_begin, 48);
  const TensorInfo* down = l.find("layers.1.w_down");  // FFN columns [129, 172)
  EXPECT_EQ(down->col_begin, 129);
  EXPECT_EQ(down->cols, 43);
  EXPECT_EQ(l.find("head")->row_begin, 192);
  EXPECT_EQ(l.find("head")->rows, 64);
  EXPECT_EQ(l.find("final_norm")->cols, 64);
}

TEST(Params, InitIsDeterministicAndShardsInitTheirPartOfTheFullModel) {
  const LlamaDims d = tiny_dims();
  Params<float> full(model_layout(d)), again(full.layout);
  init_params(full, d, {99, 0.1});
  init_params(again, d, {99, 0.1});
  EXPECT_EQ(full.data, again.data);
  Params<float> other(full.layout);
  init_params(other, d, {100, 0.1});
  EXPECT_NE(full.data, other.data);
  for (int r = 0; r < 4; ++r) {
    Params<float> shard(stage_layout(d, {0, 4, true, true, tp_shard(d, r, 4)}));
    Params<float> sliced(shard.layout);
    init_params(shard, d, {99, 0.1});
    copy_from_full(full, sliced);
    EXPECT_EQ(shard.data, sliced.data) << "rank " << r;
  }
}

TEST(Params, InitScales) {
  const LlamaDims d = tiny_dims();
  Params<double> p(model_layout(d));
  init_params(p, d, {1, 0.0});
  const double* wq = p.get("layers.0.wq");
  const double* wo = p.get("layers.0.wo");
  double max_q = 0, max_o = 0;
  for (int i = 0; i < 64 * 64; ++i) {
    max_q = std::max(max_q, std::abs(wq[i]));
    max_o = std::max(max_o, std::abs(wo[i]));
  }
  EXPECT_LE(max_q, 1.0 / 32);
  EXPECT_GT(max_q, 0.99 / 32);
  EXPECT_LE(max_o, 1.0 / 32 / std::sqrt(8.0));  // residual outputs scaled by 1/sqrt(2L)
  EXPECT_EQ(p.get("final_norm")[5], 1.0);       // no jitter: gains start at 1
}

TEST(Params, AddIntoFullReassemblesShards) {
  const LlamaDims d = tiny_dims();
  Params<double> full(model_layout(d)), sum(full.layout);
  init_params(full, d, {3, 0.5});
  for (int r = 0; r < 2; ++r) {
    Params<double> shard(stage_layout(d, {0, 4, true, true, tp_shard(d, r, 2)}));
    copy_from_full(full, shard);
    add_into_full(shard, sum);
  }
  // Sharded tensors land once; replicated norm gains are added once per rank.
  for (const TensorInfo& t : full.layout.tensors)
    for (std::size_t i = 0; i < t.size(); ++i)
      ASSERT_EQ(sum.get(t)[i], full.get(t)[i] * (t.replicated ? 2 : 1)) << t.name;
}

TEST(Params, GetThrowsOnUnknownNames) {
  Params<float> p(model_layout(tiny_dims()));
  EXPECT_THROW(p.get("layers.9.wq"), std::out_of_range);
}

TEST(Optimizer, DecaysMatricesButNotNormGains) {
  const LlamaDims d = tiny_dims();
  Params<double> p(model_layout(d)), g(p.layout);
  init_params(p, d, {5, 0.0});
  const Params<double> before = p;
  AdamWState<double> state(p.layout);
  adamw_step(p, g, state, {0.1, 0.9, 0.95, 1e-8, 0.5});  // zero gradients: decay only
  EXPECT_EQ(state.step, 1);
  EXPECT_DOUBLE_EQ(p.get("layers.1.w_up")[3], before.get("layers.1.w_up")[3] * 0.95);
  EXPECT_DOUBLE_EQ(p.get("layers.1.mlp_norm")[3], 1.0);
}

}  // namespace
}  // namespace hexi::kernels
