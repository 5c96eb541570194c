// libFuzzer target: the model catalog (ModelCatalog::from_json, scenarios/models.json).
// Every loaded model round-trips: to_json -> read_model -> to_json gives the same bytes.

#include <cmath>

#include "scenarios/model.hpp"
#include "tests/fuzz/fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hexi;
  auto json = fuzz::parse(data, size);
  if (!json) return 0;
  auto catalog = ModelCatalog::from_json(*json, fuzz::kOrigin);
  if (!catalog) return 0;
  for (const Model& model : catalog->models()) {
    fuzz::check(catalog->find(model.name) == &model, "a catalog model is not found by its name",
                model.name);
    fuzz::check(std::isfinite(model.params()) && model.params() > 0,
                "a loaded model has no finite parameter count", model.name);
    const std::string first = dump_json(to_json(model));
    const Json again = fuzz::reparse(first, "a written model is not JSON");
    auto reread = load_with([&] { return read_model(JsonNode(again, fuzz::kOrigin)); });
    const Model& second = fuzz::must(reread, "a written model does not read back");
    fuzz::check_same_bytes(first, dump_json(to_json(second)), "model round trip");
  }
  return 0;
}
