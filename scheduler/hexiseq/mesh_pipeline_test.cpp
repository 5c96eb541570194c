// Pipelines of sequence meshes (mesh_pipeline.hpp): the machine runs by hand, and on the
// HexiSeq testbed (8 H100 + 8 A100 behind 25 GB/s, Llama 13B, 64K tokens, 8 sequences per
// iteration) a two-stage pipeline that uses the A100s a single mesh leaves idle, its plan
// valid and its estimate the one the search reports.
#include "scheduler/hexiseq/mesh_pipeline.hpp"

#include <gtest/gtest.h>

#include "scheduler/plan/sequence_testing.hpp"

namespace hexi {
namespace {

using testing::catalog_model;
using testing::long_context;
using testing::mixed_cluster;

TEST(MeshPipeline, MachineRunsCutAtEqualShares) {
  // 4 machines: H100 x8 (7 912 TFLOP/s), A100 x8 (2 496) twice, H100 x8: p = 2 cuts where the
  // running sum first reaches half the total (after the second machine: 10 408 of 20 816).
  const Cluster c =
      mixed_cluster({{"H100-SXM", 8, 1}, {"A100-SXM-80GB", 8, 2}, {"H100-SXM", 8, 1}});
  EXPECT_EQ(machine_runs(c, 1), (std::vector<std::vector<int>>{{0, 1, 2, 3}}));
  EXPECT_EQ(machine_runs(c, 2), (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  // p = 3: a third is 6 939; the first machine alone passes it, the next two reach two thirds
  // only with the fourth, which the last run needs.
  EXPECT_EQ(machine_runs(c, 3), (std::vector<std::vector<int>>{{0}, {1, 2}, {3}}));
  EXPECT_EQ(machine_runs(c, 4), (std::vector<std::vector<int>>{{0}, {1}, {2}, {3}}));
  EXPECT_TRUE(machine_runs(c, 5).empty());
}

TEST(MeshPipeline, TwoStagesUseTheMachineOneMeshLeavesIdle) {
  const Cluster c = mixed_cluster({{"H100-SXM", 8, 1}, {"A100-SXM-80GB", 8, 1}}, 25);
  const Model m = catalog_model("llama-13b-1m");
  TrainingConfig t = long_context(65536, 8);
  t.recompute = Recompute::kFull;
  const Profile profile;
  auto r = search_mesh_pipeline(c, m, t, profile);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->tried.size(), 2u);
  const MeshPipelineCandidate &one = r->tried[0], &two = r->tried[1];
  ASSERT_TRUE(one.fits && two.fits) << one.problem << " / " << two.problem;
  // One mesh: HexiSeq leaves the A100s behind the 25 GB/s NIC idle.
  EXPECT_EQ(one.plan.num_devices(), 8);
  // Two stages: every GPU, the H100 machine's mesh holding more layers.
  ASSERT_EQ(r->plan.pipelines.size(), 1u);
  const Pipeline& p = r->plan.pipelines.front();
  ASSERT_EQ(p.stages.size(), 2u);
  EXPECT_EQ(r->plan.num_devices(), 16);
  EXPECT_GT(p.stages[0].layers(), p.stages[1].layers());
  EXPECT_EQ(p.stages[0].layers() + p.stages[1].layers(), m.layers);
  EXPECT_LT(two.estimate.iteration_time_s, 0.9 * one.estimate.iteration_time_s);
  EXPECT_DOUBLE_EQ(r->estimate.iteration_time_s, two.estimate.iteration_time_s);
  EXPECT_TRUE(validate_plan(r->plan, c, m, t, "<search>").ok());
  std::printf("one mesh %.3f s, two stages (%d + %d layers) %.3f s\n",
              one.estimate.iteration_time_s, p.stages[0].layers(), p.stages[1].layers(),
              two.estimate.iteration_time_s);
}

TEST(MeshPipeline, RefusesZeroTwoAndThree) {
  const Cluster c = mixed_cluster({{"H100-SXM", 4, 2}});
  TrainingConfig t = long_context(16384, 2);
  t.zero_stage = 3;
  auto r = search_mesh_pipeline(c, catalog_model("llama-13b-1m"), t, Profile{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("zero_stage 3"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace hexi
