// Simulator benchmarks (targets: 128 GPUs layer fidelity <= 2 s, 1 024 GPUs stage fidelity <= 1 s
// and <= 1 GiB, 10 000 GPUs <= 30 s; measured, never asserted):
//   128 GPUs, Llama-2 70B, layer fidelity          <= 2 s per simulated iteration
//   1 024 GPUs of four types, Llama-2 70B, stage   <= 10 s, <= 4 GiB
//   10 000 GPUs of four types, stage               report wall and memory (goal <= 120 s)
// Each simulation runs in a child process (sim/simulator.hpp); times are wall
// clock (UseRealTime), memory is the child's peak RSS. Counters: ops of the
// program, SimGrid activities and activities per second, the simulated iteration.
// Plans come from bench/plan_gen.hpp (per GPU type, pipelines of whole machines).

#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>

#include "bench/plan_gen.hpp"
#include "scenarios/scenario.hpp"
#include "scheduler/program/lower.hpp"
#include "sim/simulator.hpp"
#include "topologies/cluster_gen.hpp"

namespace hexi::bench {
namespace {

struct Workload {
  Cluster cluster;
  Model model;
  TrainingConfig training;
  Profile profile;
  Plan plan;
};

const GpuCatalog& gpus() {
  static GpuCatalog c = *GpuCatalog::load_shipped();
  return c;
}

const ModelCatalog& models() {
  static ModelCatalog m = *ModelCatalog::load_shipped();
  return m;
}

std::optional<Workload> shipped(const std::string& name) {
  auto sc = load_scenario(name, gpus(), models());
  if (!sc) {
    std::cerr << sc.error().message << "\n";
    return std::nullopt;
  }
  auto plan = generate_plan(sc->cluster, sc->model, sc->training, sc->profile);
  if (!plan) {
    std::cerr << plan.error().message << "\n";
    return std::nullopt;
  }
  return Workload{std::move(sc->cluster), sc->model, sc->training, sc->profile, std::move(*plan)};
}

// 10 000 GPUs: 1 250 machines of 8 A100 / RTX 4090 / RTX 3090 / A6000, 16 per leaf.
std::optional<Workload> ten_thousand() {
  auto mix = parse_mix("A100:313x8,RTX4090:312x8,RTX3090:312x8,A6000:313x8", gpus());
  FabricOptions fabric;
  fabric.name = "mix-10000-4types";
  auto cluster = Cluster::from_json(generate_cluster_json(*mix, fabric), "<mix-10000>", gpus());
  if (!cluster) return std::nullopt;
  TrainingConfig t;
  t.global_batch = 4096;
  t.micro_batch = 1;
  t.seq_len = 4096;
  const Model& m = *models().find("llama2-70b");
  auto plan = generate_plan(*cluster, m, t, Profile{});
  if (!plan) return std::nullopt;
  return Workload{std::move(*cluster), m, t, Profile{}, std::move(*plan)};
}

// One line per distinct pipeline shape, on stderr (what the generator chose); with
// HEXISIM_BENCH_PLANS=DIR the plan is also written to DIR/<name>.json, to rerun it
// with `hexisim simulate <scenario> --plan DIR/<name>.json`.
void describe(const Workload& w, const std::string& name) {
  if (const char* dir = std::getenv("HEXISIM_BENCH_PLANS")) {
    std::ofstream(std::string(dir) + "/" + name + ".json") << plan_text(w.plan);
  }
  std::map<std::string, int> shapes;
  for (const auto& p : w.plan.pipelines) {
    const Stage& s = p.stages.front();
    shapes[w.cluster.gpu(s.devices.front()).name + " TP " + std::to_string(s.tp()) + " x PP " +
           std::to_string(p.stages.size()) + " batch " + std::to_string(p.batch)]++;
  }
  std::cerr << name << ": " << w.plan.pipelines.size() << " pipelines on " << w.plan.num_devices()
            << " of " << w.cluster.num_devices() << " GPUs\n";
  for (const auto& [k, n] : shapes) std::cerr << "  " << n << " x " << k << "\n";
}

double self_peak_rss_gib() {
  struct rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0 / kGiB;
}

void run(benchmark::State& state, const std::optional<Workload>& w, Granularity g) {
  if (!w) {
    state.SkipWithError("workload not available");
    return;
  }
  LowerOptions lo;
  lo.granularity = g;
  const auto t0 = std::chrono::steady_clock::now();
  auto program = lower_plan(w->plan, w->cluster, w->model, w->training, lo, "<generated plan>");
  const double lower_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!program) {
    state.SkipWithError(program.error().message.c_str());
    return;
  }
  SimOptions so;
  so.trace = false;
  SimReport last;
  for (auto _ : state) {
    auto out = simulate(*program, w->cluster, w->model, w->training, w->profile, so);
    if (!out) {
      state.SkipWithError(out.error().message.c_str());
      return;
    }
    last = out->report;
  }
  state.counters["gpus"] = w->cluster.num_devices();
  state.counters["pipelines"] = static_cast<double>(w->plan.pipelines.size());
  state.counters["ops"] = program->num_ops();
  state.counters["activities"] = static_cast<double>(last.activities);
  state.counters["activities_per_s"] = last.activities / last.wall_time_s;
  state.counters["sim_wall_s"] = last.wall_time_s;
  state.counters["platform_s"] = last.platform_s;
  state.counters["sim_peak_rss_GiB"] = last.peak_rss_bytes / kGiB;
  state.counters["lower_s"] = lower_s;
  state.counters["parent_peak_rss_GiB"] = self_peak_rss_gib();
  state.counters["iteration_s"] = last.iteration_time_s;
  state.counters["mfu"] = last.mfu;
}

void BM_Mix128Llama70bLayer(benchmark::State& state) {
  static auto w = shipped("mix-128-llama2-70b");
  if (w) describe(*w, "mix-128-llama2-70b");
  run(state, w, Granularity::kLayer);
}

void BM_Mix1024Llama70bStage(benchmark::State& state) {
  static auto w = shipped("mix-1024-llama2-70b");
  if (w) describe(*w, "mix-1024-llama2-70b");
  run(state, w, Granularity::kStage);
}

void BM_Mix10000Llama70bStage(benchmark::State& state) {
  static auto w = ten_thousand();
  if (w) describe(*w, "mix-10000-llama2-70b");
  run(state, w, Granularity::kStage);
}

BENCHMARK(BM_Mix128Llama70bLayer)->Unit(benchmark::kSecond)->UseRealTime()->Iterations(2);
BENCHMARK(BM_Mix1024Llama70bStage)->Unit(benchmark::kSecond)->UseRealTime()->Iterations(1);
BENCHMARK(BM_Mix10000Llama70bStage)->Unit(benchmark::kSecond)->UseRealTime()->Iterations(1);

}  // namespace
}  // namespace hexi::bench

BENCHMARK_MAIN();
