#include "studies/advise_search.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "scheduler/search/search.hpp"
#include "studies/advise_bound.hpp"
#include "topologies/text.hpp"

namespace hexi {
inline namespace studies {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Costs equal up to rounding count as equal (a cost "at most" another's).
bool cost_le(double a, double b) {
  return a <= b + 1e-9 * std::max(1.0, std::abs(b));
}

// A candidate mix, by its code: the bought counts in mixed radix (type 0 the lowest digit).
struct Candidate {
  std::int64_t code = 0;
  double cost = 0;   // on the cost axis
  double bound = 0;  // tokens/s
  double pred = 0;   // tokens/s, calibrated per type (times kappa, Search::kappa_)
  int types = 0;     // machine types in the mix (owned ones included)
  double x = 0;      // log of the cost (floored), for the hypervolume
  double lp = 0;     // log of pred
};

// The best planned tokens/s at each cost or less, and how much of the (log cost, log
// tokens/s) plane a new point would add to what the planned points dominate (the
// hypervolume gain, up to a reference cost a little above the dearest candidate).
class Staircase {
 public:
  Staircase(double x_ref, double log_floor) : x_ref_(x_ref), log_floor_(log_floor) {}

  void add(double cost, double x, double tokens_per_s) {
    points_.push_back({cost, x, tokens_per_s, 0});
    std::sort(points_.begin(), points_.end(),
              [](const Step& a, const Step& b) { return a.cost < b.cost; });
    levels();
  }
  // Tokens/s below exp(log_floor) count for nothing in the gain.
  void set_floor(double log_floor) {
    log_floor_ = log_floor;
    levels();
  }
  double best_at(double cost) const {
    double best = 0;  // a handful of points (the plans made): a scan is cheap
    for (const Step& p : points_) {
      if (!cost_le(p.cost, cost)) break;
      best = std::max(best, p.tokens);
    }
    return best;
  }
  // What a point at log cost x and log tokens/s lp adds: the sum over the steps from x on of
  // (lp - the step's log best) x its width, while lp is above it.
  double log_gain(double x, double lp) const {
    double level = log_floor_, gain = 0, from = x;
    std::size_t k = 0;
    for (; k < points_.size() && points_[k].x <= x; ++k) level = points_[k].log_best;
    for (; lp > level; ++k) {
      const double to = k < points_.size() ? points_[k].x : x_ref_;
      gain += (lp - level) * std::max(0.0, to - from);
      if (k >= points_.size()) break;
      from = to;
      level = points_[k].log_best;
    }
    return gain;
  }

 private:
  struct Step {
    double cost, x, tokens, log_best;
  };
  void levels() {
    double best = 0;
    for (Step& p : points_) {
      best = std::max(best, p.tokens);
      p.log_best = std::max(log_floor_, std::log(best));
    }
  }
  double x_ref_, log_floor_;
  std::vector<Step> points_;  // by cost
};

class Search {
 public:
  Search(const AdviseRequest& r, const MixModel& m, MixEvaluator& ev, const ProgressFn& progress)
      : r_(r), model_(m), ev_(ev), progress_(progress), table_(cost_table(r)) {}

  AdviseResult run();

 private:
  std::vector<int> decode(std::int64_t code) const;
  std::int64_t encode(const std::vector<int>& buy) const;  // -1 beyond max_machines
  double bound_of(const std::vector<int>& machines) const;
  double usable_of(const std::vector<int>& machines) const;
  int gpus_of(const std::vector<int>& machines) const;
  std::vector<int> machines_of(const std::vector<int>& buy) const;
  long find(std::int64_t code) const;  // index into cands_, or -1
  void enumerate();
  Point priced(const std::vector<int>& buy) const;  // machines, GPUs, cost and bound; no plan
  Point evaluate(const std::vector<int>& buy, const std::string& why);
  void evaluate_owned_and_marginal();
  void evaluate_types_alone();
  void calibrate();
  void guided_search();
  bool below_a_failure(const Candidate& c) const;
  long pick_for_front();
  long pick_for_target(double target);
  void update_kappa();
  void final_pass();
  void exhaustive_search();
  void front_and_simulations();
  std::vector<int> simulation_order() const;
  void say(const std::string& line) const {
    if (progress_) progress_(line);
  }

  const AdviseRequest& r_;
  const MixModel& model_;
  MixEvaluator& ev_;
  const ProgressFn& progress_;
  const CostTable table_;
  AdviseResult res_;
  std::vector<Candidate> cands_;  // by code
  std::vector<char> done_;        // planned, per candidate
  std::vector<std::size_t> open_;
  Staircase stairs_{0, 0};
  // Median planned / predicted tokens/s so far, by the number of machine types in the mix
  // (index 0: over all mixes): mixing types costs what the per-type calibration misses.
  std::vector<double> kappa_;
  std::vector<std::vector<int>> failed_;  // bought counts of mixes that got no plan
  double x_floor_ = 0;
  std::vector<std::pair<int, double>> ratios_;  // (types, planned / predicted) per plan
  std::vector<std::pair<std::vector<int>, double>> planned_;  // (bought, planned / predicted)
  // planned / predicted of the planned mix nearest to `buy` (L1 over the counts, each type
  // scaled by its range); kappa by types when nothing is planned yet.
  double nearest_ratio(const std::vector<int>& buy, int types) const;
  double kappa(int types) const {
    if (types < static_cast<int>(kappa_.size()) && kappa_[types] > 0) return kappa_[types];
    return !kappa_.empty() && kappa_[0] > 0 ? kappa_[0] : 1.0;
  }
};

std::vector<int> Search::decode(std::int64_t code) const {
  std::vector<int> buy(r_.types.size());
  for (std::size_t i = 0; i < buy.size(); ++i) {
    const int radix = r_.types[i].max_buy + 1;
    buy[i] = static_cast<int>(code % radix);
    code /= radix;
  }
  return buy;
}

std::int64_t Search::encode(const std::vector<int>& buy) const {
  std::int64_t code = 0;
  for (std::size_t i = buy.size(); i-- > 0;) {
    if (buy[i] < 0 || buy[i] > r_.types[i].max_buy) return -1;
    code = code * (r_.types[i].max_buy + 1) + buy[i];
  }
  return code;
}

std::vector<int> Search::machines_of(const std::vector<int>& buy) const {
  std::vector<int> n = buy;
  for (std::size_t i = 0; i < n.size(); ++i) n[i] += r_.types[i].owned;
  return n;
}

int Search::gpus_of(const std::vector<int>& n) const {
  int g = 0;
  for (std::size_t i = 0; i < n.size(); ++i) g += n[i] * r_.types[i].gpus;
  return g;
}

double Search::bound_of(const std::vector<int>& n) const {
  double b = 0;
  for (std::size_t i = 0; i < n.size(); ++i) b += n[i] * r_.types[i].gpus * model_.bound_per_gpu[i];
  return b;
}

double Search::usable_of(const std::vector<int>& n) const {
  double u = 0;
  for (std::size_t i = 0; i < n.size(); ++i)
    u += n[i] * r_.types[i].gpus * model_.usable_bytes_per_gpu[i];
  return u;
}

long Search::find(std::int64_t code) const {
  auto it = std::lower_bound(cands_.begin(), cands_.end(), code,
                             [](const Candidate& c, std::int64_t k) { return c.code < k; });
  return it != cands_.end() && it->code == code ? it - cands_.begin() : -1;
}

void Search::enumerate() {
  AdviseStats& s = res_.stats;
  s.combinations = r_.combinations();
  std::vector<int> buy(r_.types.size(), 0);
  for (std::int64_t code = 0; code < s.combinations; ++code) {
    if (code > 0) {  // the next combination, odometer-wise
      for (std::size_t i = 0; i < buy.size(); ++i) {
        if (++buy[i] <= r_.types[i].max_buy) break;
        buy[i] = 0;
      }
    }
    const std::vector<int> n = machines_of(buy);
    if (gpus_of(n) == 0 || usable_of(n) < model_.memory_need_bytes) {
      ++s.no_memory;
      continue;
    }
    const double cost = cost_axis(r_.budget.pricing, table_.of(buy));
    if (!cost_le(cost, r_.budget.limit)) {
      ++s.over_budget;
      continue;
    }
    cands_.push_back({code, cost, bound_of(n), 0});
  }
  s.candidates = static_cast<std::int64_t>(cands_.size());
  done_.assign(cands_.size(), 0);
  // Log costs for the hypervolume: free candidates (owned only) count as half the cheapest
  // paid one; the reference is 5 % above the dearest.
  double cheapest = kInf, dearest = 0;
  for (const auto& c : cands_) {
    if (c.cost > 0) cheapest = std::min(cheapest, c.cost);
    dearest = std::max(dearest, c.cost);
  }
  const double floor = std::isfinite(cheapest) ? cheapest / 2 : 1;
  for (auto& c : cands_) c.x = std::log(std::max(c.cost, floor));
  x_floor_ = std::log(floor);
  stairs_ = Staircase(std::log(std::max(dearest, floor) * 1.05), 0);
  say(std::to_string(s.combinations) + " combinations of machine counts: " +
      std::to_string(s.candidates) + " candidates, " + std::to_string(s.over_budget) +
      " over budget, " + std::to_string(s.no_memory) + " without the memory any plan needs");
}

Point Search::priced(const std::vector<int>& buy) const {
  Point p;
  p.buy = buy;
  p.machines = machines_of(buy);
  p.gpus = gpus_of(p.machines);
  p.cost = table_.of(buy);
  p.cost_axis = cost_axis(r_.budget.pricing, p.cost);
  p.bound_tokens_per_s = bound_of(p.machines);
  return p;
}

Point Search::evaluate(const std::vector<int>& buy, const std::string& why) {
  Point p = priced(buy);
  const long idx = find(encode(buy));
  p.candidate = idx >= 0;
  const auto start = std::chrono::steady_clock::now();
  p.plan = ev_.plan(p.machines);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  res_.stats.scheduler_runs += p.plan.scheduler_runs;
  if (p.plan.ok) {
    p.metrics = point_metrics(p.cost, p.plan.tokens_per_s, r_.workload);
    if (p.plan.tokens_per_s > p.bound_tokens_per_s * (1 + 1e-9)) {
      say("internal error (please report it): " + buy_label(r_, buy) + " plans " +
          fixed(p.plan.tokens_per_s, 0) + " tokens/s, above its bound " +
          fixed(p.bound_tokens_per_s, 0));
    }
  }
  say(why + ": " + buy_label(r_, buy) + " (" + std::to_string(p.gpus) + " GPUs): " +
      (p.plan.ok ? fixed(p.plan.tokens_per_s, 0) + " tokens/s" : "no plan (" + p.plan.error + ")") +
      ", " + fixed(seconds, 1) + " s");
  if (!p.plan.ok) failed_.push_back(buy);
  if (idx >= 0 && !done_[idx]) {
    done_[idx] = 1;
    res_.evaluated.push_back(p);
    ++res_.stats.planned;
    if (p.plan.ok) {
      stairs_.add(p.cost_axis, std::max(cands_[idx].x, x_floor_), p.plan.tokens_per_s);
      if (cands_[idx].pred > 0) {
        ratios_.emplace_back(cands_[idx].types, p.plan.tokens_per_s / cands_[idx].pred);
        planned_.emplace_back(buy, p.plan.tokens_per_s / cands_[idx].pred);
      }
    }
  }
  return p;
}

void Search::evaluate_owned_and_marginal() {
  const std::vector<int> none(r_.types.size(), 0);
  bool owns = false;
  for (const auto& t : r_.types) owns = owns || t.owned > 0;
  if (owns) res_.owned = evaluate(none, "owned");
  for (const Addition& a : r_.marginal) {
    std::vector<int> buy = none;
    buy[a.type] = a.machines;
    MarginalRow row;
    row.add = a;
    row.point = evaluate(buy, "marginal");
    const double base = res_.owned && res_.owned->plan.ok ? res_.owned->plan.tokens_per_s : 0;
    row.delta_tokens_per_s = row.point.plan.ok ? row.point.plan.tokens_per_s - base : 0;
    row.delta_cost = row.point.cost_axis - (res_.owned ? res_.owned->cost_axis : 0);
    res_.marginal.push_back(std::move(row));
  }
}

void Search::evaluate_types_alone() {
  for (std::size_t t = 0; t < r_.types.size(); ++t) {
    if (r_.types[t].max_buy == 0) continue;
    std::vector<int> buy(r_.types.size(), 0);
    int n = r_.types[t].max_buy;
    for (; n > 0; --n) {
      buy[t] = n;
      if (find(encode(buy)) >= 0) break;
    }
    if (n > 0) {
      res_.alone.push_back(evaluate(buy, "type alone"));
      continue;
    }
    // No count is a candidate: the maximum, with the reason.
    buy[t] = r_.types[t].max_buy;
    Point p = priced(buy);
    p.candidate = false;
    const bool memory = usable_of(p.machines) >= model_.memory_need_bytes;
    p.plan.error = memory ? "over the budget at every count whose memory holds the model"
                          : "too little memory for any plan even at " +
                                std::to_string(r_.types[t].max_buy) + " machines";
    res_.alone.push_back(std::move(p));
  }
}

// phi per type from one homogeneous plan: the type alone, on the fewest machines whose
// memory holds the model, doubled (room for data parallelism), at least 32 GPUs and at
// most search.plan_gpus when the machines allow.
void Search::calibrate() {
  const std::size_t t = r_.types.size();
  res_.phi.assign(t, std::numeric_limits<double>::quiet_NaN());
  for (std::size_t i = 0; i < t; ++i) {
    const MachineType& m = r_.types[i];
    const double usable = m.gpus * model_.usable_bytes_per_gpu[i];
    const int avail = m.owned + m.max_buy;
    if (usable <= 0) continue;
    const int fewest = static_cast<int>(std::ceil(model_.memory_need_bytes / usable));
    if (fewest > avail) continue;
    int count = std::max(2 * fewest, (32 + m.gpus - 1) / m.gpus);
    count = std::min({count, avail, std::max(1, r_.search.plan_gpus / m.gpus)});
    count = std::max(count, fewest);
    std::vector<int> buy(t, 0);
    bool only_this = true;  // the reference is a real mix only when nothing else is owned
    for (std::size_t j = 0; j < t; ++j) {
      buy[j] = (j == i ? count : 0) - r_.types[j].owned;
      only_this = only_this && buy[j] >= 0;
    }
    Point p;
    if (only_this) {
      p = evaluate(buy, "calibration");
    } else {
      std::vector<int> n(t, 0);
      n[i] = count;
      p.plan = ev_.plan(n);
      res_.stats.scheduler_runs += p.plan.scheduler_runs;
      p.bound_tokens_per_s = bound_of(n);
    }
    ++res_.stats.calibration_plans;
    if (p.plan.ok) res_.phi[i] = p.plan.tokens_per_s / p.bound_tokens_per_s;
    say("calibration: " + std::to_string(count) + " x " + m.label() + ": " +
        (p.plan.ok ? fixed(res_.phi[i], 3) + " of the bound" : "no plan"));
  }
  double sum = 0;
  int known = 0;
  for (double f : res_.phi) {
    if (!std::isnan(f)) sum += f, ++known;
  }
  const double fallback = known > 0 ? sum / known : 0.5;
  for (auto& c : cands_) {
    const std::vector<int> n = machines_of(decode(c.code));
    c.pred = 0;
    for (std::size_t i = 0; i < t; ++i) {
      const double f = std::isnan(res_.phi[i]) ? fallback : res_.phi[i];
      c.pred += n[i] * r_.types[i].gpus * model_.bound_per_gpu[i] * f;
    }
    c.lp = std::log(std::max(c.pred, 1e-9));
    c.types = static_cast<int>(std::count_if(n.begin(), n.end(), [](int k) { return k > 0; }));
  }
  // Below 5 % of the largest prediction a mix adds nothing to the gain: the front's low end
  // (mixes that barely hold the model) is not worth many plans.
  double most = 0;
  for (const auto& c : cands_) most = std::max(most, c.pred);
  if (most > 0) stairs_.set_floor(std::log(0.05 * most));
  // What was planned before the prediction existed (owned, marginal) calibrates kappa too.
  for (const Point& p : res_.evaluated) {
    const long idx = find(encode(p.buy));
    if (p.plan.ok && idx >= 0 && cands_[idx].pred > 0) {
      ratios_.emplace_back(cands_[idx].types, p.plan.tokens_per_s / cands_[idx].pred);
      planned_.emplace_back(p.buy, p.plan.tokens_per_s / cands_[idx].pred);
    }
  }
}

void Search::update_kappa() {
  auto median = [](std::vector<double> r) {
    std::nth_element(r.begin(), r.begin() + r.size() / 2, r.end());
    return r[r.size() / 2];
  };
  kappa_.assign(r_.types.size() + 1, 0);
  std::vector<std::vector<double>> by(kappa_.size());
  for (const auto& [types, ratio] : ratios_) {
    by[0].push_back(ratio);
    by[types].push_back(ratio);
  }
  for (std::size_t k = 0; k < by.size(); ++k) {
    if (!by[k].empty()) kappa_[k] = median(by[k]);
  }
}

// Whether the candidate has no more machines of any type than a mix that got no plan: it
// has less memory (and compute) everywhere, so it is presumed to get none either.
bool Search::below_a_failure(const Candidate& c) const {
  if (failed_.empty()) return false;
  const std::vector<int> buy = decode(c.code);
  for (const auto& f : failed_) {
    bool below = true;
    for (std::size_t i = 0; i < buy.size() && below; ++i) below = buy[i] <= f[i];
    if (below) return true;
  }
  return false;
}

// The open candidate whose prediction (x kappa) adds the most hypervolume to the planned
// front; when none is predicted to add any, the one whose bound most exceeds the front at
// its cost. Drops what is planned or proven dominated from open_ on the way.
long Search::pick_for_front() {
  long best = -1;
  double best_gain = 0, best_ratio = 0;
  bool gaining = false;
  std::size_t kept = 0;
  for (std::size_t idx : open_) {
    const Candidate& c = cands_[idx];
    if (done_[idx]) continue;
    const double planned = stairs_.best_at(c.cost);
    if (c.bound <= planned) {  // cannot beat a planned mix that costs no more
      ++res_.stats.dominated;
      continue;
    }
    if (below_a_failure(c)) {
      ++res_.stats.presumed_no_plan;
      continue;
    }
    open_[kept++] = idx;
    const double gain = stairs_.log_gain(c.x, c.lp + std::log(kappa(c.types)));
    const double ratio = planned > 0 ? c.bound / planned : kInf;
    const Candidate* b = best >= 0 ? &cands_[best] : nullptr;
    bool better;
    if (gain > 0 || gaining) {
      better = gain > best_gain || (gain == best_gain && b && c.cost < b->cost);
    } else {
      better = !b || ratio > best_ratio || (ratio == best_ratio && c.cost < b->cost);
    }
    if (better) {
      best = static_cast<long>(idx);
      best_gain = gain;
      best_ratio = ratio;
      gaining = gaining || gain > 0;
    }
  }
  open_.resize(kept);
  return best;
}

double Search::nearest_ratio(const std::vector<int>& buy, int types) const {
  double best = kInf, ratio = kappa(types);
  for (const auto& [other, r] : planned_) {
    double d = 0;
    int other_types = 0;
    for (std::size_t i = 0; i < buy.size(); ++i) {
      const int range = r_.types[i].owned + r_.types[i].max_buy;
      d += std::abs(buy[i] - other[i]) / static_cast<double>(std::max(1, range));
      other_types += other[i] + r_.types[i].owned > 0;
    }
    // The neighbour's ratio, moved by what mixing one more or fewer type costs in general.
    if (d < best) best = d, ratio = r * kappa(types) / kappa(other_types);
  }
  return ratio;
}

// With a throughput target: the cheapest open candidate predicted to reach it, cheaper
// than the cheapest planned mix that does; -1 when there is none. The prediction is
// corrected by the planned mix nearest in composition (how far planned mixes of that kind
// fell short of their prediction).
long Search::pick_for_target(double target) {
  double reached = kInf;  // cost of the cheapest planned candidate reaching the target
  for (const Point& p : res_.evaluated) {
    if (p.plan.ok && p.plan.tokens_per_s >= target) reached = std::min(reached, p.cost_axis);
  }
  long best = -1;
  for (std::size_t idx : open_) {
    const Candidate& c = cands_[idx];
    if (done_[idx] || c.bound < target || !(c.cost < reached)) continue;
    if (best >= 0 && !(c.cost < cands_[best].cost)) continue;
    if (c.pred * nearest_ratio(decode(c.code), c.types) >= target) best = static_cast<long>(idx);
  }
  return best;
}

void Search::guided_search() {
  open_.clear();
  for (std::size_t k = 0; k < cands_.size(); ++k) {
    if (!done_[k]) open_.push_back(k);
  }
  const std::optional<double>& target = r_.workload.tokens_per_s;
  int plans = 0;
  // With a target, first the cheapest mix of each single type (bought) predicted to reach
  // it: single types are what the calibration predicts best, so these give the target's
  // answer a cost to beat early; the mixed picks below then look only below it.
  for (std::size_t i = 0; target && i < r_.types.size() && plans < r_.search.max_plans; ++i) {
    long best = -1;
    for (std::size_t idx : open_) {
      const Candidate& c = cands_[idx];
      if (done_[idx] || c.bound < *target || (best >= 0 && !(c.cost < cands_[best].cost))) continue;
      const std::vector<int> buy = decode(c.code);
      bool single = buy[i] > 0;
      for (std::size_t j = 0; j < buy.size() && single; ++j) single = j == i || buy[j] == 0;
      if (single && c.pred * kappa(c.types) >= *target) best = static_cast<long>(idx);
    }
    if (best < 0) continue;
    ++plans;
    evaluate(decode(cands_[best].code), "plan " + std::to_string(plans) + "/" +
                                            std::to_string(r_.search.max_plans) +
                                            " (target, one type)");
  }
  for (; plans < r_.search.max_plans; ++plans) {
    update_kappa();
    const std::string count =
        "plan " + std::to_string(plans + 1) + "/" + std::to_string(r_.search.max_plans);
    const long front = pick_for_front();  // also drops what is planned or dominated
    // Every other plan looks for the target's cheapest mix, when one is predicted.
    if (const long t = target && plans % 2 == 1 ? pick_for_target(*target) : -1; t >= 0) {
      evaluate(decode(cands_[t].code), count + " (target)");
      continue;
    }
    if (front < 0) break;
    evaluate(decode(cands_[front].code), count + " (front)");
  }
}

void Search::final_pass() {
  AdviseStats& s = res_.stats;
  std::size_t kept = 0;
  for (std::size_t idx : open_) {
    const Candidate& c = cands_[idx];
    if (done_[idx]) continue;
    const double planned = stairs_.best_at(c.cost);
    if (c.bound <= planned) {
      ++s.dominated;
      continue;
    }
    if (below_a_failure(c)) {
      ++s.presumed_no_plan;
      continue;
    }
    open_[kept++] = idx;
    s.open_gain = std::max(s.open_gain, planned > 0 ? c.bound / planned - 1 : kInf);
  }
  open_.resize(kept);
  s.open = static_cast<std::int64_t>(kept);
  s.complete = kept == 0;
  if (const auto& target = r_.workload.tokens_per_s) {
    double reached = kInf;
    for (const Point& p : res_.evaluated) {
      if (p.plan.ok && p.plan.tokens_per_s >= *target) reached = std::min(reached, p.cost_axis);
    }
    for (std::size_t idx : open_) {
      if (cands_[idx].bound >= *target && cands_[idx].cost < reached) ++s.target_open;
    }
  }
}

void Search::exhaustive_search() {
  std::vector<std::size_t> order(cands_.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return cands_[a].cost < cands_[b].cost; });
  std::size_t n = 0;
  for (std::size_t idx : order) {
    ++n;
    if (!done_[idx]) {
      evaluate(decode(cands_[idx].code),
               "plan " + std::to_string(n) + "/" + std::to_string(order.size()));
    }
  }
  res_.stats.complete = true;
}

void Search::front_and_simulations() {
  auto& ev = res_.evaluated;
  std::stable_sort(ev.begin(), ev.end(), [](const Point& a, const Point& b) {
    if (a.cost_axis != b.cost_axis) return a.cost_axis < b.cost_axis;
    return a.plan.tokens_per_s > b.plan.tokens_per_s;
  });
  double best = 0;
  for (std::size_t i = 0; i < ev.size(); ++i) {
    if (ev[i].plan.ok && ev[i].plan.tokens_per_s > best) {
      best = ev[i].plan.tokens_per_s;
      res_.front.push_back(static_cast<int>(i));
    }
  }
  for (int i : res_.front) {
    Point& p = ev[i];
    p.plan_json = ev_.plan_json(p.machines);
    if (r_.workload.tokens_per_s && !res_.cheapest_meeting_target &&
        p.plan.tokens_per_s >= *r_.workload.tokens_per_s)
      res_.cheapest_meeting_target = i;
  }
  for (int i : simulation_order()) {
    Point& p = ev[i];
    say("simulating " + buy_label(r_, p.buy) + " (" + std::to_string(p.gpus) + " GPUs)...");
    auto sim = ev_.simulate(p.machines);
    if (sim) {
      p.simulated_tokens_per_s = *sim;
    } else {
      p.simulation_note = sim.error().message;
    }
  }
  // Break-even against the winner: the lowest $/M tokens of the front points that buy something
  // (what is owned alone is paid for) and reach the target, if there is one.
  double lowest = 0;
  for (int i : res_.front) {
    const Point& p = ev[i];
    const bool buys = std::any_of(p.buy.begin(), p.buy.end(), [](int n) { return n > 0; });
    if (!buys || (p.metrics.meets_target && !*p.metrics.meets_target)) continue;
    if (lowest == 0 || p.metrics.usd_per_m_tokens < lowest) lowest = p.metrics.usd_per_m_tokens;
  }
  auto break_even = [&](Point& p) {
    if (p.plan.ok && lowest > 0) {
      p.break_even = studies::break_even(r_, table_, p.buy, p.plan.tokens_per_s, lowest);
    }
  };
  // Each point against the front: on it, or the cheapest front point at no more cost with at
  // least its tokens/s (the front's tokens/s rise with its cost).
  auto verdict = [&](Point& p) {
    if (!p.plan.ok) return;
    for (int f : res_.front) {
      const Point& q = ev[f];
      if (q.buy == p.buy) {
        p.on_front = true;
        return;
      }
      if (q.plan.tokens_per_s >= p.plan.tokens_per_s) {
        if (cost_le(q.cost_axis, p.cost_axis)) p.dominated_by = q.buy;
        return;
      }
    }
  };
  for (Point& p : ev) verdict(p);
  for (int i : res_.front) break_even(ev[i]);
  for (MarginalRow& m : res_.marginal) {
    verdict(m.point);
    break_even(m.point);
  }
  for (Point& p : res_.alone) {
    verdict(p);
    break_even(p);
  }
  for (int i : res_.front) {
    Point& p = ev[i];
    if (!p.simulated_tokens_per_s && p.simulation_note.empty()) {
      p.simulation_note = "not simulated (search.simulate = " + std::to_string(r_.search.simulate) +
                          " front points)";
    }
  }
}

// Which front points to simulate: the cheapest reaching the target first, then points
// spread evenly along the front (its first and last included), then the rest cheapest
// first, search.simulate in all.
std::vector<int> Search::simulation_order() const {
  const std::vector<int>& f = res_.front;
  const std::size_t want = std::min<std::size_t>(r_.search.simulate, f.size());
  std::vector<int> order;
  auto add = [&](int i) {
    if (order.size() < want && std::find(order.begin(), order.end(), i) == order.end())
      order.push_back(i);
  };
  if (res_.cheapest_meeting_target) add(*res_.cheapest_meeting_target);
  const std::size_t spread = want - order.size();
  for (std::size_t j = 0; j < spread; ++j) {
    const std::size_t pos =
        spread == 1 ? f.size() - 1 : (j * (f.size() - 1) + (spread - 1) / 2) / (spread - 1);
    add(f[pos]);
  }
  for (int i : f) add(i);
  return order;
}

AdviseResult Search::run() {
  enumerate();
  evaluate_owned_and_marginal();
  evaluate_types_alone();
  if (r_.search.prune) {
    calibrate();
    guided_search();
    final_pass();
  } else {
    exhaustive_search();
  }
  front_and_simulations();
  const AdviseStats& s = res_.stats;
  say("planned " + std::to_string(s.planned) + " of " + std::to_string(s.candidates) +
      " candidates (" + std::to_string(s.scheduler_runs) + " scheduler runs); " +
      std::to_string(s.dominated) + " proven dominated by the bound, " + std::to_string(s.open) +
      " open");
  return std::move(res_);
}

}  // namespace

MixModel mix_model(const AdviseRequest& r) {
  MixModel m;
  const Profile profile;
  const double reserve = r.training.reserve_gib * 1073741824.0;
  for (const MachineType& t : r.types) {
    const double flops = tokens_per_s_bound(t.gpu, profile, r.model, r.training);
    m.bound_per_gpu.push_back(
        r.long_context()
            ? flops
            : std::min(flops, layer_tokens_per_s_bound(t.gpu, profile, r.model, r.training)));
    m.usable_bytes_per_gpu.push_back(std::max(0.0, t.gpu.memory_bytes() - reserve));
  }
  // HexiSeq shards model states with ZeRO up to 3: only their 16 bytes per parameter are
  // sure to be needed; pipeline plans need minimum_memory_bytes (search.hpp).
  m.memory_need_bytes =
      r.long_context() ? 16.0 * r.model.params() : minimum_memory_bytes(r.model, r.training);
  return m;
}

AdviseResult run_advise(const AdviseRequest& r, const MixModel& model, MixEvaluator& evaluator,
                        const ProgressFn& progress) {
  return Search(r, model, evaluator, progress).run();
}

std::string buy_label(const AdviseRequest& r, const std::vector<int>& buy) {
  std::string s;
  for (std::size_t i = 0; i < buy.size(); ++i) {
    if (buy[i] > 0)
      s += (s.empty() ? "+" : ", +") + std::to_string(buy[i]) + " " + r.types[i].label();
  }
  return s.empty() ? "owned only" : s;
}

}  // namespace studies
}  // namespace hexi
