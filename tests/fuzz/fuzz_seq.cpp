// libFuzzer target: the sequence schedulers of `hexisim seq` (the registry's kSequence
// entries) on small problems: the input decodes to a scenario of 1-8 GPUs of shipped types
// (mixed types, sequences shorter than the mesh), a shipped model, one sequence and HexiSeq
// options (seq_problem.hpp), loaded by scenario_from_json and read_hexiseq_options. A
// scheduler either answers bad input or returns a layout that is valid for the scenario
// under the ZeRO stage it chose (training_of): every device at most once, the groups' tokens
// summing to seq_len (validate_structure), within memory when it says it fits (validate),
// reading back through its JSON, and a finite positive iteration time. hexiseq-exact is left
// out (seq_schedulers()).

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>

#include "scenarios/scenario.hpp"
#include "scheduler/scheduler.hpp"
#include "tests/fuzz/fuzz.hpp"
#include "tests/fuzz/seq_problem.hpp"
#include "topologies/paths.hpp"

namespace {

void check_layout(const hexi::Scenario& sc, const hexi::Scheduled& r, const std::string& what) {
  using namespace hexi;
  fuzz::check(r.sequence.has_value() && r.document.layout.has_value(),
              "a sequence scheduler returned no layout", what);
  const SequenceLayout& layout = *r.document.layout;
  // The search may choose a lower ZeRO stage than the scenario's (HexiSeqOptions::zero_stages).
  const TrainingConfig training = training_of(sc.training, *r.sequence);
  fuzz::check(!layout.groups.empty(), "a layout without groups", what);
  std::int64_t tokens = 0;
  std::set<int> seen;
  for (const SequenceGroup& g : layout.groups) {
    tokens += g.tokens;
    for (int d : g.devices) {
      fuzz::check(d >= 0 && d < sc.cluster.num_devices(), "a layout device out of range", what);
      fuzz::check(seen.insert(d).second, "a device in a layout twice", what);
    }
  }
  fuzz::check(tokens == sc.training.seq_len, "the groups' tokens do not sum to seq_len", what);
  const auto structure =
      validate_structure(layout, sc.model, training, sc.cluster, fuzz::kOrigin, "/sequence");
  if (!structure) {
    fuzz::fail("a scheduler's layout is not valid", what + ": " + structure.error().message);
  }
  if (r.fits) {
    const auto fits = validate(layout, sc.model, training, sc.cluster, fuzz::kOrigin);
    if (!fits) fuzz::fail("a layout that fits is over memory", what + ": " + fits.error().message);
  }
  fuzz::check(std::isfinite(r.iteration_time_s) && r.iteration_time_s > 0,
              "iteration time not finite and > 0", what);
  fuzz::check(std::isfinite(r.tokens_per_s) && r.tokens_per_s > 0, "tokens/s not finite and > 0",
              what);
  const auto reread = layout_from_json(to_json(layout), fuzz::kOrigin);
  fuzz::check(reread.ok() && *reread == layout, "a layout does not read back from its JSON", what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hexi;
  static const ModelCatalog models = fuzz::must(ModelCatalog::load_shipped(), "shipped models");
  static const std::filesystem::path file = data_root() / "scenarios/shipped" / fuzz::kOrigin;
  const auto& gpus = fuzz::shipped_gpus();
  const auto& fuzzed = fuzz::seq_schedulers();
  const fuzz::SeqProblem p = fuzz::decode_seq_problem(data, size, gpus, models);
  const Json scenario_json = fuzz::seq_scenario_json(p, gpus, models);
  auto sc = scenario_from_json(scenario_json, file, gpus, models);
  if (!sc) return 0;  // e.g. a machine of a catalog type that the cluster refuses
  SchedulerOptions options;
  const Json options_json = fuzz::seq_options_json(p);
  auto sequence =
      load_with([&] { return read_hexiseq_options(JsonNode(options_json, "options")); });
  if (!sequence) fuzz::fail("the decoded HexiSeq options do not load", sequence.error().message);
  options.sequence = *sequence;
  const SchedulerInfo& s = *fuzzed[static_cast<std::size_t>(p.scheduler) % fuzzed.size()];
  const std::string what =
      s.name + " on " + dump_json(scenario_json) + " with " + dump_json(options_json);
  auto r = run_scheduler(s.name, *sc, options);
  if (!r) {
    fuzz::check(r.error().kind == ErrorKind::kBadInput, "a scheduler failed on its own",
                what + ": " + r.error().message);
    return 0;
  }
  check_layout(*sc, *r, what);
  return 0;
}
