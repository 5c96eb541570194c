#include "scheduler/hexiscale_search.hpp"

#include <algorithm>
#include <cmath>

namespace hexi {
namespace {

// Refinement starts: the best plan of this many different D values.
constexpr std::size_t kEliteStarts = 3;
// Most D values the sweep visits one by one (then it strides; see sweep()).
constexpr int kMaxSweep = 128;

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  // splitmix64 step: distinct, reproducible METIS seeds per (seed, D, mode, round).
  std::uint64_t z = a + 0x9e3779b97f4a7c15ULL * (b + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

Assignment assignment_from_parts(const std::vector<Unit>& units, const std::vector<int>& parts) {
  std::map<int, std::map<int, int>> by_part;
  for (std::size_t i = 0; i < units.size(); ++i)
    by_part[parts[i]][units[i].machine] += units[i].count;
  Assignment out;
  for (auto& [_, p] : by_part) out.push_back(std::move(p));
  return out;
}

HexiScaleSearch::HexiScaleSearch(SpecEvaluator& ev, const HexiScaleOptions& options,
                                 SearchClock& clock, std::uint64_t seed)
    : ev_(ev), options_(options), clock_(clock), seed_(seed), builder_(ev, options.tau) {
  const Cluster& c = ev.cost_model().cluster();
  per_machine_ = c.num_devices() > options.device_level_max;
  units_ = make_units(c, per_machine_);
  total_flops_ = c.peak_flops();
}

int HexiScaleSearch::expected_micro_batches(const std::map<int, int>& pipeline) const {
  const Cluster& c = ev_.cost_model().cluster();
  double flops = 0;
  for (auto [m, n] : pipeline) flops += n * c.gpu_types()[c.machines()[m].gpu_type].flops();
  return std::max(1, static_cast<int>(std::lround(ev_.micro_batches() * flops / total_flops_)));
}

PlanSpec HexiScaleSearch::build(const Assignment& a) {
  PlanSpec spec;
  const int dp = static_cast<int>(a.size());
  for (const auto& p : a) {
    std::vector<Unit> units;
    for (auto [m, n] : p) units.push_back({m, n});
    spec.pipelines.push_back(builder_.build(units, dp, expected_micro_batches(p)));
  }
  return spec;
}

std::string HexiScaleSearch::signature(const Assignment& a) const {
  std::vector<std::string> pipes;
  for (const auto& p : a) {
    std::vector<std::pair<int, int>> segs;
    for (auto [m, n] : p) segs.emplace_back(ev_.machine_class(m), n);
    std::sort(segs.begin(), segs.end());
    std::string text;
    for (auto [c, n] : segs) text += std::to_string(c) + ":" + std::to_string(n) + ",";
    pipes.push_back(std::move(text));
  }
  std::sort(pipes.begin(), pipes.end());
  std::string out;
  for (const auto& p : pipes) out += p + "|";
  return out;
}

double HexiScaleSearch::consider(const Assignment& a, std::optional<double> threshold) {
  if (a.empty() || static_cast<int>(a.size()) > ev_.micro_batches()) return kInfeasible;
  const double limit = threshold.value_or(best_objective());
  Seen& seen = seen_[signature(a)];
  if (seen.estimated) return seen.objective;
  if (seen.slowest != kInfeasible && !(seen.slowest < limit)) return kInfeasible;
  PlanSpec spec = build(a);
  // The slowest pipeline bounds the iteration time from below: skip the full
  // estimate when it alone cannot beat the limit.
  seen.slowest = ev_.pipelines_s(spec);
  if (!(seen.slowest < limit)) {
    clock_.count();
    return kInfeasible;
  }
  auto scored = ev_.evaluate(spec, "hexiscale");
  seen.estimated = true;
  if (!scored || !scored->estimate.feasible) {
    clock_.count();
    return kInfeasible;
  }
  clock_.count(scored->estimate.tokens_per_s);
  seen.objective = scored->objective();
  if (seen.objective < best_objective()) {
    best_ = SpecResult{std::move(spec), std::move(*scored)};
    best_assignment_ = a;
  }
  return seen.objective;
}

void HexiScaleSearch::try_pipelines(int d, int d_max) {
  const Cluster& c = ev_.cost_model().cluster();
  clock_.phase("phase 1: D=" + std::to_string(d) + " of " + std::to_string(d_max));
  std::vector<std::vector<int>> partitions;
  partitions.push_back(spread_partition(units_, d));
  if (d <= static_cast<int>(c.machines().size()))
    partitions.push_back(packed_partition(c, units_, d));
  // Machine-level graphs of large clusters get one METIS run per cut mode.
  const int seeds = per_machine_ ? 1 : options_.seeds;
  for (CutMode mode : {CutMode::kDpOnSlowLinks, CutMode::kDpOnFastLinks}) {
    for (int s = 0; s < seeds && d > 1; ++s) {
      // Seed 0 partitions the plain graph; later seeds jitter its edge weights.
      const std::uint64_t metis_seed = mix(seed_, (static_cast<std::uint64_t>(d) << 8) + 2 * s +
                                                      (mode == CutMode::kDpOnFastLinks ? 1 : 0));
      partitions.push_back(metis_partition(c, units_, d, mode, metis_seed, s == 0 ? 0.0 : 0.3));
    }
  }
  double best_here = kInfeasible;
  Assignment best_a;
  for (const auto& parts : partitions) {
    if (clock_.out_of_time()) break;
    Assignment a = assignment_from_parts(units_, parts);
    const double objective = consider(a);  // duplicates are answered from seen_
    if (objective < best_here) {
      best_here = objective;
      best_a = a;
    }
  }
  if (!best_a.empty()) elite_.emplace_back(best_here, best_a);
}

void HexiScaleSearch::sweep() {
  // Every D from 1 to the most pipelines memory allows; when that is more than
  // kMaxSweep values, every stride-th D first, then every D around the best.
  const int d_max =
      std::min<int>(max_pipelines_by_memory(ev_.cost_model()), static_cast<int>(units_.size()));
  const int stride = (d_max + kMaxSweep - 1) / kMaxSweep;
  for (int d = 1; d <= d_max && !clock_.out_of_time(); d += stride) try_pipelines(d, d_max);
  if (stride > 1 && best_) {
    const int at = static_cast<int>(best_assignment_.size());
    for (int d = std::max(1, at - stride + 1);
         d < std::min(d_max + 1, at + stride) && !clock_.out_of_time(); ++d) {
      if ((d - 1) % stride != 0) try_pipelines(d, d_max);
    }
  }
}

std::optional<SpecResult> HexiScaleSearch::run() {
  // Machine-aligned pipelines (one per machine, and everything in one) are cheap
  // and often good starting points; they seed the incumbent before the sweep.
  const Cluster& c = ev_.cost_model().cluster();
  Assignment per_machine, all(1);
  for (std::size_t m = 0; m < c.machines().size(); ++m) {
    per_machine.push_back({{static_cast<int>(m), c.machines()[m].num_gpus}});
    all[0][static_cast<int>(m)] = c.machines()[m].num_gpus;
  }
  consider(all);
  consider(per_machine);
  sweep();
  if (options_.refine && best_) {
    std::stable_sort(elite_.begin(), elite_.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<Assignment> starts{best_assignment_};
    for (const auto& [_, a] : elite_) {
      if (starts.size() >= kEliteStarts) break;
      if (std::find(starts.begin(), starts.end(), a) == starts.end()) starts.push_back(a);
    }
    for (const auto& s : starts) {
      if (clock_.out_of_time()) break;
      refine(s);
    }
  }
  return best_;
}

}  // namespace hexi
