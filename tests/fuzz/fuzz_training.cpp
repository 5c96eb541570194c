// libFuzzer target: the training config (read_training, a scenario's "training"). A
// loaded config round-trips: to_json -> read_training -> to_json gives the same bytes.

#include "scenarios/training.hpp"
#include "tests/fuzz/fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hexi;
  auto json = fuzz::parse(data, size);
  if (!json) return 0;
  auto training = load_with([&] { return read_training(JsonNode(*json, fuzz::kOrigin)); });
  if (!training) return 0;
  const std::string first = dump_json(to_json(*training));
  const Json again = fuzz::reparse(first, "a written training config is not JSON");
  auto reread = load_with([&] { return read_training(JsonNode(again, fuzz::kOrigin)); });
  fuzz::check_same_bytes(
      first, dump_json(to_json(fuzz::must(reread, "a written training config does not read back"))),
      "training config round trip");
  return 0;
}
