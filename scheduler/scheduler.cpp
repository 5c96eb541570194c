#include "scheduler/scheduler.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <utility>

#include "scheduler/baselines/baselines.hpp"
#include "scheduler/baselines/sequence.hpp"
#include "scheduler/hexiscale/exact.hpp"
#include "scheduler/hexiscale/hexiscale.hpp"
#include "scheduler/hexiseq/exact.hpp"
#include "scheduler/search/batch_split.hpp"

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

// Whether estimate `a` is the better: fitting first, then the shorter iteration.
bool better_estimate(const Estimate& a, const Estimate& b) {
  if (a.feasible != b.feasible) return a.feasible;
  return a.iteration_time_s < b.iteration_time_s * (1 - 1e-9);
}

// `plan` with whole experts on every GPU of every TP stage (expert_split), each group's
// experts split in proportion to its GPUs' FLOP/s; nullopt where a stage is a mesh or has
// more GPUs than experts.
std::optional<Plan> with_whole_experts(const Plan& plan, const Scenario& sc) {
  Plan out = plan;
  for (Pipeline& p : out.pipelines) {
    for (Stage& s : p.stages) {
      if (s.mesh()) return std::nullopt;
      std::vector<double> rate;
      for (int d : s.devices) rate.push_back(sc.cluster.gpu(d).flops());
      s.expert_split = proportional_split(rate, sc.model.moe.experts);
      if (s.expert_split.empty()) return std::nullopt;
    }
  }
  return out;
}

// A mixture of experts: every plan a pipeline search returns (its best, runners-up and best
// on every GPU) is scored again with whole experts per GPU (with_whole_experts), and the
// better of the two kept. Fine-grained experts split by columns over a TP group make narrow
// GEMMs; whole experts give each GPU full-width ones on fewer rows. A note says which won.
void place_experts(const Scenario& sc, SearchResult& r) {
  if (!sc.model.is_moe()) return;
  const CostModel cm(sc.cluster, sc.model, sc.training, sc.profile);
  double columns_s = 0, whole_s = 0;  // the search's best plan both ways (0: not scored)
  auto improve = [&](Plan& plan, Estimate& estimate, bool best) {
    const std::optional<Plan> whole = with_whole_experts(plan, sc);
    if (!whole) return;
    Estimate e = cm.estimate(*whole);
    if (best) {
      columns_s = estimate.iteration_time_s;
      whole_s = e.iteration_time_s;
    }
    if (!better_estimate(e, estimate)) return;
    plan = std::move(*whole);
    estimate = std::move(e);
  };
  improve(r.plan, r.estimate, true);
  for (EstimatedPlan& p : r.runners_up) improve(p.plan, p.estimate, false);
  if (r.all_gpus) improve(r.all_gpus->plan, r.all_gpus->estimate, false);
  for (EstimatedPlan& p : r.runners_up) {
    if (better_estimate(p.estimate, r.estimate)) {
      std::swap(p.plan, r.plan);
      std::swap(p.estimate, r.estimate);
    }
  }
  bool grouped = false;  // a TP group of 2 or more GPUs: the two placements differ
  for (const Pipeline& p : r.plan.pipelines) {
    for (const Stage& s : p.stages) grouped = grouped || s.tp() > 1;
  }
  if (!grouped || whole_s == 0) return;
  char line[240];
  std::snprintf(line, sizeof line,
                "mixture of experts: the search's best plan takes %.3f s per iteration with whole "
                "experts per GPU and %.3f s with every expert split by columns over its TP group "
                "(closed form); the plan returned runs %s",
                whole_s, columns_s,
                r.plan.whole_experts() ? "whole experts" : "experts split by columns");
  r.notes.push_back(line);
}

