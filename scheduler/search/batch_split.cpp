#include "scheduler/search/batch_split.hpp"

#include <algorithm>
#include <cmath>
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
