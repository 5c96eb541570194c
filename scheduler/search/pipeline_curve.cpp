#include "scheduler/search/pipeline_curve.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace hexi {
inline namespace search {
namespace {

// Relative headroom kept below capacity so that rounding in the linear memory
// terms never admits a split the estimate would call over capacity.
constexpr double kMemoryMargin = 1e-9;

// Memory of TP rank `rank` with `layers` layers and `in_flight` micro-batches (bytes).
double rank_memory(const CostModel& cm, const Stage& s, bool first, bool last, int rank, int layers,
                   int in_flight, int dp, int micro_batch) {
  StageShape shape = rank_shape(s, first, last, rank, cm.model().heads, micro_batch);
  shape.layer_begin = 0;
  shape.layer_end = layers;
  shape.in_flight = in_flight;
  shape.dp = dp;
  return device_memory(cm.model(), cm.training(), shape).total();
}

// Linear memory coefficients of one rank: m(l, f) = a + f*b + l*(c + f*d).
void fit_memory(const CostModel& cm, const Stage& s, bool first, bool last, int rank, int dp,
                int mb, StageTerms& t) {
  const double m01 = rank_memory(cm, s, first, last, rank, 0, 1, dp, mb);
  const double m02 = rank_memory(cm, s, first, last, rank, 0, 2, dp, mb);
  const double m11 = rank_memory(cm, s, first, last, rank, 1, 1, dp, mb);
  const double m12 = rank_memory(cm, s, first, last, rank, 1, 2, dp, mb);
  t.mem_base_f = m02 - m01;
  t.mem_base = m01 - t.mem_base_f;
  t.mem_slope_f = (m12 - m02) - (m11 - m01);
  t.mem_slope = (m11 - m01) - t.mem_slope_f;
}

bool same_terms(const StageTerms& a, const StageTerms& b) {
  return a.per_layer_s == b.per_layer_s && a.fixed_s == b.fixed_s && a.send_s == b.send_s &&
         a.mem_base == b.mem_base && a.mem_base_f == b.mem_base_f && a.mem_slope == b.mem_slope &&
         a.mem_slope_f == b.mem_slope_f && a.capacity_bytes == b.capacity_bytes;
}

// Most layers a stage may hold at a bound on its time (its memory cap without one).
int fit_under(const StageTerms& t, int cap, double bound) {
  if (std::isinf(bound)) return cap;
  const double room = (bound - t.fixed_s - t.boundary_s) / t.per_layer_s + 1e-9;
  return std::clamp(static_cast<int>(std::floor(room)), 0, cap);
}

}  // namespace

// An option no faster, with no smaller fixed time, that holds as many layers makes
// another useless (on a tie, the earlier one stays).
void PipelineCurve::drop_useless(std::vector<Choice>& all, std::size_t from) {
  auto dominates = [](const Choice& a, const Choice& b) {
    const StageTerms &x = *a.terms, &y = *b.terms;
    if (x.per_layer_s > y.per_layer_s || x.fixed_s > y.fixed_s || a.cap < b.cap) return false;
    const bool tie = x.per_layer_s == y.per_layer_s && x.fixed_s == y.fixed_s && a.cap == b.cap;
    return !tie || a.option < b.option;
  };
  // Judged against all of them first, then removed.
  thread_local std::vector<char> useless;
  useless.assign(all.size() - from, 0);
  for (std::size_t c = from; c < all.size(); ++c) {
    for (std::size_t o = from; o < all.size(); ++o) {
      if (all[o].option != all[c].option && dominates(all[o], all[c])) {
        useless[c - from] = 1;
        break;
      }
    }
  }
  std::size_t kept = from;
  for (std::size_t c = from; c < all.size(); ++c) {
    if (!useless[c - from]) all[kept++] = all[c];
  }
  all.resize(kept);
}

bool PipelineCurve::Choices::end_stage() {
  drop_useless(all, static_cast<std::size_t>(begin.back()));
  const bool any = static_cast<int>(all.size()) > begin.back();
  begin.push_back(static_cast<int>(all.size()));
  return any;
}

StageTerms stage_terms(const CostModel& cm, const std::vector<int>& devices, bool first, bool last,
                       const std::vector<int>* next, int dp, int micro_batch,
                       std::optional<Recompute> r) {
  StageTerms t;
  Stage s;
  s.devices = devices;
  s.recompute = r;
  t.recompute = s.recompute_in(cm.training());
  s.layer_end = 1;
  StageEstimate one = cm.stage(s, first, last, micro_batch);
  s.layer_end = 2;
  StageEstimate two = cm.stage(s, first, last, micro_batch);
  const double t1 = one.forward_s + one.backward_s, t2 = two.forward_s + two.backward_s;
  t.per_layer_s = t2 - t1;
  t.fixed_s = t1 - t.per_layer_s;
  if (next != nullptr) {
    t.send_s = cm.transfer_s(devices, *next, hidden_bytes(cm.model(), cm.training(), micro_batch));
    t.own_send_s = t.send_s;
  }
  // The tightest rank: least headroom with one layer and one micro-batch in flight.
  double worst = kInfeasible;
  for (int rank = 0; rank < s.tp(); ++rank) {
    StageTerms candidate;
    fit_memory(cm, s, first, last, rank, dp, micro_batch, candidate);
    candidate.capacity_bytes = cm.cluster().device_memory_bytes(devices[rank]);
    const double headroom = candidate.capacity_bytes - candidate.memory(1, 1);
    if (headroom < worst) {
      worst = headroom;
      t.mem_base = candidate.mem_base;
      t.mem_base_f = candidate.mem_base_f;
      t.mem_slope = candidate.mem_slope;
      t.mem_slope_f = candidate.mem_slope_f;
      t.capacity_bytes = candidate.capacity_bytes;
    }
  }
  return t;
}

std::vector<StageTerms> pipeline_terms(const CostModel& cm,
                                       const std::vector<std::vector<int>>& stages, int dp,
                                       int micro_batch) {
  std::vector<StageTerms> out;
  const int k = static_cast<int>(stages.size());
  for (int i = 0; i < k; ++i) {
    out.push_back(stage_terms(cm, stages[i], i == 0, i == k - 1,
                              i + 1 < k ? &stages[i + 1] : nullptr, dp, micro_batch));
  }
  return out;
}

std::vector<StageTerms> stage_options(const CostModel& cm, const std::vector<int>& devices,
                                      bool first, bool last, const std::vector<int>* next, int dp,
                                      int micro_batch, const std::vector<Recompute>& modes) {
  std::vector<StageTerms> options;
  for (std::size_t q = 0; q < modes.size(); ++q) {
    // The send does not depend on recompute: computed once.
    StageTerms t =
        stage_terms(cm, devices, first, last, q == 0 ? next : nullptr, dp, micro_batch, modes[q]);
    if (q > 0) t.send_s = t.own_send_s = options.front().send_s;
    const bool duplicate = std::any_of(options.begin(), options.end(),
                                       [&](const StageTerms& o) { return same_terms(o, t); });
    if (!duplicate) options.push_back(t);
  }
  return options;
}

std::vector<std::vector<StageTerms>> pipeline_options(const CostModel& cm,
                                                      const std::vector<std::vector<int>>& stages,
                                                      int dp, int micro_batch,
                                                      const std::vector<Recompute>& modes) {
  std::vector<std::vector<StageTerms>> out;
  const int k = static_cast<int>(stages.size());
  for (int i = 0; i < k; ++i) {
    out.push_back(stage_options(cm, stages[i], i == 0, i == k - 1,
                                i + 1 < k ? &stages[i + 1] : nullptr, dp, micro_batch, modes));
  }
  return out;
}

std::vector<Recompute> recompute_modes(const TrainingConfig& t, bool per_stage) {
  std::vector<Recompute> out{t.recompute};
  if (!per_stage) return out;
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    if (r != t.recompute) out.push_back(r);
  }
  return out;
}

