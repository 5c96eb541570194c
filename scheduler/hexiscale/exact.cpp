#include "scheduler/hexiscale/exact.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "scheduler/hexiscale/pipeline.hpp"
#include "topologies/text.hpp"

namespace hexi {
inline namespace hexiscale {
namespace {

constexpr long kMaxTypes = 400000;  // beyond this the cluster is too big to enumerate
// Machine symmetries used to skip mirrored plans: at most this many permutations, and
// permutations times types (the table of each type's image).
constexpr std::size_t kMaxSymmetries = 120;
constexpr std::size_t kMaxSymmetryTable = 8000000;

struct Type {
  PipelineSpec spec;
  int index = 0;  // mixed-radix index of its per-machine device counts
};

class ExactSearch {
 public:
  ExactSearch(SpecEvaluator& ev, SearchClock& clock, ExactStats& stats)
      : ev_(ev), clock_(clock), stats_(stats), machines_(ev.cost_model().cluster().machines()) {
    stride_.resize(machines_.size());
    int s = 1;
    for (std::size_t m = 0; m < machines_.size(); ++m) {
      stride_[m] = s;
      s *= machines_[m].num_gpus + 1;
    }
    states_ = s;
    for (int i = 0; i < states_; ++i) {
      for (std::size_t m = 0; m < machines_.size(); ++m) digits_.push_back(digit(i, m));
    }
  }

  Status enumerate();
  std::optional<SpecResult> run(std::optional<SpecResult> incumbent);

 private:
  // The permutations of interchangeable machines (same class: same GPUs, links, NICs and
  // leaf switch) and each type's image under each; empty when there are too many.
  void symmetries();
  // Whether the plan chosen_ is the least (as a sorted list of type indices) of its images
  // under the machine permutations: of plans that are images of each other (equal estimates),
  // only that one is estimated.
  bool canonical() const;
  void search(int d);
  void bounds(int d);
  // A lower bound of the iteration time of every plan of `from` to `to` pipelines
  // (kInfeasible: none fits; a negative value: not computed, too large a dynamic program).
  double rate_bound(int from, int to);
  void dfs(std::size_t from, int remaining, int left, long served);
  void leaf();
  // The most micro-batches m <= `most` with m * floor < limit.
  static long most_below(double floor, double limit, long most);
  // A lower bound of the slowest pipeline of chosen_ under any batch split.
  double floor_split() const;
  double best_objective() const { return best_ ? best_->scored.objective() : kInfeasible; }
  bool fits(int type, int remaining) const;
  // Whether the devices of count vector `used` lie within those of `remaining`.
  bool within(int used, int remaining) const;
  int digit(int index, std::size_t m) const;  // devices of machine m in a count vector

  SpecEvaluator& ev_;
  SearchClock& clock_;
  ExactStats& stats_;
  const std::vector<Machine>& machines_;
  std::vector<int> stride_;
  int states_ = 1;
  std::vector<int> digits_;  // [state * machines + m]
  std::vector<Type> types_;
  // Per D: candidate types (indices into types_, best first), their micro-batch
  // capacity below T*, and the best capacity of (remaining devices, pipelines left).
  int d_ = 1;
  std::vector<int> order_;
  std::vector<long> capacity_;  // by type index
  std::vector<double> floor_;   // by type index: its curve's compute_floor()
  std::vector<long> table_;     // [remaining * (d + 1) + left], -1 = impossible
  std::vector<int> chosen_;
  std::vector<std::vector<int>> image_;  // [permutation][type]: the type it maps to
  std::optional<SpecResult> best_;
  bool stopped_ = false;
};

int ExactSearch::digit(int index, std::size_t m) const {
  return index / stride_[m] % (machines_[m].num_gpus + 1);
}

bool ExactSearch::within(int used, int remaining) const {
  const std::size_t nm = machines_.size();
  const int* u = &digits_[static_cast<std::size_t>(used) * nm];
  const int* r = &digits_[static_cast<std::size_t>(remaining) * nm];
  for (std::size_t m = 0; m < nm; ++m) {
    if (u[m] > r[m]) return false;
  }
  return true;
}

bool ExactSearch::fits(int type, int remaining) const {
  return within(types_[type].index, remaining);
}

Status ExactSearch::enumerate() {
  const Model& model = ev_.cost_model().model();
  const int nm = static_cast<int>(machines_.size());
  for (int idx = 1; idx < states_; ++idx) {
    std::vector<int> used, count;
    for (int m = 0; m < nm; ++m) {
      const int u = digit(idx, m);
      if (u > 0) {
        used.push_back(m);
        count.push_back(u);
      }
    }
    // Every degree combination, then every order of the machines.
    std::vector<std::vector<int>> degrees;
    for (int c : count) degrees.push_back(segment_degrees(model, c));
    std::vector<std::size_t> pick(used.size(), 0);
    for (;;) {
      std::vector<int> perm(used.size());
      std::iota(perm.begin(), perm.end(), 0);
      do {
        Type t;
        t.index = idx;
        for (int i : perm) t.spec.segments.push_back({used[i], count[i], degrees[i][pick[i]]});
        types_.push_back(std::move(t));
      } while (std::next_permutation(perm.begin(), perm.end()));
      if (static_cast<long>(types_.size()) > kMaxTypes) {
        return bad_input(
            "exact: cluster \"" + ev_.cost_model().cluster().name() + "\" has more than " +
            std::to_string(kMaxTypes) +
            " pipeline types to enumerate (too many machines); use fewer, larger machines");
      }
      std::size_t i = 0;
      while (i < pick.size() && ++pick[i] == degrees[i].size()) pick[i++] = 0;
      if (i == pick.size()) break;
    }
  }
  stats_.types = static_cast<long>(types_.size());
  symmetries();
  return {};
}

void ExactSearch::symmetries() {
  // Machines by class; every permutation within the classes but the identity.
  std::map<int, std::vector<int>> by_class;
  for (std::size_t m = 0; m < machines_.size(); ++m)
    by_class[ev_.machine_class(static_cast<int>(m))].push_back(static_cast<int>(m));
  std::vector<std::vector<int>> perms{std::vector<int>(machines_.size())};
  std::iota(perms[0].begin(), perms[0].end(), 0);
  for (const auto& [_, members] : by_class) {
    if (members.size() < 2) continue;
    std::vector<std::vector<int>> next;
    std::vector<int> images = members;  // sorted: machine indices ascending
    do {
      for (const auto& p : perms) {
        std::vector<int> q = p;
        for (std::size_t i = 0; i < members.size(); ++i) q[members[i]] = images[i];
        next.push_back(std::move(q));
        if (next.size() > kMaxSymmetries + 1) return;
      }
    } while (std::next_permutation(images.begin(), images.end()));
    perms = std::move(next);
  }
  perms.erase(perms.begin());  // the identity comes first
  if (perms.empty() || perms.size() * types_.size() > kMaxSymmetryTable) return;
  std::map<std::vector<int>, int> index;
  auto key = [](const PipelineSpec& spec, const std::vector<int>* perm) {
    std::vector<int> k;
    for (const MachineSegment& seg : spec.segments)
      k.insert(k.end(), {perm ? (*perm)[seg.machine] : seg.machine, seg.count, seg.tp});
    return k;
  };
  for (std::size_t t = 0; t < types_.size(); ++t)
    index.emplace(key(types_[t].spec, nullptr), static_cast<int>(t));
  for (const auto& perm : perms) {
    std::vector<int>& image = image_.emplace_back(types_.size());
    for (std::size_t t = 0; t < types_.size(); ++t) image[t] = index.at(key(types_[t].spec, &perm));
  }
}

bool ExactSearch::canonical() const {
  if (image_.empty()) return true;
  std::vector<int> plan = chosen_, mirrored(chosen_.size());
  std::sort(plan.begin(), plan.end());
  for (const std::vector<int>& image : image_) {
    for (std::size_t i = 0; i < plan.size(); ++i) mirrored[i] = image[plan[i]];
    std::sort(mirrored.begin(), mirrored.end());
    if (mirrored < plan) return false;
  }
  return true;
}

void ExactSearch::bounds(int d) {
  const int micro = ev_.micro_batches();
  const double limit = best_objective();
  capacity_.assign(types_.size(), 0);
  floor_.assign(types_.size(), kInfeasible);
  for (int t : order_) {
    PlanSpec one{{types_[t].spec}};
    const auto curve = ev_.curve(one, 0, d);
    const double f = curve->compute_floor();
    floor_[t] = f;
    // At most the compute floor's count; then the largest m whose realized split's timeline
    // floor is below T* (it need not grow with m: every m from the top is looked at).
    long m = most_below(f, limit, micro - (d - 1));
    while (m > 0 && !(curve->timeline_floor(static_cast<int>(m)) < limit)) --m;
    capacity_[t] = m;
  }
  // table[r][k]: the most micro-batches k pipelines within the devices r can run (the
  // devices they leave idle included).
  table_.assign(static_cast<std::size_t>(states_) * (d + 1), -1);
  for (int r = 0; r < states_; ++r) table_[static_cast<std::size_t>(r) * (d + 1)] = 0;
  for (int k = 1; k <= d; ++k) {
    for (int r = 1; r < states_; ++r) {
      long best = -1;
      for (int t : order_) {
        if (capacity_[t] == 0 || !fits(t, r)) continue;
        const long rest = table_[static_cast<std::size_t>(r - types_[t].index) * (d + 1) + k - 1];
        if (rest >= 0) best = std::max(best, rest + capacity_[t]);
      }
      table_[static_cast<std::size_t>(r) * (d + 1) + k] = best;
    }
  }
}

long ExactSearch::most_below(double floor, double limit, long most) {
  if (std::isinf(floor)) return 0;
  if (std::isinf(limit) || !(floor > 0)) return most;
  long m = static_cast<long>(std::min<double>(most, std::floor(limit / floor)));
  while (m > 0 && !(static_cast<double>(m) * floor < limit)) --m;
  return m;
}

double ExactSearch::floor_split() const {
  // The least over batch splits (every pipeline at least one micro-batch) of the largest
  // m_p * floor_p: the micro-batches an optimal split holds include those that end before
  // the fluid split's time (which is at most its) and every pipeline's first; from there the
  // rest go one at a time to the pipeline whose next one ends soonest (at most d of them).
  const int d = static_cast<int>(chosen_.size());
  const long micro = ev_.micro_batches();
  if (micro < d) return kInfeasible;  // no split gives every pipeline a micro-batch
  double inverse = 0;
  for (int t : chosen_) {
    if (!(floor_[t] > 0)) return 0;  // no bound
    inverse += 1 / floor_[t];
  }
  const double fluid = static_cast<double>(micro) / inverse;
  std::vector<long> m(d);
  long placed = 0;
  for (int p = 0; p < d; ++p) {
    m[p] = std::max<long>(1, static_cast<long>(std::floor(fluid / floor_[chosen_[p]])));
    placed += m[p];
  }
  // Too many (the ones): take back from the pipelines that end last.
  while (placed > micro) {
    int worst = -1;
    for (int p = 0; p < d; ++p) {
      if (m[p] > 1 && (worst < 0 || m[p] * floor_[chosen_[p]] > m[worst] * floor_[chosen_[worst]]))
        worst = p;
    }
    if (worst < 0) break;
    --m[worst];
    --placed;
  }
  for (; placed < micro; ++placed) {
    int next = 0;
    for (int p = 1; p < d; ++p) {
      if ((m[p] + 1) * floor_[chosen_[p]] < (m[next] + 1) * floor_[chosen_[next]]) next = p;
    }
    ++m[next];
  }
  double slowest = 0;
  for (int p = 0; p < d; ++p)
    slowest = std::max(slowest, static_cast<double>(m[p]) * floor_[chosen_[p]]);
  return slowest;
}

void ExactSearch::leaf() {
  ++stats_.leaves;
  PlanSpec spec;
  for (int t : chosen_) spec.pipelines.push_back(types_[t].spec);
  // Lower bounds of the realized plan's iteration time: the cheap one of the compute floors,
  // then the one of the realized splits (the pipelines' curves are none: they approximate
  // the timeline from above where sends and the fill weigh).
  clock_.count();
  if (!canonical()) {
    ++stats_.mirrored;
    return;
  }
  if (!(floor_split() < best_objective())) return;
  const double slowest = ev_.iteration_floor_s(spec);
  if (!(slowest < best_objective())) return;
  ++stats_.full_estimates;
  auto scored = ev_.evaluate(spec, "exact");
  if (!scored || !scored->estimate.feasible || !(scored->objective() < best_objective())) return;
  clock_.count(scored->estimate.tokens_per_s);
  best_ = SpecResult{std::move(spec), std::move(*scored)};
  bounds(d_);  // a lower T* cuts harder
}

void ExactSearch::dfs(std::size_t from, int remaining, int left, long served) {
  ++stats_.nodes;
  if ((stats_.nodes & 1023) == 0 && clock_.out_of_time()) stopped_ = true;
  if (stopped_) return;
  if (left == 0) {
    leaf();  // the devices still `remaining` are left idle
    return;
  }
  const int micro = ev_.micro_batches();
  for (std::size_t i = from; i < order_.size() && !stopped_; ++i) {
    const int t = order_[i];
    if (capacity_[t] == 0 || !fits(t, remaining)) continue;
    const int rest = remaining - types_[t].index;
    const long more = table_[static_cast<std::size_t>(rest) * (d_ + 1) + left - 1];
    if (more < 0 || served + capacity_[t] + more < micro) continue;
    chosen_.push_back(t);
    dfs(i, rest, left - 1, served + capacity_[t]);
    chosen_.pop_back();
  }
}

void ExactSearch::search(int d) {
  d_ = d;
  order_.clear();
  for (std::size_t t = 0; t < types_.size(); ++t) {
    PlanSpec one{{types_[t].spec}};
    if (ev_.curve(one, 0, d)->time(1) != kInfeasible) order_.push_back(static_cast<int>(t));
  }
  bounds(d);
  // Most capable types first: good plans early, so T* tightens early.
  std::stable_sort(order_.begin(), order_.end(),
                   [&](int a, int b) { return capacity_[a] > capacity_[b]; });
  clock_.phase("exact: D=" + std::to_string(d) + ", " + std::to_string(order_.size()) +
               " pipeline types");
  dfs(0, states_ - 1, d, 0);
}

double ExactSearch::rate_bound(int from, int to) {
  // The most micro-batches per second (1 / compute floor) of a type's devices, by count vector:
  // the floors at `to` pipelines, which are no higher than at fewer (more pipelines share the
  // optimizer state under ZeRO: more layers fit a stage; the compute is the same).
  std::vector<double> rate(static_cast<std::size_t>(states_), 0);
  for (const Type& type : types_) {
    PlanSpec one{{type.spec}};
    const double f = ev_.curve(one, 0, to)->compute_floor();
    if (!(f > 0)) return 0;  // no bound
    if (f != kInfeasible) rate[type.index] = std::max(rate[type.index], 1 / f);
  }
  std::vector<int> useful;
  for (int u = 1; u < states_; ++u) {
    if (rate[u] > 0) useful.push_back(u);
  }
  constexpr double kMaxWork = 3e8;  // the dynamic program's steps
  if (static_cast<double>(states_) * static_cast<double>(useful.size()) * to > kMaxWork) return -1;
  // most[r][k]: the largest summed rate of k pipelines within the devices r (-1: none fits).
  std::vector<double> most(static_cast<std::size_t>(states_) * (to + 1), -1);
  for (int r = 0; r < states_; ++r) most[static_cast<std::size_t>(r) * (to + 1)] = 0;
  double best = -1;
  for (int k = 1; k <= to; ++k) {
    for (int r = 1; r < states_; ++r) {
      double m = -1;
      for (int u : useful) {
        if (!within(u, r)) continue;
        const double rest = most[static_cast<std::size_t>(r - u) * (to + 1) + k - 1];
        if (rest >= 0) m = std::max(m, rest + rate[u]);
      }
      most[static_cast<std::size_t>(r) * (to + 1) + k] = m;
    }
    if (k >= from)
      best = std::max(best, most[static_cast<std::size_t>(states_ - 1) * (to + 1) + k]);
  }
  // Each pipeline's stages compute its micro-batches one at a time, each taking at least its
  // floor: the slowest takes at least the global count over the summed rates.
  return best > 0 ? ev_.micro_batches() / best : kInfeasible;
}

std::optional<SpecResult> ExactSearch::run(std::optional<SpecResult> incumbent) {
  best_ = std::move(incumbent);
  const int d_max = max_pipelines_by_memory(ev_.cost_model(), ev_.least_memory_recompute());
  int d = 1;
  for (; d <= d_max && !stopped_; ++d) search(d);
  stats_.proven = !stopped_;
  if (stopped_ && best_) {
    // search(d - 1) was cut short: the pipeline counts from there on are bounded.
    const double b = rate_bound(d - 1, d_max);
    const double bound = b < 0 ? -1 : std::min(best_objective(), b);
    stats_.bound_s = bound;
    stats_.gap = bound < 0 ? 0 : (best_objective() - bound) / best_objective();
  }
  return best_;
}

}  // namespace

std::optional<SpecResult> exact_search(SpecEvaluator& ev, SearchClock& clock,
                                       std::optional<SpecResult> incumbent, ExactStats& stats) {
  ExactSearch search(ev, clock, stats);
  if (!search.enumerate()) return std::nullopt;
  return search.run(std::move(incumbent));
}

Result<SearchResult> run_exact(const Scenario& sc, const SearchOptions& options) {
  const Cluster& c = sc.cluster;
  const int most = options.time_budget_s > 0 ? kExactMaxGpusBudgeted : kExactMaxGpus;
  if (c.num_devices() > most) {
    return bad_input("exact: cluster \"" + c.name() + "\" has " + std::to_string(c.num_devices()) +
                     " GPUs; the exhaustive search is limited to " + std::to_string(kExactMaxGpus) +
                     ", and to " + std::to_string(kExactMaxGpusBudgeted) + " under --time-budget");
  }
  for (std::size_t m = 0; m < c.machines().size(); ++m) {
    if (!machine_symmetric(c, static_cast<int>(m))) {
      return bad_input(
          "exact: machine \"" + c.machines()[m].name +
          "\" has GPUs that are not interchangeable (several CPU sockets behind PCIe, or device "
          "link overrides); the exact search assumes they are");
    }
  }
  CostModel cm(c, sc.model, sc.training, sc.profile);
  SpecEvaluator ev(cm);
  SearchClock clock("exact", options);
  ExactStats stats;
  auto incumbent = hexiscale_search(ev, HexiScaleOptions{}, clock, options.seed);
  ExactSearch exact(ev, clock, stats);
  if (auto st = exact.enumerate(); !st) return st.error();
  auto best = exact.run(std::move(incumbent));
  if (!best) return no_feasible_plan(sc, "exact");
  SearchResult out;
  out.plan = std::move(best->scored.plan);
  out.plan.scheduler = "exact";
  out.plan.comment = "exact: " + describe(best->spec, c);
  out.estimate = std::move(best->scored.estimate);
  clock.finish(out);
  std::string proof = stats.proven ? "proven optimal" : "NOT proven optimal (time budget";
  if (!stats.proven) {
    proof += stats.bound_s < 0
                 ? "; no bound: too many pipeline types"
                 : ": every plan takes >= " + fixed(stats.bound_s, 3) + " s, a gap of " +
                       fixed(100 * stats.gap, 1) + " % below this one's";
    proof += ")";
  }
  out.notes.push_back(proof + " over HexiScale's plan space: " + std::to_string(stats.types) +
                      " pipeline types, " + std::to_string(stats.nodes) + " partial plans, " +
                      std::to_string(stats.leaves) + " complete plans (" +
                      std::to_string(stats.mirrored) +
                      " mirror images of others under interchangeable machines), " +
                      std::to_string(stats.full_estimates) + " estimated in full");
  return out;
}

}  // namespace hexiscale
}  // namespace hexi
