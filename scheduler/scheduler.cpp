#include "scheduler/scheduler.hpp"

#include <utility>

#include "scheduler/baselines/baselines.hpp"
#include "scheduler/baselines/sequence.hpp"
#include "scheduler/hexiscale/exact.hpp"
#include "scheduler/hexiscale/hexiscale.hpp"
#include "scheduler/hexiseq/exact.hpp"

namespace hexi {
namespace {

using PipelineFn = Result<SearchResult> (*)(const Scenario&, const SearchOptions&);
using SequenceFn = Result<HexiSeqResult> (*)(const SequenceCost&, std::vector<int>,
                                             const HexiSeqOptions&);

// A plan document and its closed-form estimate (pipeline and hybrid schedulers).
Scheduled of_plan(const std::string& name, SchedulerKind kind, const Plan& plan,
                  const Estimate& estimate, double search_time_s) {
  Scheduled s;
  s.scheduler = name;
  s.kind = kind;
  s.document.plan = plan;
  s.iteration_time_s = estimate.iteration_time_s;
  s.tokens_per_s = estimate.tokens_per_s;
  s.fits = estimate.feasible;
  s.search_time_s = search_time_s;
  return s;
}

// A pipeline search: the scenario checked first (a disconnected cluster, a model that fits
// nowhere), its plan and estimate the document.
SchedulerInfo pipeline(std::string name, std::string description, PipelineFn fn,
                       bool in_best = true, int best_max_gpus = 0) {
  auto run = [fn](const Scenario& sc, const SchedulerOptions& o) -> Result<Scheduled> {
    if (auto st = check_schedulable(sc); !st) return st.error();
    auto r = fn(sc, o.search);
    if (!r) return r.error();
    Scheduled s =
        of_plan(r->scheduler, SchedulerKind::kPipeline, r->plan, r->estimate, r->search_time_s);
    s.pipeline = std::move(*r);
    return s;
  };
  return {std::move(name), std::move(description), SchedulerKind::kPipeline, run,
          in_best,         best_max_gpus};
}

Scheduled from_layout(const std::string& name, HexiSeqResult r) {
  Scheduled s;
  s.scheduler = name;
  s.kind = SchedulerKind::kSequence;
  s.document.layout = r.layout;
  s.iteration_time_s = r.time.iteration_s;
  s.tokens_per_s = r.time.tokens_per_s;
  s.fits = r.time.fits;
  s.search_time_s = r.search_time_s;
  s.sequence = std::move(r);
  return s;
}

// A sequence layout over every device of the scenario's cluster, scored with its profile.
SchedulerInfo sequence(const std::string& name, std::string description, SequenceFn fn) {
  auto run = [name, fn](const Scenario& sc, const SchedulerOptions& o) -> Result<Scheduled> {
    SequenceCost cost(sc.cluster, sc.model, sc.training, sc.profile);
    auto r = fn(cost, {}, o.sequence);
    if (!r) return r.error();
    return from_layout(name, std::move(*r));
  };
  return {name, std::move(description), SchedulerKind::kSequence, run};
}

Result<HexiSeqResult> run_exact_layout(const SequenceCost& cost, std::vector<int> devices,
                                       const HexiSeqOptions& options) {
  auto e = run_hexiseq_exact(cost, std::move(devices), options);
  if (!e) return e.error();
  return std::move(e->best);
}

Result<Scheduled> run_mesh_pipeline(const Scenario& sc, const SchedulerOptions& o) {
  MeshPipelineOptions po;
  po.sequence = o.sequence;
  po.max_stages = o.max_stages;
  auto r = search_mesh_pipeline(sc.cluster, sc.model, sc.training, sc.profile, po);
  if (!r) return r.error();
  Scheduled s =
      of_plan("mesh-pipeline", SchedulerKind::kHybrid, r->plan, r->estimate, r->search_time_s);
  s.hybrid = std::move(*r);
  return s;
}

}  // namespace

const std::vector<SchedulerInfo>& schedulers() {
  static const std::vector<SchedulerInfo> all = {
      pipeline("hexiscale",
               "HexiScale: METIS phase 1, per-pipeline phase 2, exact batch/layer splits, "
               "refinement",
               run_hexiscale),
      pipeline("uniform",
               "Megatron TP x PP x DP grid over device ids, ignoring heterogeneity (best valid "
               "grid)",
               run_uniform),
      pipeline("random",
               "random device partitions, then HexiScale's phase 2 (best of the iterations)",
               run_random, true, 128),
      pipeline("flashflex",
               "the FlashFlex reference: even batch, memory-proportional layers, TP menus, "
               "fudge-factor cost",
               run_flashflex, true, 256),
      pipeline("metis-like",
               "Metis (ATC'24): type-ordered stages, uniform (dp, tp), power-of-two groups",
               run_metis_like),
      pipeline("amp-like",
               "AMP (NeurIPS'22): uniform (tp, pp, dp) grid, layers by dynamic programming",
               run_amp_like),
      pipeline("exact",
               "exhaustive search of HexiScale's plan space (<= 16 GPUs), branch and bound",
               run_exact, false),
      sequence("hexiseq", "HexiSeq: groupings, LP token split, per-group integer programs",
               run_hexiseq),
      sequence("hexiseq-exact", "whole-mesh MILP per grouping, proven optimal (<= 16 devices)",
               run_exact_layout),
      sequence("ring", "Ring Attention: one ring, equal zig-zag shards, all heads", run_ring),
      sequence("ulysses", "DeepSpeed-Ulysses: one all-to-all group, equal heads", run_ulysses),
      sequence("usp", "USP: best Ulysses x ring factorisation, Ulysses on contiguous ranks",
               run_usp),
      sequence("megatron-cp", "Megatron a2a+p2p: a2a inside machines, ring across, equal",
               run_megatron_cp),
      sequence("hexiseq-homogeneous", "HexiSeq told every device is identical, scored for real",
               run_hexiseq_homogeneous),
      sequence("round-robin", "USP factorisations with devices dealt round-robin", run_round_robin),
      {"mesh-pipeline",
       "pipelines of HexiSeq meshes: the machines cut into 1, 2, ... stages, layers by FLOP/s",
       SchedulerKind::kHybrid, run_mesh_pipeline},
  };
  return all;
}

const SchedulerInfo* find_scheduler(std::string_view name) {
  for (const auto& s : schedulers()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::string scheduler_names(std::optional<SchedulerKind> kind) {
  std::string out;
  for (const auto& s : schedulers()) {
    if (kind && s.kind != *kind) continue;
    out += (out.empty() ? "" : ", ") + s.name;
  }
  return out;
}

std::vector<std::string> best_plan_schedulers(int gpus) {
  std::vector<std::string> out;
  for (const auto& s : schedulers()) {
    if (s.in_best && (gpus == 0 || s.best_max_gpus == 0 || gpus <= s.best_max_gpus))
      out.push_back(s.name);
  }
  return out;
}

Result<Scheduled> run_scheduler(const std::string& name, const Scenario& sc,
                                const SchedulerOptions& options) {
  const SchedulerInfo* s = find_scheduler(name);
  if (s == nullptr) {
    return bad_input("unknown scheduler \"" + name + "\" (known: " + scheduler_names() + ")");
  }
  return s->run(sc, options);
}

Result<SearchResult> run_pipeline_scheduler(const std::string& name, const Scenario& sc,
                                            const SearchOptions& options) {
  const SchedulerInfo* s = find_scheduler(name);
  if (s == nullptr) {
    return bad_input("unknown scheduler \"" + name +
                     "\" (known: " + scheduler_names(SchedulerKind::kPipeline) + ")");
  }
  if (s->kind == SchedulerKind::kSequence) {
    return bad_input("scheduler \"" + name +
                     "\" plans sequence (context + head parallel) layouts: use `hexisim seq "
                     "SCENARIO --scheduler " +
                     name + "`; pipeline schedulers: " + scheduler_names(SchedulerKind::kPipeline));
  }
  if (s->kind == SchedulerKind::kHybrid) {
    return bad_input("scheduler \"" + name +
                     "\" plans pipelines of sequence meshes: use `hexisim seq SCENARIO "
                     "--pipeline`; pipeline schedulers: " +
                     scheduler_names(SchedulerKind::kPipeline));
  }
  SchedulerOptions o;
  o.search = options;
  auto r = s->run(sc, o);
  if (!r) return r.error();
  return std::move(*r->pipeline);
}

}  // namespace hexi