namespace {

std::vector<std::vector<StageTerms>> one_option_each(std::vector<StageTerms> terms) {
  std::vector<std::vector<StageTerms>> out;
  for (auto& t : terms) out.push_back({std::move(t)});
  return out;
}

}  // namespace

PipelineCurve::PipelineCurve(std::vector<StageTerms> terms, int layers, PipelineSchedule schedule)
    : PipelineCurve(one_option_each(std::move(terms)), layers, schedule) {}

PipelineCurve::PipelineCurve(std::vector<std::vector<StageTerms>> options, int layers,
                             PipelineSchedule schedule)
    : options_(std::move(options)), num_layers_(layers), schedule_(schedule) {
  for (std::size_t i = 0; i < options_.size(); ++i) {
    const double before = i > 0 ? options_[i - 1].front().send_s : 0.0;
    for (StageTerms& t : options_[i]) t.boundary_s = before + t.send_s;
    send_sum_ += 2 * options_[i].front().send_s;
    send_max_ = std::max(send_max_, options_[i].front().send_s);
  }
}

int PipelineCurve::layer_cap(const StageTerms& t, int in_flight) const {
  const double room =
      t.capacity_bytes * (1 - kMemoryMargin) - t.mem_base - in_flight * t.mem_base_f;
  const double slope = t.mem_slope + in_flight * t.mem_slope_f;
  if (room < slope) return 0;
  return static_cast<int>(std::min<double>(num_layers_, std::floor(room / slope)));
}

