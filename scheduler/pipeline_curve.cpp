#include "scheduler/pipeline_curve.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>

namespace hexi {
namespace {

// Relative headroom kept below capacity so that rounding in the linear memory
// terms never admits a split the estimate would call over capacity.
constexpr double kMemoryMargin = 1e-9;

// Memory of TP rank `rank` with `layers` layers and `in_flight` micro-batches (bytes).
double rank_memory(const CostModel& cm, const Stage& s, bool first, bool last, int rank, int layers,
                   int in_flight, int dp, int micro_batch) {
  StageShape shape;
  shape.layer_begin = 0;
  shape.layer_end = layers;
  shape.first = first;
  shape.last = last;
  shape.tp = s.tp();
  shape.phi = s.phi(rank, cm.model().heads);
  shape.in_flight = in_flight;
  shape.dp = dp;
  shape.micro_batch = micro_batch;
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

}  // namespace

StageTerms stage_terms(const CostModel& cm, const std::vector<int>& devices, bool first, bool last,
                       const std::vector<int>* next, int dp, int micro_batch) {
  StageTerms t;
  Stage s;
  s.devices = devices;
  s.layer_end = 1;
  StageEstimate one = cm.stage(s, first, last, micro_batch);
  s.layer_end = 2;
  StageEstimate two = cm.stage(s, first, last, micro_batch);
  const double t1 = one.forward_s + one.backward_s, t2 = two.forward_s + two.backward_s;
  t.per_layer_s = t2 - t1;
  t.fixed_s = t1 - t.per_layer_s;
  if (next != nullptr) {
    t.send_s = cm.transfer_s(devices, *next, hidden_bytes(cm.model(), cm.training(), micro_batch));
  }
  // The tightest rank: least headroom with one layer and one micro-batch in flight.
  double worst = kInfeasible;
  for (int r = 0; r < s.tp(); ++r) {
    StageTerms candidate;
    fit_memory(cm, s, first, last, r, dp, micro_batch, candidate);
    candidate.capacity_bytes = cm.cluster().device_memory_bytes(devices[r]);
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

PipelineCurve::PipelineCurve(std::vector<StageTerms> terms, int layers, PipelineSchedule schedule)
    : terms_(std::move(terms)), num_layers_(layers), schedule_(schedule) {
  by_cost_.resize(terms_.size());
  std::iota(by_cost_.begin(), by_cost_.end(), 0);
  std::stable_sort(by_cost_.begin(), by_cost_.end(),
                   [&](int a, int b) { return terms_[a].per_layer_s < terms_[b].per_layer_s; });
  for (const auto& t : terms_) {
    fixed_sum_ += t.fixed_s + 2 * t.send_s;
    send_max_ = std::max(send_max_, t.send_s);
  }
}

int PipelineCurve::layer_cap(int stage, int in_flight) const {
  const StageTerms& t = terms_[stage];
  const double room =
      t.capacity_bytes * (1 - kMemoryMargin) - t.mem_base - in_flight * t.mem_base_f;
  const double slope = t.mem_slope + in_flight * t.mem_slope_f;
  if (room < slope) return 0;
  return static_cast<int>(std::min<double>(num_layers_, std::floor(room / slope)));
}

double PipelineCurve::solve(int m, std::vector<int>* layers, double* bottleneck) const {
  const int k = num_stages(), L = num_layers_;
  if (k == 0 || k > L || m < 1) return kInfeasible;
  std::vector<int> cap(k);
  long total_cap = 0;
  for (int i = 0; i < k; ++i) {
    cap[i] = layer_cap(i, in_flight_micro_batches(schedule_, i, k, m));
    if (cap[i] < 1) return kInfeasible;
    total_cap += cap[i];
  }
  if (total_cap < L) return kInfeasible;
  auto value = [&](int i, int l) { return terms_[i].fixed_s + l * terms_[i].per_layer_s; };
  // Smallest feasible bound on the slowest stage: hand out layers one at a time to
  // the stage whose time grows least (optimal for min-max with per-stage caps).
  std::vector<int> l(k, 1);
  using Item = std::pair<double, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> heap;
  for (int i = 0; i < k; ++i) {
    if (cap[i] > 1) heap.emplace(value(i, 2), i);
  }
  double bound = 0;
  for (int i = 0; i < k; ++i) bound = std::max(bound, value(i, 1));
  for (int left = L - k; left > 0; --left) {
    auto [v, i] = heap.top();
    heap.pop();
    ++l[i];
    bound = std::max(bound, v);
    if (l[i] < cap[i]) heap.emplace(value(i, l[i] + 1), i);
  }
  // For a bound B, the smallest sum fills the cheapest stages first.
  auto fill = [&](double b, std::vector<int>& out) {
    std::fill(out.begin(), out.end(), 1);
    int left = L - k;
    for (int i : by_cost_) {
      const int fit =
          std::isinf(b)
              ? cap[i]
              : std::min<int>(cap[i], static_cast<int>(std::floor(
                                          (b - terms_[i].fixed_s) / terms_[i].per_layer_s + 1e-9)));
      const int add = std::clamp(fit - 1, 0, left);
      out[i] += add;
      left -= add;
    }
    return left == 0;
  };
  auto objective = [&](const std::vector<int>& ls, double* worst) {
    double sum = 0, top = 0;
    for (int i = 0; i < k; ++i) {
      sum += ls[i] * terms_[i].per_layer_s;
      top = std::max(top, value(i, ls[i]));
    }
    *worst = std::max(top, send_max_);
    return sum + (m - 1) * *worst;
  };
  std::vector<int> best_l(k), trial(k);
  double best_worst = 0;
  if (m == 1) bound = kInfeasible;  // no bound term: the smallest sum wins outright
  fill(bound, best_l);
  double best = objective(best_l, &best_worst);
  if (m > 1) {
    std::vector<int> floor_l(k);
    fill(kInfeasible, floor_l);
    double floor_sum = 0;
    for (int i = 0; i < k; ++i) floor_sum += floor_l[i] * terms_[i].per_layer_s;
    // Larger bounds: only worth it while the smaller sum can pay for them.
    for (;;) {
      double next = kInfeasible;
      for (int i = 0; i < k; ++i) {
        const double room = (bound - terms_[i].fixed_s) / terms_[i].per_layer_s + 1e-9;
        const int at = std::min<int>(cap[i], static_cast<int>(std::floor(room)));
        if (at < cap[i]) next = std::min(next, value(i, at + 1));  // stage i's next breakpoint
      }
      if (std::isinf(next) || floor_sum + (m - 1) * std::max(next, send_max_) >= best) break;
      bound = next;
      fill(bound, trial);
      double w = 0;
      const double obj = objective(trial, &w);
      if (obj < best) {
        best = obj;
        best_l = trial;
        best_worst = w;
      }
    }
  }
  if (layers != nullptr) *layers = best_l;
  if (bottleneck != nullptr) *bottleneck = best_worst;
  return fixed_sum_ + best;
}

const PipelineCurve::Solution& PipelineCurve::solution(int m) const {
  auto [it, fresh] = memo_.try_emplace(m);
  Solution& s = it->second;
  if (fresh) {
    s.time = solve(m, &s.layers, &s.bottleneck);
    if (s.time == kInfeasible) {
      s.layers.clear();
      s.bottleneck = kInfeasible;
    }
  }
  return s;
}

std::size_t PipelineCurve::memory_bytes() const {
  std::size_t bytes = sizeof(*this) + terms_.size() * (sizeof(StageTerms) + sizeof(int));
  for (const auto& [_, s] : memo_)
    bytes += 64 + sizeof(Solution) + s.layers.capacity() * sizeof(int);
  return bytes;
}

double PipelineCurve::time(int m) const {
  return m < 1 ? kInfeasible : solution(m).time;
}

std::vector<int> PipelineCurve::layers(int m) const {
  return m < 1 ? std::vector<int>{} : solution(m).layers;
}

double PipelineCurve::bottleneck(int m) const {
  return m < 1 ? kInfeasible : solution(m).bottleneck;
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

}  // namespace hexi
