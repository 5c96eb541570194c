// libFuzzer target: scenario files (scenario_from_json with the shipped catalogs). The
// input stands in for a file in scenarios/shipped/, so relative cluster, plan and profile
// references resolve as a shipped scenario's do.

#include <cmath>

#include "scenarios/scenario.hpp"
#include "tests/fuzz/fuzz.hpp"
#include "topologies/paths.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hexi;
  static const ModelCatalog models = fuzz::must(ModelCatalog::load_shipped(), "shipped models");
  static const std::filesystem::path file = data_root() / "scenarios/shipped" / fuzz::kOrigin;
  auto json = fuzz::parse(data, size);
  if (!json) return 0;
  auto scenario = scenario_from_json(*json, file, fuzz::shipped_gpus(), models);
  if (!scenario) return 0;
  fuzz::check(scenario->cluster.num_devices() >= 1, "a loaded scenario's cluster has no devices");
  fuzz::check(std::isfinite(scenario->model.params()), "a loaded scenario's model has no size");
  fuzz::check(scenario->training.seq_len <= scenario->model.max_seq,
              "a loaded scenario's seq_len exceeds the model's max_seq");
  (void)scenario->scheduler_options_node();
  return 0;
}