void PipelineCurve::solve(int m, Solution& out, double limit) const {
  const int k = num_stages(), L = num_layers_;
  if (k == 0 || k > L || m < 1) return;
  thread_local Choices choices;  // scratch kept per thread (curves are shared by threads)
  choices.clear();
  long total_cap = 0;
  bool single = true;
  for (int i = 0; i < k; ++i) {
    const int in_flight = in_flight_micro_batches(schedule_, i, k, m);
    for (std::size_t q = 0; q < options_[i].size(); ++q) {
      // No stage holds more than L - k + 1 layers (the others need one each).
      const int cap = std::min(layer_cap(options_[i][q], in_flight), L - k + 1);
      if (cap >= 1) choices.all.push_back({&options_[i][q], static_cast<int>(q), cap});
    }
    if (!choices.end_stage()) return;
    int most = 0;
    for (const Choice& c : choices[i]) most = std::max(most, c.cap);
    total_cap += most;
    single = single && choices[i].size() == 1;
  }
  if (total_cap < L) return;
  if (single) {
    solve_single(m, choices, out, limit);
  } else {
    solve_options(m, choices, out, limit);
  }
}

namespace {

// One option per stage: choose the layers l_i (1 <= l_i <= cap_i, sum L) minimising
// sum_i l_i p_i + (m - 1) max(max_i (e_i + D_i + l_i p_i), send_max), with e_i the
// stage's fixed time, D_i its boundaries' transfers and p_i its per-layer time.
class SingleOption {
 public:
  SingleOption(std::vector<const StageTerms*> terms, std::vector<int> cap, int layers,
               double send_max)
      : terms_(std::move(terms)),
        cap_(std::move(cap)),
        k_(static_cast<int>(terms_.size())),
        layers_(layers),
        send_max_(send_max),
        by_cost_(k_) {
    std::iota(by_cost_.begin(), by_cost_.end(), 0);
    std::stable_sort(by_cost_.begin(), by_cost_.end(),
                     [&](int a, int b) { return terms_[a]->per_layer_s < terms_[b]->per_layer_s; });
  }

  double value(int i, int l) const {
    return terms_[i]->fixed_s + terms_[i]->boundary_s + l * terms_[i]->per_layer_s;
  }

  // For a bound b, the smallest sum fills the cheapest stages first; false when the
  // layers do not fit under it.
  bool fill(double b, std::vector<int>& ls) const {
    std::fill(ls.begin(), ls.end(), 1);
    int left = layers_ - k_;
    for (int i : by_cost_) {
      const int add = std::clamp(fit_under(*terms_[i], cap_[i], b) - 1, 0, left);
      ls[i] += add;
      left -= add;
    }
    return left == 0;
  }

