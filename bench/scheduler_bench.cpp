// Scheduler search time and peak memory at 32, 128, 512, 1 024 and 4 096 GPUs of
// four GPU types (equal mixes of 8-GPU A100-80GB / RTX 4090 / RTX 3090 / A6000
// machines from cluster_gen, 16 machines per leaf, 200 Gbit/s NICs), Llama-2 70B
// (13B at 32 GPUs, where 70B fits in no plan with selective recompute), global batch
// 4 x GPUs (2 x GPUs above 128), sequence 4096.
// Targets: the HexiScale search within 3 s at 128 GPUs and 20 s at 1 024 GPUs, on one core
// (hexiscale_1thread: {"threads": 1}); `hexiscale` runs the default thread count.
// `flashflex` is the FlashFlex reference implementation's algorithm (scheduler/baselines/
// flashflex.cpp), timed as we run it; `feasible` = 0 where its chosen plan does not fit
// hexisim's memory model.
//
// Each measurement runs in a forked child so that its peak resident memory
// (getrusage ru_maxrss of that child alone) belongs to that search only; the
// reported time is the search's own (SearchResult::search_time_s).
//   build/bench/scheduler_bench                      all sizes, hexiscale + baselines
//   build/bench/scheduler_bench --benchmark_filter=hexiscale/1024
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>

#include "bench/in_child.hpp"
#include "scenarios/scenario.hpp"
#include "scheduler/scheduler.hpp"
#include "topologies/cluster_gen.hpp"

namespace hexi {
namespace {

Result<Scenario> mix_scenario(int gpus) {
  auto catalog = GpuCatalog::load_shipped();
  auto models = ModelCatalog::load_shipped();
  if (!catalog || !models) return failure("cannot load the shipped catalogs");
  const int machines = gpus / 32;  // per type, 8 GPUs each
  std::vector<MixEntry> mix = {{"A100-SXM-80GB", machines, 8},
                               {"RTX4090", machines, 8},
                               {"RTX3090", machines, 8},
                               {"A6000", machines, 8}};
  FabricOptions fabric;
  fabric.name = "bench-mix-" + std::to_string(gpus);
  const int batch = gpus <= 128 ? 4 * gpus : 2 * gpus;
  Json sc = {{"version", 1},
             {"name", "bench-" + std::to_string(gpus)},
             {"cluster", generate_cluster_json(mix, fabric)},
             {"model", gpus < 128 ? "llama2-13b" : "llama2-70b"},
             {"training", {{"global_batch", batch}, {"micro_batch", 1}, {"seq_len", 4096}}}};
  return scenario_from_json(sc, "bench.json", *catalog, *models);
}

struct ChildReport {
  double search_s = 0;
  double tokens_per_s = 0;
  long candidates = 0;
  int ok = 0;
  int feasible = 0;  // every device of the chosen plan fits in memory
};

void BM_Search(benchmark::State& state, const std::string& scheduler, const Json& options) {
  const int gpus = static_cast<int>(state.range(0));
  for (auto _ : state) {
    const auto run = bench::run_in_child([&] {
      ChildReport rep;
      auto sc = mix_scenario(gpus);
      if (sc && !options.empty()) {
        sc->scheduler = scheduler;
        sc->scheduler_options = options;
      }
      if (sc) {
        auto r = run_pipeline_scheduler(scheduler, *sc, {});
        if (r)
          rep = {r->search_time_s, r->estimate.tokens_per_s, r->candidates, 1,
                 r->estimate.feasible ? 1 : 0};
      }
      return rep;
    });
    if (!run || !run->value.ok) {
      state.SkipWithError("search failed");
      return;
    }
    const ChildReport& rep = run->value;
    state.SetIterationTime(rep.search_s);
    state.counters["peak_MiB"] = run->peak_MiB;
    state.counters["tokens_per_s"] = rep.tokens_per_s;
    state.counters["candidates"] = static_cast<double>(rep.candidates);
    state.counters["gpus"] = gpus;
    state.counters["feasible"] = rep.feasible;
  }
}

void sizes(benchmark::internal::Benchmark* b) {
  for (int g : {32, 128, 512, 1024, 4096}) b->Arg(g);
  b->UseManualTime()->Iterations(1)->Unit(benchmark::kSecond);
}

BENCHMARK_CAPTURE(BM_Search, hexiscale, std::string("hexiscale"), Json())->Apply(sizes);
BENCHMARK_CAPTURE(BM_Search, hexiscale_1thread, std::string("hexiscale"), Json{{"threads", 1}})
    ->Apply(sizes);
BENCHMARK_CAPTURE(BM_Search, uniform, std::string("uniform"), Json())->Apply(sizes);
BENCHMARK_CAPTURE(BM_Search, metis_like, std::string("metis-like"), Json())->Apply(sizes);
BENCHMARK_CAPTURE(BM_Search, amp_like, std::string("amp-like"), Json())->Apply(sizes);
BENCHMARK_CAPTURE(BM_Search, flashflex, std::string("flashflex"), Json())->Apply(sizes);

}  // namespace
}  // namespace hexi

BENCHMARK_MAIN();
