// The cuda backend and the NCCL communicator (built whenever nvcc is found; run with a
// GPU, skipped with the reason otherwise):
// - every Backend operation on random inputs against the cpu backend (tolerances per
//   operation below);
// - the exact-sum collective suite on a one-rank NCCL world (device buffers);
// - a training run of the tiny Llama on the cuda backend against the PyTorch oracle
//   (loss and every gradient; same bounds as the cpu engine) and against the cpu
//   backend for ten steps; a sequence mesh; bf16 mixed precision.
// One rank each, so no mpirun: the NCCL world is bootstrapped over an in-memory world of
// one (run_fake_world). nccl_mpi_test runs the collective suite over MPI ranks, one GPU each.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "engine/comm_fake.hpp"
#include "engine/comm_nccl.hpp"
#include "engine/comm_suite.hpp"
#include "engine/cuda_testing.hpp"
#include "engine/engine_testing.hpp"

namespace hexi::engine {
namespace {

// Runs `body` on a world of one rank in memory (its thread holds the CUDA device).
void with_one_rank(const std::function<void(Communicator&)>& body) {
  auto status = run_fake_world(1, [&](Communicator& world) -> Status {
    body(world);
    return {};
  });
  ASSERT_TRUE(status[0].ok()) << status[0].error().message;
}

TEST(CudaBackend, NcclCollectivesExactOneRank) {
  if (auto why = cuda_skip_reason(1); !why.empty()) GTEST_SKIP() << why;
  with_one_rank([](Communicator& world) {
    auto backend = make_backend("cuda", 0);
    ASSERT_TRUE(backend.ok()) << backend.error().message;
    auto nccl = make_nccl_world(world, **backend);
    ASSERT_TRUE(nccl.ok()) << nccl.error().message;
    Status s = check_collectives(**nccl, cuda_device_buffers());
    EXPECT_TRUE(s.ok()) << s.error().message;
  });
}

// Gather/scatter, the loss statistics and AdamW on random data: cuda vs cpu.
TEST(CudaBackend, EngineKernelsMatchCpu) {
  if (auto why = cuda_skip_reason(1); !why.empty()) GTEST_SKIP() << why;
  auto cuda = make_backend("cuda", 0);
  ASSERT_TRUE(cuda.ok()) << cuda.error().message;
  auto cpu = make_cpu_backend();
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const std::size_t n = 4099;
  std::vector<float> src(n), grad(n), m(n, 0.0f), v(n, 0.0f);
  for (auto* x : {&src, &grad}) {
    for (float& e : *x) e = normal(rng);
  }
  std::vector<std::int64_t> idx(n);
  for (std::size_t i = 0; i < n; ++i)
    idx[i] = static_cast<std::int64_t>((i * 7919) % n);  // a permutation
  // cpu results
  std::vector<float> want_gather(n), want_param = src, want_m = m, want_v = v;
  ASSERT_TRUE(cpu->gather(want_gather.data(), src.data(), idx.data(), n).ok());
  AdamW c;
  ASSERT_TRUE(
      cpu->adamw(want_param.data(), grad.data(), want_m.data(), want_v.data(), n, c, 0.1, 3).ok());
  // cuda results
  auto d_src = DeviceArray<float>::make(**cuda, n), d_out = DeviceArray<float>::make(**cuda, n);
  auto d_grad = DeviceArray<float>::make(**cuda, n), d_m = DeviceArray<float>::make(**cuda, n),
       d_v = DeviceArray<float>::make(**cuda, n);
  auto d_idx = DeviceArray<std::int64_t>::make(**cuda, n);
  ASSERT_TRUE((*cuda)->upload(d_src->get(), src.data(), n * 4).ok());
  ASSERT_TRUE((*cuda)->upload(d_grad->get(), grad.data(), n * 4).ok());
  ASSERT_TRUE((*cuda)->upload(d_m->get(), m.data(), n * 4).ok());
  ASSERT_TRUE((*cuda)->upload(d_v->get(), v.data(), n * 4).ok());
  ASSERT_TRUE((*cuda)->upload(d_idx->get(), idx.data(), n * 8).ok());
  ASSERT_TRUE((*cuda)->gather(d_out->get(), d_src->get(), d_idx->get(), n).ok());
  std::vector<float> got(n);
  ASSERT_TRUE((*cuda)->download(got.data(), d_out->get(), n * 4).ok());
  EXPECT_EQ(got, want_gather);  // a copy: exact
  // scatter back must restore the source exactly
  ASSERT_TRUE((*cuda)->scatter(d_src->get(), d_idx->get(), d_out->get(), n).ok());
  ASSERT_TRUE((*cuda)->download(got.data(), d_src->get(), n * 4).ok());
  EXPECT_EQ(got, src);
  // AdamW: float32 elementwise with sqrt and division; 1e-6 relative (a few ulps).
  ASSERT_TRUE(
      (*cuda)->adamw(d_src->get(), d_grad->get(), d_m->get(), d_v->get(), n, c, 0.1, 3).ok());
  ASSERT_TRUE((*cuda)->download(got.data(), d_src->get(), n * 4).ok());
  for (std::size_t i = 0; i < n; ++i)
    EXPECT_NEAR(got[i], want_param[i], 1e-6 * std::fabs(want_param[i]) + 1e-7);
}

// The engine on the cuda backend (1 rank, NCCL world) running `plan` of `scenario` against
// the PyTorch oracle of `oracle_model` and against the cpu engine for ten steps (float32 both;
// GEMM summation orders differ: losses within 1e-5 relative, oracle bounds as on the cpu).
void expect_matches_oracle_and_cpu(const std::string& scenario, const std::string& plan,
                                   const std::string& oracle_model, const std::string& what) {
  with_one_rank([&](Communicator& world) {
    Scenario sc;
    auto program = lower_shipped(scenario, plan, &sc);
    ASSERT_TRUE(program.ok()) << program.error().message;
    auto backend = make_backend("cuda", 0);
    ASSERT_TRUE(backend.ok()) << backend.error().message;
    auto nccl = make_nccl_world(world, **backend);
    ASSERT_TRUE(nccl.ok()) << nccl.error().message;
    auto oracle = load_oracle_inputs("fp32", oracle_model);
    ASSERT_TRUE(oracle.ok()) << oracle.error().message;
    RankResult r;
    std::vector<double> losses;
    Status s = run_rank(*program, sc.model, *oracle->data, oracle->options, 3, **nccl, **backend, r,
                        losses);
    ASSERT_TRUE(s.ok()) << s.error().message;
    auto t = assemble_trajectory(*program, sc.model, {r}, losses);
    ASSERT_TRUE(t.ok()) << t.error().message;
    auto cmp = compare_with_oracle(*oracle, t->losses, t->grads_first, "fp32");
    ASSERT_TRUE(cmp.ok()) << cmp.error().message;
    std::printf("cuda backend, %s vs torch oracle:\n%s", what.c_str(),
                format_errors(cmp->grads).c_str());
    for (const std::string& f : cmp->failures) ADD_FAILURE() << f;

    auto corpus = CorpusSource::load(default_corpus(), sc.training.seq_len, 7);
    ASSERT_TRUE(corpus.ok());
    RankResult rc;
    std::vector<double> cuda_losses;
    ASSERT_TRUE(run_rank(*program, sc.model, *corpus, RuntimeOptions{}, 10, **nccl, **backend, rc,
                         cuda_losses)
                    .ok());
    auto cpu_run = run_fake(*program, sc.model, *corpus, RuntimeOptions{}, 10);
    ASSERT_TRUE(cpu_run.ok());
    for (int k = 0; k < 10; ++k)
      EXPECT_NEAR(cuda_losses[k], cpu_run->losses[k], 1e-5 * cpu_run->losses[k]);
  });
}

TEST(CudaBackend, TrainingMatchesOracleAndCpu) {
  if (auto why = cuda_skip_reason(1); !why.empty()) GTEST_SKIP() << why;
  expect_matches_oracle_and_cpu("tiny-llama-cpu", "tiny-single.json", "tiny-llama", "tiny-single");
}

// A sequence mesh (tiny-seq-single: the mesh's pre, ring and post ops with the blockwise
// kernels, no messages) against the tiny-llama-seq oracle.
TEST(CudaBackend, SequenceMeshMatchesOracleAndCpu) {
  if (auto why = cuda_skip_reason(1); !why.empty()) GTEST_SKIP() << why;
  expect_matches_oracle_and_cpu("tiny-seq-cpu", "tiny-seq-single.json", "tiny-llama-seq",
                                "sequence mesh");
}

// bf16 mixed precision on the cuda backend (cuBLAS bf16 GEMMs with fp32 compute, bf16
// rounding kernels), 1 rank: against the PyTorch bf16 oracle with the cpu's bf16 bounds
// and evidence (compare_with_oracle), and against the cpu engine's bf16 emulation for three steps
// (the same rounding points; summation orders differ, so a tensor may round one bf16 ulp apart:
// losses within 1e-3 relative).
TEST(CudaBackend, Bf16TrainingMatchesOracleAndCpu) {
  if (auto why = cuda_skip_reason(1); !why.empty()) GTEST_SKIP() << why;
  with_one_rank([](Communicator& world) {
    Scenario sc;
    auto single = lower_shipped("tiny-llama-cpu", "tiny-single.json", &sc, "bf16");
    ASSERT_TRUE(single.ok()) << single.error().message;
    auto backend = make_backend("cuda", 0);
    ASSERT_TRUE(backend.ok()) << backend.error().message;
    auto nccl = make_nccl_world(world, **backend);
    ASSERT_TRUE(nccl.ok()) << nccl.error().message;
    auto oracle = load_oracle_inputs("bf16");
    ASSERT_TRUE(oracle.ok()) << oracle.error().message;
    RankResult r;
    std::vector<double> losses;
    Status s = run_rank(*single, sc.model, *oracle->data, oracle->options, 3, **nccl, **backend, r,
                        losses);
    ASSERT_TRUE(s.ok()) << s.error().message;
    auto t = assemble_trajectory(*single, sc.model, {r}, losses);
    ASSERT_TRUE(t.ok()) << t.error().message;
    auto cmp = compare_with_oracle(*oracle, t->losses, t->grads_first, "bf16");
    ASSERT_TRUE(cmp.ok()) << cmp.error().message;
    std::printf("cuda backend bf16 vs torch bf16 oracle:\n%s", format_errors(cmp->grads).c_str());
    for (const std::string& f : cmp->failures) ADD_FAILURE() << f;
    auto cpu_run = run_fake(*single, sc.model, *oracle->data, oracle->options, 3);
    ASSERT_TRUE(cpu_run.ok()) << cpu_run.error().message;
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(losses[k], cpu_run->losses[k], 1e-3 * losses[k]);
  });
}

}  // namespace
}  // namespace hexi::engine