  // The objective of `ls` for m micro-batches; *worst = its bottleneck.
  double objective(const std::vector<int>& ls, int m, double* worst) const {
    double sum = 0, top = 0;
    for (int i = 0; i < k_; ++i) {
      sum += ls[i] * terms_[i]->per_layer_s;
      top = std::max(top, value(i, ls[i]));
    }
    *worst = std::max(top, send_max_);
    return sum + (m - 1) * *worst;
  }

  // The smallest sum of per-layer times over every split (no bound).
  double floor_sum() const {
    std::vector<int> floor_l(k_);
    fill(kInfeasible, floor_l);
    double sum = 0;
    for (int i = 0; i < k_; ++i) sum += floor_l[i] * terms_[i]->per_layer_s;
    return sum;
  }

 private:
  std::vector<const StageTerms*> terms_;
  std::vector<int> cap_;
  int k_;
  int layers_;
  double send_max_;
  std::vector<int> by_cost_;  // stage indices, cheapest per-layer time first
};

}  // namespace

void PipelineCurve::solve_single(int m, const Choices& choices, Solution& out, double limit) const {
  const int k = num_stages();
  std::vector<const StageTerms*> terms(k);
  std::vector<int> cap(k);
  double fixed_sum = 0;  // sum e_i + 2 sum C_i
  for (int i = 0; i < k; ++i) {
    terms[i] = choices[i].front().terms;
    cap[i] = choices[i].front().cap;
    fixed_sum += terms[i]->fixed_s + 2 * terms[i]->send_s;
  }
  const SingleOption problem(terms, cap, num_layers_, send_max_);
  // One option per stage is the general case with one choice each: the same greedy
  // bound and breakpoints.
  double bound = min_max_bound(choices, num_layers_);
  // No split has a smaller sum than the unbounded fill, nor a smaller bottleneck than the bound.
  if (!std::isinf(limit) && out.bounded(fixed_sum + problem.floor_sum() +
                                            (m - 1) * std::max(m > 1 ? bound : 0.0, send_max_),
                                        limit))
    return;
  std::vector<int> best_l(k), trial(k);
  double best_worst = 0;
  if (m == 1) bound = kInfeasible;  // no bound term: the smallest sum wins outright
  problem.fill(bound, best_l);
  double best = problem.objective(best_l, m, &best_worst);
  if (m > 1) {
    const double floor_sum = problem.floor_sum();
    // Larger bounds: only worth it while the smaller sum can pay for them.
    for (;;) {
      const double next = next_breakpoint(choices, bound);
      if (std::isinf(next) || floor_sum + (m - 1) * std::max(next, send_max_) >= best) break;
      bound = next;
      problem.fill(bound, trial);
      double w = 0;
      const double obj = problem.objective(trial, m, &w);
      if (obj < best) {
        best = obj;
        best_l = trial;
        best_worst = w;
      }
    }
  }
  out.time = fixed_sum + best;
  out.bottleneck = best_worst;
  out.layers = std::move(best_l);
  out.option.resize(k);
  for (int i = 0; i < k; ++i) out.option[i] = static_cast<std::uint8_t>(choices[i].front().option);
}

bool PipelineCurve::fill_cheapest(const Choices& useful, const std::vector<int>& pick,
                                  std::vector<int>& layers, double& sum) const {
  const int k = num_stages(), L = num_layers_;
  thread_local std::vector<int> order;
  order.resize(k);
  std::iota(order.begin(), order.end(), 0);
  auto c = [&](int i) { return useful[i][pick[i]].terms->per_layer_s; };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return c(a) < c(b); });
  layers.assign(k, 1);
  int left = L - k;
  for (int i : order) {
    const int add = std::clamp(useful[i][pick[i]].cap - 1, 0, left);
    layers[i] += add;
    left -= add;
  }
  if (left > 0) return false;
  sum = 0;
  for (int i = 0; i < k; ++i) {
    const StageTerms& t = *useful[i][pick[i]].terms;
    sum += t.fixed_s + layers[i] * t.per_layer_s;
  }
  return true;
}

