// The CUDA blockwise attention (attention_blockwise_cuda.cu) against the CPU one
// (attention_blockwise_cpu.cpp, itself checked against the dense kernels in
// attention_blockwise_test.cpp): a ring over uneven zig-zag shards, one block of a whole
// sequence at a head dimension that leaves lanes partly empty, a fully masked block. Without a
// visible GPU every test reports SKIPPED with the reason (ctest label "cuda").
//
// Tolerance per element, |gpu - cpu| <= atol + eps * |cpu| with atol = eps * max|cpu|:
// - float32: both sum the same products in different orders (the GPU key by key with a
//   running max per key, the CPU by 64-key tiles) and use different exp implementations:
//   rounding only, ~sqrt(K) * 2^-24 for K <= 400 keys; eps = 1e-4 as the other CUDA kernel
//   tests. A wrong mask or index gives O(1) errors.
// - bf16: P and dS are rounded at the same points, but relative to a running max that moves
//   per key on the GPU and per tile on the CPU, so different values are rounded (2^-9
//   relative each); eps = 2e-2.
// - a fully masked block: exact (lse -inf, out 0, merge and backward change nothing).
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/attention_blockwise.hpp"
#include "kernels/bf16.hpp"
#include "kernels/cuda_kernels.hpp"
#include "kernels/test_util.hpp"

