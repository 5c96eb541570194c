#include "scheduler/hexiscale/search.hpp"

#include "scheduler/search/parallel.hpp"
#include "scheduler/search/random.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

namespace hexi {
inline namespace hexiscale {
namespace {

// Refinement starts: the best plan of this many different D values.
constexpr std::size_t kEliteStarts = 5;
// Most D values the sweep visits one by one (then it strides; see sweep()).
constexpr int kMaxSweep = 128;
// The sweep then tries every D around this many of the strided pass's best D values.
constexpr std::size_t kSweepPeaks = 3;
// Device-level seeds per D of a machine-level search (round-robin, mixed, mixed in pairs).
constexpr std::size_t kDeviceSeeds = 3;
// The device refinement from the fast types' slices stops after this many moves in a row
// without improvement: a second local search, kept shorter than a full round of moves (which
// costs as much again as the rest of a 128-GPU search; 64 stopped too early on the cluster in
// the comment of run()).
constexpr std::size_t kSpreadPatience = 256;
// Subset starts of machine-level searches try every D up to this, then fewer (try_subset).
constexpr int kSubsetEveryD = 16;
// A candidate within this factor of the best plan's time also tries its pipelines reversed.
constexpr double kNearBest = 1.05;
// Pipelines that beat the best plan but for their DP sync are split by compute where the plan
// is within this of the best (their own split's DP sync and sends can cost a third).
constexpr double kBalanceNear = 1.5;

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
    : ev_(ev),
      options_(options),
      clock_(clock),
      seed_(seed),
      builder_(ev, options.tau),
      wide_builder_(ev, options.tau) {
  const Cluster& c = ev.cost_model().cluster();
  per_machine_ = c.num_devices() > options.device_level_max;
  device_seeds_ = per_machine_ && c.num_devices() <= options.device_refine_max;
  builder_.set_wide(!per_machine_);  // the wider phase 2 where groups are parts of machines
  units_ = make_units(c, per_machine_);
  device_units_ = make_units(c, false);
  threads_ = std::max(1, options.threads);
  for (int w = 1; w < threads_; ++w) {
    workers_.push_back(std::make_unique<Worker>(ev.cost_model(), options, !per_machine_));
    workers_.back()->ev.share_caches(ev_);
    workers_.back()->builder.share_cache(builder_);
    workers_.back()->wide_builder.share_cache(wide_builder_);
  }
}

double HexiScaleSearch::peak_flops(const std::map<int, int>& pipeline) const {
  const Cluster& c = ev_.cost_model().cluster();
  double flops = 0;
  for (auto [m, n] : pipeline) flops += n * c.gpu_types()[c.machines()[m].gpu_type].flops();
  return flops;
}

PlanSpec HexiScaleSearch::build(PipelineBuilder& builder, const Assignment& a) const {
  PlanSpec spec;
  const int dp = static_cast<int>(a.size());
  // Micro-batches in proportion to each pipeline's peak FLOP/s among the GPUs used.
  double used = 0;
  for (const auto& p : a) used += peak_flops(p);
  for (const auto& p : a) {
    std::vector<Unit> units;
    for (auto [m, n] : p) units.push_back({m, n});
    const int expected =
        std::max(1, static_cast<int>(std::lround(ev_.micro_batches() * peak_flops(p) / used)));
    spec.pipelines.push_back(builder.build(units, dp, expected));
  }
  return spec;
}

std::string HexiScaleSearch::signature(const Assignment& a) const {
  // Invariant under renumbering pipelines and interchangeable machines, yet telling
  // apart "two pipelines on one machine" from "on two machines of the same class":
  // two rounds of label refinement over the pipeline-machine incidence.
  auto join = [](std::vector<std::string>& parts, char sep) {
    std::sort(parts.begin(), parts.end());
    std::size_t size = 0;
    for (const auto& x : parts) size += x.size() + 1;
    std::string out;
    out.reserve(size);
    for (const auto& x : parts) {
      out += x;
      out += sep;
    }
    return out;
  };
  auto number = [](std::string& to, int n) {
    char digits[16];
    to.append(digits, std::to_chars(digits, digits + sizeof digits, n).ptr);
  };
  std::vector<std::string> pipe0;                      // pipeline: its (machine class, count)s
  std::map<int, std::vector<std::string>> by_machine;  // machine: (pipeline label, count)s
  std::vector<std::string> segs;
  for (const auto& p : a) {
    segs.clear();
    for (auto [m, n] : p) {
      std::string& seg = segs.emplace_back();
      number(seg, ev_.machine_class(m));
      seg += ':';
      number(seg, n);
    }
    pipe0.push_back(join(segs, ','));
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    for (auto [m, n] : a[i]) {
      std::string& entry = by_machine[m].emplace_back(pipe0[i]);
      entry += '*';
      number(entry, n);
    }
  }
  std::map<int, std::string> machine_label;
  for (auto& [m, list] : by_machine) {
    std::string& label = machine_label[m];
    number(label, ev_.machine_class(m));
    label += '{';
    label += join(list, ';');
    label += '}';
  }
  std::vector<std::string> pipes;
  for (const auto& p : a) {
    segs.clear();
    for (auto [m, n] : p) {
      std::string& seg = segs.emplace_back(machine_label[m]);
      seg += ':';
      number(seg, n);
    }
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

HexiScaleSearch::Worker::Worker(const CostModel& model, const HexiScaleOptions& options, bool wide)
    : cm(model),
      ev(cm, options.per_stage_recompute),
      builder(ev, options.tau),
      wide_builder(ev, options.tau) {
  builder.set_wide(wide);
}

bool HexiScaleSearch::uses_every_gpu(const Plan& plan) const {
  return plan.num_devices() == ev_.cost_model().cluster().num_devices();
}

bool HexiScaleSearch::splits_machines(const Assignment& a) const {
  const Cluster& c = ev_.cost_model().cluster();
  for (const auto& p : a) {
    for (auto [m, n] : p) {
      if (n < c.machines()[m].num_gpus) return true;
    }
  }
  return false;
}

HexiScaleSearch::Outcome HexiScaleSearch::evaluate(SpecEvaluator& ev, PipelineBuilder& builder,
                                                   PipelineBuilder& wide_builder,
                                                   const Assignment& a, double limit, double best,
                                                   double best_balanced, bool screen) const {
  Outcome o;
  // Device-level candidates (pipelines of parts of machines) get the device-level
  // search's phase 2 and reversed pipelines, also in a machine-level search.
  const bool device_level = !per_machine_ || splits_machines(a);
  // Phase 2 per pipeline, and the same with the pipelines' orders aligned.
  std::vector<PlanSpec> variants{build(device_level ? wide_builder : builder, a)};
  PlanSpec same_order = aligned(variants[0]);
  bool differs = false;
  for (std::size_t p = 0; p < same_order.pipelines.size(); ++p) {
    differs = differs || !(same_order.pipelines[p].segments == variants[0].pipelines[p].segments);
  }
  if (differs) variants.push_back(std::move(same_order));
  auto score = [&](const PlanSpec& spec) {
    // Skip the full estimate when the slowest pipeline's curve alone cannot beat the limit.
    // A heuristic cut: the curves approximate the timeline from above where sends and the
    // fill weigh, so a plan cut here may be a little faster than the limit (the exact search
    // cuts on SpecEvaluator::iteration_floor_s instead).
    const double w = ev.pipelines_s(spec);
    o.slowest = std::min(o.slowest, w);
    o.counted.push_back(0);
    if (!(w < limit)) return;
    // The same kind of cut on the busy-fraction fixed point, where the shared timeline would
    // cost the most (CostModel::estimate_below); a screened plan counts as not estimated.
    auto scored =
        ev.evaluate(spec, "hexiscale", screen ? limit : std::numeric_limits<double>::infinity());
    if (scored && scored->estimate.screened) return;
    o.estimated = true;
    if (!scored || !scored->estimate.feasible) return;
    // Pipelines that beat the best plan but for their DP sync: their layers aligned.
    if (scored->estimate.pipeline_s < best) {
      if (auto aligned = ev.align_layers(*scored)) scored = std::move(aligned);
      // And split by compute alone and with the sends half weighted, where near the best: the
      // curves charge a stage each boundary's send whole, so over a slow network they give
      // the end stages (one boundary each) the most layers and the DP sync its largest
      // pieces, where the estimate's timeline overlaps sends with compute. Kept apart
      // (Outcome::balanced): these splits lie outside the plan space the search (the exact
      // search's incumbent) keeps to, and its course stays as it was. Only the fastest of the
      // whole search is used (the polish's start): one that does not beat the fastest before
      // this batch is not kept, and is estimated below that bound (screened where the shared
      // timeline would run).
      double held =
          std::min({scored->objective(), o.balanced ? o.balanced->scored.objective() : kInfeasible,
                    best_balanced});
      for (double weight : {0.0, 0.5}) {
        if (!(scored->objective() < kBalanceNear * best)) break;
        auto balanced = ev.compute_balanced(*scored, weight, held);
        if (balanced && balanced->objective() < held) {
          held = balanced->objective();
          o.balanced = SpecResult{spec, std::move(*balanced)};
        }
      }
    }
    o.counted.back() = scored->estimate.tokens_per_s;
    o.objective = std::min(o.objective, scored->objective());
    const double held = o.best ? o.best->scored.objective() : kInfeasible;
    if (scored->objective() < held) o.best = SpecResult{spec, std::move(*scored)};
  };
  for (const PlanSpec& spec : variants) score(spec);
  // Reversed pipelines keep every inter-stage bandwidth but swap which stages drain
  // first (and so sync their gradients behind the rest of the drain) and which hold
  // the embedding and the most in-flight activations (layers, recompute and batch are
  // split anew for the new order). Always tried by device-level searches: phase 2
  // orders a pipeline by the curve's bound, which overstates pipelines of few
  // micro-batches per stage (m <= stages: the fill is hidden behind the slowest
  // stage's own warm-up), so the better order may rank second there (16-GPU mixes at
  // global batch 16: amp-like's [H100, RTX 4090] pipelines, 13 % faster, were built
  // as [RTX 4090, H100]). Above: only near the best plan.
  if (device_level || o.objective < kNearBest * std::min(best, o.objective)) {
    PlanSpec& reversed = variants[0];
    for (auto& p : reversed.pipelines) std::reverse(p.segments.begin(), p.segments.end());
    score(reversed);
  }
  return o;
}

void HexiScaleSearch::keep(const std::string& signature, const SpecResult& result) {
  const double objective = result.scored.objective();
  const std::size_t limit = static_cast<std::size_t>(keep_) + 1;
  if (kept_.size() == limit && !(objective < kept_.back().objective)) return;
  auto same = std::find_if(kept_.begin(), kept_.end(),
                           [&](const Kept& k) { return k.signature == signature; });
  if (same != kept_.end()) {
    if (!(objective < same->objective)) return;
    kept_.erase(same);
  }
  // After the equal ones: the first found stays first, as best_ does.
  auto at = std::upper_bound(kept_.begin(), kept_.end(), objective,
                             [](double v, const Kept& k) { return v < k.objective; });
  kept_.insert(at, Kept{objective, signature, result});
  if (kept_.size() > limit) kept_.pop_back();
}

std::vector<SpecResult> HexiScaleSearch::runners_up() const {
  std::vector<SpecResult> out;
  const std::string best = best_ ? signature(best_assignment_) : std::string();
  for (const Kept& k : kept_) {
    if (k.signature != best && static_cast<int>(out.size()) < keep_) out.push_back(k.result);
  }
  return out;
}

double HexiScaleSearch::record(const Assignment& a, const std::string& sig, Outcome& o) {
  Seen& seen = seen_[sig];
  seen.slowest = o.slowest;
  seen.objective = o.objective;
  seen.estimated = seen.estimated || o.estimated;
  for (double tokens : o.counted) clock_.count(tokens);
  if (keep_ > 0 && o.best) keep(sig, *o.best);
  if (o.best && uses_every_gpu(o.best->scored.plan) &&
      (!best_all_gpus_ || o.best->scored.objective() < best_all_gpus_->scored.objective()))
    best_all_gpus_ = *o.best;
  if (o.best && o.best->scored.objective() < best_objective()) {
    best_ = std::move(o.best);
    best_assignment_ = a;
  }
  if (o.balanced &&
      (!best_balanced_ || o.balanced->scored.objective() < best_balanced_->scored.objective()))
    best_balanced_ = std::move(o.balanced);
  return o.objective;
}

double HexiScaleSearch::consider(const Assignment& a, std::optional<double> threshold) {
  return consider_all({a}, threshold)[0];
}

std::vector<double> HexiScaleSearch::consider_all(const std::vector<Assignment>& as,
                                                  std::optional<double> threshold, bool screen) {
  const double limit = threshold.value_or(best_objective());
  const double best = best_objective();
  const double best_balanced = best_balanced_ ? best_balanced_->scored.objective() : kInfeasible;
  const int n = static_cast<int>(as.size());
  std::vector<double> out(n, kInfeasible);
  // Answered from what is known before the batch, or evaluated (the first of equal
  // signatures only; the others take its answer).
  enum class Todo { kDone, kEvaluate, kSameAs };
  std::vector<Todo> todo(n, Todo::kDone);
  std::vector<std::string> sigs(n);
  std::vector<int> jobs;
  std::unordered_map<std::string, int> first;
  for (int i = 0; i < n; ++i) {
    const Assignment& a = as[i];
    if (a.empty() || static_cast<int>(a.size()) > ev_.micro_batches()) continue;
    sigs[i] = signature(a);
    auto known = seen_.find(sigs[i]);
    if (known != seen_.end()) {
      const Seen& seen = known->second;
      if (seen.estimated) {
        out[i] = seen.objective;
        continue;
      }
      if (seen.slowest != kInfeasible && !(seen.slowest < limit)) continue;
    }
    if (!first.emplace(sigs[i], i).second) {
      todo[i] = Todo::kSameAs;
      continue;
    }
    todo[i] = Todo::kEvaluate;
    jobs.push_back(i);
  }
  std::vector<Outcome> outcomes(jobs.size());
  parallel_for(threads_, static_cast<int>(jobs.size()), [&](int w, int j) {
    outcomes[j] = evaluate(worker_ev(w), worker_builder(w), worker_wide_builder(w), as[jobs[j]],
                           limit, best, best_balanced, screen);
  });
  for (std::size_t j = 0; j < jobs.size(); ++j)
    out[jobs[j]] = record(as[jobs[j]], sigs[jobs[j]], outcomes[j]);
  for (int i = 0; i < n; ++i) {
    if (todo[i] == Todo::kSameAs) out[i] = out[first[sigs[i]]];
  }
  return out;
}

void HexiScaleSearch::try_pipelines(int d, int d_max, Eta eta, double eta_s) {
  const Cluster& c = ev_.cost_model().cluster();
  clock_.phase("phase 1: D=" + std::to_string(d) + " of " + std::to_string(d_max), eta, eta_s);
  // The partitions of this D.
  std::vector<std::function<Assignment()>> jobs;
  auto add = [&](const std::vector<Unit>& units, std::function<std::vector<int>()> parts) {
    jobs.push_back([&units, parts] { return assignment_from_parts(units, parts()); });
  };
  const int units = static_cast<int>(units_.size());
  if (d <= units) add(units_, [this, d] { return spread_partition(units_, d); });
  if (d <= static_cast<int>(c.machines().size()))
    add(units_, [this, &c, d] { return packed_partition(c, units_, d); });
  // A machine-level search also deals single GPUs round-robin (each pipeline a slice of
  // every machine, DP on the fast intra-machine links): a structure whole machines
  // cannot express, and often the best on mixes of few fast and many slow machines.
  const std::size_t device_seed_at = jobs.size();
  if (device_seeds_) {
    add(device_units_, [this, d] { return spread_partition(device_units_, d); });
    add(device_units_, [this, &c, d] { return mixed_partition(c, device_units_, d); });
    add(device_units_, [this, &c, d] { return mixed_partition(c, device_units_, d, 2); });
  }
  // Machine-level graphs of large clusters get one METIS run per cut mode, and none
  // when parts would average fewer than two machines: METIS then has nothing to choose
  // (the spread and packed partitions cover it) and its initial bisections cost the
  // most (a third of the search at 1 024 GPUs).
  const int seeds = per_machine_ ? (2 * d <= units ? 1 : 0) : options_.seeds;
  for (CutMode mode : {CutMode::kDpOnSlowLinks, CutMode::kDpOnFastLinks}) {
    for (int s = 0; s < seeds && d > 1; ++s) {
      // Seed 0 partitions the plain graph; later seeds jitter its edge weights.
      const std::uint64_t metis_seed = mix(seed_, (static_cast<std::uint64_t>(d) << 8) + 2 * s +
                                                      (mode == CutMode::kDpOnFastLinks ? 1 : 0));
      add(units_, [this, &c, d, mode, metis_seed, s] {
        return metis_partition(c, units_, d, mode, metis_seed, s == 0 ? 0.0 : 0.3);
      });
    }
  }
  if (clock_.out_of_time()) return;
  // METIS runs one at a time: its random generator is one global state.
  std::vector<Assignment> candidates;
  for (const auto& job : jobs) candidates.push_back(job());
  const std::vector<double> objectives = consider_all(candidates);  // duplicates: from seen_
  double best_here = kInfeasible;
  Assignment best_a;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    // The device-level seed is no start for the machine-level refinement (its moves
    // of whole machines do not fit pipelines made of single GPUs).
    if (device_seeds_ && i >= device_seed_at && i < device_seed_at + kDeviceSeeds) continue;
    if (objectives[i] < best_here) {
      best_here = objectives[i];
      best_a = candidates[i];
    }
  }
  if (!best_a.empty()) elite_.emplace_back(best_here, best_a);
}

int HexiScaleSearch::pipelines_by_memory() const {
  return max_pipelines_by_memory(ev_.cost_model(), ev_.least_memory_recompute());
}

void HexiScaleSearch::keep_best(std::optional<Start>& slot, double objective, const Assignment& a) {
  // The first of equal objectives stays.
  if (objective != kInfeasible && (!slot || objective < slot->first)) slot = Start{objective, a};
}

void HexiScaleSearch::try_subset(const std::vector<int>& fastest, std::size_t k) {
  // A type left idle may slow the iteration however the rest is split (a slow GPU type over a
  // slow network), and the sweep over D on every GPU never leaves one idle; the subset starts
  // of one pipeline and one per machine miss D = 2, 3, ... on the fast machines. Structured
  // partitions only (METIS costs the most), at most kMaxSweep values of D.
  const Cluster& c = ev_.cost_model().cluster();
  std::vector<Unit> devices, machines;  // every machine's devices, fastest first; the k machines
  std::size_t n = 0;                    // devices of the k machines
  for (std::size_t i = 0; i < fastest.size(); ++i) {
    const int m = fastest[i];
    for (int g = 0; g < c.machines()[m].num_gpus; ++g) devices.push_back({m, 1});
    if (i < k) {
      machines.push_back({m, c.machines()[m].num_gpus});
      n = devices.size();
    }
  }
  const int d_max = std::min<int>(pipelines_by_memory(), static_cast<int>(n));
  const int stride = (d_max + kMaxSweep - 1) / kMaxSweep;
  // Machine-level searches (long pipelines, each candidate costly): every D up to
  // kSubsetEveryD, then half as many more each time.
  auto next = [&](int d) { return per_machine_ && d >= kSubsetEveryD ? d + d / 2 : d + stride; };
  std::vector<Assignment> candidates;
  for (int d = 2; d <= d_max; d = next(d)) {
    // Pipelines of equal lengths, dealt round-robin (data parallelism on the fast links inside
    // machines): the k machines' devices rounded down to a multiple of D (the last few left
    // idle) or up (the next fastest devices added; a pipeline one GPU short may not fit).
    const std::size_t down = n / d * d, up = (n + d - 1) / d * d;
    for (std::size_t count : {down, up}) {
      if (count > devices.size() || (count == up && up == down)) continue;
      const std::vector<Unit> first(devices.begin(), devices.begin() + static_cast<long>(count));
      candidates.push_back(assignment_from_parts(first, spread_partition(first, d)));
    }
    // Whole machines per pipeline (data parallelism over the network).
    if (d <= static_cast<int>(k))
      candidates.push_back(assignment_from_parts(machines, packed_partition(c, machines, d)));
  }
  if (clock_.out_of_time()) return;
  const std::vector<double> objectives = consider_all(candidates);
  for (std::size_t i = 0; i < candidates.size(); ++i)
    keep_best(split_subset_start_, objectives[i], candidates[i]);
  // The slices in full whatever their slowest pipeline's curve says (phase 2 orders a slice's
  // segments by that bound; the device refinement reorders them): a start for it.
  if (!device_seeds_) return;
  std::vector<Assignment> slices;
  for (const Assignment& a : candidates) {
    if (splits_machines(a)) slices.push_back(a);
  }
  const std::vector<double> full = consider_all(slices, kInfeasible);
  for (std::size_t i = 0; i < slices.size(); ++i)
    keep_best(spread_subset_start_, full[i], slices[i]);
}

void HexiScaleSearch::sweep() {
  // Every D from 1 to the most pipelines memory allows; when that is more than
  // kMaxSweep values, every stride-th D first, then every D around the best.
  // Device-level seeds of a machine-level search go beyond one pipeline per machine.
  const int d_max =
      std::min<int>(pipelines_by_memory(),
                    static_cast<int>(device_seeds_ ? device_units_.size() : units_.size()));
  const int stride = (d_max + kMaxSweep - 1) / kMaxSweep;
  const std::size_t seeded = elite_.size();  // the machine-aligned seeds of run()
  // ETA of the strided pass: the D values left at the mean time of those done.
  const int pass = (d_max + stride - 1) / stride;
  for (int d = 1, k = 0; d <= d_max && !clock_.out_of_time(); d += stride, ++k) {
    if (k == 0) {
      try_pipelines(d, d_max, Eta::kNone, 0);
    } else {
      try_pipelines(d, d_max, Eta::kEstimate, clock_.phase_elapsed_s() / k * (pass - k));
    }
  }
  if (stride == 1) return;
  // Every D around the best D so far and around the kSweepPeaks best D values of the
  // strided pass: the objective over D is bumpy (pipelines whose stages stop lining up pay a
  // longer DP sync), so a neighbourhood the stride only sampled can hold the best D (4 096
  // GPUs of four types, Llama-2 70B: 18.96 s around the strided best alone, 17.86 s).
  std::vector<std::pair<double, int>> peaks;  // (objective, D) of the strided pass
  for (std::size_t i = seeded; i < elite_.size(); ++i) {
    peaks.emplace_back(elite_[i].first, static_cast<int>(elite_[i].second.size()));
  }
  std::stable_sort(peaks.begin(), peaks.end());
  std::vector<int> around;
  if (best_) around.push_back(static_cast<int>(best_assignment_.size()));
  for (const auto& [objective, at] : peaks) {
    if (around.size() > kSweepPeaks) break;
    if (std::find(around.begin(), around.end(), at) == around.end()) around.push_back(at);
  }
  std::sort(around.begin(), around.end());
  int done = 0;  // every D below this was tried
  for (int at : around) {
    for (int d = std::max({1, at - stride + 1, done});
         d < std::min(d_max + 1, at + stride) && !clock_.out_of_time(); ++d) {
      if ((d - 1) % stride != 0) try_pipelines(d, d_max, Eta::kNone, 0);
    }
    done = std::max(done, at + stride);
  }
}

std::string HexiScaleSearch::mode() const {
  if (!per_machine_) return "device-level";
  return device_seeds_ && options_.refine ? "machine-level + device refinement" : "machine-level";
}

std::optional<SpecResult> HexiScaleSearch::run() {
  // Machine-aligned pipelines (one per machine, and everything in one) are cheap
  // and often good starting points; they seed the incumbent before the sweep.
  const Cluster& c = ev_.cost_model().cluster();
  clock_.begin("sweep");
  Assignment per_machine, all(1);
  for (std::size_t m = 0; m < c.machines().size(); ++m) {
    per_machine.push_back({{static_cast<int>(m), c.machines()[m].num_gpus}});
    all[0][static_cast<int>(m)] = c.machines()[m].num_gpus;
  }
  for (const Assignment& a : {all, per_machine}) {
    const double objective = consider(a);
    if (device_seeds_ && objective != kInfeasible) elite_.emplace_back(objective, a);
  }
  // The same two on fewer machines, the fastest GPUs first: without the slowest types (one
  // more type left idle each time), and on the fastest 1, 2, 4, ... machines. Where a slow
  // type, or any GPU beyond a few machines, costs more over a slow network than its FLOPs
  // bring (a DP sync or a pipeline boundary on a thin link), the plan on fewer GPUs is a start
  // the refinement cannot reach by leaving one machine idle at a time (each step alone may
  // cost more than it saves). The best of them is kept as a refinement start.
  std::vector<int> fastest(c.machines().size());
  std::iota(fastest.begin(), fastest.end(), 0);
  auto type_flops = [&](int m) { return c.gpu_types()[c.machines()[m].gpu_type].flops(); };
  std::stable_sort(fastest.begin(), fastest.end(),
                   [&](int x, int y) { return type_flops(x) > type_flops(y); });
  std::vector<std::size_t> type_ends;  // k: the fastest k machines end a GPU type
  for (std::size_t k = 1; k < fastest.size(); ++k) {
    if (c.machines()[fastest[k]].gpu_type != c.machines()[fastest[k - 1]].gpu_type)
      type_ends.push_back(k);
  }
  std::vector<std::size_t> prefixes = type_ends;
  for (std::size_t k = 1; k < fastest.size(); k *= 2) prefixes.push_back(k);
  std::sort(prefixes.begin(), prefixes.end());
  prefixes.erase(std::unique(prefixes.begin(), prefixes.end()), prefixes.end());
  // Each GPU of those machines its own pipeline too (data parallelism alone, where the model
  // fits one GPU), and of every machine; a start for the refinement that moves single GPUs.
  prefixes.push_back(fastest.size());
  for (std::size_t k : prefixes) {
    Assignment fewer_per_machine, fewer_all(1), fewer_per_gpu;
    for (std::size_t i = 0; i < k; ++i) {
      const int m = fastest[i];
      fewer_per_machine.push_back({{m, c.machines()[m].num_gpus}});
      fewer_all[0][m] = c.machines()[m].num_gpus;
      for (int g = 0; g < c.machines()[m].num_gpus; ++g) fewer_per_gpu.push_back({{m, 1}});
    }
    if (k < fastest.size()) {
      // Estimated whatever their curves say (a few plans): over a slow network the curves
      // overstate a long pipeline's sends by a sixth or more, and would cut the one that
      // uses a whole fast type.
      for (const Assignment& a : {fewer_all, fewer_per_machine})
        keep_best(subset_start_, consider(a, kInfeasible), a);
    }
    const double objective = consider(fewer_per_gpu);
    if (!per_machine_) keep_best(subset_start_, objective, fewer_per_gpu);
  }
  sweep();
  // Without the slowest types, every D on the faster machines alone (after the sweep, whose
  // cuts and refinement starts stay as they were); not above device_refine_max GPUs, where
  // the search keeps to its cheapest parts (at 1 024 GPUs these starts cost ~400 candidates of
  // long pipelines, 1 583 without them).
  if (device_seeds_ || !per_machine_) {
    for (std::size_t k : type_ends) try_subset(fastest, k);
  }
  if (!options_.refine || !best_) return best_;
  clock_.begin("refinement");
  std::stable_sort(elite_.begin(), elite_.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  // With device-level seeds the best plan may be made of single GPUs: the machine-level
  // refinement starts from machine-level plans only.
  std::vector<Assignment> starts;
  if (!device_seeds_) starts.push_back(best_assignment_);
  for (const auto& [_, a] : elite_) {
    if (starts.size() >= kEliteStarts) break;
    if (std::find(starts.begin(), starts.end(), a) == starts.end()) starts.push_back(a);
  }
  // The best start that leaves a type idle, of one pipeline or one per machine, and of D >= 2
  // (each a local search of its own: the better start need not refine to the better plan).
  for (const auto& subset : {subset_start_, split_subset_start_}) {
    if (subset && std::find(starts.begin(), starts.end(), subset->second) == starts.end())
      starts.push_back(subset->second);
  }
  for (const auto& s : starts) {
    if (clock_.out_of_time()) break;
    refine(s, per_machine_);
  }
  // The machine-level search's best plan seeds a refinement that moves single GPUs
  // (parts of machines between pipelines, exchanges of GPUs of different kinds): the
  // moves of the device-level search, from a start that is already good.
  if (device_seeds_ && !clock_.out_of_time()) {
    clock_.begin("device refinement");
    const Assignment best = best_assignment_;
    refine(best, false);
    // And the best start on the fast types alone whose pipelines are slices of every fast
    // machine (data parallelism inside them): the machine-level refinement cannot move single
    // GPUs, and the best plan may lie nearer that start than the incumbent (74 GPUs of five
    // kinds, Llama-3 8B: 5 B200 machines dealt to 4 pipelines, 20 % faster than the one long
    // pipeline the incumbent refined to).
    if (spread_subset_start_ && spread_subset_start_->second != best && !clock_.out_of_time())
      refine(spread_subset_start_->second, false, kSpreadPatience);
  }
  return best_;
}

}  // namespace hexiscale
}  // namespace hexi
