#include "scheduler/search/plan_space.hpp"

#include <algorithm>

namespace hexi {
inline namespace search {
namespace {

// The curve cache is emptied when it holds more than this (checked every
// kCacheCheckEvery new curves): long searches on thousands of GPUs build millions.
constexpr std::size_t kMaxCacheBytes = std::size_t{64} << 20;
constexpr long kCacheCheckEvery = 8192;

}  // namespace

int PipelineSpec::num_devices() const {
  int n = 0;
  for (const auto& s : segments) n += s.count;
  return n;
}

int PipelineSpec::num_stages() const {
  int n = 0;
  for (const auto& s : segments) n += s.count / s.tp;
  return n;
}

std::vector<int> tp_degrees(const Model& model, int max_degree) {
  std::vector<int> out;
  for (int t = 1; t <= max_degree; ++t)
    if (model.even_tp_degree(t)) out.push_back(t);
  return out;
}

bool machine_symmetric(const Cluster& cluster, int machine) {
  const Machine& m = cluster.machines()[machine];
  if (m.sockets > 1 && m.intra_kind != IntraKind::kNvSwitch) return false;
  for (const auto& [key, _] : cluster.device_overrides()) {
    const int a = static_cast<int>(key >> 32), b = static_cast<int>(key & 0xffffffffu);
    if (cluster.devices()[a].machine == machine || cluster.devices()[b].machine == machine)
      return false;
  }
  return true;
}

std::vector<int> machine_classes(const Cluster& c) {
  const auto& ms = c.machines();
  std::vector<bool> alone(ms.size(), false);  // in a machine-level override: its own class
  for (const auto& [key, _] : c.machine_overrides()) {
    alone[key >> 32] = alone[key & 0xffffffffu] = true;
  }
  auto same = [&](const Machine& a, const Machine& b) {
    return a.gpu_type == b.gpu_type && a.num_gpus == b.num_gpus && a.intra_kind == b.intra_kind &&
           a.intra_Bps == b.intra_Bps && a.intra_latency_s == b.intra_latency_s &&
           a.pcie_Bps == b.pcie_Bps && a.sockets == b.sockets && a.socket_Bps == b.socket_Bps &&
           a.nic_Bps == b.nic_Bps && a.nics == b.nics && a.leaf == b.leaf;
  };
  std::vector<int> out(ms.size());
  for (std::size_t m = 0; m < ms.size(); ++m) {
    out[m] = static_cast<int>(m);
    if (alone[m] || !machine_symmetric(c, static_cast<int>(m))) continue;
    for (std::size_t k = 0; k < m; ++k) {
      if (out[k] == static_cast<int>(k) && !alone[k] && machine_symmetric(c, static_cast<int>(k)) &&
          same(ms[k], ms[m])) {
        out[m] = static_cast<int>(k);
        break;
      }
    }
  }
  return out;
}

SpecEvaluator::SpecEvaluator(const CostModel& cm, bool per_stage_recompute)
    : cm_(cm),
      modes_(hexi::recompute_modes(cm.training(), per_stage_recompute)),
      class_of_(machine_classes(cm.cluster())) {
  for (std::size_t m = 0; m < cm.cluster().machines().size(); ++m) {
    symmetric_.push_back(machine_symmetric(cm.cluster(), static_cast<int>(m)));
  }
  all_symmetric_ = std::all_of(symmetric_.begin(), symmetric_.end(), [](bool b) { return b; });
}

Recompute SpecEvaluator::least_memory_recompute() const {
  const bool full = std::find(modes_.begin(), modes_.end(), Recompute::kFull) != modes_.end();
  return full ? Recompute::kFull : cm_.training().recompute;
}

namespace {

// The TP groups of one pipeline's segments, taking devices from each machine from `next`
// (its next free local index, advanced past them).
std::vector<std::vector<int>> pipeline_groups(const Cluster& c, const PipelineSpec& p,
                                              std::vector<int>& next) {
  std::vector<std::vector<int>> groups;
  for (const auto& seg : p.segments) {
    const int base = c.machines()[seg.machine].first_device + next[seg.machine];
    for (int g = 0; g < seg.count / seg.tp; ++g) {
      std::vector<int> devices(seg.tp);
      for (int r = 0; r < seg.tp; ++r) devices[r] = base + g * seg.tp + r;
      groups.push_back(std::move(devices));
    }
    next[seg.machine] += seg.count;
  }
  return groups;
}

}  // namespace

std::vector<std::vector<std::vector<int>>> SpecEvaluator::stages(const PlanSpec& spec) const {
  const Cluster& c = cm_.cluster();
  std::vector<int> next(c.machines().size(), 0);  // next free local index per machine
  std::vector<std::vector<std::vector<int>>> out;
  for (const auto& p : spec.pipelines) out.push_back(pipeline_groups(c, p, next));
  return out;
}

std::vector<std::vector<int>> SpecEvaluator::stages_of(const PlanSpec& spec, int p) const {
  const Cluster& c = cm_.cluster();
  std::vector<int> next(c.machines().size(), 0);  // next free local index per machine
  for (int q = 0; q < p; ++q) {
    for (const auto& seg : spec.pipelines[q].segments) next[seg.machine] += seg.count;
  }
  return pipeline_groups(c, spec.pipelines[p], next);
}

std::vector<int> SpecEvaluator::curve_key(const PlanSpec& spec, int p, int dp) const {
  // Segments, plus the local offset of asymmetric machines (devices there differ).
  std::vector<int> key{dp};
  if (all_symmetric_) {  // every offset 0: the other pipelines do not matter
    key.reserve(1 + 4 * spec.pipelines[p].segments.size());
    for (const auto& seg : spec.pipelines[p].segments)
      key.insert(key.end(), {class_of_[seg.machine], seg.count, seg.tp, 0});
    return key;
  }
  std::vector<int> next(cm_.cluster().machines().size(), 0);
  for (int q = 0; q <= p; ++q) {
    for (const auto& seg : spec.pipelines[q].segments) {
      if (q == p) {
        key.insert(key.end(), {class_of_[seg.machine], seg.count, seg.tp,
                               symmetric_[seg.machine] ? 0 : next[seg.machine] + 1});
      }
      next[seg.machine] += seg.count;
    }
  }
  return key;
}

std::shared_ptr<const PipelineCurve> SpecEvaluator::curve(const PlanSpec& spec, int p, int dp) {
  std::vector<int> key = curve_key(spec, p, dp);
  if (auto found = caches_->curves.find(key)) return std::move(*found);
  auto curve = std::make_shared<const PipelineCurve>(options(stages_of(spec, p), dp),
                                                     cm_.model().layers, cm_.training().schedule);
  Caches& c = *caches_;
  // The full count visits every curve: only once the bytes counted as curves came in (their
  // memos grow later) reach half the limit, by one thread at a time.
  if (++c.new_curves % kCacheCheckEvery == 0 && c.bytes > kMaxCacheBytes / 2) {
    if (std::unique_lock lock(c.recount, std::try_to_lock); lock.owns_lock()) {
      std::size_t bytes = 0;
      c.curves.for_each([&](const std::vector<int>& k, const auto& v) {
        bytes += k.size() * sizeof(int) + v->memory_bytes();
      });
      c.bytes = bytes;
      if (bytes > kMaxCacheBytes) {
        c.curves.clear();
        c.bytes = 0;
      }
    }
  }
  c.bytes += key.size() * sizeof(int) + curve->memory_bytes();
  c.curves.insert(std::move(key), curve);
  return curve;
}

std::vector<std::vector<StageTerms>> SpecEvaluator::options(
    const std::vector<std::vector<int>>& groups, int dp) {
  // A stage's terms depend on its devices only through their machine's class when the
  // machine is symmetric (its GPUs interchangeable): the key is (dp, position, class,
  // degree) and the next stage's (same machine, or its class) and degree.
  const Cluster& c = cm_.cluster();
  const int k = static_cast<int>(groups.size());
  const int micro_batch = cm_.training().micro_batch;
  const double bytes = hidden_bytes(cm_.model(), cm_.training(), micro_batch);
  std::vector<std::vector<StageTerms>> out;
  // The stage's options, with the gradient's way back from the next stage alone (the curves'
  // timeline floor and share_nics read it).
  auto compute = [&](int i, const std::vector<int>* next) {
    out.push_back(stage_options(cm_, groups[i], i == 0, i == k - 1, next, dp, micro_batch, modes_));
    if (next == nullptr) return;
    const double back = cm_.transfer_s(*next, groups[i], bytes);
    for (StageTerms& t : out.back()) t.own_back_s = back;
  };
  for (int i = 0; i < k; ++i) {
    const std::vector<int>* next = i + 1 < k ? &groups[i + 1] : nullptr;
    const int m = c.devices()[groups[i][0]].machine;
    const int m_next = next ? c.devices()[(*next)[0]].machine : -1;
    const bool cacheable = symmetric_[m] && (m_next < 0 || symmetric_[m_next]);
    if (!cacheable) {
      compute(i, next);
      continue;
    }
    const std::array<int, 7> key{dp,
                                 (i == 0 ? 1 : 0) + (i == k - 1 ? 2 : 0),
                                 class_of_[m],
                                 static_cast<int>(groups[i].size()),
                                 m_next < 0    ? -2
                                 : m_next == m ? -1
                                               : class_of_[m_next],
                                 next ? static_cast<int>(next->size()) : 0,
                                 0};
    if (auto found = caches_->stages.find(key)) {
      out.push_back(std::move(*found));
      continue;
    }
    compute(i, next);
    caches_->stages.insert(key, out.back());
  }
  share_nics(groups, out);
  return out;
}

void SpecEvaluator::share_nics(const std::vector<std::vector<int>>& groups,
                               std::vector<std::vector<StageTerms>>& options) const {
  // Two boundaries through one NIC direction need three stages (activations forward and
  // gradients back leave a machine through one NIC: one stage's, another's).
  const int k = static_cast<int>(groups.size());
  if (k < 3) return;
  // A stage's devices sit on one machine (TP never leaves it): a boundary inside a machine
  // puts no flow on a NIC, and its sends take their own time both ways.
  const Cluster& c = cm_.cluster();
  auto crosses = [&](int i) {
    return c.devices()[groups[i][0]].machine != c.devices()[groups[i + 1][0]].machine;
  };
  const double bytes = hidden_bytes(cm_.model(), cm_.training(), cm_.training().micro_batch);
  NicFlows all;
  for (int i = 0; i + 1 < k; ++i) {
    if (!crosses(i)) continue;
    cm_.add_nic_flows(groups[i], groups[i + 1], bytes, all);
    cm_.add_nic_flows(groups[i + 1], groups[i], bytes, all);
  }
  // A crossing's time depends on its groups and the flows through the two NICs it uses: by
  // machine class where both machines are symmetric, cached.
  auto transfer = [&](const std::vector<int>& from, const std::vector<int>& to) {
    const int mf = c.devices()[from[0]].machine, mt = c.devices()[to[0]].machine;
    if (!symmetric_[mf] || !symmetric_[mt]) return cm_.transfer_s(from, to, bytes, &all);
    const std::array<int, 6> key{class_of_[mf],
                                 static_cast<int>(from.size()),
                                 class_of_[mt],
                                 static_cast<int>(to.size()),
                                 static_cast<int>(all.out.at(mf)),
                                 static_cast<int>(all.in.at(mt))};
    if (auto found = caches_->crossings.find(key)) return *found;
    const double t = cm_.transfer_s(from, to, bytes, &all);
    caches_->crossings.insert(key, t);
    return t;
  };
  for (int i = 0; i + 1 < k; ++i) {
    const double shared =
        crosses(i)
            ? std::max(transfer(groups[i], groups[i + 1]), transfer(groups[i + 1], groups[i]))
            : std::max(options[i].front().send_s, options[i].front().own_back_s);
    if (!(shared > options[i].front().send_s)) continue;
    for (StageTerms& t : options[i]) t.send_s = shared;
  }
}

BatchSplit SpecEvaluator::split(const PlanSpec& spec) {
  const int d = static_cast<int>(spec.pipelines.size());
  std::vector<const PipelineCurve*> curves;
  std::vector<std::shared_ptr<const PipelineCurve>> held;  // alive even if the cache is emptied
  for (int p = 0; p < d; ++p) {
    held.push_back(curve(spec, p, d));
    curves.push_back(held.back().get());
  }
  return split_micro_batches(curves, micro_batches());
}

double SpecEvaluator::pipelines_s(const PlanSpec& spec) {
  return split(spec).slowest_s;
}

double SpecEvaluator::iteration_floor_s(const PlanSpec& spec) {
  const BatchSplit bs = split(spec);
  if (bs.micro_batches.empty() || bs.slowest_s == kInfeasible) return kInfeasible;
  const int d = static_cast<int>(spec.pipelines.size());
  double floor = 0;
  std::vector<std::vector<double>> finish(d);
  std::vector<std::vector<int>> layers(d);
  for (int p = 0; p < d; ++p) {
    const auto c = curve(spec, p, d);
    finish[p] = c->finish_floors(bs.micro_batches[p]);
    layers[p] = c->layers(bs.micro_batches[p]);
    if (finish[p].empty() || layers[p].empty()) return kInfeasible;
    floor = std::max(floor, finish[p].front());
  }
  return d < 2 ? floor : std::max(floor, dp_nic_floor(spec, finish, layers));
}

double SpecEvaluator::dp_nic_floor(const PlanSpec& spec,
                                   const std::vector<std::vector<double>>& finish,
                                   const std::vector<std::vector<int>>& layers) const {
  const Cluster& c = cm_.cluster();
  const Model& model = cm_.model();
  const int d = static_cast<int>(spec.pipelines.size());
  // Each stage's machine (a TP group lies on one machine); a stage without layers is left out
  // of the realized plan and would move the embedding or head: no bound then.
  std::vector<std::vector<int>> machine(d);
  for (int p = 0; p < d; ++p) {
    for (const MachineSegment& seg : spec.pipelines[p].segments)
      machine[p].insert(machine[p].end(), seg.count / seg.tp, seg.machine);
    if (machine[p].size() != layers[p].size()) return 0;
    for (int l : layers[p]) {
      if (l < 1) return 0;
    }
  }
  // A ring moves at most its bytes times the best efficiency any transport reaches.
  double best_efficiency = 1;
  for (const Transport t : kMeasuredTransports) {
    for (const EfficiencyPoint& pt : c.curve(t).points)
      best_efficiency = std::max(best_efficiency, pt.efficiency);
  }
  // Per machine: (release, bytes) of each gradient piece whose holders span machines.
  std::vector<std::vector<std::pair<double, double>>> through(c.machines().size());
  std::vector<int> holder(d, 0), at(d, 0);  // per pipeline: the stage holding a layer, its start
  auto add = [&](double params) {
    std::vector<int> ms;
    double release = 0;
    for (int p = 0; p < d; ++p) {
      ms.push_back(machine[p][static_cast<std::size_t>(holder[p])]);
      release = std::max(release, finish[p][static_cast<std::size_t>(holder[p])]);
    }
    std::sort(ms.begin(), ms.end());
    ms.erase(std::unique(ms.begin(), ms.end()), ms.end());
    const double k = static_cast<double>(ms.size());
    if (k < 2) return;
    const double bytes =
        2 * (k - 1) / k * cm_.training().bytes_per_element() * params / best_efficiency;
    for (int m : ms) through[static_cast<std::size_t>(m)].emplace_back(release, bytes);
  };
  const double table = static_cast<double>(model.vocab) * model.hidden;
  const double layer = model.attention_params() + model.mlp_params();
  add(table);  // the embedding's TP-split table, on every first stage (holder 0)
  for (int l = 0; l < model.layers; ++l) {
    for (int p = 0; p < d; ++p) {
      while (l >= at[p] + layers[p][static_cast<std::size_t>(holder[p])])
        at[p] += layers[p][static_cast<std::size_t>(holder[p]++)];
    }
    add(layer);  // the layer's TP-split weights (norms left out: replicated)
  }
  bool single_tied = false;  // a one-stage pipeline's tied head is its embedding
  for (int p = 0; p < d; ++p) {
    holder[p] = static_cast<int>(layers[p].size()) - 1;
    single_tied = single_tied || (holder[p] == 0 && model.tied_embeddings);
  }
  if (!single_tied) add(table);
  // Rings start when their last member is free; a machine's NICs carry its rings' bytes at
  // most at their rate each way: those released at r or later end no earlier than r + their
  // bytes / rate.
  double floor = 0;
  for (std::size_t m = 0; m < through.size(); ++m) {
    auto& jobs = through[m];
    std::sort(jobs.begin(), jobs.end(), std::greater<>());
    double bytes = 0;
    for (const auto& [release, b] : jobs) {
      bytes += b;
      floor = std::max(floor, release + bytes / c.machines()[m].nic_Bps);
    }
  }
  return floor;
}

std::optional<Plan> SpecEvaluator::realize(const PlanSpec& spec, const std::string& scheduler) {
  const BatchSplit bs = split(spec);
  if (bs.micro_batches.empty() || bs.slowest_s == kInfeasible) return std::nullopt;
  const int d = static_cast<int>(spec.pipelines.size());
  std::vector<std::vector<int>> layers;
  std::vector<std::vector<std::optional<Recompute>>> recompute;
  for (int p = 0; p < d; ++p) {
    auto c = curve(spec, p, d);
    layers.push_back(c->layers(bs.micro_batches[p]));
    if (layers.back().empty()) return std::nullopt;
    recompute.emplace_back();
    for (Recompute r : c->recompute(bs.micro_batches[p])) {
      recompute.back().push_back(r == cm_.training().recompute ? std::nullopt
                                                               : std::optional<Recompute>(r));
    }
  }
  return assemble_plan(stages(spec), layers, bs.micro_batches, cm_.training().micro_batch,
                       scheduler, recompute);
}

Plan assemble_plan(const std::vector<std::vector<std::vector<int>>>& stages,
                   const std::vector<std::vector<int>>& layers,
                   const std::vector<int>& micro_batches, int micro_batch,
                   const std::string& scheduler,
                   const std::vector<std::vector<std::optional<Recompute>>>& recompute) {
  Plan plan;
  plan.scheduler = scheduler;
  for (std::size_t p = 0; p < stages.size(); ++p) {
    Pipeline pipe;
    pipe.micro_batch = micro_batch;
    pipe.batch = micro_batches[p] * micro_batch;
    int begin = 0;
    for (std::size_t s = 0; s < stages[p].size(); ++s) {
      if (layers[p][s] == 0) continue;
      pipe.stages.push_back({stages[p][s],
                             begin,
                             begin + layers[p][s],
                             {},
                             recompute.empty() ? std::nullopt : recompute[p][s],
                             {}});
      begin += layers[p][s];
    }
    plan.pipelines.push_back(std::move(pipe));
  }
  return plan;
}

ScoredPlan score_plan(const CostModel& cm, Plan plan, double bound, CostModel::OverBound over) {
  ScoredPlan out;
  out.estimate = cm.estimate_below(plan, bound, over);
  out.pipelines_s = out.estimate.pipeline_s;
  out.plan = std::move(plan);
  return out;
}

std::optional<ScoredPlan> SpecEvaluator::evaluate(const PlanSpec& spec,
                                                  const std::string& scheduler, double bound) {
  ++evaluations_;
  auto plan = realize(spec, scheduler);
  if (!plan) return std::nullopt;
  return score_plan(cm_, std::move(*plan), bound);
}

std::optional<ScoredPlan> SpecEvaluator::align_layers(const ScoredPlan& scored) const {
  const std::vector<Pipeline>& pipes = scored.plan.pipelines;
  if (pipes.size() < 2 || !scored.estimate.feasible ||
      !(scored.estimate.dp_sync_s > kAlignShare * scored.estimate.iteration_time_s))
    return std::nullopt;
  auto same_split = [](const Pipeline& a, const Pipeline& b) {
    if (a.stages.size() != b.stages.size()) return false;
    for (std::size_t s = 0; s < a.stages.size(); ++s) {
      if (a.stages[s].layer_end != b.stages[s].layer_end ||
          a.stages[s].recompute != b.stages[s].recompute)
        return false;
    }
    return true;
  };
  std::vector<std::size_t> donors;
  for (std::size_t p = 0; p < pipes.size() && donors.size() < kAlignDonors; ++p) {
    bool seen = false, differs = false;
    for (std::size_t q = 0; q < pipes.size(); ++q) {
      if (pipes[q].stages.size() != pipes[p].stages.size()) continue;
      if (same_split(pipes[p], pipes[q])) {
        seen = seen || q < p;
      } else {
        differs = true;
      }
    }
    if (!seen && differs) donors.push_back(p);
  }
  std::optional<ScoredPlan> best;
  for (std::size_t donor : donors) {
    Plan trial = scored.plan;
    for (Pipeline& pipe : trial.pipelines) {
      if (pipe.stages.size() != pipes[donor].stages.size()) continue;
      for (std::size_t s = 0; s < pipe.stages.size(); ++s) {
        pipe.stages[s].layer_begin = pipes[donor].stages[s].layer_begin;
        pipe.stages[s].layer_end = pipes[donor].stages[s].layer_end;
        pipe.stages[s].recompute = pipes[donor].stages[s].recompute;
      }
    }
    const double held = best ? best->objective() : scored.objective();
    ScoredPlan aligned = score_plan(cm_, std::move(trial), held, CostModel::OverBound::kDiscarded);
    if (!aligned.estimate.screened && aligned.objective() < held) best = std::move(aligned);
  }
  return best;
}

std::optional<ScoredPlan> SpecEvaluator::polish_layers(const ScoredPlan& scored,
                                                       long& budget) const {
  if (!scored.estimate.feasible) return std::nullopt;
  ScoredPlan best = scored;
  auto ends = [](const Pipeline& p) {
    std::vector<int> out;
    for (const Stage& s : p.stages) out.push_back(s.layer_end);
    return out;
  };
  // The moves, (pipeline, boundary), over the first pipeline of each class (same stage count
  // and split; a class moves together). Tried in turn, round and round, until a whole round
  // of them fails or the budget is spent; a kept move keeps its place in the round.
  std::vector<std::pair<std::size_t, std::size_t>> moves;
  auto list_moves = [&]() {
    moves.clear();
    const std::vector<Pipeline>& pipes = best.plan.pipelines;
    for (std::size_t p = 0; p < pipes.size(); ++p) {
      bool first = true;
      for (std::size_t q = 0; q < p && first; ++q) first = ends(pipes[q]) != ends(pipes[p]);
      if (!first || pipes[p].chunks() > 1 || pipes[p].has_mesh()) continue;
      for (std::size_t b = 0; b + 1 < pipes[p].stages.size(); ++b) moves.emplace_back(p, b);
    }
  };
  list_moves();
  bool improved = false;
  std::size_t failed = 0;  // moves failed in a row
  for (std::size_t i = 0; failed < moves.size() && budget > 0; i = (i + 1) % moves.size()) {
    const auto [p, b] = moves[i];
    const Pipeline& pipe = best.plan.pipelines[p];
    const std::vector<int> split = ends(pipe);
    bool kept = false;
    for (const int shift : {-1, 1}) {
      // The boundary after stage b moves by `shift` layers; both stages keep one.
      const int at = split[b] + shift;
      if (at <= pipe.stages[b].layer_begin || at >= pipe.stages[b + 1].layer_end) continue;
      Plan trial = best.plan;
      for (Pipeline& t : trial.pipelines) {
        if (ends(t) != split) continue;
        t.stages[b].layer_end = at;
        t.stages[b + 1].layer_begin = at;
      }
      ScoredPlan moved = score_plan(cm_, std::move(trial));
      --budget;
      if (moved.objective() < best.objective() * (1 - 1e-12)) {
        best = std::move(moved);
        kept = improved = true;
        break;
      }
      if (budget <= 0) break;
    }
    failed = kept ? 0 : failed + 1;
    if (kept) list_moves();  // classes may have split or merged
  }
  if (!improved) return std::nullopt;
  return best;
}

std::optional<ScoredPlan> SpecEvaluator::compute_balanced(const ScoredPlan& scored,
                                                          double send_weight, double bound) const {
  Plan plan = scored.plan;
  const int dp = static_cast<int>(plan.pipelines.size());
  const int layers = cm_.model().layers;
  bool changed = false;
  for (Pipeline& pipe : plan.pipelines) {
    const int k = static_cast<int>(pipe.stages.size());
    if (pipe.chunks() > 1 || pipe.has_mesh() || k > layers) return std::nullopt;
    std::vector<StageTerms> terms;
    std::vector<int> most(k);  // layers each stage holds in memory
    for (int i = 0; i < k; ++i) {
      const Stage& st = pipe.stages[i];
      terms.push_back(stage_terms(cm_, st.devices, i == 0, i + 1 == k,
                                  i + 1 < k ? &pipe.stages[i + 1].devices : nullptr, dp,
                                  pipe.micro_batch, st.recompute));
      const int in_flight =
          in_flight_micro_batches(cm_.training().schedule, i, k, pipe.micro_batches());
      const StageTerms& t = terms.back();
      const double per_layer = t.mem_slope + in_flight * t.mem_slope_f;
      const double room = t.capacity_bytes - t.memory(0, in_flight);
      most[i] =
          per_layer > 0 ? static_cast<int>(std::min<double>(layers, room / per_layer)) : layers;
      if (most[i] < 1) return std::nullopt;
    }
    std::vector<double> fixed(static_cast<std::size_t>(k));  // compute, and the weighted sends
    for (int i = 0; i < k; ++i) {
      fixed[i] =
          terms[i].fixed_s + send_weight * (terms[i].send_s + (i > 0 ? terms[i - 1].send_s : 0.0));
    }
    // The least T at which stages of at most T each (fixed + l * per layer) hold every layer.
    auto at = [&](double t, std::vector<int>& l) {
      long sum = 0;
      for (int i = 0; i < k; ++i) {
        const double fit = (t - fixed[i]) / terms[i].per_layer_s;
        l[i] = static_cast<int>(std::clamp<double>(std::floor(fit), 1, most[i]));
        sum += l[i];
      }
      return sum;
    };
    std::vector<int> l(k);
    double lo = 0, hi = 0;
    for (int i = 0; i < k; ++i) hi = std::max(hi, fixed[i] + layers * terms[i].per_layer_s);
    if (at(hi, l) < layers) return std::nullopt;
    for (int round = 0; round < 100; ++round) {
      const double mid = (lo + hi) / 2;
      (at(mid, l) >= layers ? hi : lo) = mid;
    }
    long surplus = at(hi, l) - layers;
    while (surplus > 0) {  // off the slowest stages first
      int slowest = -1;
      for (int i = 0; i < k; ++i) {
        if (l[i] > 1 &&
            (slowest < 0 || fixed[i] + l[i] * terms[i].per_layer_s >
                                fixed[slowest] + l[slowest] * terms[slowest].per_layer_s))
          slowest = i;
      }
      --l[slowest];
      --surplus;
    }
    int begin = 0;
    for (int i = 0; i < k; ++i) {
      changed = changed || pipe.stages[i].layers() != l[i];
      pipe.stages[i].layer_begin = begin;
      begin += l[i];
      pipe.stages[i].layer_end = begin;
    }
  }
  if (!changed) return std::nullopt;
  ScoredPlan balanced = score_plan(cm_, std::move(plan), bound, CostModel::OverBound::kDiscarded);
  if (!balanced.estimate.feasible || balanced.estimate.screened) return std::nullopt;
  return balanced;
}

std::string describe(const PlanSpec& spec, const Cluster& cluster) {
  std::string out = std::to_string(spec.pipelines.size()) + " pipeline" +
                    (spec.pipelines.size() == 1 ? "" : "s") + ":";
  for (const auto& p : spec.pipelines) {
    out += " [";
    for (std::size_t i = 0; i < p.segments.size(); ++i) {
      const MachineSegment& s = p.segments[i];
      out += (i ? " " : "") + cluster.machines()[s.machine].name + ":" + std::to_string(s.count) +
             "/tp" + std::to_string(s.tp);
    }
    out += "]";
  }
  return out;
}

}  // namespace search
}  // namespace hexi