bool PipelineCurve::min_sum(const Choices& choices, double bound, std::vector<int>& layers,
                            std::vector<std::uint8_t>& option, double& sum) const {
  long combinations = 1;
  thread_local Choices useful;
  if (!useful_under(choices, bound, useful, combinations)) return false;
  // With options fixed, the cheapest-first fill is the least sum; when few stages
  // keep several options, try every assignment.
  constexpr long kEnumerateUpTo = 16;
  if (combinations <= kEnumerateUpTo) return enumerate_min_sum(useful, layers, option, sum);
  return dp_min_sum(useful, layers, option, sum);
}

bool PipelineCurve::useful_under(const Choices& choices, double bound, Choices& useful,
                                 long& combinations) const {
  const int k = num_stages();
  useful.clear();
  for (int i = 0; i < k; ++i) {
    for (const Choice& ch : choices[i]) {
      const int most = fit_under(*ch.terms, ch.cap, bound);
      if (most >= 1) useful.all.push_back({ch.terms, ch.option, most});
    }
    if (!useful.end_stage()) return false;
    combinations = std::min<long>(combinations * static_cast<long>(useful[i].size()), 1 << 20);
  }
  return true;
}

// Every assignment of the options, the earlier options first (so ties keep them).
bool PipelineCurve::enumerate_min_sum(const Choices& useful, std::vector<int>& layers,
                                      std::vector<std::uint8_t>& option, double& sum) const {
  const int k = num_stages();
  thread_local std::vector<int> pick, trial;
  pick.assign(k, 0);
  bool found = false;
  for (;;) {
    double s = 0;
    if (fill_cheapest(useful, pick, trial, s) && (!found || s < sum)) {
      found = true;
      sum = s;
      layers = trial;
      option.resize(k);
      for (int i = 0; i < k; ++i) option[i] = static_cast<std::uint8_t>(useful[i][pick[i]].option);
    }
    int i = 0;
    while (i < k && ++pick[i] == static_cast<int>(useful[i].size())) pick[i++] = 0;
    if (i == k) break;
  }
  return found;
}

// A dynamic program over stages and layers: best[j] = least sum of the stages so far
// holding j layers; each option's range of l a sliding minimum of prev[x] - x * c over
// x in [j - most, j - 1]. Only cells from which L layers stay reachable are filled: those
// with too few layers for the later stages' caps (j + caps after stage i < L) feed no
// others that can reach L, and the window of a cell that can reach L holds only such
// cells, so the values and choices along the answer's path are those of the full table.
bool PipelineCurve::dp_min_sum(const Choices& useful, std::vector<int>& layers,
                               std::vector<std::uint8_t>& option, double& sum) const {
  const int k = num_stages(), L = num_layers_;
  const std::size_t width = static_cast<std::size_t>(L) + 1;
  // Scratch kept per thread (curves are shared by the threads of a search).
  thread_local std::vector<double> prev, cur;
  thread_local std::vector<std::pair<int, int>> from;
  thread_local std::vector<int> window, after;  // a monotone deque of x; caps after stage i
  prev.assign(width, kInfeasible);
  cur.resize(width);
  from.resize(static_cast<std::size_t>(k) * width);
  window.resize(width);
  after.assign(k + 1, 0);
  for (int i = k - 1; i >= 0; --i) {
    int most = 0;
    for (const Choice& ch : useful[i]) most = std::max(most, ch.cap);
    after[i] = std::min(L, after[i + 1] + most);
  }
  prev[0] = 0;
  int reach = 0;  // the most layers stages 0..i - 1 can hold
  for (int i = 0; i < k; ++i) {
    std::fill(cur.begin(), cur.end(), kInfeasible);
    // Layers of stages 0..i: at least one each, room for one per later stage, within the
    // caps so far, and enough for the later stages' caps to reach L.
    const int lo = i + 1;
    const int first = std::max(lo, L - after[i + 1]);
    int most_here = 0;
    for (const Choice& ch : useful[i]) most_here = std::max(most_here, ch.cap);
    const int hi = std::min(L - (k - 1 - i), reach + most_here);
    for (const Choice& ch : useful[i]) {
      const StageTerms& t = *ch.terms;
      const int most = ch.cap;
      auto key = [&](int x) { return prev[x] - x * t.per_layer_s; };
      int head = 0, tail = 0;
      for (int j = std::max(lo, first - most + 1); j <= hi; ++j) {
        const int x = j - 1;
        if (!std::isinf(prev[x])) {
          while (tail > head && key(window[tail - 1]) >= key(x)) --tail;
          window[tail++] = x;
        }
        while (tail > head && window[head] < j - most) ++head;
        if (tail == head || j < first) continue;
        const int y = window[head];
        const double v = prev[y] + (t.fixed_s + (j - y) * t.per_layer_s);
        if (v < cur[j]) {
          cur[j] = v;
          from[static_cast<std::size_t>(i) * width + j] = {y, ch.option};
        }
      }
    }
    reach = hi;
    std::swap(prev, cur);
  }
  if (std::isinf(prev[L])) return false;
  layers.assign(k, 0);
  option.assign(k, 0);
  for (int i = k - 1, j = L; i >= 0; --i) {
    auto [x, q] = from[static_cast<std::size_t>(i) * width + j];
    layers[i] = j - x;
    option[i] = static_cast<std::uint8_t>(q);
    j = x;
  }
  sum = 0;
  for (int i = 0; i < k; ++i) {
    const StageTerms& t = options_[i][option[i]];
    sum += t.fixed_s + layers[i] * t.per_layer_s;
  }
  return true;
}

