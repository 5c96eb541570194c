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
                     "recompute", "interleave"});
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
    o.interleave = static_cast<int>(node.integer_or("interleave", 1, 8, o.interleave));
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

Pipeline interleaved(const Pipeline& plain, int v) {
  Pipeline out = plain;
  out.stages.clear();
  int cursor = plain.stages.empty() ? 0 : plain.stages.front().layer_begin;
  for (int c = 0; c < v; ++c) {
    for (const Stage& s : plain.stages) {
      Stage chunk = s;
      const int n = s.layers() / v + (c < s.layers() % v ? 1 : 0);
      chunk.layer_begin = cursor;
      chunk.layer_end = cursor + n;
      cursor += n;
      out.stages.push_back(std::move(chunk));
    }
  }
  return out;
}

std::vector<int> interleave_pipelines(const CostModel& cm, ScoredPlan& best, int max_chunks) {
  std::vector<int> chosen(best.plan.pipelines.size(), 1);
  if (cm.training().schedule != PipelineSchedule::k1F1B) return chosen;
  for (std::size_t pi = 0; pi < best.plan.pipelines.size(); ++pi) {
    const Pipeline plain = best.plan.pipelines[pi];
    const int p = static_cast<int>(plain.stages.size());
    if (p < 2 || plain.chunks() > 1 || plain.has_mesh() || plain.micro_batches() % p != 0) continue;
    int fewest = plain.stages.front().layers();
    for (const Stage& s : plain.stages) fewest = std::min(fewest, s.layers());
    for (int v = 2; v <= std::min(max_chunks, fewest); ++v) {
      Plan trial = best.plan;
      trial.pipelines[pi] = interleaved(plain, v);
      Estimate e = cm.estimate(trial);
      if (e.feasible && e.iteration_time_s < best.estimate.iteration_time_s) {
        best.plan = std::move(trial);
        best.estimate = std::move(e);
        chosen[pi] = v;
      }
    }
  }
  return chosen;
}

