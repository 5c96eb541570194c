#include "scheduler/search/batch_split.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>

namespace hexi {
inline namespace search {
std::vector<int> proportional_split(const std::vector<double>& rate, int total) {
  const int d = static_cast<int>(rate.size());
  if (d == 0 || d > total) return {};
  const double sum = std::accumulate(rate.begin(), rate.end(), 0.0);
  std::vector<int> share(d, 1);
  int left = total - d;
  std::vector<std::pair<double, int>> frac;
  for (int p = 0; p < d; ++p) {
    const double want = left * rate[p] / sum;
    const int whole = static_cast<int>(std::floor(want));
    share[p] += whole;
    frac.emplace_back(want - whole, p);
  }
  left = total - std::accumulate(share.begin(), share.end(), 0);
  std::stable_sort(frac.begin(), frac.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (int i = 0; left > 0; ++i, --left) ++share[frac[i % d].second];
  return share;
}

namespace {

// How many more micro-batches than m pipeline c runs in under `limit`: #{i >= 1 : T(m + i) <
// limit}, at most `most`.
int runs_below(const PipelineCurve& c, int m, double limit, int most) {
  return std::max(0, c.max_micro_batches_below(limit, m + most) - m);
}

// Hands `count` micro-batches of pipeline `from` to the others as the single moves of
// split_micro_batches do while `from` cannot run its share: one at a time, each to the
// pipeline that would finish earliest with it (ties: the lowest index). Each T_q is
// nondecreasing, so they go to the `count` smallest of the times T_q(m_q + i), i >= 1, in
// the order (time, q, i): those below the count-th smallest time t, then those at t, lowest q
// first. t is bisected over the bit patterns of non-negative doubles (ordered as integers).
// Returns how many were handed out: fewer when the others cannot run them.
int hand_out(const std::vector<const PipelineCurve*>& curves, int from, int count,
             std::vector<int>& m) {
  const int d = static_cast<int>(curves.size());
  auto taken = [&](double limit) {
    std::vector<int> n(d, 0);
    for (int q = 0; q < d; ++q) n[q] = q == from ? 0 : runs_below(*curves[q], m[q], limit, count);
    return n;
  };
  auto sum = [](const std::vector<int>& n) { return std::accumulate(n.begin(), n.end(), 0L); };
  if (const std::vector<int> all = taken(kInfeasible); sum(all) < count) {
    for (int q = 0; q < d; ++q) m[q] += all[q];
    return static_cast<int>(sum(all));
  }
  const auto at_most = [](double t) { return std::nextafter(t, kInfeasible); };
  std::int64_t lo = 0, hi = std::bit_cast<std::int64_t>(std::numeric_limits<double>::max());
  while (lo < hi) {  // the least t with `count` times <= t
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (sum(taken(at_most(std::bit_cast<double>(mid)))) >= count) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  const double t = std::bit_cast<double>(lo);
  const std::vector<int> below = taken(t), upto = taken(at_most(t));
  int left = count - static_cast<int>(sum(below));
  for (int q = 0; q < d; ++q) {
    const int at_t = std::min(left, upto[q] - below[q]);
    m[q] += below[q] + at_t;
    left -= at_t;
  }
  return count;
}

}  // namespace

BatchSplit split_micro_batches(const std::vector<const PipelineCurve*>& curves, int total) {
  BatchSplit out;
  const int d = static_cast<int>(curves.size());
  if (d == 0 || total < d) return out;
  // Throughput of each pipeline near its even share: micro-batches per second.
  std::vector<double> rate(d);
  const int guess = std::max(1, total / d);
  for (int p = 0; p < d; ++p) {
    double b = curves[p]->bottleneck(guess);
    if (std::isinf(b)) b = curves[p]->bottleneck(1);
    if (std::isinf(b)) return out;  // cannot run even one micro-batch
    rate[p] = 1.0 / b;
  }
  std::vector<int> m = proportional_split(rate, total);
  // Local improvement: the slowest pipeline hands one micro-batch to the one that
  // would finish earliest with it (ties: lowest index).
  for (;;) {
    int slow = 0;
    for (int p = 1; p < d; ++p) {
      if (curves[p]->time(m[p]) > curves[slow]->time(m[slow])) slow = p;
    }
    if (m[slow] <= 1) break;
    // A share the slowest cannot run at all (its bottleneck at the even share is infinite)
    // is handed out at once, as the single moves would: the cost does not grow with it.
    if (curves[slow]->time(m[slow]) == kInfeasible) {
      const int runs = std::max(1, curves[slow]->max_micro_batches_below(kInfeasible, m[slow]));
      const int handed = hand_out(curves, slow, m[slow] - runs, m);
      const bool stuck = handed < m[slow] - runs;  // no other pipeline takes one more
      m[slow] -= handed;
      if (stuck) break;
      continue;
    }
    int to = -1;
    double to_time = kInfeasible;
    for (int q = 0; q < d; ++q) {
      if (q == slow) continue;
      const double t = curves[q]->time(m[q] + 1);
      if (t < to_time) {
        to_time = t;
        to = q;
      }
    }
    if (to < 0 || !(to_time < curves[slow]->time(m[slow]))) break;
    --m[slow];
    ++m[to];
  }
  out.slowest_s = 0;
  for (int p = 0; p < d; ++p) out.slowest_s = std::max(out.slowest_s, curves[p]->time(m[p]));
  out.micro_batches = std::move(m);
  return out;
}

std::vector<int> even_split(int pipelines, int total) {
  std::vector<int> out(pipelines, total / pipelines);
  for (int p = 0; p < total % pipelines; ++p) ++out[p];
  return out;
}

}  // namespace search
}  // namespace hexi
