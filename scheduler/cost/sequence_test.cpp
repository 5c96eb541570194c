// Asymmetric context + head parallelism: the mirrored layout against brute force over every
// causal pair, ring and all-to-all bytes and times worked out by hand, and equal shards
// reducing to the homogeneous formulas.
#include "scheduler/cost/sequence.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>

#include "scheduler/cost/all_to_all.hpp"
#include "topologies/testing.hpp"

namespace hexi {
namespace {

// Llama-2-7B-like attention with GQA: 32 query heads, 8 kv heads, d = 128, bf16.
AttentionShape llama_attention(int grad_bytes = 2) {
  return {128, 32, 8, 2, grad_bytes};
}

// A model of the shipped catalog (scenarios/models.json).
Model shipped_model(std::string_view name) {
  static const ModelCatalog catalog = [] {
    auto c = ModelCatalog::load_shipped();
    if (!c) throw std::runtime_error(c.error().message);
    return std::move(*c);
  }();
  const Model* m = catalog.find(name);
  if (m == nullptr) throw std::runtime_error("no model " + std::string(name));
  return *m;
}

std::vector<MirroredShard> layout(std::int64_t total, const std::vector<std::int64_t>& lengths) {
  auto l = mirrored_layout(total, lengths);
  if (!l) throw std::runtime_error(l.error().message);
  return *l;
}

int owner(const std::vector<MirroredShard>& shards, std::int64_t token) {
  for (std::size_t i = 0; i < shards.size(); ++i) {
    if (shards[i].front.contains(token) || shards[i].back.contains(token)) return int(i);
  }
  return -1;
}

TEST(Sequence, MirroredLayoutRanges) {
  // S = 20, L = {4, 10, 6}: halves 2, 5, 3 from the front in order, from the back mirrored.
  auto s = layout(20, {4, 10, 6});
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].front.begin, 0);
  EXPECT_EQ(s[0].front.end, 2);
  EXPECT_EQ(s[0].back.begin, 18);
  EXPECT_EQ(s[0].back.end, 20);
  EXPECT_EQ(s[1].front.begin, 2);
  EXPECT_EQ(s[1].front.end, 7);
  EXPECT_EQ(s[1].back.begin, 13);
  EXPECT_EQ(s[1].back.end, 18);
  EXPECT_EQ(s[2].front.begin, 7);
  EXPECT_EQ(s[2].front.end, 10);
  EXPECT_EQ(s[2].back.begin, 10);
  EXPECT_EQ(s[2].back.end, 13);
  EXPECT_EQ(s[1].tokens(), 10);
}

TEST(Sequence, MirroredLayoutRejectsBadLengths) {
  auto odd = mirrored_layout(10, {4, 5, 1});
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.error().message.find("rank 1 has 5 tokens"), std::string::npos)
      << odd.error().message;
  auto sum = mirrored_layout(10, {4, 4});
  ASSERT_FALSE(sum.ok());
  EXPECT_NE(sum.error().message.find("sum to 8"), std::string::npos) << sum.error().message;
  EXPECT_EQ(sum.error().kind, ErrorKind::kBadInput);
}

TEST(Sequence, CausalPairsOfAContiguousRangeMatchBruteForce) {
  for (std::int64_t x = 0; x < 12; ++x) {
    for (std::int64_t y = x; y < 16; ++y) {
      std::int64_t brute = 0;
      for (std::int64_t q = x; q < y; ++q) brute += q + 1;  // keys 0..q
      EXPECT_EQ(causal_pairs({x, y}), brute) << x << " " << y;
    }
  }
}

TEST(Sequence, MirroredPairsMatchBruteForceOverEveryCausalPair) {
  const std::vector<std::vector<std::int64_t>> cases = {
      {16},         {8, 8},        {2, 14},       {10, 4, 2},        {4, 4, 4, 4},
      {0, 6, 2, 8}, {12, 2, 0, 2}, {2, 2, 2, 30}, {6, 10, 14, 2, 4}, {18, 2, 6, 10, 2, 2}};
  for (const auto& lengths : cases) {
    std::int64_t total = 0;
    for (auto l : lengths) total += l;
    auto shards = layout(total, lengths);
    const int p = static_cast<int>(lengths.size());
    std::vector<std::vector<std::int64_t>> block(p, std::vector<std::int64_t>(p, 0));
    for (std::int64_t q = 0; q < total; ++q) {
      for (std::int64_t k = 0; k <= q; ++k) ++block[owner(shards, q)][owner(shards, k)];
    }
    for (int i = 0; i < p; ++i) {
      std::int64_t rank = 0;
      for (int j = 0; j < p; ++j) {
        EXPECT_EQ(mirrored_block_pairs(lengths, i, j), block[i][j])
            << "S=" << total << " block (" << i << ", " << j << ")";
        rank += block[i][j];
      }
      // L_i (S + 1) / 2 whatever the other ranks' lengths.
      EXPECT_EQ(mirrored_rank_pairs(total, lengths[i]), rank) << "S=" << total << " rank " << i;
      EXPECT_EQ(causal_pairs(shards[i].front) + causal_pairs(shards[i].back), rank);
    }
  }
}

