#include "cli/sweep_point.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>

#include "scheduler/program/lower.hpp"
#include "scheduler/scheduler.hpp"
#include "sim/simulator.hpp"
#include "topologies/text.hpp"

namespace hexi::cli {
namespace {

// What a point produced: the search (plan + closed-form estimate) and, at layer or
// stage fidelity, the simulation of that plan.
struct Outcome {
  const Scenario& scenario;
  const SearchResult& search;
  std::optional<SimReport> sim;
};

struct MetricDef {
  SweepMetric info;
  Json (*get)(const Outcome&);  // null Json: not measured at this point's fidelity
};

double peak_memory_gib(const Estimate& e) {
  double peak = 0;
  for (const auto& d : e.devices) peak = std::max(peak, d.memory.total() / kGiB);
  return peak;
}

int max_stages(const Plan& plan) {
  std::size_t n = 0;
  for (const auto& p : plan.pipelines) n = std::max(n, p.stages.size());
  return static_cast<int>(n);
}

int max_tp(const Plan& plan) {
  int t = 0;
  for (const auto& p : plan.pipelines)
    for (const auto& s : p.stages) t = std::max(t, s.tp());
  return t;
}

// Every metric, in CSV column order: closed form, plan, cluster, simulation.
const std::vector<MetricDef>& metric_defs() {
  static const std::vector<MetricDef> defs = {
      {{"tokens_per_s", "tokens/s, closed form"},
       [](const Outcome& o) { return Json(o.search.estimate.tokens_per_s); }},
      {{"iteration_time_s", "iteration time (s), closed form"},
       [](const Outcome& o) { return Json(o.search.estimate.iteration_time_s); }},
      {{"mfu", "model FLOPs utilisation of the whole cluster's peak, closed form"},
       [](const Outcome& o) { return Json(o.search.estimate.mfu); }},
      {{"hfu", "hardware FLOPs utilisation (recompute included), closed form"},
       [](const Outcome& o) { return Json(o.search.estimate.figures.hfu); }},
      {{"achieved_pflops", "model PFLOP/s, closed form"},
       [](const Outcome& o) { return Json(o.search.estimate.achieved_pflops); }},
      {{"model_tflops_per_gpu", "model TFLOP/s per GPU used, closed form"},
       [](const Outcome& o) { return Json(o.search.estimate.figures.model_tflops_per_gpu); }},
      {{"megatron_tflops_per_gpu", "Megatron-LM formula TFLOP/s per GPU used, closed form"},
       [](const Outcome& o) { return Json(o.search.estimate.figures.megatron_tflops_per_gpu); }},
      {{"pipeline_s", "slowest pipeline (s), closed form"},
       [](const Outcome& o) { return Json(o.search.estimate.pipeline_s); }},
      {{"dp_sync_s", "DP sync after the slowest pipeline (s), closed form"},
       [](const Outcome& o) { return Json(o.search.estimate.dp_sync_s); }},
      {{"optimizer_s", "optimizer step (s), closed form"},
       [](const Outcome& o) { return Json(o.search.estimate.optimizer_s); }},
      {{"feasible", "every device fits in memory"},
       [](const Outcome& o) { return Json(o.search.estimate.feasible); }},
      {{"peak_memory_gib", "largest device memory (GiB), closed form"},
       [](const Outcome& o) { return Json(peak_memory_gib(o.search.estimate)); }},
      {{"pipelines", "pipelines (DP degree) of the plan"},
       [](const Outcome& o) { return Json(o.search.plan.pipelines.size()); }},
      {{"max_stages", "most stages in one pipeline"},
       [](const Outcome& o) { return Json(max_stages(o.search.plan)); }},
      {{"max_tp", "largest TP degree of a stage"},
       [](const Outcome& o) { return Json(max_tp(o.search.plan)); }},
      {{"gpus_used", "GPUs the plan uses"},
       [](const Outcome& o) { return Json(o.search.plan.num_devices()); }},
      {{"candidates", "plans the search evaluated"},
       [](const Outcome& o) { return Json(o.search.candidates); }},
      {{"num_gpus", "GPUs in the cluster"},
       [](const Outcome& o) { return Json(o.scenario.cluster.num_devices()); }},
      {{"peak_pflops", "the cluster's summed peak PFLOP/s"},
       [](const Outcome& o) { return Json(o.scenario.cluster.peak_flops() / 1e15); }},
      {{"sim_tokens_per_s", "tokens/s, simulated (layer or stage fidelity)"},
       [](const Outcome& o) { return o.sim ? Json(o.sim->tokens_per_s) : Json(); }},
      {{"sim_iteration_time_s", "iteration time (s), simulated"},
       [](const Outcome& o) { return o.sim ? Json(o.sim->iteration_time_s) : Json(); }},
      {{"sim_mfu", "MFU, simulated"},
       [](const Outcome& o) { return o.sim ? Json(o.sim->mfu) : Json(); }},
      {{"sim_hfu", "HFU, simulated"},
       [](const Outcome& o) { return o.sim ? Json(o.sim->figures.hfu) : Json(); }},
      {{"sim_vs_estimate", "simulated / closed-form iteration time"},
       [](const Outcome& o) {
         return o.sim ? Json(o.sim->iteration_time_s / o.search.estimate.iteration_time_s) : Json();
       }},
      {{"sim_feasible", "every device fits in memory, simulated"},
       [](const Outcome& o) { return o.sim ? Json(o.sim->feasible) : Json(); }},
      {{"sim_activities", "SimGrid activities of the simulation"},
       [](const Outcome& o) { return o.sim ? Json(o.sim->activities) : Json(); }},
  };
  return defs;
}

// The point as a scenario: the sweep's base training config with the point's sequence
// length and global batch, its cluster, model, scheduler and seed.
Result<Scenario> point_scenario(const Sweep& s, const SweepPoint& p) {
  Scenario sc;
  sc.name = s.name + "#" + std::to_string(p.index);
  sc.file = s.file;
  sc.inputs = {s.file};
  sc.cluster_ref = s.clusters[p.cluster].label;
  sc.cluster = s.clusters[p.cluster].cluster;
  sc.model = s.models[p.model].model;
  sc.training = s.training_of(p);
  if (sc.training.seq_len > sc.model.max_seq) {
    return bad_input("seq_len " + std::to_string(sc.training.seq_len) +
                     " is longer than the model's max_seq " + std::to_string(sc.model.max_seq));
  }
  const SweepScheduler& sched = s.schedulers[p.scheduler];
  sc.scheduler = sched.name;
  sc.scheduler_options = sched.options;
  sc.scheduler_options_origin = s.file.string() + " (scheduler " + sched.label + ")";
  sc.seed = p.seed;
  return sc;
}

struct Timing {
  double search_s = 0;
  double sim_s = 0;
};

Result<SimReport> simulate_plan(const Scenario& sc, const SearchResult& found, Fidelity f) {
  LowerOptions lo;
  lo.scenario = sc.name;
  lo.granularity = f == Fidelity::kStage ? Granularity::kStage : Granularity::kLayer;
  auto program =
      lower_plan(found.plan, sc.cluster, sc.model, sc.training, lo, found.scheduler + " plan");
  if (!program) return program.error();
  SimOptions so;
  so.scenario = sc.name;
  so.trace = false;
  auto out = simulate(*program, sc.cluster, sc.model, sc.training, sc.profile, so);
  if (!out) return out.error();
  return std::move(out->report);
}

Result<Json> compute(const SweepContext& ctx, const SweepPoint& p, Timing& timing,
                     std::string& plan_digest) {
  auto sc = point_scenario(ctx.sweep, p);
  if (!sc) return sc.error();
  SearchOptions so;
  so.seed = p.seed;
  so.time_budget_s = ctx.sweep.time_budget_s;
  auto found = run_scheduler(sc->scheduler, *sc, so);
  if (!found) return found.error();
  timing.search_s = found->search_time_s;
  if (auto st = validate_plan(found->plan, sc->cluster, sc->model, sc->training, sc->scheduler);
      !st) {
    return failure("internal error: " + st.error().message);
  }
  plan_digest = fnv1a64_hex(plan_text(found->plan));
  Outcome o{*sc, *found, std::nullopt};
  if (p.fidelity != Fidelity::kClosedForm) {
    auto sim = simulate_plan(*sc, *found, p.fidelity);
    if (!sim) return sim.error();
    timing.sim_s = sim->wall_time_s;
    o.sim = std::move(*sim);
  }
  Json metrics = Json::object();
  for (const std::string& name : ctx.sweep.metrics) {
    for (const MetricDef& d : metric_defs()) {
      if (name != d.info.name) continue;
      if (Json v = d.get(o); !v.is_null()) metrics[name] = std::move(v);
    }
  }
  return metrics;
}

Json row_head(const SweepContext& ctx, const SweepPoint& p, double wall_s) {
  return {{"version", 1},
          {"index", p.index},
          {"key", p.key},
          {"point", ctx.sweep.point_json(p)},
          {"digests", point_digests(ctx, p)},
          {"wall_time_s", wall_s}};
}

Json error_json(const Error& e) {
  return {{"kind", e.kind == ErrorKind::kBadInput ? "bad_input" : "failure"},
          {"message", e.message}};
}

}  // namespace

const std::vector<SweepMetric>& sweep_metrics() {
  static const std::vector<SweepMetric> list = [] {
    std::vector<SweepMetric> out;
    for (const auto& d : metric_defs()) out.push_back(d.info);
    return out;
  }();
  return list;
}

SweepVocabulary sweep_vocabulary() {
  SweepVocabulary v;
  for (const auto& s : schedulers()) v.schedulers.push_back(s.name);
  for (const auto& m : sweep_metrics()) v.metrics.emplace_back(m.name);
  return v;
}

Json point_digests(const SweepContext& ctx, const SweepPoint& p) {
  const Sweep& s = ctx.sweep;
  const SweepScheduler& sched = s.schedulers[p.scheduler];
  return {{"cluster", s.clusters[p.cluster].digest},
          {"model", input_digest(to_json(s.models[p.model].model))},
          {"training", input_digest(to_json(s.training_of(p)))},
          {"scheduler", fnv1a64_hex(sched.name + dump_json(sched.options))},
          {"gpus", ctx.gpus_digest}};
}

std::string run_point(const SweepContext& ctx, const SweepPoint& p) {
  const auto start = std::chrono::steady_clock::now();
  Timing timing;
  std::string plan_digest;
  Result<Json> metrics = failure("");
  try {
    metrics = compute(ctx, p, timing, plan_digest);
  } catch (const std::exception& e) {
    metrics = failure(std::string("internal error (a bug; please report it): ") + e.what());
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!metrics) return error_row(ctx, p, metrics.error(), wall);
  Json row = row_head(ctx, p, wall);
  row["search_time_s"] = timing.search_s;
  if (p.fidelity != Fidelity::kClosedForm) row["sim_wall_time_s"] = timing.sim_s;
  row["plan_digest"] = plan_digest;
  row["metrics"] = std::move(*metrics);
  return dump_json(row);
}

std::string error_row(const SweepContext& ctx, const SweepPoint& p, const Error& error,
                      double wall_s) {
  Json row = row_head(ctx, p, wall_s);
  row["error"] = error_json(error);
  return dump_json(row);
}

}  // namespace hexi::cli