double PipelineCurve::fluid_bound(const Choices& choices) const {
  // Stage i at l layers takes at least a_i + l p_i (its cheapest option's fixed part and
  // per-layer time); the largest is at least their average weighted by 1 / p_i, which is
  // (sum a_i / p_i + L) / sum 1 / p_i whatever the split, and at least a_i + p_i each.
  double weighted = 0, weights = 0, single = 0;
  for (int i = 0; i < choices.stages(); ++i) {
    double a = kInfeasible, p = kInfeasible;
    for (const Choice& c : choices[i]) {
      a = std::min(a, c.terms->fixed_s + c.terms->boundary_s);
      p = std::min(p, c.terms->per_layer_s);
    }
    single = std::max(single, a + p);
    if (!(p > 0)) return single;  // a free layer: nothing to average
    weighted += a / p;
    weights += 1 / p;
  }
  return std::max(single, (weighted + num_layers_) / weights);
}

double PipelineCurve::min_max_bound(const Choices& choices, int layers) {
  const int k = choices.stages();
  // g_i(l): the cheapest option of stage i that holds l layers (nondecreasing in l).
  auto g = [&](int i, int l) {
    double v = kInfeasible;
    for (const Choice& c : choices[i]) {
      if (l <= c.cap)
        v = std::min(v, c.terms->fixed_s + c.terms->boundary_s + l * c.terms->per_layer_s);
    }
    return v;
  };
  thread_local std::vector<int> l;
  l.assign(k, 1);
  // A min-heap of (next value, stage), kept per thread.
  using Item = std::pair<double, int>;
  thread_local std::vector<Item> heap;
  heap.clear();
  auto push = [&](double v, int i) {
    heap.emplace_back(v, i);
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  double bound = 0;
  for (int i = 0; i < k; ++i) {
    bound = std::max(bound, g(i, 1));
    if (const double v = g(i, 2); !std::isinf(v)) push(v, i);
  }
  for (int left = layers - k; left > 0; --left) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    auto [v, i] = heap.back();
    heap.pop_back();
    ++l[i];
    bound = std::max(bound, v);
    if (const double w = g(i, l[i] + 1); !std::isinf(w)) push(w, i);
  }
  return bound;
}