TEST(Sequence, AttentionFlopsPerRank) {
  // S = 8192, L_i = 2048: pairs = 1024 * 8193 = 8 389 632; forward 4 d n_q = 16 384 FLOPs per
  // pair: 137 455 730 688 FLOPs; backward 2.5x: 343 639 326 720.
  const auto a = llama_attention();
  const std::int64_t pairs = mirrored_rank_pairs(8192, 2048);
  EXPECT_EQ(pairs, 8389632);
  EXPECT_DOUBLE_EQ(attention_forward_flops(pairs, a.q_heads, a.head_dim), 137455730688.0);
  EXPECT_DOUBLE_EQ(attention_backward_flops(pairs, a.q_heads, a.head_dim), 343639326720.0);
  // Summed over equal ranks: the cost model's causal flash kernel (4 s^2 h / 2, pairs
  // counted as s^2 / 2) times (S + 1) / S, the diagonal it rounds away.
  Model m = shipped_model("llama3-8b");  // 32 heads of 128, 8 kv heads
  TrainingConfig t;
  t.seq_len = 8192;
  double core = 0;
  for (const auto& k : block_forward(m, t, Block::kAttention, 1, 1.0)) {
    if (k.cls == KernelClass::kAttention) core += k.flops;
  }
  double ranks = 0;
  for (int i = 0; i < 4; ++i) ranks += attention_forward_flops(pairs, m.heads, m.head_dim());
  EXPECT_NEAR(ranks / (core * 8193.0 / 8192.0), 1.0, 1e-12);
}

TEST(Sequence, TokenWiseFlopsAreLinearInTokens) {
  Model m = shipped_model("llama3-8b");
  TrainingConfig t;
  const double s = 1000, h = 4096, f = 14336, kd = 8 * 128;
  // QKV 2sh(h + 2kd) + out-proj 2sh^2 + SwiGLU 6shf (no attention core).
  const double fwd = 2 * s * h * (h + 2 * kd) + 2 * s * h * h + 6 * s * h * f;
  EXPECT_NEAR(token_wise_forward_flops(m, t, 1000) / fwd, 1.0, 1e-12);
  EXPECT_NEAR(token_wise_forward_flops(m, t, 3000) / (3 * fwd), 1.0, 1e-12);
  // Backward: dgrad + wgrad = 2x; full recompute replays the forward: 3x.
  EXPECT_NEAR(token_wise_backward_flops(m, t, 1000, Recompute::kSelective) / (2 * fwd), 1.0, 1e-12);
  EXPECT_NEAR(token_wise_backward_flops(m, t, 1000, Recompute::kFull) / (3 * fwd), 1.0, 1e-12);
}

TEST(Sequence, RingBytesPerRank) {
  // S = 8192, L_i = 2048, n_kv = 8, d = 128, bf16 K/V, fp32 dK/dV:
  //   forward  2 * 6144 * 8 * 128 * 2 = 25 165 824
  //   backward 25 165 824 + 2 * 8192 * 8 * 128 * 4 = 92 274 688
  const auto a = llama_attention(4);
  EXPECT_DOUBLE_EQ(ring_forward_bytes(a, 8192, 2048), 25165824.0);
  EXPECT_DOUBLE_EQ(ring_backward_bytes(a, 8192, 2048), 92274688.0);
  EXPECT_DOUBLE_EQ(ring_forward_bytes(a, 8192, 8192), 0.0);  // one rank: nothing moves
}

std::vector<RingRank> equal_ring(int p, std::int64_t total, double flops, double bw) {
  return std::vector<RingRank>(p, RingRank{total / p, flops, bw, 0.0});
}

