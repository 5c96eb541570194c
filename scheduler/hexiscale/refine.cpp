// HexiScale refinement: local search over assignments of devices to pipelines,
// first improvement, until a full round of moves brings nothing (or the budget
// ends). Moves, in a fixed order (deterministic):
//   transfer  some devices of one machine to another pipeline or a new one
//             (powers of two, all but a power of two, and all of them; whole machines
//             on large clusters)
//   merge     two pipelines into one (one fewer replica, less DP traffic)
//   swap      the segments of two machines of different classes between pipelines
//   exchange  some devices of one machine for as many of another between two
//             pipelines (powers of two; device-level partitions only)
//   idle      some devices of one machine left out of every pipeline (the same counts as
//             transfer), and idle devices of one machine put back into a pipeline: where
//             a slow GPU type (or a machine behind a slow network) slows the iteration more
//             than its FLOPs speed it up, the plan runs without it
// Moves are small descriptors applied on demand: a plan of hundreds of pipelines
// has hundreds of thousands of neighbours.
#include <algorithm>

#include "scheduler/hexiscale/search.hpp"

namespace hexi {
inline namespace hexiscale {
namespace {

constexpr std::size_t kLargePatience = 1000;  // moves without improvement, machine-level search
// Moves scored together (in parallel): fixed, so that the result does not depend on the
// number of threads.
constexpr std::size_t kBatch = 8;

void take(std::map<int, int>& p, int machine, int n) {
  if ((p[machine] -= n) == 0) p.erase(machine);
}

void drop_empty(Assignment& a) {
  a.erase(std::remove_if(a.begin(), a.end(), [](const auto& p) { return p.empty(); }), a.end());
}

}  // namespace

Assignment apply_move(const Assignment& a, const Move& mv) {
  Assignment b = a;
  switch (mv.kind) {
    case Move::kTransfer:
      take(b[mv.p], mv.m1, mv.n1);
      if (mv.q == static_cast<int>(b.size())) b.emplace_back();
      b[mv.q][mv.m1] += mv.n1;
      break;
    case Move::kMerge:
      for (auto [m, n] : b[mv.q]) b[mv.p][m] += n;
      b[mv.q].clear();
      break;
    case Move::kSwap:  // n1 devices of m1 (p -> q) against n2 of m2 (q -> p)
      take(b[mv.p], mv.m1, mv.n1);
      take(b[mv.q], mv.m2, mv.n2);
      b[mv.p][mv.m2] += mv.n2;
      b[mv.q][mv.m1] += mv.n1;
      break;
    case Move::kIdle:
      take(b[mv.p], mv.m1, mv.n1);
      break;
    case Move::kUse:
      b[mv.p][mv.m1] += mv.n1;
      break;
  }
  drop_empty(b);
  return b;
}

namespace {

// The GPU counts a move takes out of `count`: powers of two, all but a power of two, and
// all of them (all of them only, for whole machines).
std::vector<int> move_counts(int count, bool whole_machines) {
  std::vector<int> deltas;
  if (!whole_machines) {
    for (int x = 1; x < count; x *= 2) {
      deltas.push_back(x);
      if (count - x != x && (count - x) & (count - x - 1)) deltas.push_back(count - x);
    }
  }
  deltas.push_back(count);
  return deltas;
}

}  // namespace

std::vector<Move> HexiScaleSearch::neighbours(const Assignment& a, bool whole_machines) const {
  std::vector<Move> out;
  const int d = static_cast<int>(a.size());
  for (int p = 0; p < d; ++p) {
    for (auto [m, count] : a[p]) {
      for (int delta : move_counts(count, whole_machines)) {
        for (int q = 0; q <= d; ++q) {
          if (q == p || (q == d && delta == count && a[p].size() == 1)) continue;
          out.push_back({Move::kTransfer, p, q, m, delta, 0, 0});
        }
      }
    }
  }
  for (int p = 0; p < d; ++p) {
    for (int q = p + 1; q < d; ++q) out.push_back({Move::kMerge, p, q, 0, 0, 0, 0});
  }
  for (int p = 0; p < d; ++p) {
    for (int q = p + 1; q < d; ++q) {
      for (auto [m1, n1] : a[p]) {
        for (auto [m2, n2] : a[q]) {
          if (m1 == m2 || a[p].count(m2) || a[q].count(m1)) continue;
          if (ev_.machine_class(m1) == ev_.machine_class(m2) && n1 == n2) continue;  // no change
          out.push_back({Move::kSwap, p, q, m1, n1, m2, n2});
        }
      }
    }
  }
  // Idle moves: leave GPUs out (never the last GPUs of the plan), or put idle ones back.
  const Cluster& c = ev_.cost_model().cluster();
  std::vector<int> idle(c.machines().size());
  for (std::size_t m = 0; m < idle.size(); ++m) idle[m] = c.machines()[m].num_gpus;
  int used = 0;
  for (const auto& p : a) {
    for (auto [m, count] : p) {
      idle[m] -= count;
      used += count;
    }
  }
  for (int p = 0; p < d; ++p) {
    for (auto [m, count] : a[p]) {
      for (int delta : move_counts(count, whole_machines)) {
        if (delta < used) out.push_back({Move::kIdle, p, 0, m, delta, 0, 0});
      }
    }
  }
  for (int m = 0; m < static_cast<int>(idle.size()); ++m) {
    if (idle[m] == 0) continue;
    for (int delta : move_counts(idle[m], whole_machines)) {
      for (int p = 0; p < d; ++p) out.push_back({Move::kUse, p, 0, m, delta, 0, 0});
    }
  }
  if (whole_machines) return out;
  for (int p = 0; p < d; ++p) {
    for (int q = 0; q < d; ++q) {
      if (p == q) continue;
      for (auto [m1, n1] : a[p]) {
        for (auto [m2, n2] : a[q]) {
          if (ev_.machine_class(m1) == ev_.machine_class(m2)) continue;
          for (int x = 1; x <= std::min(n1, n2); x *= 2) {
            if (x == n1 && x == n2 && p > q) continue;  // the whole-segment swap, listed once
            out.push_back({Move::kSwap, p, q, m1, x, m2, x});
          }
        }
      }
    }
  }
  return out;
}

void HexiScaleSearch::refine(Assignment a, bool whole_machines, std::size_t patience_cap) {
  double current = consider(a, kInfeasible);
  if (current == kInfeasible) return;
  std::vector<Move> moves = neighbours(a, whole_machines);
  // Converged: a whole round of moves without improvement (on large clusters, at
  // most kLargePatience moves in a row; at most patience_cap in any case).
  auto patience = [&] {
    return std::min(per_machine_ ? std::min(moves.size(), kLargePatience) : moves.size(),
                    patience_cap);
  };
  std::size_t i = 0, since_improvement = 0, scored = 0;
  const double start_s = clock_.elapsed_s();
  while (since_improvement < patience() && !clock_.out_of_time()) {
    // At least the moves left to converge, at this start's pace, if none improves.
    const double per_move =
        scored > 0 ? (clock_.elapsed_s() - start_s) / static_cast<double>(scored) : 0;
    clock_.phase("refinement: " + std::to_string(a.size()) + " pipelines",
                 scored > 0 ? Eta::kAtLeast : Eta::kNone,
                 per_move * static_cast<double>(patience() - since_improvement));
    // The next kBatch moves are scored together (in parallel); the first that improves
    // is taken, as if they had been scored one by one.
    const std::size_t batch = std::min(kBatch, patience() - since_improvement);
    std::vector<Assignment> next;
    for (std::size_t k = 0; k < batch; ++k)
      next.push_back(apply_move(a, moves[(i + k) % moves.size()]));
    const std::vector<double> objectives = consider_all(next, current, /*screen=*/true);
    scored += batch;
    std::size_t k = 0;
    while (k < batch && !(objectives[k] < current * (1 - 1e-9))) ++k;
    if (k < batch) {
      current = objectives[k];
      a = std::move(next[k]);
      moves = neighbours(a, whole_machines);
      i += k;  // continue at the same position in the new list
      since_improvement = 0;
      continue;
    }
    i += batch;
    since_improvement += batch;
  }
}

}  // namespace hexiscale
}  // namespace hexi
