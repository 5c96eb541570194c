#include "scheduler/hexiscale/pipeline.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <tuple>

namespace hexi {
inline namespace hexiscale {
namespace {

constexpr int kAllOrdersUpTo = 5;     // groups; 5! = 120 orders
constexpr std::size_t kMaxBeam = 64;  // partial orders kept by the top-tau beam
constexpr int kRounds = 4;            // coordinate-descent rounds over degrees and order
// Pipelines of at most this many groups get the wider phase 2: several starts, and
// degree changes tried at every position (cost grows with groups squared).
constexpr std::size_t kWideSearchUpTo = 8;

// Pipelines that cannot run their share still need a ranking that leads towards
// feasibility: runnable with one micro-batch beats not runnable at all. At or above `limit`
// only a lower bound may come back (all a comparison with the limit needs).
double penalised(const PipelineCurve& c, int m, double limit) {
  const double t = c.time_below(m, limit);
  if (!std::isinf(t)) return t;
  const double one = c.time(1);
  if (!std::isinf(one)) return 1e9 + one;
  return 1e18;
}

}  // namespace

std::vector<int> segment_degrees(const Model& model, int count) {
  std::vector<int> out;
  for (int t : tp_degrees(model, count)) {
    if (count % t == 0) out.push_back(t);
  }
  return out;
}

PipelineBuilder::PipelineBuilder(SpecEvaluator& evaluator, int tau) : ev_(evaluator), tau_(tau) {}

double PipelineBuilder::score(const PipelineSpec& p, int dp, int m, double limit) {
  ++evaluations_;
  one_.pipelines.resize(1);
  one_.pipelines[0].segments.assign(p.segments.begin(), p.segments.end());
  return penalised(*ev_.curve(one_, 0, dp), m, limit);
}

const std::vector<std::vector<int>>& PipelineBuilder::candidate_orders(
    const std::vector<MachineSegment>& segs) {
  const int g = static_cast<int>(segs.size());
  if (g <= kAllOrdersUpTo) {
    // Every order of g groups, in lexicographic order (the same for every pipeline).
    static const std::array<std::vector<std::vector<int>>, kAllOrdersUpTo + 1> all = [] {
      std::array<std::vector<std::vector<int>>, kAllOrdersUpTo + 1> table;
      for (int n = 0; n <= kAllOrdersUpTo; ++n) {
        std::vector<int> order(n);
        std::iota(order.begin(), order.end(), 0);
        do table[n].push_back(order);
        while (std::next_permutation(order.begin(), order.end()));
      }
      return table;
    }();
    return all[g];
  }
  std::vector<std::vector<int>>& out = beam_orders_;
  out.clear();
  // Top-tau greedy beam: extend each partial order by its tau best next groups
  // (highest bandwidth; ties: more memory per GPU first, then machine order) and
  // keep the tau * g partial orders with the best bottleneck (then summed) bandwidth.
  const Cluster& c = ev_.cost_model().cluster();
  std::vector<double> bw_matrix(static_cast<std::size_t>(g) * g, 0), memory(g);
  for (int a = 0; a < g; ++a) {
    const int da = c.machines()[segs[a].machine].first_device;
    memory[a] = c.device_memory_bytes(da);
    for (int b = 0; b < g; ++b) {
      if (a != b)
        bw_matrix[a * g + b] = c.bandwidth(da, c.machines()[segs[b].machine].first_device);
    }
  }
  auto bw = [&](int a, int b) { return bw_matrix[a * g + b]; };
  auto mem = [&](int i) { return memory[i]; };
  struct Path {
    std::vector<int> nodes;
    double bottleneck = kInfeasible;
    double sum = 0;
  };
  std::vector<Path> beam;
  for (int s = 0; s < g; ++s) beam.push_back({{s}, kInfeasible, 0});
  const std::size_t width = std::min<std::size_t>(static_cast<std::size_t>(tau_) * g, kMaxBeam);
  for (int step = 1; step < g; ++step) {
    std::vector<Path> next;
    for (const Path& p : beam) {
      std::vector<bool> used(g, false);
      for (int i : p.nodes) used[i] = true;
      std::vector<int> rest;
      for (int i = 0; i < g; ++i) {
        if (!used[i]) rest.push_back(i);
      }
      const int tail = p.nodes.back();
      const auto better = [&](int a, int b) {
        return std::make_tuple(-bw(tail, a), -mem(a), a) <
               std::make_tuple(-bw(tail, b), -mem(b), b);
      };
      const std::size_t keep = std::min<std::size_t>(tau_, rest.size());
      std::partial_sort(rest.begin(), rest.begin() + keep, rest.end(), better);
      for (int k = 0; k < tau_ && k < static_cast<int>(rest.size()); ++k) {
        Path q = p;
        q.nodes.push_back(rest[k]);
        q.bottleneck = std::min(q.bottleneck, bw(tail, rest[k]));
        q.sum += bw(tail, rest[k]);
        next.push_back(std::move(q));
      }
    }
    std::stable_sort(next.begin(), next.end(), [](const Path& a, const Path& b) {
      return std::tie(b.bottleneck, b.sum) < std::tie(a.bottleneck, a.sum);
    });
    if (next.size() > width) next.resize(width);
    beam = std::move(next);
  }
  for (const Path& p : beam) out.push_back(p.nodes);
  return out;
}

PipelineSpec PipelineBuilder::optimise(std::vector<MachineSegment> segs, int dp, int m) {
  const Model& model = ev_.cost_model().model();
  for (auto& s : segs) s.tp = segment_degrees(model, s.count).back();  // most memory-friendly start
  // Even the largest degrees give more stages than layers: nothing to optimise.
  if (PipelineSpec{segs}.num_stages() > model.layers) return PipelineSpec{segs};
  // Starts: the largest degrees, and every degree for all segments at once (when it
  // divides them all). Single changes from one start miss plans such as TP 1
  // everywhere with full recompute on the memory-starved stages, which beats TP 2
  // while TP 1 on one machine alone does not.
  std::vector<std::vector<MachineSegment>> starts{segs};
  const bool small = wide_ && segs.size() <= kWideSearchUpTo;
  for (int t : small ? tp_degrees(model, segs.front().count) : std::vector<int>{}) {
    std::vector<MachineSegment> start = segs;
    bool valid = true;
    for (auto& s : start) {
      valid = valid && s.count % t == 0;
      s.tp = t;
    }
    if (valid && start != segs) starts.push_back(std::move(start));
  }
  double best = kInfeasible;
  std::vector<MachineSegment> best_segs = segs;
  for (auto& start : starts) {
    double score = kInfeasible;
    std::vector<MachineSegment> found = descend(std::move(start), dp, m, score);
    if (score < best * (1 - 1e-12)) {
      best = score;
      best_segs = std::move(found);
    }
  }
  return PipelineSpec{best_segs};
}

std::vector<MachineSegment> PipelineBuilder::descend(std::vector<MachineSegment> segs, int dp,
                                                     int m, double& best) {
  const Model& model = ev_.cost_model().model();
  auto arrange = [](const std::vector<MachineSegment>& base, const std::vector<int>& order) {
    PipelineSpec p;
    for (int i : order) p.segments.push_back(base[i]);
    return p;
  };
  // `segs` is kept in the current best order.
  auto try_orders = [&]() {
    bool changed = false;
    const std::vector<MachineSegment> base = segs;
    for (const auto& order : candidate_orders(base)) {
      PipelineSpec p = arrange(base, order);
      const double s = score(p, dp, m, best);
      if (s < best * (1 - 1e-12)) {
        best = s;
        segs = p.segments;
        changed = true;
      }
    }
    return changed;
  };
  best = score(PipelineSpec{segs}, dp, m);
  try_orders();
  for (int round = 0; round < kRounds; ++round) {
    bool changed = false;
    for (std::size_t i = 0; i < segs.size(); ++i) {
      for (int t : segment_degrees(model, segs[i].count)) {
        if (t == segs[i].tp) continue;
        // The new degree at the segment's place, then (small pipelines) at every
        // other place: a stage's position sets its in-flight micro-batches, so a
        // degree that needs less memory may only pay somewhere else.
        const std::size_t places = wide_ && segs.size() <= kWideSearchUpTo ? segs.size() : 1;
        for (std::size_t j = 0; j < places; ++j) {
          std::vector<MachineSegment> trial = segs;
          MachineSegment moved = trial[i];
          moved.tp = t;
          trial.erase(trial.begin() + static_cast<long>(i));
          const std::size_t at = places == 1 ? i : j;
          trial.insert(trial.begin() + static_cast<long>(at), moved);
          const double sc = score(PipelineSpec{trial}, dp, m, best);
          if (sc < best * (1 - 1e-12)) {
            best = sc;
            segs = std::move(trial);
            changed = true;
            break;
          }
        }
      }
    }
    if (try_orders()) changed = true;
    if (!changed) break;
  }
  return segs;
}

PipelineSpec PipelineBuilder::build(const std::vector<Unit>& devices, int dp, int micro_batches) {
  // Merge units per machine, then sort by (class, count, machine). The cache is keyed by the
  // machines themselves, not their classes: machines of one class may sit in different places
  // of the network, and an answer shared between them would depend on which candidate asked
  // first (with threads, on their timing: the same search gave two plans).
  std::map<int, int> per_machine;
  for (const Unit& u : devices) per_machine[u.machine] += u.count;
  std::vector<MachineSegment> segs;
  for (auto [machine, count] : per_machine) segs.push_back({machine, count, 1});
  std::stable_sort(segs.begin(), segs.end(), [&](const MachineSegment& a, const MachineSegment& b) {
    return std::make_tuple(ev_.machine_class(a.machine), a.count, a.machine) <
           std::make_tuple(ev_.machine_class(b.machine), b.count, b.machine);
  });
  std::vector<int> key{dp, micro_batches};
  for (const auto& s : segs) key.insert(key.end(), {s.machine, s.count});
  std::vector<MachineSegment> answer;
  if (auto found = cache_->find(key)) {
    answer = std::move(*found);
  } else {
    // Store the answer as positions into the sorted composition plus degrees.
    PipelineSpec best = optimise(segs, dp, micro_batches);
    std::vector<MachineSegment> positional;
    std::vector<bool> taken(segs.size(), false);
    for (const auto& s : best.segments) {
      for (std::size_t i = 0; i < segs.size(); ++i) {
        if (!taken[i] && segs[i].machine == s.machine) {
          taken[i] = true;
          positional.push_back({static_cast<int>(i), s.count, s.tp});
          break;
        }
      }
    }
    answer = positional;
    cache_->insert(std::move(key), std::move(positional));
  }
  PipelineSpec out;
  for (const auto& p : answer) out.segments.push_back({segs[p.machine].machine, p.count, p.tp});
  return out;
}

}  // namespace hexiscale
}  // namespace hexi
