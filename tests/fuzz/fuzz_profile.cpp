// libFuzzer target: device profiles (Profile::from_json). A loaded profile round-trips:
// to_json -> from_json -> to_json gives the same bytes.

#include "tests/fuzz/fuzz.hpp"
#include "topologies/profile.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hexi;
  auto json = fuzz::parse(data, size);
  if (!json) return 0;
  auto profile = Profile::from_json(*json, fuzz::kOrigin);
  if (!profile) return 0;
  const std::string first = dump_json(profile->to_json());
  auto reread =
      Profile::from_json(fuzz::reparse(first, "a written profile is not JSON"), fuzz::kOrigin);
  fuzz::check_same_bytes(
      first, dump_json(fuzz::must(reread, "a written profile does not read back").to_json()),
      "profile round trip");
  return 0;
}