// Every stage as cheap as its cheapest option and as roomy as its roomiest (a
// relaxation, filled greedily).
bool PipelineCurve::relaxed_floor_sum(const Choices& choices, double& floor_sum) const {
  const int k = num_stages();
  thread_local Choices relaxed;
  thread_local std::vector<StageTerms> cheapest;
  thread_local std::vector<int> pick, layers;
  relaxed.clear();
  cheapest.resize(k);  // not resized below: relaxed points into it
  for (int i = 0; i < k; ++i) {
    cheapest[i] = *choices[i].front().terms;
    int most = 0;
    for (const Choice& c : choices[i]) {
      cheapest[i].per_layer_s = std::min(cheapest[i].per_layer_s, c.terms->per_layer_s);
      cheapest[i].fixed_s = std::min(cheapest[i].fixed_s, c.terms->fixed_s);
      most = std::max(most, c.cap);
    }
    relaxed.all.push_back({&cheapest[i], 0, most});
    relaxed.begin.push_back(i + 1);
  }
  pick.assign(k, 0);
  return fill_cheapest(relaxed, pick, layers, floor_sum);
}

double PipelineCurve::next_breakpoint(const Choices& choices, double bound) {
  double next = kInfeasible;
  for (int i = 0; i < choices.stages(); ++i) {
    for (const Choice& c : choices[i]) {
      const int at = fit_under(*c.terms, c.cap, bound);
      if (at < c.cap) {
        next = std::min(next,
                        c.terms->fixed_s + c.terms->boundary_s + (at + 1) * c.terms->per_layer_s);
      }
    }
  }
  return next;
}

void PipelineCurve::solve_options(int m, const Choices& choices, Solution& out,
                                  double limit) const {
  const int k = num_stages();
  // No split has a smaller sum than the relaxed floor, nor a smaller bottleneck than the
  // fluid bound (cheap) or the greedy bound (exact, needed below anyway).
  double floor_sum = 0;
  if (!std::isinf(limit)) {
    if (!relaxed_floor_sum(choices, floor_sum)) return;
    if (out.bounded(send_sum_ + floor_sum + (m - 1) * std::max(fluid_bound(choices), send_max_),
                    limit))
      return;
  }
  double bound = min_max_bound(choices, num_layers_);
  if (!std::isinf(limit) &&
      out.bounded(send_sum_ + floor_sum + (m - 1) * std::max(bound, send_max_), limit))
    return;
  double best = kInfeasible, best_worst = kInfeasible;
  std::vector<int> ls;
  std::vector<std::uint8_t> os;
  auto consider = [&](double b) {
    double sum = 0;
    if (!min_sum(choices, b, ls, os, sum)) return;
    double top = 0;
    for (int i = 0; i < k; ++i) {
      const StageTerms& t = options_[i][os[i]];
      top = std::max(top, t.fixed_s + t.boundary_s + ls[i] * t.per_layer_s);
    }
    const double worst = std::max(top, send_max_);
    const double obj = sum + (m - 1) * worst;
    if (obj < best) {
      best = obj;
      best_worst = worst;
      out.layers = ls;
      out.option = os;
    }
  };
  if (m == 1) {
    consider(kInfeasible);  // no bound term: the smallest sum wins outright
  } else {
    consider(bound);
    if (std::isinf(limit) && !relaxed_floor_sum(choices, floor_sum)) return;  // else done above
    // Larger bounds (the options' breakpoints), while the smaller sum can pay for them.
    for (;;) {
      const double next = next_breakpoint(choices, bound);
      if (std::isinf(next) || floor_sum + (m - 1) * std::max(next, send_max_) >= best) break;
      bound = next;
      consider(bound);
    }
  }
  if (std::isinf(best)) return;
  out.time = send_sum_ + best;
  out.bottleneck = best_worst;
}

const PipelineCurve::Solution& PipelineCurve::solution(int m) const {
  {
    std::lock_guard lock(memo_mutex_);
    auto it = memo_.find(m);
    if (it != memo_.end()) return it->second;
  }
  // Solved outside the lock (solve reads only the immutable terms); when two threads
  // solve the same m, the first stored answer is kept and both are the same.
  Solution s;
  solve(m, s);
  return remember(m, std::move(s));
}

