#include "scheduler/hexiscale/hexiscale.hpp"

#include <algorithm>
#include <cmath>

#include "scheduler/hexiscale/pipeline.hpp"
#include "scheduler/hexiscale/search.hpp"

namespace hexi {
inline namespace hexiscale {

Result<HexiScaleOptions> read_hexiscale_options(const Scenario& sc) {
  return load_with([&] {
    HexiScaleOptions o;
    if (sc.scheduler != "hexiscale") return o;
    JsonNode node = sc.scheduler_options_node();
    node.allow_only({"tau", "seeds", "refine", "device_level_max", "device_refine_max", "threads",
                     "recompute"});
    o.tau = static_cast<int>(node.integer_or("tau", 1, 16, o.tau));
    o.seeds = static_cast<int>(node.integer_or("seeds", 1, 64, o.seeds));
    o.refine = node.boolean_or("refine", o.refine);
    o.device_level_max =
        static_cast<int>(node.integer_or("device_level_max", 1, 1 << 20, o.device_level_max));
    o.device_refine_max =
        static_cast<int>(node.integer_or("device_refine_max", 0, 1 << 20, o.device_refine_max));
    o.threads = static_cast<int>(node.integer_or("threads", 1, 256, o.threads));
    const std::string recompute = node.str_or("recompute", "per-stage");
    if (recompute != "per-stage" && recompute != "scenario")
      node.at("recompute").fail("\"per-stage\" or \"scenario\"");
    o.per_stage_recompute = recompute == "per-stage";
    return o;
  });
}

int max_pipelines_by_memory(const CostModel& cm, std::optional<Recompute> recompute) {
  const Model& m = cm.model();
  const TrainingConfig& t = cm.training();
  const Cluster& c = cm.cluster();
  // One replica: e-byte weights and gradients of every parameter, plus one
  // micro-batch of activations; the (16 - 2e)-byte optimizer state is shared by
  // all replicas under ZeRO-1 (kept whole per replica without it).
  MemoryBreakdown mem = device_memory(m, t, whole_model_shape(m, t.micro_batch, recompute));
  const double replica = mem.weights + mem.gradients + mem.activations + mem.logits;
  double usable = 0;
  for (int d = 0; d < c.num_devices(); ++d) {
    usable += std::max(0.0, c.device_memory_bytes(d) - t.reserve_gib * kGiB);
  }
  const double shared = t.zero_stage >= 1 ? mem.optimizer : 0;
  const double each = replica + (t.zero_stage >= 1 ? 0 : mem.optimizer);
  const double room = (usable - shared) / each;
  const int micro = t.global_batch / t.micro_batch;
  return std::clamp(static_cast<int>(std::floor(room)), 1, std::min(micro, c.num_devices()));
}

Error no_feasible_plan(const Scenario& sc, const std::string& scheduler) {
  const Cluster& c = sc.cluster;
  double biggest = 0;
  for (int d = 0; d < c.num_devices(); ++d) biggest = std::max(biggest, c.device_memory_bytes(d));
  StageShape one;
  one.layer_end = 1;
  one.micro_batch = sc.training.micro_batch;
  const double layer = device_memory(sc.model, sc.training, one).total();
  return bad_input(
      scheduler + ": no plan of " + sc.model.name + " fits in the memory of cluster \"" + c.name() +
      "\" (" + std::to_string(static_cast<long>(c.memory_bytes() / kGiB)) +
      " GiB in all, largest GPU " + std::to_string(static_cast<long>(biggest / kGiB)) +
      " GiB; one layer with its optimizer state, one micro-batch and the reserve needs " +
      std::to_string(static_cast<long>(std::ceil(layer / kGiB))) +
      " GiB on a single GPU): use more or larger GPUs, full recompute or ZeRO-1");
}

std::optional<SpecResult> hexiscale_search(SpecEvaluator& ev, const HexiScaleOptions& options,
                                           SearchClock& clock, std::uint64_t seed,
                                           std::string* mode, std::vector<SpecResult>* runners_up,
                                           int keep) {
  HexiScaleSearch search(ev, options, clock, seed);
  if (mode) *mode = search.mode();
  if (runners_up) search.keep_runners_up(keep);
  auto best = search.run();
  if (runners_up) *runners_up = search.runners_up();
  return best;
}

Result<SearchResult> run_hexiscale(const Scenario& sc, const SearchOptions& options) {
  auto hx = read_hexiscale_options(sc);
  if (!hx) return hx.error();
  CostModel cm(sc.cluster, sc.model, sc.training, sc.profile);
  SpecEvaluator ev(cm, hx->per_stage_recompute);
  SearchClock clock("hexiscale", options);
  SearchResult out;
  std::vector<SpecResult> runners_up;
  auto best =
      hexiscale_search(ev, *hx, clock, options.seed, &out.mode, &runners_up, options.runners_up);
  if (!best) return no_feasible_plan(sc, "hexiscale");
  out.plan = std::move(best->scored.plan);
  out.plan.comment = "hexiscale: " + describe(best->spec, sc.cluster);
  out.estimate = std::move(best->scored.estimate);
  for (SpecResult& r : runners_up) {
    r.scored.plan.comment = "hexiscale: " + describe(r.spec, sc.cluster);
    out.runners_up.push_back({std::move(r.scored.plan), std::move(r.scored.estimate)});
  }
  clock.finish(out);
  return out;
}

}  // namespace hexiscale
}  // namespace hexi
