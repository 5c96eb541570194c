// libFuzzer target: a checkpoint's manifest.json (parse_checkpoint_manifest) and its
// entries (parse_manifest_file, what ranks send to rank 0). A parsed manifest and each of
// its entries round-trip: to_text -> parse -> to_text, same bytes.

#include "engine/checkpoint.hpp"
#include "tests/fuzz/fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hexi;
  const std::string_view text = fuzz::text_of(data, size);
  if (auto entry = engine::parse_manifest_file(text, fuzz::kOrigin)) {
    const std::string first = engine::to_text(*entry);
    auto reread = engine::parse_manifest_file(first, fuzz::kOrigin);
    fuzz::check_same_bytes(
        first, engine::to_text(fuzz::must(reread, "a written manifest entry does not read back")),
        "manifest entry round trip");
  }
  auto manifest = engine::parse_checkpoint_manifest(text, fuzz::kOrigin);
  if (!manifest) return 0;
  const std::string first = engine::to_text(*manifest);
  auto reread = engine::parse_checkpoint_manifest(first, fuzz::kOrigin);
  fuzz::check_same_bytes(
      first, engine::to_text(fuzz::must(reread, "a written manifest does not read back")),
      "checkpoint manifest round trip");
  return 0;
}
