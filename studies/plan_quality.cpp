#include "studies/plan_quality.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "scheduler/scheduler.hpp"
#include "studies/random_scenarios.hpp"

namespace hexi {
inline namespace studies {
namespace {

PlannerOutcome run_planner(const std::string& name, const Scenario& sc,
                           const PlanQualityOptions& options) {
  PlannerOutcome o;
  o.scheduler = name;
  auto r = run_scheduler(name, sc, SchedulerOptions{});
  if (!r) {
    o.error = r.error().message;
  } else {
    o.fits = r->fits;
    o.tokens_per_s = r->tokens_per_s;
    o.search_time_s = r->search_time_s;
    if (r->document.plan) o.plan = *r->document.plan;
  }
  if (options.on_outcome) options.on_outcome(o);
  return o;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double min_of(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::min_element(v.begin(), v.end());
}

void add_cluster(QualityGroup& g, const ClusterQuality& q, const QualityTargets& t) {
  ++g.clusters;
  if (!q.feasible()) {
    ++g.infeasible;
    return;
  }
  if (auto r = q.ratio_to_best_baseline()) {
    g.ratios.push_back(*r);
    if (*r < t.every) ++g.below_every;
    if (*r >= t.most) ++g.at_least_most;
  } else if (q.hexiscale.feasible()) {
    ++g.only_hexiscale;  // no baseline's plan fits: HexiScale wins outright
    ++g.at_least_most;
  } else {
    ++g.below_every;  // only the exact search's plan fits
  }
  if (auto r = q.ratio_to_exact()) {
    g.exact_ratios.push_back(*r);
    if (*r < t.exact) ++g.below_exact;
  }
}

}  // namespace

bool ClusterQuality::feasible() const {
  if (hexiscale.feasible() || (exact && exact->feasible())) return true;
  return best_baseline() != nullptr;
}

const PlannerOutcome* ClusterQuality::best_baseline() const {
  const PlannerOutcome* best = nullptr;
  for (const PlannerOutcome& b : baselines) {
    if (b.feasible() && (best == nullptr || b.tokens_per_s > best->tokens_per_s)) best = &b;
  }
  return best;
}

std::optional<double> ClusterQuality::ratio_to_best_baseline() const {
  const PlannerOutcome* best = best_baseline();
  if (best == nullptr) return std::nullopt;
  return hexiscale.feasible_tokens_per_s() / best->tokens_per_s;
}

std::optional<double> ClusterQuality::ratio_to_exact() const {
  if (!exact || !exact->feasible()) return std::nullopt;
  return hexiscale.feasible_tokens_per_s() / exact->tokens_per_s;
}

std::vector<std::string> pipeline_baselines() {
  std::vector<std::string> names;
  for (const SchedulerInfo& s : schedulers()) {
    if (s.kind == SchedulerKind::kPipeline && s.name != "hexiscale" && s.name != "exact")
      names.push_back(s.name);
  }
  return names;
}

ClusterQuality measure_plan_quality(const Scenario& sc, const PlanQualityOptions& options) {
  ClusterQuality q;
  q.name = sc.name;
  q.mix = cluster_mix(sc.cluster);
  q.gpus = sc.cluster.num_devices();
  q.transport = std::string(to_string(sc.cluster.network_transport()));
  q.nic_GBps = sc.cluster.machines().empty() ? 0 : sc.cluster.machines()[0].nic_Bps / 1e9;
  q.model = sc.model.name;
  q.global_batch = sc.training.global_batch;
  q.seq_len = sc.training.seq_len;
  q.hexiscale = run_planner("hexiscale", sc, options);
  for (const std::string& name : pipeline_baselines())
    q.baselines.push_back(run_planner(name, sc, options));
  if (q.gpus <= options.exact_max_gpus) q.exact = run_planner("exact", sc, options);
  return q;
}

double QualityGroup::min_ratio() const {
  return min_of(ratios);
}
double QualityGroup::median_ratio() const {
  return median_of(ratios);
}
double QualityGroup::min_exact_ratio() const {
  return min_of(exact_ratios);
}

double QualityGroup::share_at_least_most() const {
  const int feasible = clusters - infeasible;
  return feasible == 0 ? 1.0 : static_cast<double>(at_least_most) / feasible;
}

bool QualityGroup::meets(const QualityTargets& t) const {
  return below_every == 0 && below_exact == 0 && share_at_least_most() >= t.share;
}

QualitySummary summarize_plan_quality(const std::vector<ClusterQuality>& clusters,
                                      const QualityTargets& targets) {
  QualitySummary s;
  s.targets = targets;
  std::map<std::string, QualityGroup> kinds;
  QualityGroup all;
  all.kind = "all";
  for (const ClusterQuality& q : clusters) {
    QualityGroup& g = kinds[q.transport];
    g.kind = q.transport;
    add_cluster(g, q, targets);
    add_cluster(all, q, targets);
  }
  for (auto& [kind, g] : kinds) s.groups.push_back(std::move(g));
  s.groups.push_back(std::move(all));
  s.met = std::all_of(s.groups.begin(), s.groups.end(),
                      [&](const QualityGroup& g) { return g.meets(targets); });
  return s;
}

std::string plan_shape(const Plan& plan) {
  std::map<std::string, int> count;
  std::vector<std::string> order;
  for (const Pipeline& p : plan.pipelines) {
    std::string shape = "[";
    for (std::size_t i = 0; i < p.stages.size(); ++i)
      shape += (i ? " " : "") + std::to_string(p.stages[i].tp());
    shape += "]";
    if (count[shape]++ == 0) order.push_back(shape);
  }
  if (order.empty()) return "-";
  std::string out;
  for (const std::string& shape : order)
    out += (out.empty() ? "" : " ") + std::to_string(count[shape]) + "x" + shape;
  return out;
}

Json to_json(const PlannerOutcome& o) {
  Json j = {{"scheduler", o.scheduler},
            {"fits", o.fits},
            {"tokens_per_s", o.tokens_per_s},
            {"gpus_used", o.plan.num_devices()},
            {"pipelines", o.plan.pipelines.size()},
            {"shape", plan_shape(o.plan)},
            {"search_time_s", o.search_time_s},
            {"plan", to_json(o.plan)}};
  if (!o.error.empty()) j["error"] = o.error;
  return j;
}

Json to_json(const ClusterQuality& q) {
  Json baselines = Json::array();
  for (const PlannerOutcome& b : q.baselines) baselines.push_back(to_json(b));
  const PlannerOutcome* best = q.best_baseline();
  const auto ratio = q.ratio_to_best_baseline();
  const auto exact_ratio = q.ratio_to_exact();
  return {{"seed", q.seed},
          {"name", q.name},
          {"mix", q.mix},
          {"gpus", q.gpus},
          {"transport", q.transport},
          {"nic_GBps", q.nic_GBps},
          {"model", q.model},
          {"global_batch", q.global_batch},
          {"seq_len", q.seq_len},
          {"feasible", q.feasible()},
          {"hexiscale", to_json(q.hexiscale)},
          {"baselines", baselines},
          {"exact", q.exact ? to_json(*q.exact) : Json(nullptr)},
          {"best_baseline", best ? Json(best->scheduler) : Json(nullptr)},
          {"ratio_to_best_baseline", ratio ? Json(*ratio) : Json(nullptr)},
          {"ratio_to_exact", exact_ratio ? Json(*exact_ratio) : Json(nullptr)}};
}

Json to_json(const QualitySummary& s) {
  Json groups = Json::array();
  for (const QualityGroup& g : s.groups) {
    groups.push_back({{"kind", g.kind},
                      {"clusters", g.clusters},
                      {"infeasible", g.infeasible},
                      {"compared", g.ratios.size()},
                      {"only_hexiscale", g.only_hexiscale},
                      {"min_ratio", g.min_ratio()},
                      {"median_ratio", g.median_ratio()},
                      {"below_every", g.below_every},
                      {"share_at_least_most", g.share_at_least_most()},
                      {"exact_runs", g.exact_ratios.size()},
                      {"min_exact_ratio", g.min_exact_ratio()},
                      {"below_exact", g.below_exact},
                      {"meets_targets", g.meets(s.targets)}});
  }
  return {{"targets",
           {{"every", s.targets.every},
            {"most", s.targets.most},
            {"share", s.targets.share},
            {"exact", s.targets.exact}}},
          {"groups", groups},
          {"met", s.met}};
}

}  // namespace studies
}  // namespace hexi