std::optional<double> expected_search_s(int gpus, const HexiScaleOptions& options) {
  if (gpus <= options.device_refine_max) return std::nullopt;
  const double two_threads = kExpectedAt1024 * std::pow(gpus / 1024.0, kExpectedGrowth);
  return options.threads == 1 ? kOneThread * two_threads : two_threads;
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

namespace {

// Estimates the layer polish may spend on each of its starts.
constexpr long kPolishBudget = 400;
// The polish runs where the best plan's pipelines take this much longer, or shorter, under the
// full estimate than their curves say.
constexpr double kPolishGap = 0.05;

// Phase 2 splits layers, and ranks a pipeline's orders, by the pipeline curves, which charge a
// stage each of its boundaries' sends whole (where one NIC carries a machine's boundaries both
// ways, at every boundary's rate at once); the estimate's timeline overlaps much of them with
// compute. So the curves may be near the estimate on the split they chose and far off on others:
// they spare the stages next to a slow boundary layers the timeline would have overlapped. The
// best plan and its pipelines reversed (fast GPUs last, where fewer micro-batches are in flight,
// may hold more layers) are each also split by compute alone and with the sends weighted 1/4,
// 1/2 and 3/4 (SpecEvaluator::compute_balanced), scored under the full estimate; so is the best
// plan on every GPU where the best leaves some idle (its curves may have misplaced its layers).
// Where the curves and the estimate disagree on the best plan, or such a split is faster, the
// polish (SpecEvaluator::polish_layers) runs from the best plan, its reverse, the compute-alone
// split of each and the fastest weighted one where it differs, and last from the search's fastest
// candidate split by compute (HexiScaleSearch::best_balanced), where there is one. The fastest
// replaces the best (the first of equals, in that order).
constexpr double kSendWeights[] = {0.25, 0.5, 0.75};

// `start` split by compute alone, and its fastest split with weighted sends; either nullopt
// where it does not fit or changes nothing, the second also where it is the first.
std::pair<std::optional<ScoredPlan>, std::optional<ScoredPlan>> resplit(const SpecEvaluator& ev,
                                                                        const ScoredPlan& start) {
  std::optional<ScoredPlan> alone = ev.compute_balanced(start, 0), weighted;
  for (const double w : kSendWeights) {
    auto split = ev.compute_balanced(start, w);
    if (split && (!weighted || split->objective() < weighted->objective()))
      weighted = std::move(split);
  }
  if (alone && weighted && plan_text(alone->plan) == plan_text(weighted->plan)) weighted.reset();
  return {std::move(alone), std::move(weighted)};
}

void polish(SpecEvaluator& ev, SpecResult& best, std::optional<SpecResult> balanced,
            const std::optional<SpecResult>& all_gpus) {
  const double curves = ev.pipelines_s(best.spec), estimated = best.scored.estimate.pipeline_s;
  const bool disagree = std::abs(curves - estimated) > kPolishGap * estimated;
  std::vector<SpecResult> starts{best}, alone, weighted;
  auto add_splits = [&](const PlanSpec& spec, const ScoredPlan& start) {
    auto [a, w] = resplit(ev, start);
    if (a) alone.push_back(SpecResult{spec, std::move(*a)});
    if (w) weighted.push_back(SpecResult{spec, std::move(*w)});
  };
  add_splits(best.spec, best.scored);
  PlanSpec reversed = best.spec;
  for (auto& p : reversed.pipelines) std::reverse(p.segments.begin(), p.segments.end());
  if (auto r = ev.evaluate(reversed, "hexiscale"); r && r->estimate.feasible) {
    add_splits(reversed, *r);
    starts.push_back(SpecResult{std::move(reversed), std::move(*r)});
  }
  if (all_gpus) {
    add_splits(all_gpus->spec, all_gpus->scored);
    starts.push_back(*all_gpus);
  }
  if (balanced) weighted.push_back(std::move(*balanced));
  bool faster = false;
  for (std::vector<SpecResult>* group : {&alone, &weighted}) {
    for (SpecResult& split : *group) {
      faster = faster || split.scored.objective() < best.scored.objective();
      starts.push_back(std::move(split));
    }
  }
  if (!disagree && !faster) return;
  for (SpecResult& start : starts) {
    long budget = kPolishBudget;
    if (auto polished = ev.polish_layers(start.scored, budget)) start.scored = std::move(*polished);
    if (start.scored.objective() < best.scored.objective()) best = std::move(start);
  }
}

}  // namespace

std::optional<SpecResult> hexiscale_search(SpecEvaluator& ev, const HexiScaleOptions& options,
                                           SearchClock& clock, std::uint64_t seed,
                                           std::string* mode, std::vector<SpecResult>* runners_up,
                                           int keep, std::optional<SpecResult>* all_gpus,
                                           std::optional<SpecResult>* balanced) {
  HexiScaleSearch search(ev, options, clock, seed);
  if (mode) *mode = search.mode();
  if (runners_up) search.keep_runners_up(keep);
  auto best = search.run();
  if (runners_up) *runners_up = search.runners_up();
  if (all_gpus && best && search.best_all_gpus() &&
      best->scored.plan.num_devices() < ev.cost_model().cluster().num_devices())
    *all_gpus = search.best_all_gpus();
  if (balanced) *balanced = search.best_balanced();
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
  std::optional<SpecResult> all_gpus, balanced;
  auto best = hexiscale_search(ev, *hx, clock, options.seed, &out.mode, &runners_up,
                               options.runners_up, &all_gpus, &balanced);
  if (!best) return no_feasible_plan(sc, "hexiscale");
  // After the search, so that the search (the exact search's incumbent) stays in its space;
  // not once a time budget is spent.
  if (!clock.out_of_time()) {
    polish(ev, *best, std::move(balanced), all_gpus);
    if (best->scored.plan.num_devices() == sc.cluster.num_devices()) all_gpus.reset();
  }
  std::string interleaving;
  if (hx->interleave > 1) {
    const std::vector<int> v = interleave_pipelines(cm, best->scored, hx->interleave);
    for (std::size_t pi = 0; pi < v.size(); ++pi) {
      if (v[pi] > 1)
        interleaving +=
            "; pipeline " + std::to_string(pi) + " interleaved, v=" + std::to_string(v[pi]);
    }
  }
  out.plan = std::move(best->scored.plan);
  out.plan.comment = "hexiscale: " + describe(best->spec, sc.cluster) + interleaving;
  out.estimate = std::move(best->scored.estimate);
  if (all_gpus) {
    all_gpus->scored.plan.comment = "hexiscale: " + describe(all_gpus->spec, sc.cluster);
    out.all_gpus =
        EstimatedPlan{std::move(all_gpus->scored.plan), std::move(all_gpus->scored.estimate)};
  }
  for (SpecResult& r : runners_up) {
    r.scored.plan.comment = "hexiscale: " + describe(r.spec, sc.cluster);
    out.runners_up.push_back({std::move(r.scored.plan), std::move(r.scored.estimate)});
  }
  clock.finish(out);
  return out;
}

}  // namespace hexiscale
}  // namespace hexi