TEST(Sequence, RingTimeOnEqualShards) {
  // P = 4, S = 4096 (L = 1024), 100 TFLOP/s attention, n_q 32, n_kv 8, d 128, bf16.
  //   off-diagonal step: 1024^2/2 = 524 288 pairs * 16 384 FLOPs / 1e14 = 85.899 us
  //   diagonal step:     524 800 pairs -> 85.983 us
  //   one block's K, V:  2 * 1024 * 8 * 128 * 2 = 4 194 304 bytes
  const auto a = llama_attention();
  const double c_off = 8589934592.0 / 1e14, c_diag = 16384.0 * 524800 / 1e14;
  // 100 GB/s: 41.9 us per block < compute: the ring hides the transfers.
  // total = c_diag + 3 c_off = 343.681 us
  auto fast = equal_ring(4, 4096, 1e14, 1e11);
  EXPECT_DOUBLE_EQ(ring_time(a, fast, false), c_diag + 3 * c_off);
  std::printf("ring forward, 4 x 1024 tokens, 100 TFLOP/s, 100 GB/s: %.3f us (343.681)\n",
              ring_time(a, fast, false) * 1e6);
  // 10 GB/s: 419.4 us per block: three transfers, then the last block's compute.
  auto slow = equal_ring(4, 4096, 1e14, 1e10);
  EXPECT_DOUBLE_EQ(ring_time(a, slow, false), 3 * 4194304.0 / 1e10 + c_off);
  // Overlap holds while S/P >= (n_kv / n_q) B F / BW: at 10 GB/s that is 5 000 tokens.
  EXPECT_GT(1024, 8.0 / 32 * 2 * 1e14 / 1e11);
  EXPECT_LT(1024, 8.0 / 32 * 2 * 1e14 / 1e10);
  // Backward, fp32 dK/dV, 100 GB/s: compute 2.5x (214.7 us) outlasts K, V, dK, dV of a block
  // (2 * 1024 * 8 * 128 * 6 bytes = 125.8 us); then every dK, dV comes home (83.9 us).
  const auto a32 = llama_attention(4);
  const double home = 2.0 * 1024 * 8 * 128 * 4 / 1e11;
  EXPECT_DOUBLE_EQ(ring_time(a32, fast, true), 2.5 * c_diag + 3 * 2.5 * c_off + home);
  EXPECT_EQ(ring_step_times(a32, fast, true).size(), 5u);
  // Backward at 10 GB/s, transfers exposed: each step's dK, dV leave when it ends, beside the
  // next K, V (ring-flash-attention's loop): step 0 waits for K, V alone (419.4 us), steps 1
  // and 2 for K, V, dK, dV (1258.3 us), the last step for the dK, dV of step 1 (838.9 us),
  // then every dK, dV comes home (838.9 us).
  const double kv = 4194304.0 / 1e10, grads = 8388608.0 / 1e10;
  EXPECT_DOUBLE_EQ(ring_time(a32, slow, true), kv + 2 * (kv + grads) + grads + grads);
  // One rank: the diagonal only.
  EXPECT_DOUBLE_EQ(ring_time(a, equal_ring(1, 1024, 1e14, 0), false), c_diag);
}

TEST(Sequence, RingStepsWithUnevenShardsWaitForTheSlowestRank) {
  // S = 4096, L = {2048, 1024, 1024}, rank 0 twice as fast (2e14 FLOP/s), 100 GB/s.
  //   step 0 (diagonals): rank 0 2048^2/2 + 1024 = 2 098 176 pairs / 2e14 -> 171.883 us;
  //                       ranks 1, 2 85.98 us; transfers <= 83.9 us
  //   step 1: rank 1 visits block 0: 2048 * 1024 / 2 = 1 048 576 pairs / 1e14 -> 171.799 us
  //   step 2: rank 2 visits block 0: the same 171.799 us
  const auto a = llama_attention();
  std::vector<RingRank> ranks = {
      {2048, 2e14, 1e11, 0}, {1024, 1e14, 1e11, 0}, {1024, 1e14, 1e11, 0}};
  auto steps = ring_step_times(a, ranks, false);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_DOUBLE_EQ(steps[0], 16384.0 * 2098176 / 2e14);
  EXPECT_DOUBLE_EQ(steps[1], 16384.0 * 1048576 / 1e14);
  EXPECT_DOUBLE_EQ(steps[2], 16384.0 * 1048576 / 1e14);
  EXPECT_NEAR(ring_time(a, ranks, false), 515.4799616e-6, 1e-15);
}

