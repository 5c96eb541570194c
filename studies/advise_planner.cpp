#include "studies/advise_planner.hpp"

#include <algorithm>
#include <functional>
#include <set>

#include "scheduler/estimate/estimate.hpp"
#include "scheduler/hexiscale/hexiscale.hpp"
#include "scheduler/hexiseq/hexiseq.hpp"
#include "scheduler/program/lower.hpp"
#include "scheduler/program/lower_sequence.hpp"
#include "scheduler/scheduler.hpp"
#include "scheduler/search/batch_split.hpp"
#include "scheduler/search/search.hpp"
#include "sim/simulator.hpp"
#include "studies/planning.hpp"

namespace hexi {
inline namespace studies {

struct MixPlanner::Planned {
  MixPlan result;
  std::optional<Plan> plan;              // HexiScale
  std::optional<SequenceLayout> layout;  // HexiSeq
};

struct MixPlanner::Group {
  bool ok = false;
  std::string error;
  Plan plan;  // device ids of the group's own cluster
  double tokens_per_s = 0;
  int groups = 1;  // HexiScale plans it is made of
};

namespace {

std::string mix_label(const AdviseRequest& r, const std::vector<int>& n) {
  std::string s;
  for (std::size_t i = 0; i < n.size(); ++i) {
    if (n[i] > 0) s += (s.empty() ? "" : " + ") + std::to_string(n[i]) + " x " + r.types[i].label();
  }
  return s.empty() ? "no machines" : s;
}

int gpus_of(const AdviseRequest& r, const std::vector<int>& n) {
  int g = 0;
  for (std::size_t i = 0; i < n.size(); ++i) g += n[i] * r.types[i].gpus;
  return g;
}

// The parts a mix is planned in: for the largest k <= k_most whose unit holds the model
// (`holds`), k equal units of floor(n / k) machines of each type,
// and the remainder as one more part when it holds the model too, else added to the last
// unit. Equal units get the same plan, so their pipelines line up stage by stage for the DP
// sync. One part (the whole mix) when no k >= 2 works.
std::vector<std::vector<int>> split_mix(const std::vector<int>& n, int k_most,
                                        const std::function<bool(const std::vector<int>&)>& holds) {
  for (int k = k_most; k >= 2; --k) {
    std::vector<int> unit(n.size()), rest(n.size());
    bool any = false, left = false;
    for (std::size_t i = 0; i < n.size(); ++i) {
      unit[i] = n[i] / k;
      rest[i] = n[i] - k * unit[i];
      any = any || unit[i] > 0;
      left = left || rest[i] > 0;
    }
    if (!any || !holds(unit)) continue;
    std::vector<std::vector<int>> parts(k, unit);
    if (left && holds(rest)) {
      parts.push_back(rest);
    } else {
      for (std::size_t i = 0; i < n.size(); ++i) parts.back()[i] += rest[i];
    }
    return parts;
  }
  return {n};
}

// Machine index of each type's first machine in the cluster of mix `n` (types with no
// machine are skipped by cluster gen).
std::vector<int> first_machine(const std::vector<int>& n) {
  std::vector<int> first(n.size(), 0);
  int next = 0;
  for (std::size_t i = 0; i < n.size(); ++i) {
    first[i] = next;
    next += n[i];
  }
  return first;
}

// The machine of `device` (index into cluster.machines()).
int machine_of(const Cluster& c, int device) {
  const auto& ms = c.machines();
  auto it = std::upper_bound(ms.begin(), ms.end(), device,
                             [](int d, const Machine& m) { return d < m.first_device; });
  return static_cast<int>(it - ms.begin()) - 1;
}

// A scheduler's answer: its tokens/s, or why there is none when its best `what` (plan,
// layout) does not fit.
MixPlan planned(bool fits, const std::string& what, double tokens_per_s, std::string summary) {
  MixPlan p;
  p.ok = fits;
  if (!fits) p.error = "the best " + what + " does not fit in memory";
  p.tokens_per_s = tokens_per_s;
  p.summary = std::move(summary);
  return p;
}

}  // namespace

std::string plan_summary(const Plan& plan, const TrainingConfig& training) {
  std::size_t lo = SIZE_MAX, hi = 0;
  std::set<int> tps;
  int full = 0;
  for (const auto& p : plan.pipelines) {
    lo = std::min(lo, p.stages.size());
    hi = std::max(hi, p.stages.size());
    for (const auto& s : p.stages) {
      tps.insert(s.tp());
      if (s.recompute_in(training) == Recompute::kFull) ++full;
    }
  }
  std::string tp;
  for (int t : tps) tp += (tp.empty() ? "" : "/") + std::to_string(t);
  std::string s = std::to_string(plan.pipelines.size()) + " pipeline" +
                  (plan.pipelines.size() == 1 ? "" : "s") + " x " + std::to_string(lo) +
                  (hi > lo ? "-" + std::to_string(hi) : "") + (hi == 1 ? " stage" : " stages") +
                  ", TP " + tp;
  if (full > 0 && training.recompute != Recompute::kFull)
    s += ", full recompute on " + std::to_string(full) + " stage" + (full == 1 ? "" : "s");
  return s;
}

MixPlanner::MixPlanner(const AdviseRequest& request, const GpuCatalog& catalog)
    : request_(request), catalog_(catalog) {}

MixPlanner::~MixPlanner() = default;

Result<Cluster> MixPlanner::cluster(const std::vector<int>& n) const {
  std::vector<MixEntry> mix;
  for (std::size_t i = 0; i < n.size(); ++i) {
    if (n[i] > 0) mix.push_back({request_.types[i].gpu.name, n[i], request_.types[i].gpus});
  }
  if (mix.empty()) return bad_input("a mix with no machines");
  return Cluster::from_json(generate_cluster_json(mix, request_.fabric),
                            "advise mix " + mix_label(request_, n), catalog_);
}

Status MixPlanner::check_options() const {
  if (request_.long_context()) return {};
  Scenario sc;
  sc.scheduler_options = request_.search.scheduler_options;
  sc.scheduler_options_origin = request_.file.string() + " (search.scheduler_options)";
  auto o = read_hexiscale_options(sc);
  if (!o) return o.error();
  return {};
}

// The default planning call (the best of HexiScale and the cheap baselines; HexiSeq for long
// context) on the whole cluster of mix `n`, with `micro_batches` of the
// training config's micro-batch as its global batch.
MixPlanner::Planned MixPlanner::plan_whole(const std::vector<int>& n, int micro_batches) const {
  Planned out;
  auto failed = [&out](const Error& e) {
    out.result.error = e.message;
    return out;
  };
  auto c = cluster(n);
  if (!c) return failed(c.error());
  Scenario sc;
  sc.name = "advise: " + mix_label(request_, n);
  sc.cluster = std::move(*c);
  sc.model = request_.model;
  sc.training = request_.training;
  sc.training.global_batch = micro_batches * request_.training.micro_batch;
  sc.scheduler_options = request_.search.scheduler_options;
  sc.scheduler_options_origin = request_.file.string() + " (search.scheduler_options)";
  sc.seed = request_.search.seed;
  if (request_.long_context()) {
    SequenceCost cost(sc.cluster, sc.model, sc.training, profile_);
    auto r = run_hexiseq(cost, {}, request_.search.hexiseq);
    if (!r) return failed(r.error());
    out.result = planned(r->time.fits, "layout", r->time.tokens_per_s,
                         std::to_string(r->layout.groups.size()) + " sequence group" +
                             (r->layout.groups.size() == 1 ? "" : "s") + " (" + r->grouping + ")");
    out.layout = std::move(r->layout);
    return out;
  }
  SearchOptions so;
  so.seed = request_.search.seed;
  // The planning call `hexisim plan` makes: the same plan for the same mix and seed.
  auto r = plan_pipeline(std::string(kBestPlan), sc, so, request_.search.verify);
  if (!r) return failed(r.error());
  out.result = planned(r->estimate.feasible, "plan", r->estimate.tokens_per_s,
                       plan_summary(r->plan, sc.training));
  out.plan = std::move(r->plan);
  return out;
}

const MixPlanner::Group& MixPlanner::plan_part(const std::vector<int>& n, int micro_batches) {
  auto& slot = groups_[{n, micro_batches}];
  if (slot) return *slot;
  slot = std::make_unique<Group>();
  if (gpus_of(request_, n) > request_.search.plan_gpus) {
    // A part holds the model with room to spare: HexiScale packs whole layers per GPU and
    // fails on clusters barely above the total memory the model needs.
    const double need = 1.5 * minimum_memory_bytes(request_.model, request_.training);
    const double reserve = request_.training.reserve_gib * 1073741824.0;
    auto holds = [&](const std::vector<int>& part) {
      double usable = 0;
      for (std::size_t i = 0; i < part.size(); ++i) {
        const MachineType& t = request_.types[i];
        usable += part[i] * t.gpus * std::max(0.0, t.gpu.memory_bytes() - reserve);
      }
      return usable >= need;
    };
    // Two ways to cut it, k0 = ceil(GPUs / plan_gpus) parts or one more, smaller: HexiScale's
    // plans of nearby compositions differ by a few percent, the better is kept.
    const int k0 =
        (gpus_of(request_, n) + request_.search.plan_gpus - 1) / request_.search.plan_gpus;
    std::vector<std::vector<int>> tried;
    for (int k : {k0, k0 + 1}) {
      const auto parts = split_mix(n, k, holds);
      if (parts.size() < 2 || parts == tried) continue;
      Group g = combine(n, parts, micro_batches);
      if (g.ok && (!slot->ok || g.tokens_per_s > slot->tokens_per_s)) {
        *slot = std::move(g);
      } else if (!slot->ok && slot->error.empty()) {
        slot->error = g.error;
      }
      tried = parts;
    }
    if (!tried.empty()) return *slot;
  }
  ++runs_;
  Planned p = plan_whole(n, micro_batches);
  slot->ok = p.result.ok && p.plan.has_value();
  slot->error = p.result.error;
  slot->tokens_per_s = p.result.tokens_per_s;
  if (p.plan) slot->plan = std::move(*p.plan);
  return *slot;
}

namespace {

// Each part's summed peak FLOP/s.
std::vector<double> part_peaks(const AdviseRequest& request,
                               const std::vector<std::vector<int>>& parts) {
  std::vector<double> peak;
  for (const auto& g : parts) {
    double p = 0;
    for (std::size_t i = 0; i < g.size(); ++i)
      p += g[i] * request.types[i].gpus * request.types[i].gpu.flops();
    peak.push_back(p);
  }
  return peak;
}

// The batch's micro-batches over the parts by their tokens/s (else by peak), each part at
// least one per pipeline of its plan; empty when no split gives every part that.
std::vector<int> part_shares(const std::vector<double>& rate, const std::vector<double>& peak,
                             const std::vector<int>& pipelines, int micro_batches) {
  auto fits = [&](const std::vector<int>& share) {
    if (share.empty()) return false;
    for (std::size_t j = 0; j < pipelines.size(); ++j) {
      if (share[j] < pipelines[j]) return false;
    }
    return true;
  };
  std::vector<int> share = proportional_split(rate, micro_batches);
  if (!fits(share)) share = proportional_split(peak, micro_batches);
  if (!fits(share)) return {};
  return share;
}

}  // namespace

// Each part planned for its share of the batch by peak (equal parts: the same share, one plan).
Result<std::vector<const MixPlanner::Group*>> MixPlanner::plan_parts(
    const std::vector<std::vector<int>>& parts, int micro_batches,
    const std::vector<double>& peak) {
  double total_peak = 0;
  for (double p : peak) total_peak += p;
  std::vector<const Group*> planned;
  for (std::size_t j = 0; j < parts.size(); ++j) {
    const int mb = std::max(1, static_cast<int>(micro_batches * peak[j] / total_peak));
    const Group& g = plan_part(parts[j], mb);
    if (!g.ok) return failure("part " + mix_label(request_, parts[j]) + ": " + g.error);
    planned.push_back(&g);
  }
  return planned;
}

// Each part's pipelines on the whole cluster: a part's machines of a type are the next ones of
// that type in the whole cluster; its share of micro-batches split over its pipelines as its
// plan split them.
Result<Plan> MixPlanner::place_parts(const std::vector<int>& n, const Cluster& whole,
                                     const std::vector<std::vector<int>>& parts,
                                     const std::vector<const Group*>& planned,
                                     const std::vector<int>& share, int micro_batch) const {
  const std::vector<int> first = first_machine(n);
  std::vector<int> cursor(n.size(), 0);  // machines of each type handed out so far
  Plan plan;
  plan.scheduler = "hexiscale";
  for (std::size_t j = 0; j < parts.size(); ++j) {
    auto pc = cluster(parts[j]);
    if (!pc) return pc.error();
    std::vector<int> global;  // local machine m of the part -> global machine
    for (std::size_t i = 0; i < n.size(); ++i) {
      for (int m = 0; m < parts[j][i]; ++m) global.push_back(first[i] + cursor[i] + m);
      cursor[i] += parts[j][i];
    }
    std::vector<double> weight;
    for (const auto& p : planned[j]->plan.pipelines) weight.push_back(p.micro_batches());
    const std::vector<int> batches = proportional_split(weight, share[j]);
    for (std::size_t p = 0; p < planned[j]->plan.pipelines.size(); ++p) {
      Pipeline pipe = planned[j]->plan.pipelines[p];
      pipe.batch = batches[p] * micro_batch;
      for (auto& st : pipe.stages) {
        for (int& d : st.devices) {
          const int lm = machine_of(*pc, d);
          d = whole.machines()[global[lm]].first_device + (d - pc->machines()[lm].first_device);
        }
      }
      plan.pipelines.push_back(std::move(pipe));
    }
  }
  return plan;
}

// The parts' plans put together on the cluster of `n` (see the header): the batch split over
// the parts by their tokens/s, and over each part's pipelines as its plan split it.
MixPlanner::Group MixPlanner::combine(const std::vector<int>& n,
                                      const std::vector<std::vector<int>>& parts,
                                      int micro_batches) {
  Group out;
  out.groups = 0;
  TrainingConfig t = request_.training;  // this part's share of the batch
  t.global_batch = micro_batches * t.micro_batch;
  auto whole = cluster(n);
  if (!whole) {
    out.error = whole.error().message;
    return out;
  }
  const std::vector<double> peak = part_peaks(request_, parts);
  auto planned = plan_parts(parts, micro_batches, peak);
  if (!planned) {
    out.error = planned.error().message;
    return out;
  }
  std::vector<double> rate;
  std::vector<int> pipelines;
  for (const Group* g : *planned) {
    rate.push_back(g->tokens_per_s);
    pipelines.push_back(static_cast<int>(g->plan.pipelines.size()));
    out.groups += g->groups;
  }
  const std::vector<int> share = part_shares(rate, peak, pipelines, micro_batches);
  if (share.empty()) {
    out.groups = 0;
    out.error = "too few micro-batches (" + std::to_string(micro_batches) + ") for the " +
                "pipelines of " + std::to_string(parts.size()) + " parts";
    return out;
  }
  auto plan = place_parts(n, *whole, parts, *planned, share, t.micro_batch);
  if (!plan) {
    out.error = plan.error().message;
    return out;
  }
  plan->comment = "advise: " + std::to_string(out.groups) + " groups of at most " +
                  std::to_string(request_.search.plan_gpus) + " GPUs, each planned by HexiScale";
  if (auto st = validate_plan(*plan, *whole, request_.model, t, "advise group plan"); !st) {
    out.error = "internal error: " + st.error().message;
    return out;
  }
  const Estimate e = CostModel(*whole, request_.model, t, profile_).estimate(*plan);
  out.ok = e.feasible;
  if (!e.feasible) out.error = "the groups' plan does not fit in memory";
  out.tokens_per_s = e.tokens_per_s;
  out.plan = std::move(*plan);
  return out;
}

MixPlan MixPlanner::plan(const std::vector<int>& n) {
  if (auto it = mixes_.find(n); it != mixes_.end()) {
    MixPlan cached = it->second->result;
    cached.scheduler_runs = 0;
    return cached;
  }
  runs_ = 0;
  auto planned = std::make_unique<Planned>();
  const int total_mb = request_.training.global_batch / request_.training.micro_batch;
  if (request_.long_context() || gpus_of(request_, n) <= request_.search.plan_gpus) {
    runs_ = 1;
    *planned = plan_whole(n, total_mb);
  } else {
    const Group& g = plan_part(n, total_mb);
    planned->result.ok = g.ok;
    planned->result.error = g.error;
    planned->result.tokens_per_s = g.tokens_per_s;
    planned->result.groups = g.groups;
    if (g.ok) {
      planned->result.summary =
          plan_summary(g.plan, request_.training) + " (" + std::to_string(g.groups) + " groups)";
      planned->plan = g.plan;
    }
  }
  planned->result.scheduler_runs = runs_;
  MixPlan result = planned->result;
  mixes_[n] = std::move(planned);
  return result;
}

Json MixPlanner::plan_json(const std::vector<int>& n) {
  auto it = mixes_.find(n);
  if (it == mixes_.end()) return nullptr;
  if (it->second->plan) return to_json(*it->second->plan);
  if (it->second->layout) return {{"sequence", to_json(*it->second->layout)}};
  return nullptr;
}

Result<double> MixPlanner::simulate(const std::vector<int>& n) {
  auto it = mixes_.find(n);
  if (it == mixes_.end() || (!it->second->plan && !it->second->layout)) return failure("no plan");
  auto c = cluster(n);
  if (!c) return c.error();
  const std::string name = "advise: " + mix_label(request_, n);
  Result<Program> program = failure("");
  if (it->second->layout) {
    program =
        lower_sequence(*it->second->layout, *c, request_.model, request_.training, name, name);
  } else {
    LowerOptions lo;
    lo.granularity = Granularity::kStage;
    lo.scenario = name;
    program = lower_plan(*it->second->plan, *c, request_.model, request_.training, lo, name);
  }
  if (!program) return program.error();
  SimOptions so;
  so.trace = false;
  so.scenario = name;
  auto out = hexi::simulate(*program, *c, request_.model, request_.training, profile_, so);
  if (!out) return out.error();
  return out->report.tokens_per_s;
}

}  // namespace studies
}  // namespace hexi
