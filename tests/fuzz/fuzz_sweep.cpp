// libFuzzer target: sweep files (sweep_from_json with the shipped catalogs and a fixed
// vocabulary of schedulers and metrics), as if in scenarios/sweeps/.

#include "scenarios/sweep.hpp"
#include "tests/fuzz/fuzz.hpp"
#include "topologies/paths.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hexi;
  static const ModelCatalog models = fuzz::must(ModelCatalog::load_shipped(), "shipped models");
  static const std::filesystem::path file = data_root() / "scenarios/sweeps" / fuzz::kOrigin;
  static const SweepVocabulary vocabulary{{"hexiscale", "uniform", "metis-like"},
                                          {"tokens_per_s", "iteration_time_s", "mfu"}};
  auto json = fuzz::parse(data, size);
  if (!json) return 0;
  (void)sweep_from_json(*json, file, fuzz::shipped_gpus(), models, vocabulary);
  return 0;
}