namespace hexi::kernels {
namespace {

using cuda::DeviceBuffer;
using Floats = std::vector<float>;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void expect_close(const Floats& gpu, const Floats& cpu, double eps, const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  double scale = 0;
  for (float x : cpu) scale = std::max(scale, double(std::abs(x)));
  int failures = 0;
  for (std::size_t i = 0; i < cpu.size() && failures < 5; ++i) {
    const double diff = std::abs(double(gpu[i]) - cpu[i]);
    if (!(diff <= eps * scale + eps * std::abs(cpu[i]))) {  // NaN fails too
      ADD_FAILURE() << what << "[" << i << "]: gpu " << gpu[i] << " cpu " << cpu[i];
      ++failures;
    }
  }
}

// A sequence of s tokens split into shards (token indices, each a block of the ring).
struct Problem {
  int s, hq, hk, d;
  std::vector<std::vector<int>> shards;
  Floats q, k, v, dout;  // (s, hq, d), (s, hk, d), (s, hk, d), (s, hq, d)
  Problem(int s_, int hq_, int hk_, int d_, std::vector<std::vector<int>> shards_)
      : s(s_),
        hq(hq_),
        hk(hk_),
        d(d_),
        shards(std::move(shards_)),
        q(testing::random_vector<float>(std::size_t(s_) * hq_ * d_, 900, -2, 2)),
        k(testing::random_vector<float>(std::size_t(s_) * hk_ * d_, 901, -2, 2)),
        v(testing::random_vector<float>(k.size(), 902)),
        dout(testing::random_vector<float>(q.size(), 903)) {}
  int tokens(int i) const { return static_cast<int>(shards[i].size()); }
  // The rows of shard i of x (s, width) as a (tokens(i), width) block, and back (+=).
  Floats rows(const Floats& x, int i, int width) const {
    Floats out(shards[i].size() * width);
    for (std::size_t r = 0; r < shards[i].size(); ++r)
      std::copy_n(x.begin() + std::size_t(shards[i][r]) * width, width, out.begin() + r * width);
    return out;
  }
  void add_rows(Floats& x, const Floats& block, int i, int width) const {
    for (std::size_t r = 0; r < shards[i].size(); ++r)
      for (int e = 0; e < width; ++e)
        x[std::size_t(shards[i][r]) * width + e] += block[r * width + e];
  }
  AttentionBlockPair pair(int i, int j, const int* q_pos, const int* kv_pos) const {
    return {tokens(i), tokens(j), hq, hk, d, q_pos, kv_pos};
  }
};

// Whole-sequence results of a ring.
struct Result {
  Floats out, lse, dq, dk, dv;
  explicit Result(const Problem& p)
      : out(p.q.size()),
        lse(std::size_t(p.s) * p.hq),
        dq(p.q.size()),
        dk(p.k.size()),
        dv(p.k.size()) {}
};

// The ring: rank i's queries against rank j's keys, the forward merged in ring order (bf16:
// the merged output then rounded, as a bf16 engine stores it), the backward summed. Kernels
// is CpuKernels or GpuKernels below: the same calls on host vectors or device buffers.
template <class Kernels>
Result ring(const Problem& p, Kernels& kern, bool bf16) {
  Result r(p);
  const int ranks = static_cast<int>(p.shards.size()), wq = p.hq * p.d, wk = p.hk * p.d;
  for (int i = 0; i < ranks; ++i) {
    const auto q = kern.put(p.rows(p.q, i, wq)), dout = kern.put(p.rows(p.dout, i, wq));
    const auto q_pos = kern.put_int(p.shards[i]);
    auto o = kern.put(Floats(std::size_t(p.tokens(i)) * wq));
    auto l = kern.put(Floats(std::size_t(p.tokens(i)) * p.hq, kNegInf));
    auto dq = kern.put(Floats(std::size_t(p.tokens(i)) * wq));
    for (int step = 0; step < ranks; ++step) {
      const int j = (i - step + ranks) % ranks;
      const auto k = kern.put(p.rows(p.k, j, wk)), v = kern.put(p.rows(p.v, j, wk));
      const auto kv_pos = kern.put_int(p.shards[j]);
      auto ob = kern.put(Floats(std::size_t(p.tokens(i)) * wq));
      auto lb = kern.put(Floats(std::size_t(p.tokens(i)) * p.hq));
      const auto pair = p.pair(i, j, kern.ptr(q_pos), kern.ptr(kv_pos));
      kern.forward(ob, lb, q, k, v, pair, bf16);
      kern.merge(o, l, ob, lb, p.tokens(i), p.hq, p.d);
    }
    if (bf16) kern.round(o);
    for (int step = 0; step < ranks; ++step) {
      const int j = (i - step + ranks) % ranks;
      const auto k = kern.put(p.rows(p.k, j, wk)), v = kern.put(p.rows(p.v, j, wk));
      const auto kv_pos = kern.put_int(p.shards[j]);
      auto dk = kern.put(Floats(std::size_t(p.tokens(j)) * wk));
      auto dv = kern.put(Floats(std::size_t(p.tokens(j)) * wk));
      kern.backward(dq, dk, dv, dout, q, k, v, o, l,
                    p.pair(i, j, kern.ptr(q_pos), kern.ptr(kv_pos)), bf16);
      p.add_rows(r.dk, kern.get(dk), j, wk);
      p.add_rows(r.dv, kern.get(dv), j, wk);
    }
    p.add_rows(r.out, kern.get(o), i, wq);
    p.add_rows(r.lse, kern.get(l), i, p.hq);
    p.add_rows(r.dq, kern.get(dq), i, wq);
  }
  return r;
}

struct CpuKernels {
  Floats put(Floats x) { return x; }
  std::vector<int> put_int(const std::vector<int>& x) { return x; }
  const int* ptr(const std::vector<int>& x) { return x.data(); }
  Floats get(const Floats& x) { return x; }
  void forward(Floats& o, Floats& l, const Floats& q, const Floats& k, const Floats& v,
               const AttentionBlockPair& pair, bool bf16) {
    cpu::blockwise_attention_forward(o.data(), l.data(), q.data(), k.data(), v.data(), pair, bf16);
  }
  void merge(Floats& o, Floats& l, const Floats& ob, const Floats& lb, int tokens, int heads,
             int d) {
    cpu::attention_merge(o.data(), l.data(), ob.data(), lb.data(), tokens, heads, d);
  }
  void round(Floats& o) { round_bf16(o.data(), o.size()); }
  void backward(Floats& dq, Floats& dk, Floats& dv, const Floats& dout, const Floats& q,
                const Floats& k, const Floats& v, const Floats& o, const Floats& l,
                const AttentionBlockPair& pair, bool bf16) {
    cpu::blockwise_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(),
                                      k.data(), v.data(), o.data(), l.data(), pair, bf16);
  }
};

struct GpuKernels {
  cuda::Context& c;
  DeviceBuffer<float> put(const Floats& x) { return DeviceBuffer<float>(x); }
  DeviceBuffer<int> put_int(const std::vector<int>& x) { return DeviceBuffer<int>(x); }
  const int* ptr(const DeviceBuffer<int>& x) { return x.get(); }
  Floats get(const DeviceBuffer<float>& x) {
    c.synchronize();
    return x.download();
  }
  using Buf = DeviceBuffer<float>;
  void forward(Buf& o, Buf& l, const Buf& q, const Buf& k, const Buf& v,
               const AttentionBlockPair& pair, bool bf16) {
    cuda::blockwise_attention_forward(c, o.get(), l.get(), q.get(), k.get(), v.get(), pair, bf16);
  }
  void merge(Buf& o, Buf& l, const Buf& ob, const Buf& lb, int tokens, int heads, int d) {
    cuda::attention_merge(c, o.get(), l.get(), ob.get(), lb.get(), tokens, heads, d);
    c.synchronize();  // the ring frees the step's buffers next
  }
  void round(Buf& o) { cuda::round_bf16(c, o.get(), o.get(), o.size()); }
  void backward(Buf& dq, Buf& dk, Buf& dv, const Buf& dout, const Buf& q, const Buf& k,
                const Buf& v, const Buf& o, const Buf& l, const AttentionBlockPair& pair,
                bool bf16) {
    cuda::blockwise_attention_backward(c, dq.get(), dk.get(), dv.get(), dout.get(), q.get(),
                                       k.get(), v.get(), o.get(), l.get(), pair, bf16);
  }
};

// Rank i of the mirrored layout holds lengths[i] / 2 tokens from the front and as many from
// the back of the sequence (attention_blockwise_test.cpp describes it).
std::vector<std::vector<int>> mirrored_shards(const std::vector<int>& lengths) {
  int front = 0, back = std::accumulate(lengths.begin(), lengths.end(), 0);
  std::vector<std::vector<int>> shards;
  for (int len : lengths) {
    std::vector<int> tokens(len);
    std::iota(tokens.begin(), tokens.begin() + len / 2, front);
    std::iota(tokens.begin() + len / 2, tokens.end(), back - len / 2);
    front += len / 2;
    back -= len / 2;
    shards.push_back(tokens);
  }
  return shards;
}

void expect_ring_matches(cuda::Context& ctx, const Problem& p, bool bf16, double eps) {
  CpuKernels cpu_kernels;
  GpuKernels gpu_kernels{ctx};
  const Result want = ring(p, cpu_kernels, bf16);
  const Result got = ring(p, gpu_kernels, bf16);
  expect_close(got.out, want.out, eps, "out");
  expect_close(got.lse, want.lse, eps, "lse");
  expect_close(got.dq, want.dq, eps, "dq");
  expect_close(got.dk, want.dk, eps, "dk");
  expect_close(got.dv, want.dv, eps, "dv");
}

class CudaBlockwiseAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = cuda::device_unavailable_reason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    ctx_ = std::make_unique<cuda::Context>();
  }
  std::unique_ptr<cuda::Context> ctx_;
};

