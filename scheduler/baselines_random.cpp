// The `random` baseline: HexiScale's phase 2 and splits on random partitions.
// Each iteration draws D uniformly from [1, the most pipelines memory allows] and
// sends every device to a uniformly random pipeline (the "random graph partition"
// of the HexiScale paper); the best plan over the iterations is kept.
#include "scheduler/baselines.hpp"
#include "scheduler/baselines_util.hpp"
#include "scheduler/hexiscale_search.hpp"

namespace hexi {
namespace {

struct RandomOptions {
  int iterations = 40;  // as many as the reference implementation's search
};

Result<RandomOptions> read_random_options(const Scenario& sc) {
  return load_with([&] {
    RandomOptions o;
    if (sc.scheduler != "random") return o;
    JsonNode node(sc.scheduler_options, sc.file.string(), "/scheduler");
    node.allow_only({"iterations"});
    o.iterations = static_cast<int>(node.integer_or("iterations", 1, 1 << 20, o.iterations));
    return o;
  });
}

}  // namespace

std::uint64_t next_random(std::uint64_t& state) {
  // splitmix64: the same sequence on every platform for a seed.
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Result<SearchResult> run_random(const Scenario& sc, const SearchOptions& options) {
  auto opt = read_random_options(sc);
  if (!opt) return opt.error();
  CostModel cm(sc.cluster, sc.model, sc.training, sc.profile);
  SpecEvaluator ev(cm);
  SearchClock clock("random", options);
  HexiScaleSearch phase2(ev, HexiScaleOptions{}, clock, options.seed);
  const std::vector<Unit> units = make_units(sc.cluster, false);
  const int d_max = std::min<int>(max_pipelines_by_memory(cm), static_cast<int>(units.size()));
  std::uint64_t state = options.seed;
  BestPlan best;
  for (int it = 0; it < opt->iterations && !clock.out_of_time(); ++it) {
    clock.phase("iteration " + std::to_string(it + 1) + " of " + std::to_string(opt->iterations));
    const int d = 1 + static_cast<int>(next_random(state) % d_max);
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

}  // namespace hexi
