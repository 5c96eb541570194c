// bf16 mixed precision in the engine (kernels/blocks.hpp "Precision"), on the fake
// communicator: every shipped tiny plan lowered at training.precision "bf16" against the
// PyTorch bf16 oracle; 200 steps of bf16 against the same 200 steps in float32; the bytes
// each communication op puts on the wire against the program's count.
// Tolerances against the bf16 oracle: oracle_tolerance("bf16") (engine_testing.hpp, with
// their justification); observed values are printed by the test.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "engine/check.hpp"
#include "engine/checkpoint_files.hpp"
#include "engine/comm_fake.hpp"
#include "engine/engine_testing.hpp"

namespace hexi::engine {
namespace {

using Case = PlanCase;

std::string bf16_name_of(const ::testing::TestParamInfo<Case>& info) {
  return plan_case_name(info.param);
}

class Bf16PlanTest : public ::testing::TestWithParam<Case> {};

TEST_P(Bf16PlanTest, MatchesPyTorchBf16Oracle) {
  Scenario sc;
  auto program = lower_shipped(GetParam().scenario, GetParam().plan, &sc, "bf16");
  ASSERT_TRUE(program.ok()) << program.error().message;
  ASSERT_EQ(program->bytes_per_element, 2);
  auto oracle = load_oracle_inputs("bf16");
  ASSERT_TRUE(oracle.ok()) << oracle.error().message;
  if (sc.model.layers != oracle->dims.layers || sc.training.seq_len != oracle->data->seq_len()) {
    GTEST_SKIP() << sc.model.name << " is not the oracle's model (tiny-llama, sequence 32)";
  }
  auto got = run_fake(*program, sc.model, *oracle->data, oracle->options, 3);
  ASSERT_TRUE(got.ok()) << got.error().message;
  auto cmp = compare_with_oracle(*oracle, got->losses, got->grads_first, "bf16");
  ASSERT_TRUE(cmp.ok()) << cmp.error().message;
  for (const std::string& f : cmp->failures) ADD_FAILURE() << f;
  if (std::getenv("HEXISIM_PRINT_ERRORS") != nullptr)
    std::printf("%s", format_errors(cmp->grads).c_str());
  const Bf16Evidence& evidence = *cmp->evidence;
  const TensorError w = worst(cmp->grads);
  std::printf(
      "bf16 %s on %s: loss %.6f (torch bf16 %.6f), after 1 step %.6f (%.6f), after 2 %.6f "
      "(%.6f); first-step gradients: max |diff| / max |torch| %.2e; rms difference to torch "
      "bf16 %.2e, to torch fp32 %.2e (torch bf16 to fp32 %.2e)\n",
      GetParam().plan, GetParam().scenario, got->losses[0], oracle->loss, got->losses[1],
      oracle->loss_after_1, got->losses[2], oracle->loss_after_2, w.max_rel, evidence.to_bf16,
      evidence.to_fp32, evidence.torch_gap);
}

INSTANTIATE_TEST_SUITE_P(Plans, Bf16PlanTest, ::testing::ValuesIn(shipped_tiny_plans()),
                         bf16_name_of);

// 200 steps on the corpus in bf16 and in float32, same plan, data and initialisation: the
// bf16 loss tracks the float32 one. Once rounding has made the runs' weights differ, the
// trajectories drift apart chaotically: measured on four plans (single, TP 4 -> TP 1,
// PP 2 x TP 2/1, ZeRO-1 DP 3), each step's loss on its own batch differs by up to 4 % (one
// 11 % spike when the TP all-reduce was done in float32 instead), the means over 20-step
// windows (5 120 tokens) by up to 2.2 %; after 200 steps bf16 is 0.1-2.1 % above float32 on
// every plan (its rounding costs a little progress at this size). Bound: every 20-step mean
// within 3 %, and the bf16 run learns (last window < 0.6 x the first step's loss). The
// oracle test, not this one, checks the arithmetic step by step.
TEST(Bf16Training, TracksFloat32Over200Steps) {
  // tiny-dp3-mixed under ZeRO-1: TP groups, pipeline sends, boundary all-gathers, gradient
  // reduce-scatters and weight all-gathers all carry bf16.
  for (const Case c : {Case{"tiny-llama-cpu-zero1", "tiny-dp3-mixed.json"}}) {
    Scenario sc;
    auto fp32 = lower_shipped(c.scenario, c.plan, &sc, "fp32");
    auto bf16 = lower_shipped(c.scenario, c.plan, nullptr, "bf16");
    ASSERT_TRUE(fp32.ok() && bf16.ok());
    auto corpus = CorpusSource::load(default_corpus(), sc.training.seq_len, 7);
    ASSERT_TRUE(corpus.ok()) << corpus.error().message;
    const int steps = 200, window = 20;
    auto a = run_fake(*fp32, sc.model, *corpus, RuntimeOptions{}, steps);
    auto b = run_fake(*bf16, sc.model, *corpus, RuntimeOptions{}, steps);
    ASSERT_TRUE(a.ok()) << a.error().message;
    ASSERT_TRUE(b.ok()) << b.error().message;
    double worst_step = 0, worst_window = 0, last_window = 0;
    for (int k = 0; k < steps; ++k)
      worst_step = std::max(worst_step, std::abs(b->losses[k] - a->losses[k]) / a->losses[k]);
    for (int w = 0; w + window <= steps; w += window) {
      double ma = 0, mb = 0;
      for (int k = w; k < w + window; ++k) ma += a->losses[k], mb += b->losses[k];
      const double rel = std::abs(mb - ma) / ma;
      EXPECT_LE(rel, 0.03) << c.plan << " steps " << w << "-" << w + window - 1 << ": bf16 mean "
                           << mb / window << ", fp32 " << ma / window;
      worst_window = std::max(worst_window, rel);
      last_window = mb / window;
    }
    EXPECT_LT(last_window, 0.6 * b->losses.front()) << "bf16 training does not learn";
    std::printf(
        "%s on %s, 200 steps: loss fp32 %.4f -> %.4f, bf16 %.4f -> %.4f; |bf16 - fp32| / fp32: "
        "max per step %.2e, max per 20-step mean %.2e\n",
        c.plan, c.scenario, a->losses.front(), a->losses.back(), b->losses.front(),
        b->losses.back(), worst_step, worst_window);
  }
}

// A bf16 ZeRO-1 run saved after 2 steps and resumed for 2 more gives the losses and the
// parameters of 4 steps in one go, bit for bit: the float32 masters, the moments and the
// bf16 copies of other ranks' shards are all in the checkpoint.
TEST(Bf16Training, CheckpointResumeIsBitIdentical) {
  Scenario sc;
  auto p = lower_shipped("tiny-llama-cpu-zero1", "tiny-dp3-mixed.json", &sc, "bf16");
  ASSERT_TRUE(p.ok()) << p.error().message;
  auto corpus = CorpusSource::load(default_corpus(), sc.training.seq_len, 7);
  ASSERT_TRUE(corpus.ok()) << corpus.error().message;
  const int n = static_cast<int>(p->devices.size());
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "hexisim_bf16_resume";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<ManifestFile> files(n);
  std::vector<std::vector<double>> losses(2);  // [straight, resumed], rank 0's view
  std::vector<std::vector<float>> params(2 * n);
  auto run = [&](Communicator& world, int steps, bool load, bool save, int which) -> Status {
    auto backend = make_cpu_backend();
    Progress progress;
    auto rt =
        RankRuntime::create(*p, sc.model, world, *backend, *corpus, RuntimeOptions{}, progress);
    HEXI_TRY(rt);
    if (load) HEXI_TRY((*rt)->load(dir));
    for (int k = 0; k < steps; ++k) {
      auto st = (*rt)->step();
      HEXI_TRY(st);
      double sums[2] = {st->loss_sum, st->loss_tokens};
      HEXI_TRY(world.all_reduce(sums, 2, DType::kF64, ReduceOp::kSum));
      if (world.rank() == 0) losses[which].push_back(sums[0] / sums[1]);
    }
    if (save) {
      SavePoints points;
      auto mine = (*rt)->save(dir, points);
      HEXI_TRY(mine);
      files[world.rank()] = *mine;
      HEXI_TRY(world.barrier());
      if (world.rank() == 0)
        HEXI_TRY(publish_manifest(dir, CheckpointManifest{(*rt)->steps_done(), n, files}, points));
      return world.barrier();
    }
    auto mine = (*rt)->params();
    HEXI_TRY(mine);
    params[which * n + world.rank()] = std::move(*mine);
    return {};
  };
  struct Phase {
    int steps;
    bool load, save;
    int which;
  };
  // 4 steps straight; 2 steps and a save; a load and 2 more steps.
  for (const Phase ph :
       {Phase{4, false, false, 0}, Phase{2, false, true, 1}, Phase{2, true, false, 1}}) {
    for (const Status& s : run_fake_world(
             n, [&](Communicator& w) { return run(w, ph.steps, ph.load, ph.save, ph.which); }))
      ASSERT_TRUE(s.ok()) << s.error().message;
  }
  EXPECT_EQ(losses[0], losses[1]);
  for (int r = 0; r < n; ++r) EXPECT_EQ(params[r], params[n + r]) << "rank " << r;
  std::filesystem::remove_all(dir);
}

// ---- bytes on the wire ---------------------------------------------------------------

// Forwards to a communicator and logs the bytes of the tensor each call moves (all-gather:
// its output, reduce-scatter: its input, else the buffer), shared by its subgroups.
class CountingCommunicator : public Communicator {
 public:
  CountingCommunicator(Communicator& inner, std::shared_ptr<std::vector<double>> log)
      : inner_(inner), log_(std::move(log)) {}
  CountingCommunicator(std::unique_ptr<Communicator> owned,
                       std::shared_ptr<std::vector<double>> log)
      : owned_(std::move(owned)), inner_(*owned_), log_(std::move(log)) {}
  std::string_view kind() const override { return inner_.kind(); }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  int world_rank(int member) const override { return inner_.world_rank(member); }
  Result<std::unique_ptr<Request>> isend(const void* buf, std::size_t count, DType type, int peer,
                                         int tag) override {
    note(count, type);
    return inner_.isend(buf, count, type, peer, tag);
  }
  Status recv(void* buf, std::size_t count, DType type, int peer, int tag) override {
    note(count, type);
    return inner_.recv(buf, count, type, peer, tag);
  }
  Status all_reduce(void* buf, std::size_t count, DType type, ReduceOp op) override {
    note(count, type);
    return inner_.all_reduce(buf, count, type, op);
  }
  Status all_gather(const void* in, void* out, std::size_t count, DType type) override {
    note(count * size(), type);
    return inner_.all_gather(in, out, count, type);
  }
  Status reduce_scatter(const void* in, void* out, std::size_t count, DType type,
                        ReduceOp op) override {
    note(count * size(), type);
    return inner_.reduce_scatter(in, out, count, type, op);
  }
  Status broadcast(void* buf, std::size_t count, DType type, int root) override {
    note(count, type);
    return inner_.broadcast(buf, count, type, root);
  }
  Status all_to_all(const void* in, void* out, std::size_t count, DType type) override {
    note(count * size(), type);
    return inner_.all_to_all(in, out, count, type);
  }
  Status barrier() override { return inner_.barrier(); }
  Status connect_peers(const std::vector<std::pair<int, int>>& pairs) override {
    return inner_.connect_peers(pairs);
  }
  Result<std::unique_ptr<Communicator>> subgroup(const std::vector<int>& members) override {
    auto sub = inner_.subgroup(members);
    HEXI_TRY(sub);
    return std::unique_ptr<Communicator>(
        std::make_unique<CountingCommunicator>(std::move(*sub), log_));
  }

