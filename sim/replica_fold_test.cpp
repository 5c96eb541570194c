// Replica folding (scheduler/program/replica_fold.hpp): a plan of identical pipelines,
// symmetric on its cluster, simulated one block of pipelines at a time gives the whole
// simulation's iteration, devices and link loads.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>

#include "scenarios/testing.hpp"
#include "scheduler/plan/testing.hpp"
#include "scheduler/program/lower.hpp"
#include "scheduler/program/replica_fold.hpp"
#include "sim/simulator.hpp"

namespace hexi {
namespace {

struct Case {
  Cluster cluster;
  Plan plan;
  TrainingConfig training;
  Granularity granularity = Granularity::kStage;
};

SimReport run(const Case& c, const Model& m, bool fold) {
  LowerOptions lo;
  lo.granularity = c.granularity;
  lo.fold_replicas = fold;
  auto program = lower_plan(c.plan, c.cluster, m, c.training, lo, "<plan>");
  if (!program) throw std::runtime_error(program.error().message);
  SimOptions o;
  o.trace = false;
  auto out = simulate(*program, c.cluster, m, c.training, Profile{}, o);
  if (!out) throw std::runtime_error(out.error().message);
  return std::move(out->report);
}

// Folded against whole: the same iteration, the same metrics on every simulated device,
// the same bytes on every link the folded run loads. Returns the fold.
ReplicaFold expect_fold_is_exact(const Case& c, const Model& m, const std::string& what) {
  const ReplicaFold fold = find_replica_fold(c.plan, c.cluster, m, c.training);
  const SimReport folded = run(c, m, true);
  const SimReport whole = run(c, m, false);
  const double t = whole.iteration_time_s;
  EXPECT_NEAR(folded.iteration_time_s, t, 1e-9 * t) << what;
  EXPECT_NEAR(folded.tokens_per_s, whole.tokens_per_s, 1e-9 * whole.tokens_per_s) << what;
  EXPECT_NEAR(folded.mfu, whole.mfu, 1e-9 * whole.mfu) << what;
  EXPECT_EQ(folded.devices_used, whole.devices_used) << what;
  EXPECT_EQ(folded.feasible, whole.feasible) << what;
  EXPECT_EQ(folded.replicas.pipelines, static_cast<int>(c.plan.pipelines.size())) << what;
  EXPECT_EQ(folded.replicas.simulated, fold.simulated) << what;
  EXPECT_EQ(folded.devices.size() * fold.factor(), whole.devices.size()) << what;
  std::map<int, const DeviceMetrics*> by_device;
  for (const auto& d : whole.devices) by_device[d.device] = &d;
  for (const auto& d : folded.devices) {
    const DeviceMetrics& w = *by_device.at(d.device);
    const std::string where = what + ", device " + std::to_string(d.device);
    EXPECT_NEAR(d.busy_s, w.busy_s, 1e-9 * t) << where;
    EXPECT_NEAR(d.bubble_s, w.bubble_s, 1e-9 * t) << where;
    EXPECT_NEAR(d.exposed_comm_s, w.exposed_comm_s, 1e-9 * t) << where;
    EXPECT_NEAR(d.dp_wait_s, w.dp_wait_s, 1e-9 * t) << where;
    EXPECT_NEAR(d.finish_s, w.finish_s, 1e-9 * t) << where;
    EXPECT_EQ(d.max_in_flight, w.max_in_flight) << where;
    EXPECT_NEAR(d.peak_memory_bytes, w.peak_memory_bytes, 1e-9 * w.peak_memory_bytes) << where;
  }
  std::map<std::string, double> bytes;
  for (const auto& l : whole.links) bytes[l.name] = l.bytes;
  for (const auto& l : folded.links) {
    EXPECT_TRUE(bytes.count(l.name)) << what << ": " << l.name << " carries nothing unfolded";
    EXPECT_NEAR(l.bytes, bytes[l.name], 1e-9 * bytes[l.name]) << what << ", " << l.name;
  }
  return fold;
}

// dp pipelines of pp stages of tp devices on machines of `gpus` GPUs: pipeline by pipeline
// (device (p pp + s) tp + r) or stage by stage ((s dp + p) tp + r).
Plan symmetric_plan(int dp, int pp, int tp, int layers, int batch, int micro_batch,
                    bool stage_major) {
  Json pipes = Json::array();
  for (int p = 0; p < dp; ++p) {
    Json stages = Json::array();
    for (int s = 0; s < pp; ++s) {
      Json devs = Json::array();
      const int group = stage_major ? s * dp + p : p * pp + s;
      for (int r = 0; r < tp; ++r) devs.push_back(group * tp + r);
      stages.push_back({{"devices", devs}, {"layers", {s * layers / pp, (s + 1) * layers / pp}}});
    }
    pipes.push_back({{"batch", batch}, {"micro_batch", micro_batch}, {"stages", stages}});
  }
  return testing::plan_from({{"version", 1}, {"pipelines", pipes}});
}

Cluster leaf_cluster(const std::string& gpu, int machines, int gpus, double nic_GBps, int per_leaf,
                     double oversubscription, const std::string& transport) {
  return testing::cluster_from(
      {{"version", 1},
       {"name", "fold-test"},
       {"network",
        {{"nic_GBps", nic_GBps},
         {"machines_per_leaf", per_leaf},
         {"oversubscription", oversubscription},
         {"transport", transport}}},
       {"machines", {{{"gpu", gpu}, {"gpus", gpus}, {"repeat", machines}}}}});
}

TEST(ReplicaFold, StageBandsOnSharedLeavesFoldToOnePipelineWithTheUplinksShared) {
  // 8 machines of 8 H100 in leaves of 4 over 2:1 oversubscribed 12.5 GB/s TCP; 4 pipelines
  // of 2 TP-8 stages, stage by stage: stage 0 of every pipeline on leaf 0, stage 1 on leaf 1,
  // so every boundary crosses the uplinks all four pipelines share.
  const Model& m = *testing::shipped_models().find("llama2-7b");
  Case c{leaf_cluster("H100-SXM", 8, 8, 12.5, 4, 2, "tcp"), symmetric_plan(4, 2, 8, 32, 8, 1, true),
         testing::tiny_training(32, 1, 2048)};
  const ReplicaFold f = expect_fold_is_exact(c, m, "stage bands");
  EXPECT_EQ(f.simulated, 1);
  ASSERT_EQ(f.uplink_share.size(), 2u);
  EXPECT_DOUBLE_EQ(f.uplink_share[0], 0.25);  // its flows and 3 images at the same rate
  EXPECT_DOUBLE_EQ(f.uplink_share[1], 0.25);
}

TEST(ReplicaFold, PipelinesSharingMachinesFoldByMachineAndRunHierarchicalSyncs) {
  // 4 machines of 8 A100, 16 pipelines of TP 2: four pipelines per machine, so the
  // gradient syncs fill machines and run hierarchically; ZeRO-1, layer fidelity.
  const Model& m = *testing::shipped_models().find("llama2-7b");
  Case c{leaf_cluster("A100-SXM-80GB", 4, 8, 25, 0, 1, "rdma"),
         symmetric_plan(16, 1, 2, 32, 2, 1, false), testing::tiny_training(32, 1, 1024),
         Granularity::kLayer};
  c.training.zero_stage = 1;
  const ReplicaFold f = expect_fold_is_exact(c, m, "TP 2, four pipelines a machine");
  EXPECT_EQ(f.simulated, 4);
}

TEST(ReplicaFold, PipelinesOfMeshStagesFold) {
  // 4 machines of 8 H100 in leaves of 2, one pipeline per machine: a TP-2 stage, then a mesh
  // stage of a tensor group of 4 (uneven heads) and a Ulysses group of 2; the meshes' ring
  // and the gradient syncs across pipelines (each head interval's holders) cross the leaves.
  // At both fidelities.
  Model m = *testing::shipped_models().find("llama2-7b");
  m.layers = 8;
  Json pipes = Json::array();
  for (int p = 0; p < 4; ++p) {
    const int d = 8 * p;
    pipes.push_back({{"batch", 4},
                     {"micro_batch", 1},
                     {"stages",
                      {{{"devices", {d, d + 1}}, {"layers", {0, 3}}},
                       {{"layers", {3, 8}},
                        {"sequence",
                         {{"groups",
                           {{{"devices", {d + 2, d + 3, d + 4, d + 5}},
                             {"tokens", 2048},
                             {"shards", {512, 512, 512, 512}},
                             {"heads", {10, 6, 10, 6}},
                             {"parallel", "tensor"}},
                            {{"devices", {d + 6, d + 7}},
                             {"tokens", 2048},
                             {"shards", {1024, 1024}},
                             {"heads", {16, 16}}}}}}}}}}});
  }
  for (const Granularity g : {Granularity::kStage, Granularity::kLayer}) {
    Case c{leaf_cluster("H100-SXM", 4, 8, 25, 2, 1, "rdma"),
           testing::plan_from({{"version", 1}, {"pipelines", pipes}}),
           testing::tiny_training(16, 1, 4096), g};
    c.training.zero_stage = 1;
    const ReplicaFold f = expect_fold_is_exact(c, m, std::string("meshes, ") + to_string(g).data());
    EXPECT_EQ(f.simulated, 2);  // one pipeline per leaf's orbit of two
  }
}

TEST(ReplicaFold, PipelinesThatDifferOrLeavesInOneOrbitAreNotFolded) {
  const Model& m = *testing::shipped_models().find("llama2-7b");
  Cluster c = leaf_cluster("A100-SXM-80GB", 4, 1, 25, 2, 1, "rdma");
  const TrainingConfig t = testing::tiny_training(8, 1, 1024);
  // Two pipelines of two single-GPU stages: devices (first, second) each, the first stage
  // holding layers [0, cut) of 32.
  auto two_pipelines = [](std::pair<int, int> p0, int cut0, std::pair<int, int> p1, int cut1) {
    Json pipes = Json::array();
    for (auto [devices, cut] : {std::pair{p0, cut0}, std::pair{p1, cut1}}) {
      pipes.push_back({{"batch", 4},
                       {"stages",
                        {{{"devices", {devices.first}}, {"layers", {0, cut}}},
                         {{"devices", {devices.second}}, {"layers", {cut, 32}}}}}});
    }
    return testing::plan_from({{"version", 1}, {"pipelines", pipes}});
  };
  // Layers split differently.
  ReplicaFold f = find_replica_fold(two_pipelines({0, 1}, 16, {2, 3}, 20), c, m, t);
  EXPECT_FALSE(f.folded());
  EXPECT_EQ(f.why_not, "pipeline 1 differs from pipeline 0");
  // Pipeline 0 on machines 0 (leaf 0) and 2 (leaf 1), pipeline 1 on 3 (leaf 1) and 1 (leaf 0):
  // the shift swaps the leaves, so pipeline 0's forward and pipeline 1's backward meet on
  // leaf 1's uplink, which a simulation of pipeline 0 alone would not see.
  f = find_replica_fold(two_pipelines({0, 2}, 16, {3, 1}, 16), c, m, t);
  EXPECT_FALSE(f.folded());
  EXPECT_NE(f.why_not.find("no shift"), std::string::npos) << f.why_not;
}

// Seeded random symmetric plans (GPU types, machine sizes, TP, PP, DP, placement, leaves,
// oversubscription, transports, ZeRO, micro-batches, fidelity), none designed on.
TEST(ReplicaFold, RandomSymmetricPlansFoldExactly) {
  const Model& m = *testing::shipped_models().find("llama2-7b");
  const char* gpus[] = {"A100-SXM-80GB", "H100-SXM", "RTX4090", "A100-PCIe-40GB", "L40S"};
  const char* transports[] = {"rdma", "tcp", "tcpxo"};
  std::mt19937_64 rng(4711);
  auto pick = [&rng](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
  int folded = 0, shared_uplinks = 0;
  for (int i = 0; i < 32; ++i) {
    const std::string gpu = gpus[pick(5)];
    const int g = pick(2) ? 8 : 4;
    const int tp = std::min(g, 1 << pick(3));
    const int pp = 1 << pick(3);
    const int dp = std::vector<int>{2, 3, 4, 6, 8, 12}[pick(6)];
    const int devices = dp * pp * tp;
    const int machines = (devices + g - 1) / g;
    const int per_leaf = pick(4);
    Case c{leaf_cluster(gpu, machines, g, std::vector<double>{1.25, 6, 12.5, 25}[pick(4)], per_leaf,
                        1 + pick(3), transports[pick(3)]),
           Plan{}, testing::tiny_training(1, 1, 1024)};
    const int micro_batch = 1 + pick(2);
    const int batch = micro_batch * (pp + pick(4));
    c.plan = symmetric_plan(dp, pp, tp, 32, batch, micro_batch, pick(2) == 1);
    c.training = testing::tiny_training(batch * dp, micro_batch, 1024);
    c.training.zero_stage = pick(2);
    c.granularity = pick(4) == 0 ? Granularity::kLayer : Granularity::kStage;
    const std::string what = "case " + std::to_string(i) + ": " + gpu + " " +
                             std::to_string(machines) + "x" + std::to_string(g) + ", leaves of " +
                             std::to_string(per_leaf) + ", DP " + std::to_string(dp) + " PP " +
                             std::to_string(pp) + " TP " + std::to_string(tp);
    const ReplicaFold f = expect_fold_is_exact(c, m, what);
    if (f.folded()) ++folded;
    for (double s : f.uplink_share) shared_uplinks += s < 1;
    std::printf("  %s: %d of %d pipelines simulated%s\n", what.c_str(), f.simulated, f.pipelines,
                f.folded() ? "" : (" (" + f.why_not + ")").c_str());
  }
  EXPECT_GE(folded, 14);
  EXPECT_GE(shared_uplinks, 1);
}

}  // namespace
}  // namespace hexi