TEST_F(CudaBlockwiseAttention, UnevenZigZagRingMatchesCpu) {
  // 400 tokens on 3 ranks with 5:3:2 shares, two mirrored chunks each; 4 query heads on 2.
  expect_ring_matches(*ctx_, Problem(400, 4, 2, 16, mirrored_shards({200, 120, 80})), false, 1e-4);
}

TEST_F(CudaBlockwiseAttention, UnevenZigZagRingMatchesCpuInBf16) {
  expect_ring_matches(*ctx_, Problem(400, 4, 2, 16, mirrored_shards({200, 120, 80})), true, 2e-2);
}

TEST_F(CudaBlockwiseAttention, WideHeadsWithPartlyEmptyLanes) {
  // d 72: lanes hold 3, 3, ..., 2 values; one block of 150 tokens, 4 query heads on 1.
  std::vector<int> all(150);
  std::iota(all.begin(), all.end(), 0);
  expect_ring_matches(*ctx_, Problem(150, 4, 1, 72, {all}), false, 1e-4);
}

TEST_F(CudaBlockwiseAttention, FullyMaskedBlockIsANoOp) {
  // Queries at 0..69 against keys at 100..169: no visible pair.
  const int n = 70, hq = 4, hk = 2, d = 16;
  std::vector<int> q_pos(n), kv_pos(n);
  std::iota(q_pos.begin(), q_pos.end(), 0);
  std::iota(kv_pos.begin(), kv_pos.end(), 100);
  const Floats q = testing::random_vector<float>(std::size_t(n) * hq * d, 910);
  const Floats k = testing::random_vector<float>(std::size_t(n) * hk * d, 911);
  const Floats acc = testing::random_vector<float>(q.size(), 912);
  const Floats acc_lse = testing::random_vector<float>(std::size_t(n) * hq, 913);
  const Floats grads = testing::random_vector<float>(q.size(), 914);
  DeviceBuffer<int> gq_pos(q_pos), gkv_pos(kv_pos);
  DeviceBuffer<float> gq(q), gk(k), gv(k), gout(Floats(q.size(), 7.f)),
      glse(Floats(acc_lse.size(), 7.f)), gacc(acc), gacc_lse(acc_lse), gdq(grads),
      gdk(Floats(grads.begin(), grads.begin() + k.size())), gdv(gdk.download());
  const AttentionBlockPair pair{n, n, hq, hk, d, gq_pos.get(), gkv_pos.get()};
  cuda::blockwise_attention_forward(*ctx_, gout.get(), glse.get(), gq.get(), gk.get(), gv.get(),
                                    pair);
  cuda::attention_merge(*ctx_, gacc.get(), gacc_lse.get(), gout.get(), glse.get(), n, hq, d);
  cuda::blockwise_attention_backward(*ctx_, gdq.get(), gdk.get(), gdv.get(), gacc.get(), gq.get(),
                                     gk.get(), gv.get(), gacc.get(), gacc_lse.get(), pair);
  ctx_->synchronize();
  EXPECT_EQ(gout.download(), Floats(q.size(), 0.f));
  EXPECT_EQ(glse.download(), Floats(acc_lse.size(), kNegInf));
  EXPECT_EQ(gacc.download(), acc);
  EXPECT_EQ(gacc_lse.download(), acc_lse);
  EXPECT_EQ(gdq.download(), grads);
  EXPECT_EQ(gdk.download(), Floats(grads.begin(), grads.begin() + k.size()));
  EXPECT_EQ(gdv.download(), Floats(grads.begin(), grads.begin() + k.size()));
}

}  // namespace
}  // namespace hexi::kernels
