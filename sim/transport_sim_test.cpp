// Achieved collective rates end to end (topologies/transport.hpp): the simulator runs one
// collective of S bytes on a cluster built like each published nccl-tests platform of
// topologies/measurements/collectives.json and is compared with the measured time.
// Fitted curves (each transport's table and extra step latency were derived from it by
// scripts/fit_collectives.py) come back as the script reports, from 1 KiB to 1 GiB (the
// tables, flows, pipelined hierarchical all-reduce and latencies are those the fit
// assumed); where it reports misses (messages smaller than the fastest point, which only the
// latency explains) the bound says so. Curves not fitted are predictions, bounded by the
// error the script reports so that a change that makes them worse fails.

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "scheduler/plan/testing.hpp"
#include "sim/sim_testing.hpp"
#include "sim/simulator.hpp"
#include "topologies/paths.hpp"

namespace hexi {
namespace {

using testing::ProgramBuilder;

const Json& measurements() {
  static const Json j = [] {
    std::ifstream in(data_root() / "topologies/measurements/collectives.json");
    return Json::parse(in);
  }();
  return j;
}

const Json& curve(const std::string& id) {
  for (const auto& c : measurements().at("curves")) {
    if (c.at("id") == id) return c;
  }
  throw std::runtime_error("no curve " + id);
}

// Measured (bytes, seconds) of a curve: its times, else times from its bus bandwidth.
std::vector<std::pair<double, double>> points(const Json& c, Collective collective, int ranks) {
  std::vector<std::pair<double, double>> out;
  for (const auto& p : c.at("points")) {
    const double bytes = p.at(0).get<double>();
    if (!p.at(1).is_null()) {
      out.emplace_back(bytes, p.at(1).get<double>() * 1e-6);
    } else if (!p.at(3).is_null() && p.at(3).get<double>() > 0) {
      out.emplace_back(bytes,
                       bus_factor(collective, ranks) * bytes / (p.at(3).get<double>() * 1e9));
    }
  }
  return out;
}

// Machines of `gpus` GPUs of `gpu`, on one switch; `network` adds to the network.
Cluster platform(int machines, int gpus, const std::string& gpu, Json network,
                 Json machine = Json::object()) {
  Json m = {{"gpu", gpu}, {"gpus", gpus}, {"repeat", machines}};
  m.update(machine);
  return testing::cluster_from(
      {{"version", 1}, {"name", "nccl-tests"}, {"network", network}, {"machines", {m}}});
}

double simulate_one(const Cluster& cluster, Collective c, double bytes) {
  const int n = cluster.num_devices();
  ProgramBuilder b(n);
  std::vector<int> all(n);
  for (int d = 0; d < n; ++d) all[d] = d;
  b.collective(b.group(all), c, bytes);
  auto out = simulate(b.build(), cluster, testing::tiny_model(), testing::tiny_training(1),
                      testing::ideal_profile(), SimOptions{});
  if (!out) throw std::runtime_error(out.error().message);
  return out->report.iteration_time_s;
}

// The largest |simulated / measured - 1| from `from` bytes to 1 GiB; the errors are printed.
double worst_error(const Cluster& cluster, const std::string& id, Collective c,
                   double from = 1024) {
  double worst = 0;
  std::string line;
  for (auto [bytes, measured] : points(curve(id), c, cluster.num_devices())) {
    if (bytes < from || bytes > (1 << 30)) continue;
    const double err = simulate_one(cluster, c, bytes) / measured - 1;
    worst = std::max(worst, std::abs(err));
    line += " " + std::to_string(static_cast<long long>(bytes)) + ":" +
            std::to_string(std::lround(err * 1000) / 10.0).substr(0, 5) + "%";
  }
  std::cout << id << ":" << line << "\n";
  return worst;
}

// A fitted all-reduce curve: `c`'s devices 0 and its last talk over `t`; the simulated curve
// is within `worst` from 1 KiB and exact (0.5 %) from `exact_from` bytes.
void expect_fitted_curve(const Cluster& c, Transport t, const std::string& id, double worst,
                         double exact_from) {
  ASSERT_EQ(c.transport(0, c.num_devices() - 1), t);
  EXPECT_LE(worst_error(c, id, Collective::kAllReduce), worst);
  EXPECT_LE(worst_error(c, id, Collective::kAllReduce, exact_from), 0.005);
}

TEST(TransportSim, NvlinkReproducesItsA100Curve) {
  // 8 x A100 SXM on NVSwitch (300 GB/s, 3 us): ring all-reduce, nvlink's table.
  Cluster c = platform(1, 8, "A100-SXM-80GB", {{"nic_GBps", 25}});
  ASSERT_EQ(c.transport(0, 7), Transport::kNvlink);
  EXPECT_LE(worst_error(c, "a100_8x_nvswitch_allreduce_ncclTests_mle", Collective::kAllReduce),
            0.02);
}

TEST(TransportSim, Nvlink4ReproducesItsH200RingCurve) {
  // 8 x H200 on NVSwitch 3 (450 GB/s, 3 us): the ring points only (NVLink SHARP, which NCCL
  // picks from 2 MiB, is not modelled). 32 KiB-512 KiB all take 38-40 us, which the
  // latency of the fastest (512 KiB) explains: -9.6 % at 32 KiB, -5.1 % at 256 KiB.
  expect_fitted_curve(platform(1, 8, "H200", {{"nic_GBps", 25}}), Transport::kNvlink4,
                      "h200_8x_nvswitch_allreduce_ring", 0.097, 524288);
}

TEST(TransportSim, Nvlink5ReproducesItsB200Curve) {
  // 8 x B200 on NVSwitch 4 (900 GB/s, 3 us): -11 % at 64 KiB (slower than 32 KiB and
  // 128 KiB), within 2 % elsewhere.
  expect_fitted_curve(platform(1, 8, "B200", {{"nic_GBps", 25}}), Transport::kNvlink5,
                      "b200_8x_nvswitch_allreduce_torch_mle", 0.111, 131072);
}

TEST(TransportSim, PcieReproducesIts4090CurveAndPredictsASecondMachine) {
  // 4 x RTX 4090 with peer-to-peer over PCIe 4 x16 (32 GB/s, 5 us): within 2.6 % from
  // 1 KiB. Not fitted: a second such machine's all-reduce (within 10.5 %), its all-gather
  // (-53 % at 4 KiB: a per-collective cost the model does not have; within 4 % from 32 MiB).
  Cluster c = platform(1, 4, "RTX4090", {{"nic_GBps", 25}}, {{"intra", {{"kind", "pcie"}}}});
  ASSERT_EQ(c.transport(0, 3), Transport::kPcie);
  EXPECT_LE(worst_error(c, "rtx4090_24g_4x_node13_allreduce_p2p", Collective::kAllReduce), 0.027);
  EXPECT_LE(worst_error(c, "rtx4090_48g_4x_node6_allreduce_p2p", Collective::kAllReduce), 0.106);
  EXPECT_LE(worst_error(c, "rtx4090_48g_4x_node6_allgather_p2p", Collective::kAllGather), 0.54);
  EXPECT_LE(worst_error(c, "rtx4090_48g_4x_node6_allgather_p2p", Collective::kAllGather, 32 << 20),
            0.04);
}

TEST(TransportSim, HostStagedReproducesIts2080TiCurveAndPredictsAllGather) {
  // 2 GPUs under one PCIe 3 switch without peer-to-peer: host-staged at 16/2 GB/s, 5 us.
  Cluster c =
      platform(1, 2, "RTX3090", {{"nic_GBps", 25}}, {{"intra", {{"kind", "host"}, {"GBps", 8}}}});
  // The fastest point (4 KiB) sets the extra latency: -8.9 % at 1 KiB, -4.7 % at 2 KiB,
  // exact from 4 KiB.
  EXPECT_LE(worst_error(c, "rtx2080ti_2x_pcie3_noP2P_allreduce", Collective::kAllReduce), 0.09);
  EXPECT_LE(worst_error(c, "rtx2080ti_2x_pcie3_noP2P_allreduce", Collective::kAllReduce, 4096),
            0.005);
  // Not fitted: the all-gather pays a per-collective cost the model does not have (-46 %
  // at 1 KiB, -20 % from 2 MiB, -5 % at 1 GiB).
  EXPECT_LE(worst_error(c, "rtx2080ti_2x_pcie3_noP2P_allgather", Collective::kAllGather), 0.46);
}

TEST(TransportSim, TcpReproducesItsTenGigabitEthernetCurve) {
  // 8 machines of 4 GPUs host-staged inside (8 GB/s), one 10 GbE NIC each, NCCL over
  // sockets: the pipelined hierarchical all-reduce, the host parts at host's table, the NIC
  // at tcp's. Exact from 1 KiB (the fastest point).
  Cluster c = platform(8, 4, "RTX3090", {{"nic_GBps", 1.25}, {"transport", "tcp"}},
                       {{"intra", {{"kind", "host"}, {"GBps", 8}}}});
  ASSERT_EQ(c.transport(0, 4), Transport::kTcp);
  EXPECT_LE(worst_error(c, "dexhunter_10GbE_8x4_2080Ti_allreduce_exp2", Collective::kAllReduce),
            0.005);
}

TEST(TransportSim, TcpxoReproducesItsTwoMachineH100Curve) {
  // 2 x 8 H100 SXM, 8 x 200 Gb/s NICs per machine (GCP A3 Mega, GPUDirect-TCPXO): the
  // pipelined hierarchical all-reduce, NVLink at nvlink4's table, NICs at tcpxo's.
  // 1 KiB takes 147 us, 2 KiB (the fastest) 126: -14.5 % at 1 KiB, exact from 2 KiB.
  expect_fitted_curve(
      platform(2, 8, "H100-SXM",
               {{"nic_GBps", 200}, {"nics_per_machine", 8}, {"transport", "tcpxo"}}),
      Transport::kTcpxo, "h100_2node_gcp_a3mega_tcpxo_allreduce", 0.15, 4096);
}

TEST(TransportSim, EfaReproducesItsFourMachineB200Curve) {
  // 4 x 8 B200 (NVLink 5, 900 GB/s), 8 x 400 Gb/s EFA per machine.
  Cluster c =
      platform(4, 8, "B200", {{"nic_GBps", 400}, {"nics_per_machine", 8}, {"transport", "efa"}});
  // Its 32 KiB point takes 6.3 ms and 64 KiB 3.2 ms, 512 KiB (the fastest) 0.36 ms: the
  // model is -95 % and -89 % there (a benchmark artefact, kept as published), exact from
  // 512 KiB.
  EXPECT_LE(worst_error(c, "b200_4node_efa_allreduce_torch_mle", Collective::kAllReduce, 524288),
            0.005);
}

TEST(TransportSim, RdmaOnTwoMachineH100RoCE) {
  // 2 x 8 H100 SXM, 400 GB/s of RoCE per machine, only >= 1 GiB published: the NICs at
  // line rate, NVLink-bound at nvlink4's efficiency; NCCL's NVLink SHARP moves half the
  // NVLink bytes of our ring parts, so the model is 17 % slow.
  Cluster c = platform(2, 8, "H100-SXM",
                       {{"nic_GBps", 400}, {"nics_per_machine", 8}, {"transport", "rdma"}});
  EXPECT_LE(worst_error(c, "h100_2node_oci_roce_allreduce_large", Collective::kAllReduce), 0.17);
}

TEST(TransportSim, NominalRatesIgnoreTheTables) {
  // "rates": "nominal": 1 GB over 8 A100s at exactly 300 GB/s and 3 us per step.
  Cluster c = platform(1, 8, "A100-SXM-80GB", {{"nic_GBps", 25}, {"rates", "nominal"}});
  EXPECT_NEAR(simulate_one(c, Collective::kAllReduce, 1e9), 1.75e9 / 300e9 + 14 * 3e-6, 1e-9);
}

// Devices under a CPU quota (cpu-20: 1 ms of the core per 5 ms period) spend the CPU their
// transport costs per op before a collective moves and at both ends of a message; a device
// whose quota is spent waits for its next period. Device d's periods start at
// frac(d x 0.618) x 5 ms (sim/executor.cpp): device 0 at 0, device 1 at 3.09 ms.
TEST(TransportSim, QuotaDevicesSpendTheirCommunicationCpu) {
  const Cluster plain =
      testing::cluster_from({{"version", 1},
                             {"name", "quota"},
                             {"network", {{"nic_GBps", 0.125}, {"transport", "tcp"}}},
                             {"machines", {{{"gpu", "cpu-20"}, {"gpus", 2}}}}});
  // The law for every device type, or for the one named only.
  auto with_cpu = [&](double message_s, double collective_s, double poll = 0,
                      const std::string& type = "") {
    TransportCurve c = plain.curve(Transport::kHost);
    CommCpuLaw& law = type.empty() ? c.cpu : c.cpu_by_device[type];
    law.op_s = message_s;
    law.collective_op_s = collective_s;
    law.poll_fraction = poll;
    Cluster out = plain;
    out.set_curves({{Transport::kHost, c}});
    return out;
  };
  auto run = [](const Cluster& cl, bool collective) {
    ProgramBuilder b(2);
    if (collective) {
      b.collective(b.group({0, 1}), Collective::kAllReduce, 1 << 20);
    } else {
      b.send(0, 1, 1 << 20, 0);
      b.recv(1, 0, 1 << 20, 0);
    }
    auto out = simulate(b.build(), cl, testing::tiny_model(), testing::tiny_training(1),
                        testing::ideal_profile(), SimOptions{});
    if (!out) throw std::runtime_error(out.error().message);
    return out->report.iteration_time_s;
  };
  ASSERT_EQ(plain.transport(0, 1), Transport::kHost);
  const double all_reduce = run(plain, true), message = run(plain, false);
  // 0.5 ms each, within both fresh quotas: the ring starts 0.5 ms later.
  EXPECT_NEAR(run(with_cpu(0, 0.5e-3), true) - all_reduce, 0.5e-3, 1e-9);
  // 1.5 ms each: device 0 spends 1 ms, waits for 5 ms, ends at 5.5 ms; device 1 ends at
  // 3.09 + 0.5 ms. The ring waits for device 0.
  EXPECT_NEAR(run(with_cpu(0, 1.5e-3), true) - all_reduce, 5.5e-3, 1e-9);
  // A message: 0.3 ms for the sender before it moves, 0.3 ms for the receiver after.
  EXPECT_NEAR(run(with_cpu(0.3e-3, 0), false) - message, 0.6e-3, 1e-9);
  // Polling while it waits: device 1 has 0.5 ms of its period [3.09, 8.09) ms left at 3.59 ms.
  // At 10 % of a core the polls until the ring ends (5.5 ms and a little) spend 0.2 ms of it;
  // at 50 % they spend it by 4.59 ms, and device 1 notices the end only at 8.09 ms.
  EXPECT_NEAR(run(with_cpu(0, 1.5e-3, 0.1), true) - all_reduce, 5.5e-3, 1e-9);
  EXPECT_NEAR(run(with_cpu(0, 1.5e-3, 0.5), true), 5e-3 + 0.6180339887498949 * 5e-3, 1e-9);
  // Nothing charged where the transport costs no CPU (every shipped table).
  EXPECT_EQ(run(with_cpu(0, 0), true), all_reduce);
  // A device type's own law: charged to that type only.
  EXPECT_NEAR(run(with_cpu(0, 1.5e-3, 0, "cpu-20"), true) - all_reduce, 5.5e-3, 1e-9);
  EXPECT_EQ(run(with_cpu(0, 1.5e-3, 0, "cpu-40"), true), all_reduce);
}

// An efficiency above 1 at the largest size calibrated (the testbed's shaped links pass a
// 64 KiB burst at the veth's speed) is a burst, not a rate: a larger message moves its bytes
// beyond the burst at the nominal rate. Fitted at 256 and 512 KiB (eta 1.0 and 1.25, a burst
// of 0.2 x 512 KiB), a 64 MiB message takes 32 MiB / rate longer than a 32 MiB one, not
// 32 MiB / 1.25 rate; a curve ending at or below 1 stays at its last eta.
TEST(TransportSim, AnEfficiencyAboveOneIsABurstThatLargerMessagesOutgrow) {
  const Cluster plain = testing::cluster_from(
      {{"version", 1},
       {"name", "shaped"},
       {"network", {{"nic_GBps", 0.125}, {"transport", "tcp"}}},
       {"machines", {{{"gpu", "cpu-20"}, {"gpus", 1}}, {{"gpu", "cpu-20"}, {"gpus", 1}}}}});
  ASSERT_EQ(plain.transport(0, 1), Transport::kTcp);
  auto with_curve = [&](std::vector<EfficiencyPoint> points) {
    TransportCurve c = plain.curve(Transport::kTcp);
    c.points = std::move(points);
    Cluster out = plain;
    out.set_curves({{Transport::kTcp, c}});
    return out;
  };
  auto message = [](const Cluster& cl, double bytes) {
    ProgramBuilder b(2);
    b.send(0, 1, bytes, 0);
    b.recv(1, 0, bytes, 0);
    auto out = simulate(b.build(), cl, testing::tiny_model(), testing::tiny_training(1),
                        testing::ideal_profile(), SimOptions{});
    if (!out) throw std::runtime_error(out.error().message);
    return out->report.iteration_time_s;
  };
  // Over tcp the payload keeps 1448 bytes of each 1514-byte frame the shaper counts.
  const double rate = 0.125e9, mib = 1 << 20, g = 1448.0 / 1514.0;
  const Cluster burst = with_curve({{262144, 1.0}, {524288, 1.25}});
  EXPECT_NEAR(burst.efficiency(0, 1, 524288), 1.25, 1e-12);
  const double b = 524288 * (1 / g - 1 / 1.25);  // the burst, in bytes
  EXPECT_NEAR(burst.efficiency(0, 1, 64 * mib), 64 * mib / (64 * mib / g - b), 1e-12);
  EXPECT_LT(burst.efficiency(0, 1, 4096 * mib), g + 1e-4);
  EXPECT_NEAR(message(burst, 64 * mib) - message(burst, 32 * mib), 32 * mib / (g * rate), 1e-9);
  EXPECT_NEAR(message(burst, 64 * mib) - message(burst, 0.5 * mib), 63.5 * mib / (g * rate), 1e-9);
  const Cluster below = with_curve({{262144, 0.5}, {524288, 0.8}});
  EXPECT_NEAR(below.efficiency(0, 1, 64 * mib), 0.8, 1e-12);
  EXPECT_NEAR(message(below, 64 * mib) - message(below, 32 * mib), 32 * mib / (0.8 * rate), 1e-9);
}

}  // namespace
}  // namespace hexi