// A pipeline search: the scenario checked first (a disconnected cluster, a model that fits
// nowhere), its plan and estimate the document; a mixture of experts' experts placed
// (place_experts).
SchedulerInfo pipeline(std::string name, std::string description, PipelineFn fn,
                       bool in_best = true, int best_max_gpus = 0) {
  auto run = [fn](const Scenario& sc, const SchedulerOptions& o) -> Result<Scheduled> {
    if (auto st = check_schedulable(sc); !st) return st.error();
    auto r = fn(sc, o.search);
    if (!r) return r.error();
    place_experts(sc, *r);
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

// The ZeRO stages a sequence scheduler's layouts are scored under: the training config's, and
// with `every` also 2 and 3 below it. Stages 1 and 2 take the same time in the closed form
// (one gradient all-reduce after the sequence; the optimizer on a 1 / n share) and stage 2
// holds less, so stage 1 is tried only where it is the config's own.
std::vector<int> zero_stages(const TrainingConfig& t, bool every) {
  if (!every || t.zero_stage < 2) return {t.zero_stage};
  std::vector<int> out = {2};
  if (t.zero_stage >= 3) out.push_back(3);
  return out;
}

// Whether the model states under `t` leave some device of the whole mesh room (ring layout,
// equal shards): a stage that fails this has no layout over these devices at all.
bool states_fit_somewhere(const Scenario& sc, const TrainingConfig& t) {
  std::vector<std::vector<int>> ring;
  for (int d = 0; d < sc.cluster.num_devices(); ++d) ring.push_back({d});
  if (t.seq_len < 2 * sc.cluster.num_devices()) return true;  // the scheduler says why not
  const SequenceLayout l = even_layout(ring, t.seq_len, sc.model.heads);
  for (const DeviceMemory& m : layout_memory(l, sc.model, t, sc.cluster)) {
    const double room = kMemoryCap * sc.cluster.gpu(m.device).memory_bytes();
    if (m.mesh.states.total() + m.mesh.reserve <= room) return true;
  }
  return false;
}

// A sequence layout over every device of the scenario's cluster, scored with its profile,
// the best over zero_stages() (search times, layouts scored and programs solved summed; a
// time budget shared; each stage's search held to the best layout of the stages before).
SchedulerInfo sequence(const std::string& name, std::string description, SequenceFn fn) {
  auto run = [name, fn](const Scenario& sc, const SchedulerOptions& o) -> Result<Scheduled> {
    std::optional<HexiSeqResult> best;
    std::optional<Error> error;
    HexiSeqOptions so = o.sequence;
    double searched = 0;
    long candidates = 0, solves = 0;
    for (int stage : zero_stages(sc.training, so.zero_stages)) {
      TrainingConfig t = sc.training;
      t.zero_stage = stage;
      if (stage != sc.training.zero_stage && !states_fit_somewhere(sc, t)) continue;
      if (o.sequence.time_budget_s > 0) {
        so.time_budget_s = o.sequence.time_budget_s - searched;
        if (so.time_budget_s <= 0) break;
      }
      SequenceCost cost(sc.cluster, sc.model, t, sc.profile);
      // A stage's layouts only matter where they beat the stages before.
      so.bar_s = best && best->time.fits ? best->time.iteration_s : kInfinity;
      const auto start = std::chrono::steady_clock::now();
      auto r = fn(cost, {}, so);
      if (!r) {  // nothing fits, or nothing beats the bar: its time still counts
        searched += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (!error || stage == sc.training.zero_stage) error = r.error();
        continue;
      }
      r->zero_stage = stage;
      searched += r->search_time_s;
      candidates += r->candidates;
      solves += r->solves;
      if (better_layout(*r, best)) best = std::move(*r);
    }
    if (!best) return *error;
    best->search_time_s = searched;
    best->candidates = candidates;
    best->solves = solves;
    return from_layout(name, std::move(*best));
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
  TrainingConfig t = sc.training;
  t.zero_stage = mesh_pipeline_zero_stage(sc.training, o.sequence);
  auto r = search_mesh_pipeline(sc.cluster, sc.model, t, sc.profile, po);
  if (!r) return r.error();
  Scheduled s =
      of_plan("mesh-pipeline", SchedulerKind::kHybrid, r->plan, r->estimate, r->search_time_s);
  s.hybrid = std::move(*r);
  return s;
}

}  // namespace

int mesh_pipeline_zero_stage(const TrainingConfig& training, const HexiSeqOptions& options) {
  return options.zero_stages ? std::min(training.zero_stage, kMaxPlanZeroStage)
                             : training.zero_stage;
}

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
               "exhaustive search of HexiScale's plan space (<= 16 GPUs; 32 under --time-budget, "
               "with the gap where it stops), branch and bound",
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