TEST(Sequence, RingHopsFollowTheClusterPaths) {
  // Two machines of two A100s: the ring 0 -> 1 -> 2 -> 3 -> 0 crosses machines at 1 -> 2
  // and 3 -> 0 (the 25 GB/s NIC), stays on NVLink at 0 -> 1 and 2 -> 3.
  Json j = {{"version", 1},
            {"name", "two-a100-machines"},
            {"network", {{"nic_GBps", 25}}},
            {"machines", {{{"gpu", "A100-SXM-80GB"}, {"gpus", 2}, {"repeat", 2}}}}};
  auto cluster = Cluster::from_json(j, "<test cluster>", testing::shipped_gpus());
  ASSERT_TRUE(cluster.ok()) << cluster.error().message;
  const std::vector<int> devices = {0, 1, 2, 3};
  auto ranks = equal_ring(4, 4096, 1e14, 0);
  set_ring_hops(*cluster, devices, ranks);
  EXPECT_DOUBLE_EQ(ranks[0].recv_Bps, cluster->bandwidth(3, 0));
  EXPECT_DOUBLE_EQ(ranks[1].recv_Bps, cluster->bandwidth(0, 1));
  EXPECT_DOUBLE_EQ(ranks[2].recv_latency_s, cluster->latency(1, 2));
  EXPECT_LT(ranks[2].recv_Bps, ranks[1].recv_Bps);
  Eigen::MatrixXd bw = group_bandwidths(*cluster, devices);
  Eigen::MatrixXd lat = group_latencies(*cluster, devices);
  EXPECT_DOUBLE_EQ(bw(1, 2), ranks[2].recv_Bps);
  EXPECT_DOUBLE_EQ(lat(3, 0), ranks[0].recv_latency_s);
  EXPECT_DOUBLE_EQ(bw(2, 2), 0.0);
}

TEST(Sequence, KvHeadsFollowTheQueryHeadRanges) {
  const auto a = llama_attention();  // 4 query heads per kv head
  EXPECT_EQ(kv_heads_needed(a, 0, 4), 1);
  EXPECT_EQ(kv_heads_needed(a, 2, 4), 2);  // splits groups 0 and 1: both replicated
  EXPECT_EQ(kv_heads_needed(a, 3, 1), 1);
  EXPECT_EQ(kv_heads_needed(a, 1, 8), 3);
  EXPECT_EQ(kv_heads_needed(a, 5, 0), 0);
  // [0, 6) touches groups 0-1, [6, 16) 1-3, [16, 32) 4-7.
  EXPECT_EQ(group_kv_heads(a, {6, 10, 16}), (std::vector<int>{2, 3, 4}));
}

TEST(Sequence, RaggedUlyssesBytesPerPair) {
  // Shards {100, 200, 300}, heads {6, 10, 16} -> kv {2, 3, 4}; d B = 128 * 2 = 256.
  const auto a = llama_attention();
  UlyssesGroup g{{100, 200, 300}, {6, 10, 16}};
  Eigen::MatrixXd in = ulysses_qkv_bytes(a, g);
  EXPECT_DOUBLE_EQ(in(0, 1), 100.0 * (10 + 2 * 3) * 256);  // 409 600
  EXPECT_DOUBLE_EQ(in(2, 0), 300.0 * (6 + 2 * 2) * 256);   // 768 000
  EXPECT_DOUBLE_EQ(in(1, 2), 200.0 * (16 + 2 * 4) * 256);  // 1 228 800
  EXPECT_DOUBLE_EQ(in(1, 1), 0.0);
  Eigen::MatrixXd out = ulysses_output_bytes(a, g);
  EXPECT_DOUBLE_EQ(out(1, 0), 100.0 * 10 * 256);  // O of device 0's tokens, device 1's heads
  EXPECT_DOUBLE_EQ(out(0, 2), 300.0 * 6 * 256);
  EXPECT_DOUBLE_EQ(out(2, 2), 0.0);
}

TEST(Sequence, EqualUlyssesReducesToTheHomogeneousFormula) {
  // P = 4, S = 4096: (P-1)/P (S/P) (2 n_q + 2 n_kv) d B = 3/4 * 1024 * 80 * 256 per rank,
  // sent and received.
  const auto a = llama_attention();
  UlyssesGroup g{{1024, 1024, 1024, 1024}, {8, 8, 8, 8}};
  Eigen::MatrixXd total = ulysses_qkv_bytes(a, g) + ulysses_output_bytes(a, g);
  const double expected = 3.0 / 4 * 1024 * (2 * 32 + 2 * 8) * 128 * 2;  // 15 728 640
  for (int i = 0; i < 4; ++i) {
    EXPECT_DOUBLE_EQ(total.row(i).sum(), expected) << "sent by " << i;
    EXPECT_DOUBLE_EQ(total.col(i).sum(), expected) << "received by " << i;
  }
}

