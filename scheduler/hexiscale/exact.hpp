#pragma once
// Exact search (ground truth for HexiScale) over the plan space of plan_space.hpp,
// for clusters of at most 16 GPUs (32 under a time budget), under the same cost model.
//
// What it is exact over: every plan on a subset of the devices (all of them or fewer; the
// rest idle), whose pipelines visit
// each machine at most once in one contiguous segment of TP groups of one degree
// (any valid degree dividing the segment; any number of pipelines; any order of
// segments), with devices handed out canonically, the batch split that minimises
// the slowest pipeline and each pipeline's time-minimal layer split (both exact).
// HexiScale's search (hexiscale_search) searches the same space, so its plan / exact <= 1
// and the ratio says how much its heuristics lose (the scheduler's final layer polish in
// run_hexiscale moves layers under the full estimate and may pass the optimum). The
// objective is the full estimate's iteration time (pipelines + DP sync + optimizer); ties
// within 1e-9 are equal.
//
// How: for each D (1 .. the most pipelines memory allows), enumerate multisets of
// D "pipeline types" (per-machine counts, degrees, segment order) within the
// cluster, depth first, with branch and bound:
//   * T* = the best iteration time so far (HexiScale's plan to start with);
//   * f_t = its compute floor (PipelineCurve::compute_floor: no layer split's busiest
//     stage computes a micro-batch in less), and n_t = the most micro-batches m with
//     m * f_t < T* whose realized split's timeline floor (PipelineCurve::timeline_floor) is
//     below T*: a stage computes its micro-batches one at a time, after the fill, so a plan
//     beats T* only if every pipeline runs >= 1 micro-batch within n_t and they cover the
//     global batch; types with n_t = 0 are out, and a partial plan is cut when its n_t plus the
//     best any completion can add (a dynamic program over remaining devices and
//     pipelines) stays below the global micro-batch count;
//   * at a leaf, the least over batch splits of the slowest m_p * f_p, then the realized
//     plan's SpecEvaluator::iteration_floor_s (each stage's compute under the split the
//     curves choose, with the fill before it; the DP sync's bytes through each machine's NICs
//     from when its stages end at the earliest), are lower bounds W of its iteration time;
//     only W < T* is estimated in full. (The pipeline curves are no such bound: they approximate
//     the timeline from above where sends and the fill weigh.)
// Symmetry: pipelines are unordered (multisets of types); devices within a machine
// are interchangeable (canonical ids); of complete plans that are images of each other
// under a permutation of interchangeable machines (one class: same GPUs, links, NICs and
// leaf switch; equal estimates), only the least as a sorted list of type indices is
// estimated (up to 120 permutations). A time budget ends it early without proof; then every
// pipeline count D not finished is bounded below by the global micro-batches over the most
// micro-batches per second (the inverse compute floors) D types that fit together can run,
// and the gap of the best plan to the least of these bounds is reported.

#include <optional>

#include "scheduler/hexiscale/hexiscale.hpp"
#include "scheduler/search/search.hpp"

namespace hexi {
inline namespace hexiscale {

constexpr int kExactMaxGpus = 16;
// Under a time budget (which reports the gap where it stops short), clusters up to this many
// GPUs whose pipeline types can be enumerated (a few machines).
constexpr int kExactMaxGpusBudgeted = 32;

struct ExactStats {
  long types = 0;           // pipeline types enumerated (all D)
  long nodes = 0;           // partial plans visited
  long leaves = 0;          // complete plans reached
  long mirrored = 0;        // of which images of others under interchangeable machines
  long full_estimates = 0;  // complete plans estimated in full
  bool proven = false;      // finished without hitting the time budget
  // Where not proven: a lower bound of every plan's iteration time (s) and the best plan's
  // relative gap to it, (best - bound) / best; a negative bound: none computed (too many
  // pipeline types for its dynamic program).
  double bound_s = -1;
  double gap = 0;
};

// Exhaustive search from an incumbent (may be empty). nullopt: nothing feasible.
std::optional<SpecResult> exact_search(SpecEvaluator& ev, SearchClock& clock,
                                       std::optional<SpecResult> incumbent, ExactStats& stats);

Result<SearchResult> run_exact(const Scenario& scenario, const SearchOptions& options);

}  // namespace hexiscale
}  // namespace hexi
