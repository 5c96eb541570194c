// The `random` baseline: HexiScale's phase 2 and splits on random partitions (the
// "random graph partition" of the HexiScale paper: the reference implementation's
// --apply_random_strategy, which replaces only the METIS partition by a uniformly
// random pipeline per device). D follows the reference's random +-1 walk in
// [n/L + 1, n/5] (clamped to what memory allows) by default, or is drawn uniformly
// from the whole feasible range [1, D_max] with {"d_range": "full"}. The best plan
// of the iterations (by the cost model) is kept.
#include "scheduler/baselines/baselines.hpp"
#include "scheduler/baselines/util.hpp"
#include "scheduler/hexiscale/search.hpp"

#include <algorithm>

namespace hexi {
inline namespace baselines {
namespace {

struct RandomOptions {
  int iterations = 40;      // as many as the reference implementation's search
  bool full_range = false;  // D uniform in [1, D_max] instead of the reference's walk
};

Result<RandomOptions> read_random_options(const Scenario& sc) {
  return load_with([&] {
    RandomOptions o;
    if (sc.scheduler != "random") return o;
    JsonNode node = sc.scheduler_options_node();
    node.allow_only({"iterations", "d_range"});
    o.iterations = static_cast<int>(node.integer_or("iterations", 1, 1 << 20, o.iterations));
    const std::string range = node.str_or("d_range", "reference");
    if (range != "reference" && range != "full")
      node.at("d_range").fail("\"reference\" or \"full\"");
    o.full_range = range == "full";
    return o;
  });
}

}  // namespace

Result<SearchResult> run_random(const Scenario& sc, const SearchOptions& options) {
  auto opt = read_random_options(sc);
  if (!opt) return opt.error();
  return run_random_with(sc, options, opt->iterations, opt->full_range);
}

Result<SearchResult> run_random_with(const Scenario& sc, const SearchOptions& options,
                                     int iterations, bool full_range) {
  CostModel cm(sc.cluster, sc.model, sc.training, sc.profile);
  SpecEvaluator ev(cm);
  SearchClock clock("random", options);
  HexiScaleSearch phase2(ev, HexiScaleOptions{}, clock, options.seed);
  const std::vector<Unit> units = make_units(sc.cluster, false);
  const int d_max = std::min<int>(max_pipelines_by_memory(cm, ev.least_memory_recompute()),
                                  static_cast<int>(units.size()));
  // The reference's walk: start at 2, step +-1 within [n/L + 1, n/5].
  const int n = sc.cluster.num_devices();
  const int lo = std::min(n / sc.model.layers + 1, d_max), hi = std::clamp(n / 5, lo, d_max);
  int walk = std::clamp(2, lo, hi);
  std::uint64_t state = options.seed;
  BestPlan best;
  for (int it = 0; it < iterations && !clock.out_of_time(); ++it) {
    clock.phase("iteration " + std::to_string(it + 1) + " of " + std::to_string(iterations));
    int d = walk;
    if (full_range) d = 1 + static_cast<int>(next_random(state) % d_max);
    walk = next_random(state) % 2 ? std::min(hi, walk + 1) : std::max(walk - 1, lo);
    std::vector<int> parts(units.size());
    for (auto& p : parts) p = static_cast<int>(next_random(state) % d);
    auto scored = ev.evaluate(phase2.build(assignment_from_parts(units, parts)), "random");
    if (!scored) {
      clock.count();
      continue;
    }
    best.offer(std::move(scored->plan), std::move(scored->estimate), clock);
  }
  return best.result(sc, clock);
}

}  // namespace baselines
}  // namespace hexi