TEST(Sequence, AllToAllTimeIsTheSlowestDevicesPort) {
  // Two devices: 1 GB one way, 2 GB back at 100 GB/s: the 2 GB take 20 ms (+ 5 us latency).
  Eigen::MatrixXd bytes{{0, 1e9}, {2e9, 0}};
  Eigen::MatrixXd bw{{0, 1e11}, {1e11, 0}};
  Eigen::MatrixXd lat{{0, 5e-6}, {5e-6, 0}};
  EXPECT_DOUBLE_EQ(all_to_all_time(bytes, bw, lat), 0.02 + 5e-6);
  // Three devices, 1 GB each way between every pair; device 2 behind a 10 GB/s link:
  // device 0 sends 1 GB at 100 GB/s and 1 GB at 10 GB/s back to back: 110 ms; device 2
  // sends 2 GB at 10 GB/s: 200 ms, the slowest.
  Eigen::MatrixXd b3 = Eigen::MatrixXd::Constant(3, 3, 1e9);
  b3.diagonal().setZero();
  Eigen::MatrixXd bw3{{0, 1e11, 1e10}, {1e11, 0, 1e10}, {1e10, 1e10, 0}};
  EXPECT_DOUBLE_EQ(all_to_all_time(b3, bw3, Eigen::MatrixXd::Zero(3, 3)), 0.2);
}

TEST(Sequence, ModelStatesByZeroStage) {
  // 1e9 parameters, bf16, 4 shards: 16 GB replicated; ZeRO-1 4 + 12/4 = 7 GB; ZeRO-2
  // 2 + 14/4 = 5.5 GB; ZeRO-3 16/4 = 4 GB.
  EXPECT_DOUBLE_EQ(model_state_bytes(1e9, 2, 0, 4).total(), 16e9);
  EXPECT_DOUBLE_EQ(model_state_bytes(1e9, 2, 1, 4).total(), 7e9);
  EXPECT_DOUBLE_EQ(model_state_bytes(1e9, 2, 2, 4).total(), 5.5e9);
  EXPECT_DOUBLE_EQ(model_state_bytes(1e9, 2, 3, 4).total(), 4e9);
  EXPECT_DOUBLE_EQ(model_state_bytes(1e9, 2, 3, 4).weights, 0.5e9);
}

TEST(Sequence, DeviceMemoryOfASequenceMesh) {
  // GPT-3 175B (h 12288, a 96, f 4h, dropout), one layer, s_i = 2048, flash + selective:
  // Korthikanti's 34 s h plus the fp32 log-sum-exp 4 a s = 856 424 448 bytes; full
  // recompute keeps the layer input 2 s h = 50 331 648.
  Model m = shipped_model("gpt3-175b");
  TrainingConfig t;
  t.reserve_gib = 1;
  const SequenceDeviceShape s{.layers = 1,
                              .params = 1e9,
                              .zero_stage = 3,
                              .zero_shards = 4,
                              .shard_tokens = 2048,
                              .group_tokens = 8192,
                              .q_heads = 8,
                              .kv_heads = 2,
                              .ring_block_tokens = 4096};
  AttentionShape a{128, 32, 8, 2, 4};
  SequenceMemory mem = sequence_device_memory(m, t, a, s, Recompute::kSelective);
  EXPECT_DOUBLE_EQ(mem.activations, 34.0 * 2048 * 12288 + 4 * 96 * 2048);
  // Ring: 2 buffers x K, V, dK, dV of 4096 tokens x 2 kv heads x 128 x (2 + 2 + 4 + 4) bytes.
  EXPECT_DOUBLE_EQ(mem.ring_buffers, 2.0 * 2 * 4096 * 2 * 128 * (2 + 4));  // 25 165 824
  // Ulysses: 8192 tokens x (Q 8 + K 2 + V 2 + O 8 heads) x 128 x 2 = 41 943 040.
  EXPECT_DOUBLE_EQ(mem.ulysses_buffers, 41943040.0);
  EXPECT_DOUBLE_EQ(mem.total(), 4e9 + mem.activations + mem.ring_buffers + 41943040.0 + kGiB);
  EXPECT_DOUBLE_EQ(sequence_device_memory(m, t, a, s, Recompute::kFull).activations,
                   2.0 * 2048 * 12288);
}

}  // namespace
}  // namespace hexi
