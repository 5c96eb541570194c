// libFuzzer target: advise requests (advise_from_json with the shipped catalogs), as if in
// scenarios/advise/ (a relative price book resolves as a shipped request's does).

#include "studies/advise_request.hpp"
#include "tests/fuzz/fuzz.hpp"
#include "topologies/paths.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hexi;
  static const ModelCatalog models = fuzz::must(ModelCatalog::load_shipped(), "shipped models");
  static const std::filesystem::path file = data_root() / "scenarios/advise" / fuzz::kOrigin;
  auto json = fuzz::parse(data, size);
  if (!json) return 0;
  auto request = advise_from_json(*json, file, fuzz::shipped_gpus(), models);
  if (!request) return 0;
  fuzz::check(request->combinations() >= 1, "a loaded request allows no combination");
  return 0;
}
