// Calibration (calibrate.hpp): traces made by the simulator under a known "true" profile
// must give back a profile that times every op as the truth does; traces that cannot
// determine a term are refused, naming it.
#include "validation/calibrate.hpp"

#include <functional>
#include <set>
#include <tuple>

#include <gtest/gtest.h>

#include "scenarios/testing.hpp"
#include "scheduler/plan/testing.hpp"
#include "scheduler/program/lower.hpp"
#include "sim/simulator.hpp"
#include "validation/validate.hpp"

namespace hexi::validation {
namespace {

// `model` (tiny-llama-8l unless given) at `micro_batch` on a cluster `name` of `machines` (a
// cluster file's "machines" array) on a 1 Gbit/s tcp network.
Scenario scenario_on(const std::string& name, const std::string& machines, int micro_batch,
                     const std::string& model = "tiny-llama-8l") {
  const std::string mb = std::to_string(micro_batch);
  return testing::tiny_scenario(R"({"version": 1, "name": ")" + name + "-mb" + mb + R"(",
    "cluster": {"version": 1, "name": ")" +
                                name + R"(",
                "network": {"nic_GBps": 0.125, "transport": "tcp"}, "machines": )" +
                                machines +
                                R"(},
    "model": ")" + model + R"(",
    "training": {"global_batch": 8, "micro_batch": )" +
                                mb + R"(, "seq_len": 32,
                 "attention": "dense", "precision": "fp32"}})");
}

// Two machines of 4 CPU ranks (intra-machine links: host transport) on a tcp network.
Scenario cpu_scenario(int micro_batch) {
  return scenario_on("cpu-2x4", R"([{"name": "m", "gpu": "CPU-core", "gpus": 4, "repeat": 2}])",
                     micro_batch);
}

// One pipeline of batch 8 at `micro_batch` over `stages` ({devices, layers} each).
Plan pipeline_plan(const Json& stages, int micro_batch) {
  return testing::plan_from(
      {{"version", 1},
       {"pipelines",
        Json::array({{{"batch", 8}, {"micro_batch", micro_batch}, {"stages", stages}}})}});
}

// The profile the "measurements" come from: CPU-core slower than the defaults in every
// term, and both transports' curves replaced.
Profile truth() {
  Profile p;
  DeviceProfile d = p.device(*testing::shipped_gpus().find("CPU-core"));
  d.gemm_ceiling = 0.4;
  d.gemm_m_half = 96;  // GEMMs of micro-batches 1 and 2 at different rates
  d.memory_efficiency = 0.3;
  d.kernel_overhead_s = 3e-6;
  p.set_device("CPU-core", d, "truth");
  for (auto [t, alpha, eta] :
       {std::tuple{Transport::kHost, 20e-6, 0.6}, std::tuple{Transport::kTcp, 80e-6, 0.7}}) {
    TransportCurve c;
    c.transport = t;
    c.source = "truth";
    c.step_latency_s = alpha;
    c.points = {{1024, eta}};
    p.set_transport(c);
  }
  return p;
}