const PipelineCurve::Solution& PipelineCurve::remember(int m, Solution s) const {
  if (s.time == kInfeasible) {
    s.layers.clear();
    s.option.clear();
    s.bottleneck = kInfeasible;
  }
  std::lock_guard lock(memo_mutex_);
  return memo_.try_emplace(m, std::move(s)).first->second;
}

std::size_t PipelineCurve::memory_bytes() const {
  std::size_t bytes = sizeof(*this);
  for (const auto& o : options_) bytes += sizeof(o) + o.capacity() * sizeof(StageTerms);
  std::lock_guard lock(memo_mutex_);
  for (const auto& [_, s] : memo_)
    bytes += 64 + sizeof(Solution) + s.layers.capacity() * sizeof(int) + s.option.capacity();
  return bytes;
}

double PipelineCurve::time(int m) const {
  return m < 1 ? kInfeasible : solution(m).time;
}

double PipelineCurve::time_below(int m, double limit) const {
  if (m < 1) return kInfeasible;
  {
    std::lock_guard lock(memo_mutex_);
    auto it = memo_.find(m);
    if (it != memo_.end()) return it->second.time;
  }
  Solution s;
  solve(m, s, limit);
  if (s.bound_only) return s.time;
  return remember(m, std::move(s)).time;
}

std::vector<int> PipelineCurve::layers(int m) const {
  return m < 1 ? std::vector<int>{} : solution(m).layers;
}

std::vector<Recompute> PipelineCurve::recompute(int m) const {
  std::vector<Recompute> out;
  if (m < 1) return out;
  const Solution& s = solution(m);
  for (std::size_t i = 0; i < s.option.size(); ++i)
    out.push_back(options_[i][s.option[i]].recompute);
  return out;
}

double PipelineCurve::bottleneck(int m) const {
  return m < 1 ? kInfeasible : solution(m).bottleneck;
}

double PipelineCurve::compute_floor() const {
  const int k = num_stages(), L = num_layers_;
  if (k == 0 || k > L) return kInfeasible;
  std::size_t count = 0;
  for (const auto& o : options_) count += o.size();
  std::vector<StageTerms> terms;  // the options without their sends; choices point into it
  terms.reserve(count);
  Choices choices;
  long total_cap = 0;
  for (int i = 0; i < k; ++i) {
    int most = 0;
    for (std::size_t q = 0; q < options_[i].size(); ++q) {
      // One micro-batch in flight: the most layers any schedule lets the stage hold.
      const int cap = std::min(layer_cap(options_[i][q], 1), L - k + 1);
      if (cap < 1) continue;
      terms.push_back(options_[i][q]);
      terms.back().boundary_s = 0;
      choices.all.push_back({&terms.back(), static_cast<int>(q), cap});
      most = std::max(most, cap);
    }
    if (!choices.end_stage()) return kInfeasible;
    total_cap += most;
  }
  if (total_cap < L) return kInfeasible;
  return min_max_bound(choices, L);
}

double PipelineCurve::timeline_floor(int m) const {
  const std::vector<double> f = finish_floors(m);
  return f.empty() ? kInfeasible : f.front();
}

std::vector<double> PipelineCurve::finish_floors(int m) const {
  if (m < 1) return {};
  const Solution& s = solution(m);
  if (s.time == kInfeasible) return {};
  // f_s = max(m c_s, c_s + sends_s + f_{s+1}): the way to stage i > s passes stage s first.
  std::vector<double> f(static_cast<std::size_t>(num_stages()));
  double after = 0;  // f_{s+1}; none after the last stage
  for (int i = num_stages() - 1; i >= 0; --i) {
    const StageTerms& t = options_[i][s.option[i]];
    const double c = t.fixed_s + s.layers[i] * t.per_layer_s;
    const double through = i + 1 < num_stages() ? c + t.own_send_s + t.own_back_s + after : 0;
    after = f[static_cast<std::size_t>(i)] = std::max(m * c, through);
  }
  return f;
}

int PipelineCurve::max_micro_batches_below(double limit, int max_m) const {
  int lo = 0, hi = max_m;  // invariant: time(lo) < limit (lo = 0 trivially), answer in [lo, hi]
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (time(mid) < limit) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace search
}  // namespace hexi
