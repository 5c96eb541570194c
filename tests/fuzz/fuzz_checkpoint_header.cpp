// libFuzzer target: a checkpoint device file's header line (parse_checkpoint_header,
// engine/checkpoint.hpp). A parsed header round-trips: to_text -> parse -> to_text, same
// bytes, and its data size does not overflow.

#include "engine/checkpoint.hpp"
#include "tests/fuzz/fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hexi;
  auto header = engine::parse_checkpoint_header(fuzz::text_of(data, size), fuzz::kOrigin);
  if (!header) return 0;
  (void)header->data_bytes();
  const std::string first = engine::to_text(*header);
  auto reread = engine::parse_checkpoint_header(first, fuzz::kOrigin);
  fuzz::check_same_bytes(first,
                         engine::to_text(fuzz::must(reread, "a written header does not read back")),
                         "checkpoint header round trip");
  return 0;
}
