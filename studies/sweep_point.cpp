#include "studies/sweep_point.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>

#include "scheduler/program/lower.hpp"
#include "scheduler/program/lower_sequence.hpp"
#include "scheduler/scheduler.hpp"
#include "sim/simulator.hpp"
#include "studies/advise_costs.hpp"
#include "studies/planning.hpp"
#include "topologies/text.hpp"

namespace hexi {
inline namespace studies {
namespace {

// What the whole cluster costs under a price book, machine by machine as `advise` prices
// them (PriceBook: capex, $/h bought or rented, watts at the wall). A price missing for some
// GPU type leaves that figure out.
struct ClusterCost {
  std::optional<double> capex_usd, usd_per_hour, cloud_usd_per_hour;
  double watts = 0;
};

Result<ClusterCost> cluster_cost(const Cluster& c, const PriceBook& book) {
  ClusterCost out;
  double capex = 0, owned = 0, cloud = 0;
  bool bought = true, rented = true;
  for (const Machine& m : c.machines()) {
    const std::string& gpu = c.gpu_types()[m.gpu_type].name;
    const GpuPrice* price = book.find(gpu);
    if (price == nullptr) {
      return bad_input("GPU type " + gpu + " (machine " + m.name + ") is not in price book \"" +
                       book.name + "\"");
    }
    out.watts += book.machine_watts(*price, m.num_gpus);
    if (price->purchase_usd) {
      capex += book.machine_usd(*price, m.num_gpus);
      owned += book.machine_owned_usd_per_hour(*price, m.num_gpus);
    } else {
      bought = false;
    }
    if (price->cloud_usd_per_hour) {
      cloud += book.machine_rent_usd_per_hour(*price, m.num_gpus);
    } else {
      rented = false;
    }
  }
  if (bought) {
    out.capex_usd = capex;
    out.usd_per_hour = owned;
  }
  if (rented) out.cloud_usd_per_hour = cloud;
  return out;
}

// What a point produced: a pipeline scheduler's search (plan + closed-form estimate) or a
// sequence scheduler's layout (closed form), and, at layer or stage fidelity, the
// simulation of that plan or layout.
struct Outcome {
  const Scenario& scenario;
  const SearchResult* search = nullptr;   // pipeline schedulers
  const HexiSeqResult* layout = nullptr;  // sequence schedulers
  std::optional<SimReport> sim;
  std::optional<ClusterCost> cost;  // with a "prices" axis

  double iteration_s() const {
    return search ? search->estimate.iteration_time_s : layout->time.iteration_s;
  }
  int gpus_used() const {
    if (search) return search->plan.num_devices();
    return layout->layout.num_devices();
  }
  double model_flops_per_s() const {
    return model_flops(scenario.model, scenario.training) / iteration_s();
  }
  // advise's per-token figures ($/M tokens, J/token) at the closed-form tokens/s, with the
  // cluster running at `usd_per_hour`.
  PointMetrics per_token(double usd_per_hour) const {
    return point_metrics({0, usd_per_hour, cost->watts},
                         scenario.training.tokens_per_iteration() / iteration_s(), {});
  }
};

// $ per million tokens at the cost's `field` ($/h), when the book prices it.
Json per_m_tokens(const Outcome& o, const std::optional<double> ClusterCost::*field) {
  if (!o.cost || !((*o.cost).*field)) return Json();
  return Json(o.per_token(*((*o.cost).*field)).usd_per_m_tokens);
}

struct MetricDef {
  SweepMetric info;
  Json (*get)(const Outcome&);  // null Json: not measured at this point (fidelity, kind)
};

double peak_memory_gib(const Outcome& o) {
  double peak = 0;
  if (o.search) {
    for (const auto& d : o.search->estimate.devices) peak = std::max(peak, d.memory.total() / kGiB);
  } else {
    for (const auto& m : o.layout->time.memory) peak = std::max(peak, m.total() / kGiB);
  }
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

// A pipeline plan's value, or null for a sequence layout.
template <class F>
Json of_plan(const Outcome& o, F get) {
  return o.search ? Json(get(*o.search)) : Json();
}

// Every metric, in CSV column order: closed form, plan, cluster, simulation. One table (a
// name, what it means and how it is read off a point's outcome per row), so one function.
const std::vector<MetricDef>& metric_defs() {
  static const std::vector<MetricDef> defs = {
      {{"tokens_per_s", "tokens/s, closed form"},
       [](const Outcome& o) {
         return Json(o.search ? o.search->estimate.tokens_per_s : o.layout->time.tokens_per_s);
       }},
      {{"iteration_time_s", "iteration time (s), closed form"},
       [](const Outcome& o) { return Json(o.iteration_s()); }},
      {{"mfu", "model FLOPs utilisation of the whole cluster's peak, closed form"},
       [](const Outcome& o) {
         return Json(o.search ? o.search->estimate.mfu
                              : o.model_flops_per_s() / o.scenario.cluster.peak_flops());
       }},
      {{"hfu", "hardware FLOPs utilisation (recompute included), closed form; pipeline plans"},
       [](const Outcome& o) { return of_plan(o, [](auto& r) { return r.estimate.figures.hfu; }); }},
      {{"achieved_pflops", "model PFLOP/s, closed form"},
       [](const Outcome& o) {
         return Json(o.search ? o.search->estimate.achieved_pflops : o.model_flops_per_s() / 1e15);
       }},
      {{"model_tflops_per_gpu", "model TFLOP/s per GPU used, closed form"},
       [](const Outcome& o) {
         return Json(o.search ? o.search->estimate.figures.model_tflops_per_gpu
                              : o.model_flops_per_s() / 1e12 / o.gpus_used());
       }},
      {{"megatron_tflops_per_gpu",
        "Megatron-LM formula TFLOP/s per GPU used, closed form; pipeline plans"},
       [](const Outcome& o) {
         return of_plan(o, [](auto& r) { return r.estimate.figures.megatron_tflops_per_gpu; });
       }},
      {{"pipeline_s", "slowest pipeline (s), closed form; pipeline plans"},
       [](const Outcome& o) { return of_plan(o, [](auto& r) { return r.estimate.pipeline_s; }); }},
      {{"sequence_s", "one sequence through every layer (s), closed form; sequence layouts"},
       [](const Outcome& o) { return o.layout ? Json(o.layout->time.sequence_s) : Json(); }},
      {{"dp_sync_s",
        "gradient sync after the slowest pipeline (DP), or the sequence mesh's (s), closed form"},
       [](const Outcome& o) {
         return Json(o.search ? o.search->estimate.dp_sync_s : o.layout->time.sync_s);
       }},
      {{"optimizer_s", "optimizer step (s), closed form"},
       [](const Outcome& o) {
         return Json(o.search ? o.search->estimate.optimizer_s : o.layout->time.optimizer_s);
       }},
      {{"feasible", "every device fits in memory"},
       [](const Outcome& o) {
         return Json(o.search ? o.search->estimate.feasible : o.layout->time.fits);
       }},
      {{"peak_memory_gib", "largest device memory (GiB), closed form"},
       [](const Outcome& o) { return Json(peak_memory_gib(o)); }},
      {{"pipelines", "pipelines (DP degree) of the plan; pipeline plans"},
       [](const Outcome& o) {
         return of_plan(o, [](auto& r) { return r.plan.pipelines.size(); });
       }},
      {{"max_stages", "most stages in one pipeline; pipeline plans"},
       [](const Outcome& o) { return of_plan(o, [](auto& r) { return max_stages(r.plan); }); }},
      {{"max_tp", "largest TP degree of a stage; pipeline plans"},
       [](const Outcome& o) { return of_plan(o, [](auto& r) { return max_tp(r.plan); }); }},
      {{"sequence_groups", "all-to-all groups on the context-parallel ring; sequence layouts"},
       [](const Outcome& o) { return o.layout ? Json(o.layout->layout.groups.size()) : Json(); }},
      {{"gpus_used", "GPUs the plan uses"}, [](const Outcome& o) { return Json(o.gpus_used()); }},
      {{"configuration",
        "the sequence layout's configuration: grouping, degrees, GPU subset; sequence layouts"},
       [](const Outcome& o) { return o.layout ? Json(o.layout->grouping) : Json(); }},
      {{"zero_stage", "the ZeRO stage the plan or layout is scored under"},
       [](const Outcome& o) {
         return Json(o.layout ? training_of(o.scenario.training, *o.layout).zero_stage
                              : o.scenario.training.zero_stage);
       }},
      {{"candidates", "plans (or layouts) the search evaluated"},
       [](const Outcome& o) {
         return Json(o.search ? o.search->candidates : o.layout->candidates);
       }},
      {{"num_gpus", "GPUs in the cluster"},
       [](const Outcome& o) { return Json(o.scenario.cluster.num_devices()); }},
      {{"peak_pflops", "the cluster's summed peak PFLOP/s"},
       [](const Outcome& o) { return Json(o.scenario.cluster.peak_flops() / 1e15); }},
      {{"capex_usd", "the cluster's purchase price (with a \"prices\" axis)"},
       [](const Outcome& o) {
         return o.cost && o.cost->capex_usd ? Json(*o.cost->capex_usd) : Json();
       }},
      {{"usd_per_hour", "bought: capex written off over the book's years + energy, $/h"},
       [](const Outcome& o) {
         return o.cost && o.cost->usd_per_hour ? Json(*o.cost->usd_per_hour) : Json();
       }},
      {{"cloud_usd_per_hour", "rented at the book's cloud prices, $/h"},
       [](const Outcome& o) {
         return o.cost && o.cost->cloud_usd_per_hour ? Json(*o.cost->cloud_usd_per_hour) : Json();
       }},
      {{"watts", "the cluster's power at the wall (GPUs at TDP, hosts, PUE)"},
       [](const Outcome& o) { return o.cost ? Json(o.cost->watts) : Json(); }},
      {{"usd_per_m_tokens", "$ per million tokens, bought (usd_per_hour), closed form"},
       [](const Outcome& o) { return per_m_tokens(o, &ClusterCost::usd_per_hour); }},
      {{"cloud_usd_per_m_tokens", "$ per million tokens, rented, closed form"},
       [](const Outcome& o) { return per_m_tokens(o, &ClusterCost::cloud_usd_per_hour); }},
      {{"joules_per_token", "J per token at the wall, closed form"},
       [](const Outcome& o) { return o.cost ? Json(o.per_token(0).joules_per_token) : Json(); }},
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
         return o.sim ? Json(o.sim->iteration_time_s / o.iteration_s()) : Json();
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

// The cluster's cost under the point's price book, if it has one.
Status price(const SweepContext& ctx, const SweepPoint& p, Outcome& o) {
  if (p.prices < 0) return {};
  auto cost = cluster_cost(o.scenario.cluster, ctx.sweep.prices[p.prices].book);
  if (!cost) return cost.error();
  o.cost = *cost;
  return {};
}

// The metrics of an outcome that the sweep keeps.
Json kept_metrics(const SweepContext& ctx, const Outcome& o) {
  Json metrics = Json::object();
  for (const std::string& name : ctx.sweep.metrics) {
    for (const MetricDef& d : metric_defs()) {
      if (name != d.info.name) continue;
      if (Json v = d.get(o); !v.is_null()) metrics[name] = std::move(v);
    }
  }
  return metrics;
}

// A sequence scheduler's point: its options from the sweep's scheduler entry, the layout
// over the whole cluster, lowered and simulated at layer or stage fidelity (one program for
// both: a sequence mesh has no per-layer stage to coarsen).
Result<Json> compute_sequence(const SweepContext& ctx, const SweepPoint& p, const Scenario& sc,
                              const SchedulerInfo& scheduler, Timing& timing,
                              std::string& plan_digest) {
  auto options = load_with([&] {
    HexiSeqOptions o;
    o.time_budget_s = ctx.sweep.time_budget_s;
    return read_hexiseq_options(JsonNode(sc.scheduler_options, sc.scheduler_options_origin), o);
  });
  if (!options) return options.error();
  SchedulerOptions so;
  so.sequence = *options;
  auto scheduled = scheduler.run(sc, so);
  if (!scheduled) return scheduled.error();
  const HexiSeqResult* found = &*scheduled->sequence;
  timing.search_s = found->search_time_s;
  plan_digest = fnv1a64_hex(dump_json(to_json(found->layout)));
  Outcome o{sc, nullptr, found, std::nullopt, std::nullopt};
  if (auto st = price(ctx, p, o); !st) return st.error();
  if (p.fidelity != Fidelity::kClosedForm) {
    // Simulated under the ZeRO stage the layout was scored under.
    Scenario staged = sc;
    staged.training = training_of(sc.training, *found);
    auto sim = simulate_untraced(
        staged, lower_sequence(found->layout, sc.cluster, sc.model, staged.training, sc.name,
                               scheduler.name + " layout"));
    if (!sim) return sim.error();
    timing.sim_s = sim->wall_time_s;
    o.sim = std::move(*sim);
  }
  return kept_metrics(ctx, o);
}

Result<Json> compute(const SweepContext& ctx, const SweepPoint& p, Timing& timing,
                     std::string& plan_digest) {
  auto sc = point_scenario(ctx.sweep, p);
  if (!sc) return sc.error();
  if (const SchedulerInfo* seq = find_scheduler(sc->scheduler);
      seq != nullptr && seq->kind == SchedulerKind::kSequence) {
    return compute_sequence(ctx, p, *sc, *seq, timing, plan_digest);
  }
  SearchOptions so;
  so.seed = p.seed;
  so.time_budget_s = ctx.sweep.time_budget_s;
  // The planning call `hexisim plan` makes: the same plan for the same scenario and seed.
  auto found = plan_pipeline(sc->scheduler, *sc, so);
  if (!found) return found.error();
  timing.search_s = found->search_time_s;
  if (auto st = validate_plan(found->plan, sc->cluster, sc->model, sc->training, sc->scheduler);
      !st) {
    return failure("internal error: " + st.error().message);
  }
  plan_digest = fnv1a64_hex(plan_text(found->plan));
  Outcome o{*sc, &*found, nullptr, std::nullopt, std::nullopt};
  if (auto st = price(ctx, p, o); !st) return st.error();
  if (p.fidelity != Fidelity::kClosedForm) {
    LowerOptions lo;
    lo.scenario = sc->name;
    lo.granularity = p.fidelity == Fidelity::kStage ? Granularity::kStage : Granularity::kLayer;
    auto sim = simulate_untraced(*sc, lower_plan(found->plan, sc->cluster, sc->model, sc->training,
                                                 lo, found->scheduler + " plan"));
    if (!sim) return sim.error();
    timing.sim_s = sim->wall_time_s;
    o.sim = std::move(*sim);
  }
  return kept_metrics(ctx, o);
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
  // Pipeline and sequence schedulers (a pipeline of meshes is no sweep axis yet).
  for (const auto& s : schedulers()) {
    if (s.kind != SchedulerKind::kHybrid) v.schedulers.push_back(s.name);
  }
  for (const auto& m : sweep_metrics()) v.metrics.emplace_back(m.name);
  return v;
}

Json point_digests(const SweepContext& ctx, const SweepPoint& p) {
  const Sweep& s = ctx.sweep;
  const SweepScheduler& sched = s.schedulers[p.scheduler];
  Json d = {{"cluster", s.clusters[p.cluster].digest},
            {"model", input_digest(to_json(s.models[p.model].model))},
            {"training", input_digest(to_json(s.training_of(p)))},
            {"scheduler", fnv1a64_hex(sched.name + dump_json(sched.options))},
            {"gpus", ctx.gpus_digest}};
  if (p.prices >= 0) d["prices"] = s.prices[p.prices].digest;
  return d;
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

}  // namespace studies
}  // namespace hexi
