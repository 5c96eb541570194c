// The HexiSeq search: its stages (groupings, token block, linear model against the closed
// form), layouts that fit and favour fast devices, determinism, both solver backends, and
// bad input.
#include "scheduler/hexiseq/hexiseq.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "scheduler/hexiseq/exact.hpp"
#include "scheduler/hexiseq/random_mesh.hpp"
#include "scheduler/plan/sequence_testing.hpp"

namespace hexi {
namespace {

using testing::catalog_model;
using testing::long_context;
using testing::mixed_cluster;

const Profile kProfile;

// Long context needs full recompute (selective keeps ~34 s h bytes per layer).
TrainingConfig full_recompute(int seq) {
  TrainingConfig t = long_context(seq);
  t.recompute = Recompute::kFull;
  return t;
}

// 4 H100 (devices 0-3) and 4 A100 (4-7) machines.
const Cluster& h100_a100() {
  static const Cluster c = mixed_cluster({{"H100-SXM", 4, 1}, {"A100-SXM-80GB", 4, 1}});
  return c;
}

TEST(HexiSeqSearch, TokenBlockDividesTheSequence) {
  EXPECT_EQ(token_block(131072, 8, 0), 512);  // 131072 / (32 * 8) = 512
  EXPECT_EQ(token_block(131072, 8, 64), 64);
  EXPECT_EQ(token_block(1000, 8, 0), 2);  // 1000 = 8 * 125: no power of two above 2 fits
  EXPECT_EQ(token_block(1001, 8, 0), std::nullopt);
  EXPECT_EQ(token_block(1000, 8, 3), std::nullopt);
  EXPECT_EQ(token_block(1000, 8, 16), std::nullopt);
}

TEST(HexiSeqSearch, GroupingsFollowTheDomains) {
  const Cluster& c = h100_a100();
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(domains(c, all), (std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  const Grouping g = make_grouping(domains(c, all), {2, 4});
  EXPECT_EQ(g.groups, (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(g.name, "sizes 2,4");
  // Sizes {1, 2, 4} per machine: 3 x 3 = 9, the merge of both whole machines: 10, and the
  // devices dealt into groups of 2 and of 4 across the machines: 12.
  const auto family = grouping_family(c, all, 100);
  EXPECT_EQ(family.size(), 12u);
  EXPECT_EQ(family.front().name, "size 1");  // a plain ring
  EXPECT_EQ(family[8].name, "merge 0+1");    // plain Ulysses
  EXPECT_EQ(family[9].name, "size 4");       // a group per machine
  EXPECT_EQ(family[11].name, "dealt 4");
  EXPECT_EQ(family[11].groups, (std::vector<std::vector<int>>{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_TRUE(grouping_family(c, all, 5).empty());
}

TEST(HexiSeqSearch, LinearModelKnowsTheMemoryExactlyAndTheTimeRoughly) {
  const Model m = catalog_model("llama3-8b");
  const TrainingConfig t = full_recompute(65536);
  SequenceCost cost(h100_a100(), m, t, kProfile);
  const LinearModel lm(cost, 8);
  SequenceLayout l;
  l.groups.push_back({{0, 1, 2, 3}, 40960, {10240, 10240, 10240, 10240}, {8, 8, 8, 8}});
  l.groups.push_back({{4, 5, 6, 7}, 24576, {6144, 6144, 6144, 6144}, {6, 10, 6, 10}});
  double excess = -1e300;
  for (const auto& dm : layout_memory(l, m, t, h100_a100())) {
    excess = std::max(excess, dm.total() - dm.limit());
  }
  EXPECT_NEAR(lm.memory_excess(l), excess, 1e-3);  // bytes
  const double model = lm.value(l), closed = cost.layer(l).time_s;
  std::printf("model %.3f ms, closed form %.3f ms\n", model * 1e3, closed * 1e3);
  EXPECT_LE(model, closed * 1.0001);
  EXPECT_GT(model, closed * 0.8);
}

TEST(HexiSeqSearch, FitsFavoursFastDevicesAndIsDeterministic) {
  const Model m = catalog_model("llama3-8b");
  const TrainingConfig t = full_recompute(131072);
  SequenceCost cost(h100_a100(), m, t, kProfile);
  auto a = run_hexiseq(cost, {}, {});
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_TRUE(validate(a->layout, m, t, h100_a100(), "<hexiseq>").ok())
      << validate(a->layout, m, t, h100_a100(), "<hexiseq>").error().message;
  EXPECT_TRUE(a->time.fits);
  std::printf("%s: %s\n%.3f s/iteration, %ld layouts, %ld solves, %.3f s\n", a->grouping.c_str(),
              dump_json(to_json(a->layout)).c_str(), a->time.iteration_s, a->candidates, a->solves,
              a->search_time_s);
  // The H100s carry more of the sequence than the A100s.
  std::int64_t h100 = 0, a100 = 0;
  for (const auto& g : a->layout.groups) {
    for (int r = 0; r < g.size(); ++r) (g.devices[r] < 4 ? h100 : a100) += g.shards[r];
  }
  EXPECT_GT(h100, a100);
  auto b = run_hexiseq(cost, {}, {});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(dump_json(to_json(a->layout)), dump_json(to_json(b->layout)));
  EXPECT_EQ(a->time.iteration_s, b->time.iteration_s);
}

TEST(HexiSeqSearch, CbcFindsAsGoodALayout) {
  const Model m = catalog_model("llama3-8b");
  SequenceCost cost(h100_a100(), m, full_recompute(65536), kProfile);
  HexiSeqOptions cbc;
  cbc.backend = Backend::kCbc;
  auto a = run_hexiseq(cost, {}, {});  // GLPK
  auto b = run_hexiseq(cost, {}, cbc);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NEAR(b->time.iteration_s / a->time.iteration_s, 1.0, 0.01);
}

// A mesh too large for the grouping family (8 machines of 2 GPUs of three types, 100 GB/s
// NICs): the descent by type, where the screen skips the integer programs of groupings whose
// first LP cannot beat the best layout found. It skips some here (fewer programs) and keeps
// the layout, byte for byte; the grouping seen twice by the descent is searched once, and
// repeated runs give the same bytes.
TEST(HexiSeqSearch, ScreenKeepsTheLayoutOnALargeMesh) {
  const Cluster c =
      mixed_cluster({{"H100-SXM", 4, 4}, {"A100-SXM-80GB", 4, 4}, {"L40S", 4, 4}}, 100);
  SequenceCost cost(c, catalog_model("llama3-8b"), full_recompute(262144), kProfile);
  HexiSeqOptions screened;
  screened.backend = Backend::kGlpk;
  screened.largest_merge = 4;  // the unscreened search's 8-16-GPU programs take seconds
  HexiSeqOptions full = screened;
  full.lp_screen = false;
  auto a = run_hexiseq(cost, {}, screened);
  auto b = run_hexiseq(cost, {}, full);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LT(a->solves, b->solves);
  EXPECT_EQ(a->grouping, b->grouping);
  EXPECT_EQ(dump_json(to_json(a->layout)), dump_json(to_json(b->layout)));
  EXPECT_EQ(a->time.iteration_s, b->time.iteration_s);
  auto again = run_hexiseq(cost, {}, screened);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(dump_json(to_json(a->layout)), dump_json(to_json(again->layout)));
  EXPECT_EQ(a->solves, again->solves);
}

// The cutoffs on meshes of any size (a program whose LP relaxation, a grouping whose
// split-free charges, or a later round whose calibrated LP already reach the best layout):
// on the 20 seeded random meshes of <= 16 GPUs (exact_random_test's), under ZeRO-1 and, with
// two sequences per iteration, ZeRO-3, the search with them finds a layout as fast as the
// search without, and solves fewer programs in all.
TEST(HexiSeqSearch, CutoffsKeepTheLayoutOnRandomMeshes) {
  long with = 0, without = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    std::string text;
    const Cluster c = testing::random_cluster(seed, &text);
    const int seq = 16384 << (seed % 3);
    TrainingConfig t = long_context(seq, seed % 2 ? 1 : 2);
    if (seed % 2 == 0) t.zero_stage = 3;
    SequenceCost cost(c, testing::small_model(8, 2), t, kProfile);
    HexiSeqOptions cut;
    cut.block_tokens = seq / 64;
    HexiSeqOptions full = cut;
    full.lp_screen = false;
    auto a = run_hexiseq(cost, {}, cut);
    auto b = run_hexiseq(cost, {}, full);
    ASSERT_TRUE(a.ok() && b.ok()) << text;
    EXPECT_LE(a->time.iteration_s, b->time.iteration_s * (1 + 1e-12)) << text;
    with += a->solves, without += b->solves;
  }
  EXPECT_LT(with, without);
}

// A bar from outside (another ZeRO stage's layout) only prunes: just above the search's best
// it still finds a layout as fast, with fewer programs; at a tenth of it every program is cut
// off at its relaxation (fewer solves still) and only the even splits are scored.
TEST(HexiSeqSearch, ABarFromOutsidePrunes) {
  TrainingConfig t = full_recompute(65536);
  t.zero_stage = 3;
  SequenceCost cost(h100_a100(), catalog_model("llama3-8b"), t, kProfile);
  HexiSeqOptions o;
  auto free = run_hexiseq(cost, {}, o);
  ASSERT_TRUE(free.ok()) << free.error().message;
  o.bar_s = free->time.iteration_s * 1.01;
  auto above = run_hexiseq(cost, {}, o);
  ASSERT_TRUE(above.ok()) << above.error().message;
  EXPECT_LE(above->time.iteration_s, free->time.iteration_s);
  EXPECT_LT(above->solves, free->solves);
  o.bar_s = free->time.iteration_s * 0.1;
  auto below = run_hexiseq(cost, {}, o);
  ASSERT_TRUE(below.ok()) << below.error().message;
  EXPECT_LT(below->solves, above->solves);
  EXPECT_GE(below->time.iteration_s, free->time.iteration_s);
}

// 8 H100 and 8 A100 behind 25 GB/s (the HexiSeq testbed) with ZeRO-3: every layout over
// both machines gathers each layer's weights and passes K/V across the slow link, and the
// A100s' compute does not pay for it; the search leaves them idle, and is faster than the
// best layout over all 16 (the search told to keep every device).
TEST(HexiSeqSearch, IdlesSlowTypesWhereTheyCostMoreThanTheyBring) {
  const Cluster c = mixed_cluster({{"H100-SXM", 8, 1}, {"A100-SXM-80GB", 8, 1}});
  TrainingConfig t = full_recompute(65536);
  t.zero_stage = 3;
  SequenceCost cost(c, catalog_model("llama-13b-1m"), t, kProfile);
  HexiSeqOptions o;
  o.backend = Backend::kGlpk;
  auto idle = run_hexiseq(cost, {}, o);
  o.idle_slow_types = false;
  auto every = run_hexiseq(cost, {}, o);
  ASSERT_TRUE(idle.ok() && every.ok());
  std::vector<int> used, all;
  for (const auto& g : idle->layout.groups)
    used.insert(used.end(), g.devices.begin(), g.devices.end());
  for (const auto& g : every->layout.groups)
    all.insert(all.end(), g.devices.begin(), g.devices.end());
  std::sort(used.begin(), used.end());
  EXPECT_EQ(used, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7})) << idle->grouping;
  EXPECT_EQ(all.size(), 16u);
  EXPECT_LT(idle->time.iteration_s, 0.95 * every->time.iteration_s);
  EXPECT_NE(idle->grouping.find("fastest type only, 8 of 16 GPUs"), std::string::npos)
      << idle->grouping;
  // Both searches were run: the candidates add up.
  EXPECT_GT(idle->candidates, every->candidates);
}

// GLPK searches, CBC solves hexiseq-exact's MILPs, unless a solver is named: then both.
TEST(HexiSeqSearch, TensorGroupsHoldAModelUlyssesDevicesCannot) {
  // llama3-8b under ZeRO-1 on two machines of four A100-40GB: a Ulysses device holds the whole
  // weights and gradients (4 bytes a parameter, 32 GB) and its optimizer share: no layout fits.
  // Tensor-parallel groups hold their share of the weights: the search finds one that fits,
  // every group tensor-parallel, and the same one twice.
  const Cluster c = mixed_cluster({{"A100-SXM-40GB", 4, 2}});
  const SequenceCost cost(c, catalog_model("llama3-8b"), full_recompute(32768), kProfile);
  HexiSeqOptions ulysses;
  ulysses.tensor_groups = false;
  auto none = run_hexiseq(cost, {}, ulysses);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("no layout"), std::string::npos) << none.error().message;
  auto found = run_hexiseq(cost, {}, HexiSeqOptions{});
  ASSERT_TRUE(found.ok()) << found.error().message;
  EXPECT_TRUE(found->time.fits);
  EXPECT_NE(found->grouping.find("tensor-parallel groups"), std::string::npos) << found->grouping;
  for (const SequenceGroup& g : found->layout.groups) EXPECT_TRUE(g.tensor);
  EXPECT_TRUE(validate(found->layout, cost.model(), cost.training(), c, "<found>").ok());
  auto again = run_hexiseq(cost, {}, HexiSeqOptions{});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->layout, found->layout);
  // hexiseq-homogeneous (identical devices) keeps to Ulysses groups.
  HexiSeqOptions homogeneous;
  homogeneous.identical_devices = true;
  EXPECT_FALSE(run_hexiseq(cost, {}, homogeneous).ok());
}

TEST(HexiSeqSearch, OptionsNameTheSolversAndTheScreen) {
  const HexiSeqOptions defaults;
  EXPECT_EQ(defaults.backend, Backend::kGlpk);
  EXPECT_EQ(defaults.exact_backend, Backend::kCbc);
  EXPECT_TRUE(defaults.lp_screen);
  EXPECT_EQ(defaults.mip_gap, 1e-3);
  const Json j = {{"solver", "cbc"}, {"lp_screen", false}, {"mip_gap", 0}};
  const HexiSeqOptions o = read_hexiseq_options(JsonNode(j, "<test options>"));
  EXPECT_EQ(o.backend, Backend::kCbc);
  EXPECT_EQ(o.exact_backend, Backend::kCbc);
  EXPECT_FALSE(o.lp_screen);
  EXPECT_EQ(o.mip_gap, 0);
  const Json bad = {{"mip_gap", 0.9}};
  EXPECT_THROW(read_hexiseq_options(JsonNode(bad, "<test options>")), InputError);
  // Every option the error lists is read (mip_node_limit_gap once was listed but refused).
  const Json nodes = {{"mip_node_limit", 50}, {"mip_node_limit_gap", 0.05}};
  const HexiSeqOptions n = read_hexiseq_options(JsonNode(nodes, "<test options>"));
  EXPECT_EQ(n.mip_node_limit, 50);
  EXPECT_EQ(n.mip_node_limit_gap, 0.05);
  try {
    read_hexiseq_options(JsonNode(Json{{"mip_node_limits", 1}}, "<test options>"));
    ADD_FAILURE() << "an unknown option was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown HexiSeq option \"mip_node_limits\" (known: "
                                         "solver, time_budget_s, rounds, "),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("mip_node_limit_gap, idle_slow_types"), std::string::npos)
        << e.what();
  }
}

TEST(HexiSeqSearch, BadInput) {
  const Model m = catalog_model("llama2-70b");
  SequenceCost huge(h100_a100(), m, full_recompute(131072), kProfile);
  auto none = run_hexiseq(huge, {0, 1}, {});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(none.error().message.find("fits in 95 % of the memory of the 2 devices"),
            std::string::npos)
      << none.error().message;
  SequenceCost odd(h100_a100(), catalog_model("llama3-8b"), full_recompute(4097), kProfile);
  auto e = run_hexiseq(odd, {}, {});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("S = 4097 must be even"), std::string::npos);
}

// Fewer token blocks than groups: round_blocks cannot give every group one and says so (an
// empty split, never a block taken from past the end); the searches on a mixed mesh of 4 GPUs
// at 2 to 8 tokens return a layout of S tokens or bad input, never crash.
TEST(HexiSeqSearch, FewerBlocksThanGroupsIsALayoutOrBadInput) {
  EXPECT_TRUE(round_blocks({1.0, 1.0, 1.0}, 2).empty());
  EXPECT_EQ(round_blocks({1.0, 1.0, 1.0}, 3), (std::vector<std::int64_t>{1, 1, 1}));
  EXPECT_EQ(round_blocks({0.2, 0.2}, 2), (std::vector<std::int64_t>{1, 1}));
  const Cluster c = mixed_cluster({{"A100-SXM-80GB", 2, 1}, {"H100-SXM", 2, 1}});
  const Profile profile;  // the cost keeps a reference: it outlives the loop
  for (int seq : {2, 4, 6, 8}) {
    SequenceCost cost(c, testing::small_model(), long_context(seq), profile);
    for (bool identical : {false, true}) {
      HexiSeqOptions o;
      o.identical_devices = identical;
      auto r = run_hexiseq(cost, {}, o);
      if (!r) {
        EXPECT_EQ(r.error().kind, ErrorKind::kBadInput) << seq << ": " << r.error().message;
        continue;
      }
      std::int64_t tokens = 0;
      for (const auto& g : r->layout.groups) tokens += g.tokens;
      EXPECT_EQ(tokens, seq);
    }
    auto e = run_hexiseq_exact(cost, {}, {});
    if (!e) {
      EXPECT_EQ(e.error().kind, ErrorKind::kBadInput) << seq << ": " << e.error().message;
    }
  }
}

}  // namespace
}  // namespace hexi