 private:
  void note(std::size_t count, DType type) {
    log_->push_back(static_cast<double>(count * dtype_size(type)));
  }
  std::unique_ptr<Communicator> owned_;
  Communicator& inner_;
  std::shared_ptr<std::vector<double>> log_;
};

// Each communication op of one step makes exactly one communicator call: its bytes are the
// program's op.bytes, except where the engine pads (boundary all-gathers move t pieces of
// ceil(R/t) rows; ZeRO buckets n chunks of the largest piece) or appends the h norm-gain
// elements to a backward TP all-reduce. bf16 programs count 2 bytes per element and the
// engine moves exactly that (loss statistics: float32 in both).
std::vector<std::string> wire_mismatches(const Program& p, const Model& model) {
  auto corpus = CorpusSource::load(default_corpus(), p.seq_len, 7);
  if (!corpus.ok()) return {corpus.error().message};
  const int n = static_cast<int>(p.devices.size());
  std::vector<std::vector<double>> logs(n);
  std::vector<std::string> bad;
  auto statuses = run_fake_world(n, [&](Communicator& world) -> Status {
    auto log = std::make_shared<std::vector<double>>();
    CountingCommunicator counting(world, log);
    auto backend = make_cpu_backend();
    Progress progress;
    auto rt =
        RankRuntime::create(p, model, counting, *backend, *corpus, RuntimeOptions{}, progress);
    HEXI_TRY(rt);
    log->clear();
    HEXI_TRY((*rt)->step());
    logs[world.rank()] = *log;
    return {};
  });
  for (const Status& s : statuses) {
    if (!s.ok()) return {s.error().message};
  }
  for (int r = 0; r < n; ++r) {
    const DeviceLayout& l = p.devices[r];
    std::size_t call = 0;
    const double e = p.bytes_per_element, h = model.hidden * e;
    for (int id = l.op_begin; id < l.op_end; ++id) {
      const Op& op = p.ops[id];
      if (op.kind == OpKind::kCompute) continue;
      if (call >= logs[r].size()) {
        bad.push_back(describe_op(p, id) + ": no communicator call");
        break;
      }
      const double got = logs[r][call++];
      double slack = 0;  // what the engine may add to the program's count
      if (op.kind == OpKind::kCollective && op.collective == Collective::kAllGather &&
          op.tensor != TensorKind::kLossStats)
        slack = op.tensor == TensorKind::kWeightBucket ? 1e9 : l.tp * h;
      if (op.collective == Collective::kReduceScatter) slack = 1e9;
      if (op.collective == Collective::kAllReduce && op.tensor == TensorKind::kActivationGrad)
        slack = h;
      const bool ok = slack >= 1e9 ? got >= op.bytes && got <= 1.5 * op.bytes
                                   : got >= op.bytes && got <= op.bytes + slack;
      if (!ok) {
        bad.push_back(describe_op(p, id) + ": the engine moved " + std::to_string(got) +
                      " bytes, the program counts " + std::to_string(op.bytes));
      }
    }
    if (call != logs[r].size()) bad.push_back("rank " + std::to_string(r) + ": extra calls");
  }
  return bad;
}

TEST(Bf16Wire, EveryCommunicationOpMovesTheProgramsBytes) {
  for (const char* precision : {"fp32", "bf16"}) {
    for (const Case c : {Case{"tiny-llama-cpu", "tiny-pp2-tp2-tp1.json"},
                         Case{"tiny-llama-cpu", "tiny-tp4-to-tp1.json"},
                         Case{"tiny-llama-cpu-zero1", "tiny-dp3-mixed.json"}}) {
      Scenario sc;
      auto p = lower_shipped(c.scenario, c.plan, &sc, precision);
      ASSERT_TRUE(p.ok()) << p.error().message;
      for (const std::string& m : wire_mismatches(*p, sc.model))
        ADD_FAILURE() << precision << " " << c.plan << ": " << m;
    }
  }
}

}  // namespace
}  // namespace hexi::engine
