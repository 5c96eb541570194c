#include "scheduler/hexiscale/search.hpp"

#include "scheduler/search/random.hpp"

#include <algorithm>
#include <cmath>

namespace hexi {
inline namespace hexiscale {
namespace {

// Refinement starts: the best plan of this many different D values.
constexpr std::size_t kEliteStarts = 5;
// Most D values the sweep visits one by one (then it strides; see sweep()).
constexpr int kMaxSweep = 128;
// A candidate within this factor of the best plan's time also tries its pipelines reversed.
constexpr double kNearBest = 1.05;

// Distinct, reproducible METIS seeds per (seed, D, mode, round): the splitmix64 output
// of state a + (b + 1) gamma.
std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  return splitmix64(a + kGoldenGamma * (b + 1));
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
  builder_.set_wide(!per_machine_);  // the wider phase 2 where groups are parts of machines
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
  // Invariant under renumbering pipelines and interchangeable machines, yet telling
  // apart "two pipelines on one machine" from "on two machines of the same class":
  // two rounds of label refinement over the pipeline-machine incidence.
  auto join = [](std::vector<std::string> parts, char sep) {
    std::sort(parts.begin(), parts.end());
    std::string out;
    for (auto& x : parts) out += x + sep;
    return out;
  };
  std::vector<std::string> pipe0;                      // pipeline: its (machine class, count)s
  std::map<int, std::vector<std::string>> by_machine;  // machine: (pipeline label, count)s
  for (const auto& p : a) {
    std::vector<std::string> segs;
    for (auto [m, n] : p)
      segs.push_back(std::to_string(ev_.machine_class(m)) + ":" + std::to_string(n));
    pipe0.push_back(join(segs, ','));
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    for (auto [m, n] : a[i]) by_machine[m].push_back(pipe0[i] + "*" + std::to_string(n));
  }
  std::map<int, std::string> machine_label;
  for (auto& [m, list] : by_machine)
    machine_label[m] = std::to_string(ev_.machine_class(m)) + "{" + join(list, ';') + "}";
  std::vector<std::string> pipes;
  for (const auto& p : a) {
    std::vector<std::string> segs;
    for (auto [m, n] : p) segs.push_back(machine_label[m] + ":" + std::to_string(n));
    pipes.push_back(join(segs, ','));
  }
  return join(pipes, '|');
}

PlanSpec HexiScaleSearch::aligned(const PlanSpec& spec) const {
  // The order of machine classes of the pipeline with the most segments, imposed
  // on every pipeline: pipelines built one by one may order the same kinds of
  // machines differently, and then the layers a GPU holds sit on another machine
  // in the other pipelines, which turns intra-machine DP traffic into NIC traffic.
  std::size_t ref = 0;
  for (std::size_t p = 1; p < spec.pipelines.size(); ++p) {
    if (spec.pipelines[p].segments.size() > spec.pipelines[ref].segments.size()) ref = p;
  }
  std::map<int, int> rank;
  for (const auto& seg : spec.pipelines[ref].segments)
    rank.emplace(ev_.machine_class(seg.machine), rank.size());
  PlanSpec out = spec;
  for (auto& p : out.pipelines) {
    std::stable_sort(p.segments.begin(), p.segments.end(),
                     [&](const MachineSegment& x, const MachineSegment& y) {
                       auto key = [&](const MachineSegment& s) {
                         auto it = rank.find(ev_.machine_class(s.machine));
                         return it == rank.end()
                                    ? static_cast<int>(rank.size()) + ev_.machine_class(s.machine)
                                    : it->second;
                       };
                       return key(x) < key(y);
                     });
  }
  return out;
}

double HexiScaleSearch::consider(const Assignment& a, std::optional<double> threshold) {
  if (a.empty() || static_cast<int>(a.size()) > ev_.micro_batches()) return kInfeasible;
  const double limit = threshold.value_or(best_objective());
  Seen& seen = seen_[signature(a)];
  if (seen.estimated) return seen.objective;
  if (seen.slowest != kInfeasible && !(seen.slowest < limit)) return kInfeasible;
  // Phase 2 per pipeline, and the same with the pipelines' orders aligned.
  std::vector<PlanSpec> variants{build(a)};
  PlanSpec same_order = aligned(variants[0]);
  bool differs = false;
  for (std::size_t p = 0; p < same_order.pipelines.size(); ++p) {
    differs = differs || !(same_order.pipelines[p].segments == variants[0].pipelines[p].segments);
  }
  if (differs) variants.push_back(std::move(same_order));
  double slowest = kInfeasible, objective = kInfeasible;
  auto score = [&](const PlanSpec& spec) {
    // The slowest pipeline bounds the iteration time from below: skip the full
    // estimate when it alone cannot beat the limit.
    const double w = ev_.pipelines_s(spec);
    slowest = std::min(slowest, w);
    if (!(w < limit)) {
      clock_.count();
      return;
    }
    auto scored = ev_.evaluate(spec, "hexiscale");
    seen.estimated = true;
    if (!scored || !scored->estimate.feasible) {
      clock_.count();
      return;
    }
    clock_.count(scored->estimate.tokens_per_s);
    objective = std::min(objective, scored->objective());
    if (scored->objective() < best_objective()) {
      best_ = SpecResult{spec, std::move(*scored)};
      best_assignment_ = a;
    }
  };
  for (const PlanSpec& spec : variants) score(spec);
  // Reversed pipelines keep every inter-stage bandwidth but swap which stages drain
  // first (and so sync their gradients behind the rest of the drain) and which hold
  // the embedding and the most in-flight activations (layers, recompute and batch are
  // split anew for the new order). Worth the extra estimate only near the best plan.
  if (objective < kNearBest * best_objective()) {
    PlanSpec& reversed = variants[0];
    for (auto& p : reversed.pipelines) std::reverse(p.segments.begin(), p.segments.end());
    score(reversed);
  }
  seen.slowest = slowest;
  seen.objective = objective;
  return objective;
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
      std::min<int>(max_pipelines_by_memory(ev_.cost_model(), ev_.least_memory_recompute()),
                    static_cast<int>(units_.size()));
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

}  // namespace hexiscale
}  // namespace hexi
