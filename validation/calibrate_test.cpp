// Calibration (calibrate.hpp): traces made by the simulator under a known "true" profile
// must give back a profile that times every op as the truth does; traces that cannot
// determine a term are refused, naming it.
#include "validation/calibrate.hpp"

#include <gtest/gtest.h>

#include "scenarios/testing.hpp"
#include "scheduler/plan/testing.hpp"
#include "scheduler/program/lower.hpp"
#include "sim/simulator.hpp"

namespace hexi::validation {
namespace {

// Two machines of 4 CPU ranks (intra-machine links: host transport) on a tcp network.
Scenario cpu_scenario(int micro_batch) {
  return testing::tiny_scenario(R"({
  "version": 1, "name": "cpu-mb)" +
                                std::to_string(micro_batch) + R"(",
  "cluster": {"version": 1, "name": "cpu-2x4", "network": {"nic_GBps": 0.125, "transport": "tcp"},
              "machines": [{"name": "m", "gpu": "CPU-core", "gpus": 4, "repeat": 2}]},
  "model": "tiny-llama-8l",
  "training": {"global_batch": 8, "micro_batch": )" +
                                std::to_string(micro_batch) + R"(, "seq_len": 32,
               "attention": "dense", "precision": "fp32"}})");
}

// The profile the "measurements" come from: CPU-core slower than the defaults in every
// term, and both transports' curves replaced.
Profile truth() {
  Profile p;
  DeviceProfile d = p.device(*testing::shipped_gpus().find("CPU-core"));
  d.gemm_ceiling = 0.4;
  d.memory_efficiency = 0.3;
  d.kernel_overhead_s = 3e-6;
  p.set_device("CPU-core", d, "truth");
  p.set_transport({Transport::kHost, "truth", 20e-6, {{1024, 0.6}}});
  p.set_transport({Transport::kTcp, "truth", 80e-6, {{1024, 0.7}}});
  return p;
}

// Three pipeline stages: device 0 -> 1 over the host link, 1 -> 4 over the network.
Plan three_stages(int micro_batch) {
  return testing::plan_from(
      {{"version", 1},
       {"pipelines",
        Json::array({{{"batch", 8},
                      {"micro_batch", micro_batch},
                      {"stages", Json::array({{{"devices", {0}}, {"layers", {0, 3}}},
                                              {{"devices", {1}}, {"layers", {3, 5}}},
                                              {{"devices", {4}}, {"layers", {5, 8}}}})}}})}});
}

// A run as if measured: the simulated iteration under `profile`, repeated for 3 steps.
MeasuredRun simulated_run(Scenario sc, const Plan& plan, const Profile& profile) {
  use_profile(sc, profile);
  LowerOptions lo;
  auto program = lower_plan(plan, sc.cluster, sc.model, sc.training, lo, "<plan>");
  if (!program) throw std::runtime_error(program.error().message);
  SimOptions so;
  so.trace = true;
  auto out = simulate(*program, sc.cluster, sc.model, sc.training, sc.profile, so);
  if (!out) throw std::runtime_error(out.error().message);
  auto json = parse_json_text(out->trace_json, "sim trace");
  auto sim = trace_from_json(*json, "sim trace");
  if (!sim) throw std::runtime_error(sim.error().message);
  Trace measured;
  double offset = 0;
  for (int s = 0; s < 3; ++s) {
    double end = 0;
    for (TraceOp e : sim->ops) {
      e.step = s;
      e.start_us += offset;
      e.end_us += offset;
      end = std::max(end, e.end_us);
      measured.ops.push_back(e);
    }
    offset = end + 1000;
  }
  return {"mb" + std::to_string(plan.pipelines[0].micro_batch) + ".json", std::move(sc), "<plan>",
          std::move(*program), std::move(measured)};
}

TEST(Calibrate, RecoversTheTimesOfTheProfileThatMadeTheTraces) {
  std::vector<MeasuredRun> runs;
  for (int mb : {1, 2}) runs.push_back(simulated_run(cpu_scenario(mb), three_stages(mb), truth()));
  const Profile base;  // the shipped defaults: every term off
  auto c = calibrate(runs, base);
  ASSERT_TRUE(c.ok()) << c.error().message;
  ASSERT_EQ(c->terms.size(), 3u);  // compute CPU-core, link host, link tcp
  for (const TermFit& t : c->terms) {
    EXPECT_GT(t.r2, 0.999) << t.term;
    EXPECT_LT(t.rms_rel, 0.01) << t.term;
    EXPECT_GT(t.rms_rel_before, 0.05) << t.term << ": the base profile must be off";
  }
  // Every compute op of both programs timed by the fitted profile as by the truth.
  for (const MeasuredRun& r : runs) {
    Scenario fitted_sc = r.scenario;
    use_profile(fitted_sc, c->profile);
    const auto want = compute_durations(r.program, r.scenario.cluster, r.scenario.profile);
    const auto got = compute_durations(r.program, fitted_sc.cluster, fitted_sc.profile);
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (want[i] > 0) {
        EXPECT_NEAR(got[i] / want[i], 1.0, 0.01) << op_label(r.program, static_cast<int>(i));
      }
    }
    // And every transfer over both links.
    for (int a : {0, 1}) {
      const int b = a == 0 ? 1 : 4;
      for (double bytes : {8192.0, 16384.0}) {
        auto time = [&](const Cluster& cl) {
          return cl.step_latency(a, b) + bytes / (cl.bandwidth(a, b) * cl.efficiency(a, b, bytes));
        };
        EXPECT_NEAR(time(fitted_sc.cluster) / time(r.scenario.cluster), 1.0, 0.02)
            << a << " -> " << b << ", " << bytes << " bytes";
      }
    }
  }
  // The profile file round-trips, transports and sources included.
  auto again = Profile::from_json(c->profile.to_json(), "fitted.json");
  ASSERT_TRUE(again.ok()) << again.error().message;
  ASSERT_EQ(again->transports().size(), 2u);
  const TransportCurve& tcp = again->transports().at(Transport::kTcp);
  EXPECT_NEAR(tcp.step_latency_s, c->profile.transports().at(Transport::kTcp).step_latency_s,
              1e-12);
  EXPECT_NE(tcp.source.find("hexisim calibrate"), std::string::npos) << tcp.source;
  const GpuSpec& cpu = *testing::shipped_gpus().find("CPU-core");
  EXPECT_NE(std::string(again->source(cpu, Param::kGemmCeiling)).find("hexisim calibrate"),
            std::string::npos);
}

TEST(Calibrate, RefusesALinkThatCarriesCollectivesButNoMessage) {
  // TP-2 stages on machines 0 and 1: the host links carry only TP all-reduces.
  const Plan plan = testing::plan_from(
      {{"version", 1},
       {"pipelines",
        Json::array({{{"batch", 8},
                      {"stages", Json::array({{{"devices", {0, 1}}, {"layers", {0, 4}}},
                                              {{"devices", {4, 5}}, {"layers", {4, 8}}}})}}})}});
  std::vector<MeasuredRun> runs;
  runs.push_back(simulated_run(cpu_scenario(1), plan, truth()));
  auto c = calibrate(runs, Profile());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("link host carries all-reduce"), std::string::npos)
      << c.error().message;
}

TEST(Calibrate, RefusesMessagesOfOneSize) {
  std::vector<MeasuredRun> runs;
  runs.push_back(simulated_run(cpu_scenario(1), three_stages(1), truth()));
  auto c = calibrate(runs, Profile());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("need messages of at least two sizes"), std::string::npos)
      << c.error().message;
}

}  // namespace
}  // namespace hexi::validation
