#include "kernels/shapes.hpp"

#include <gtest/gtest.h>

namespace hexi::kernels {
namespace {

// tiny-llama of scenarios/models.json: 4 query heads in 2 KV groups of 2.
LlamaDims tiny() {
  return {4, 64, 172, 4, 2, 256};
}

TEST(Shapes, TinyLlamaIsValid) {
  EXPECT_EQ(validate_dims(tiny()), "");
  EXPECT_EQ(tiny().head_dim(), 16);
  EXPECT_EQ(tiny().group_size(), 2);
}

TEST(Shapes, BadDimsAreNamed) {
  LlamaDims d = tiny();
  d.hidden = 63;
  EXPECT_NE(validate_dims(d).find("hidden 63"), std::string::npos);
  d = tiny();
  d.kv_heads = 3;
  EXPECT_NE(validate_dims(d).find("kv_heads 3"), std::string::npos);
}

TEST(Shapes, EvenSplitCoversEverythingOnce) {
  const LlamaDims d = tiny();
  for (int tp : {1, 2, 4}) {
    ASSERT_EQ(validate_tp_degree(d, tp), "") << tp;
    int heads = 0, ffn = 0, vocab = 0;
    for (int r = 0; r < tp; ++r) {
      const TpShard s = tp_shard(d, r, tp);
      EXPECT_EQ(validate_shard(d, s), "") << "tp " << tp << " rank " << r;
      EXPECT_EQ(s.head_begin, heads);
      EXPECT_EQ(s.ffn_begin, ffn);
      EXPECT_EQ(s.vocab_begin, vocab);
      heads = s.head_end;
      ffn = s.ffn_end;
      vocab = s.vocab_end;
    }
    EXPECT_EQ(heads, d.heads);
    EXPECT_EQ(ffn, d.ffn);
    EXPECT_EQ(vocab, d.vocab);
  }
  EXPECT_EQ(tp_shard(d, 0, 1), full_shard(d));
}

TEST(Shapes, UnevenFfnSplit) {
  // 172 columns over 3 ranks: [0, 57), [57, 114), [114, 172).
  LlamaDims d = tiny();
  d.heads = 6;
  d.kv_heads = 3;
  d.hidden = 96;
  EXPECT_EQ(tp_shard(d, 1, 3).ffn_begin, 57);
  EXPECT_EQ(tp_shard(d, 2, 3).ffn_begin, 114);
  EXPECT_EQ(tp_shard(d, 2, 3).ffn_end, 172);
}

TEST(Shapes, KvHeadsOfAShard) {
  const LlamaDims d = tiny();
  // TP 2: each rank holds one whole KV group (2 query heads, 1 KV head).
  EXPECT_EQ(kv_begin(d, tp_shard(d, 1, 2)), 1);
  EXPECT_EQ(kv_end(d, tp_shard(d, 1, 2)), 2);
  EXPECT_EQ(kv_sharers(d, 1, 2).count, 1);
  // TP 4 > 2 KV heads: ranks 2 and 3 each hold one query head of group 1 and replicate
  // KV head 1.
  for (int r : {2, 3}) {
    EXPECT_EQ(kv_begin(d, tp_shard(d, r, 4)), 1);
    EXPECT_EQ(kv_end(d, tp_shard(d, r, 4)), 2);
    EXPECT_EQ(kv_sharers(d, r, 4).first, 2);
    EXPECT_EQ(kv_sharers(d, r, 4).count, 2);
  }
  BlockShape shape{d, tp_shard(d, 3, 4), 2, 32};
  EXPECT_EQ(shape.q_heads(), 1);
  EXPECT_EQ(shape.kv_heads(), 1);
  EXPECT_EQ(shape.q_width(), 16);
}

TEST(Shapes, ShardsMustRespectKvGroups) {
  const LlamaDims d = tiny();
  TpShard s = full_shard(d);
  s.head_begin = 1;
  s.head_end = 3;  // half of group 0 and half of group 1
  EXPECT_NE(validate_shard(d, s).find("KV groups"), std::string::npos);
  EXPECT_NE(validate_tp_degree(d, 3), "");
  EXPECT_NE(validate_tp_degree(d, 8), "");  // more ranks than query heads
  s = full_shard(d);
  s.ffn_end = 200;
  EXPECT_NE(validate_shard(d, s).find("ffn column"), std::string::npos);
}

}  // namespace
}  // namespace hexi::kernels
