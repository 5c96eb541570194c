// libFuzzer target: price books (price_book_from_json with the shipped GPU catalog), the
// files `hexisim advise` reads from scenarios/prices/.

#include "scenarios/prices.hpp"
#include "tests/fuzz/fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hexi;
  auto json = fuzz::parse(data, size);
  if (!json) return 0;
  (void)price_book_from_json(*json, fuzz::kOrigin, fuzz::shipped_gpus());
  return 0;
}