// Three pipeline stages: device 0 -> 1 over the host link, 1 -> 4 over the network.
Plan three_stages(int micro_batch) {
  return pipeline_plan(Json::array({{{"devices", {0}}, {"layers", {0, 3}}},
                                    {{"devices", {1}}, {"layers", {3, 5}}},
                                    {{"devices", {4}}, {"layers", {5, 8}}}}),
                       micro_batch);
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

// The communication work of the tests' CPU law: 40 us + 0.5 ns/B a message, 300 us + 2 ns/B
// a collective member.
double law_work(bool collective, double bytes) {
  return collective ? 300e-6 + 2e-9 * bytes : 40e-6 + 0.5e-9 * bytes;
}

// The runs of `plan(mb)` on `scenario(mb)` at micro-batches 1 and 2, simulated under truth(),
// whose communication ops spent `cpu_us(op, event)` of CPU each.
std::vector<MeasuredRun> runs_spending(
    const std::function<Scenario(int)>& scenario, const std::function<Plan(int)>& plan,
    const std::function<double(const Op&, const TraceOp&)>& cpu_us) {
  std::vector<MeasuredRun> runs;
  for (int mb : {1, 2}) {
    MeasuredRun r = simulated_run(scenario(mb), plan(mb), truth());
    for (TraceOp& e : r.trace.ops) {
      const Op& op = r.program.ops[e.op];
      if (op.kind != OpKind::kCompute) e.cpu_us = cpu_us(op, e);
    }
    runs.push_back(std::move(r));
  }
  return runs;
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

// Ranks under a CPU quota (cpu-20) spend CPU in their communication ops; the engine records
// it (cpu_us). Traces whose comm ops carry a known CPU law must give it back: per op and per
// byte for messages and for collectives, and the share spent polling while waiting.
TEST(Calibrate, RecoversTheCpuThatCommunicationCostsAQuotaDevice) {
  auto scenario = [](int micro_batch) {
    return scenario_on("cpu20-2x3", R"([{"name": "m", "gpu": "cpu-20", "gpus": 3, "repeat": 2}])",
                       micro_batch);
  };
  // TP-2 on machine 0 (host), TP-2 across the machines (tcp), then one rank on machine 1:
  // messages and all-reduces on both transports, of two sizes over the two runs.
  auto plan = [](int micro_batch) {
    return pipeline_plan(Json::array({{{"devices", {0, 1}}, {"layers", {0, 3}}},
                                      {{"devices", {2, 3}}, {"layers", {3, 6}}},
                                      {{"devices", {4}}, {"layers", {6, 8}}}}),
                         micro_batch);
  };
  // The law: law_work, and 3 % of each op's duration polling.
  auto cpu_of = [](const Op& op, const TraceOp& e) {
    const double work = law_work(op.kind == OpKind::kCollective, op.bytes);
    return (work + 0.03 * (e.end_us - e.start_us) * 1e-6) * 1e6;
  };
  const std::vector<MeasuredRun> runs = runs_spending(scenario, plan, cpu_of);
  auto c = calibrate(runs, Profile());
  ASSERT_TRUE(c.ok()) << c.error().message;
  int seen = 0;
  for (const TermFit& t : c->terms) {
    if (t.term.rfind("comm cpu ", 0) != 0) continue;
    ++seen;
    EXPECT_GT(t.r2, 0.999) << t.term;
    std::map<std::string, double> got;
    for (const FitParam& p : t.params) got[p.name] = p.after;
    EXPECT_NEAR(got["cpu_us_per_op"], 40, 1) << t.term;
    EXPECT_NEAR(got["cpu_ns_per_byte"], 0.5, 0.02) << t.term;
    EXPECT_NEAR(got["collective_cpu_us_per_op"], 300, 5) << t.term;
    EXPECT_NEAR(got["collective_cpu_ns_per_byte"], 2, 0.05) << t.term;
    EXPECT_NEAR(got["poll_cpu_fraction"], 0.03, 0.002) << t.term;
  }
  EXPECT_EQ(seen, 2);  // host and tcp
  // The fitted work is in the profile's transports, which the simulator charges, and in its
  // file.
  auto again = Profile::from_json(c->profile.to_json(), "fitted.json");
  ASSERT_TRUE(again.ok()) << again.error().message;
  const TransportCurve& host = again->transports().at(Transport::kHost);
  EXPECT_NEAR(host.cpu.seconds(1e6, false), 40e-6 + 0.5e-3, 2e-5);
  EXPECT_NEAR(host.cpu.seconds(1e6, true), 300e-6 + 2e-3, 1e-4);
  EXPECT_NEAR(host.cpu.poll_fraction, 0.03, 0.002);
  EXPECT_TRUE(host.cpu_by_device.empty());  // one device type: the transport's law is its own
}

// The law is a model, and on the testbed it misses the many small ops: a rank's polls on a
// short wait cost more than its law's fraction, and a 256 KiB TP all-reduce spends about
// twice what a' + b' x bytes gives it. The fit must still give the few large gradient
// all-reduces, where most of the CPU goes, their own CPU; weighing every op alike let the
// small ones set the per-byte cost, and the testbed's 47 MB all-reduces got 2.4 times it.
TEST(Calibrate, GivesTheFewLargeAllReducesTheirOwnCpuAmongManySmallOnes) {
  // Two data-parallel pipelines of small-llama on one machine of six cpu-20 ranks, a TP-2
  // stage and a one-rank stage each: TP all-reduces of 64 and 128 KiB, gradient
  // all-reduces of MBs, messages and small broadcasts, all on shared memory.
  auto scenario = [](int micro_batch) {
    return scenario_on("cpu20-1x6", R"([{"name": "m", "gpu": "cpu-20", "gpus": 6}])", micro_batch,
                       "small-llama");
  };
  auto plan = [](int micro_batch) {
    auto pipeline = [&](int first) {
      return Json{{"batch", 4},
                  {"micro_batch", micro_batch},
                  {"stages", Json::array({{{"devices", {first, first + 1}}, {"layers", {0, 4}}},
                                          {{"devices", {first + 2}}, {"layers", {4, 8}}}})}};
    };
    return testing::plan_from(
        {{"version", 1}, {"pipelines", Json::array({pipeline(0), pipeline(3)})}});
  };
  auto tp = [](const Op& op) {
    return op.kind == OpKind::kCollective && op.bytes > 32e3 && op.bytes < 1e6;
  };
  auto cpu_of = [&](const Op& op, const TraceOp& e) {
    const double work = law_work(op.kind == OpKind::kCollective, op.bytes);
    return ((tp(op) ? 2 : 1) * work + 0.03 * (e.end_us - e.start_us) * 1e-6) * 1e6;
  };
  const std::vector<MeasuredRun> runs = runs_spending(scenario, plan, cpu_of);
  auto c = calibrate(runs, Profile());
  ASSERT_TRUE(c.ok()) << c.error().message;
  const CommCpuLaw& law = c->profile.transports().at(Transport::kHost).cpu;
  int small = 0, large = 0;
  for (const MeasuredRun& r : runs) {
    for (const TraceOp& e : r.trace.ops) {
      const Op& op = r.program.ops[e.op];
      if (op.kind != OpKind::kCollective || e.step != 0) continue;
      if (tp(op)) ++small;
      if (op.bytes < 1e6) continue;
      ++large;
      const double fitted =
          law.seconds(op.bytes, true) + law.poll_fraction * (e.end_us - e.start_us) * 1e-6;
      EXPECT_NEAR(fitted / (e.cpu_us * 1e-6), 1, 0.02) << op.bytes << " bytes";
    }
  }
  EXPECT_GE(small, 10 * large);
  EXPECT_GE(large, 6);
}

// Where a transport carries the ops of two device types, each gets its own law: here a
// cpu-20 rank spends twice a cpu-40 rank's CPU per op and polls at 5 % of a core, not 3 %.
// And each device type's compute ops get their spread from op to op (op_time_spread).
TEST(Calibrate, FitsEachDeviceTypeItsOwnCommunicationCpuAndOpSpread) {
  auto scenario = [](int micro_batch) {
    return scenario_on("cpu40-cpu20",
                       R"([{"name": "a", "gpu": "cpu-40", "gpus": 3},
                           {"name": "b", "gpu": "cpu-20", "gpus": 3}])",
                       micro_batch);
  };
  // A TP-2 stage and a one-rank stage on each machine: messages and all-reduces over shared
  // memory on both device types, messages over tcp from a cpu-40 to a cpu-20.
  auto plan = [](int micro_batch) {
    return pipeline_plan(Json::array({{{"devices", {0, 1}}, {"layers", {0, 3}}},
                                      {{"devices", {2}}, {"layers", {3, 4}}},
                                      {{"devices", {3, 4}}, {"layers", {4, 6}}},
                                      {{"devices", {5}}, {"layers", {6, 8}}}}),
                         micro_batch);
  };
  auto law = [](bool cpu20, bool collective, double bytes) {
    const double work = law_work(collective, bytes);
    return cpu20 ? 2 * work : work;
  };
  std::vector<MeasuredRun> runs;
  for (int mb : {1, 2}) {
    std::map<std::tuple<bool, int, int>, int> seen;  // (cpu-20, shape, step) -> ops so far
    MeasuredRun r = simulated_run(scenario(mb), plan(mb), truth());
    const auto model = compute_durations(r.program, r.scenario.cluster, truth());
    for (TraceOp& e : r.trace.ops) {
      const Op& op = r.program.ops[e.op];
      const bool cpu20 = op.device >= 3;
      if (op.kind == OpKind::kCompute) {
        // Compute ops' CPU: the model's work, 10 % above or below it in turn among the ops
        // of a shape in a step on a device type.
        const double share = cpu20 ? 0.2 : 0.4;
        const int k = seen[{cpu20, op.shape, e.step}]++;
        e.cpu_us = model[e.op] * share * (k % 2 == 0 ? 1.1 : 0.9) * 1e6;
        continue;
      }
      e.cpu_us = (law(cpu20, op.kind == OpKind::kCollective, op.bytes) +
                  (cpu20 ? 0.05 : 0.03) * (e.end_us - e.start_us) * 1e-6) *
                 1e6;
    }
    runs.push_back(std::move(r));
  }
  auto c = calibrate(runs, Profile());
  ASSERT_TRUE(c.ok()) << c.error().message;
  std::set<std::string> terms;
  for (const TermFit& t : c->terms) {
    if (t.term.rfind("comm cpu ", 0) == 0) terms.insert(t.term);
    if (t.term.rfind("comm cpu host cpu-", 0) == 0) {
      EXPECT_GT(t.r2, 0.999) << t.term;
    }
  }
  EXPECT_EQ(terms,
            (std::set<std::string>{"comm cpu host", "comm cpu host cpu-20", "comm cpu host cpu-40",
                                   "comm cpu tcp", "comm cpu tcp cpu-20", "comm cpu tcp cpu-40"}));
  auto again = Profile::from_json(c->profile.to_json(), "fitted.json");
  ASSERT_TRUE(again.ok()) << again.error().message;
  const TransportCurve& host = again->transports().at(Transport::kHost);
  for (bool cpu20 : {false, true}) {
    const CommCpuLaw& got = host.cpu_of(cpu20 ? "cpu-20" : "cpu-40");
    for (bool collective : {false, true}) {
      for (double bytes : {1e4, 1e6}) {
        EXPECT_NEAR(got.seconds(bytes, collective) / law(cpu20, collective, bytes), 1, 0.02)
            << cpu20 << collective << bytes;
      }
    }
    EXPECT_NEAR(got.poll_fraction, cpu20 ? 0.05 : 0.03, 0.002);
  }
  // The compute ops' spread from op to op, on both types.
  for (const char* type : {"cpu-20", "cpu-40"}) {
    EXPECT_NEAR(again->device(*testing::shipped_gpus().find(type)).op_time_spread, 0.1, 0.01)
        << type;
  }
  // Over tcp each end's messages: the sender a cpu-40, the receiver a cpu-20.
  const TransportCurve& tcp = again->transports().at(Transport::kTcp);
  EXPECT_NEAR(tcp.cpu_of("cpu-20").seconds(1e5, false) / law(true, false, 1e5), 1, 0.02);
  EXPECT_NEAR(tcp.cpu_of("cpu-40").seconds(1e5, false) / law(false, false, 1e5), 1, 0.02);
}

TEST(Calibrate, RefusesALinkThatCarriesCollectivesButNoMessage) {
  // TP-2 stages on machines 0 and 1: the host links carry only TP all-reduces.
  const Plan plan = pipeline_plan(Json::array({{{"devices", {0, 1}}, {"layers", {0, 4}}},
                                               {{"devices", {4, 5}}, {"layers", {4, 8}}}}),
                                  1);
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

// Rounds of one run are joined into one trace, each round's steps numbered on after the
// rounds before it: a step that would pass an int (2^31 - 2 after three steps) is bad input
// naming the trace, not a signed overflow.
TEST(JoinRounds, StepsNumberedPastAnIntAreBadInput) {
  auto round = [](const std::string& origin, std::vector<int> steps) {
    MeasuredRun r;
    r.origin = origin;
    r.plan_file = "plan.json";
    for (int s : steps) r.trace.ops.push_back(TraceOp{0, 0, 0, 1, s});
    return r;
  };
  auto ok = join_rounds({round("a", {0, 1, 2}), round("b", {0, 1, 2})});
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  std::set<int> steps;
  for (const TraceOp& e : ok->trace.ops) steps.insert(e.step);
  EXPECT_EQ(steps, (std::set<int>{0, 1, 2, 3, 4}));  // b's warm-up step left out
  auto bad = join_rounds({round("a", {0, 1, 2}), round("b", {0, 2147483646})});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(bad.error().message.find("b: step 2147483646, numbered on after the 3 steps of the "
                                     "rounds before it, is past 2147483646"),
            std::string::npos)
      << bad.error().message;
}

}  // namespace
}  // namespace hexi::validation
