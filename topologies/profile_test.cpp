// Device profiles: reading, defaults, and the file round trip.
#include "topologies/profile.hpp"

#include <gtest/gtest.h>

namespace hexi {
namespace {

Profile parse(const std::string& text) {
  auto json = parse_json_text(text, "p.json");
  EXPECT_TRUE(json.ok()) << json.error().message;
  auto profile = Profile::from_json(*json, "p.json");
  EXPECT_TRUE(profile.ok()) << profile.error().message;
  return profile.ok() ? *profile : Profile{};
}

TEST(Profile, ReadsDefaultAndPerGpuEntries) {
  const Profile p = parse(R"({"version": 1, "default": {"gemm_efficiency": 0.6},
      "devices": {"H100-SXM": {"kernel_overhead_us": 2}}})");
  EXPECT_DOUBLE_EQ(p.default_device().gemm_efficiency, 0.6);
  // A GPU entry starts from the file's default.
  EXPECT_DOUBLE_EQ(p.device("H100-SXM").gemm_efficiency, 0.6);
  EXPECT_DOUBLE_EQ(p.device("H100-SXM").kernel_overhead_s, 2e-6);
  EXPECT_DOUBLE_EQ(p.device("A100-SXM-80GB").kernel_overhead_s, 4e-6);
}

TEST(Profile, RefusesOutOfRangeValues) {
  for (const char* text : {R"({"version": 1, "default": {"gemm_efficiency": 0}})",
                           R"({"version": 1, "default": {"kernel_overhead_us": -1}})",
                           R"({"version": 1, "devices": {"A100": {"typo": 1}}})"}) {
    auto profile = Profile::from_json(*parse_json_text(text, "p.json"), "p.json");
    ASSERT_FALSE(profile.ok()) << text;
    EXPECT_EQ(profile.error().kind, ErrorKind::kBadInput);
  }
}

// Found by tests/fuzz (fuzz_profile): a kernel overhead of 0.023 us was read as
// 0.023 * 1e-6 s and written as 0.022999999999999996 us, drifting on every write and read.
TEST(Profile, WrittenAndReadBackIsTheSameProfile) {
  for (const char* us : {"0.023", "0.037", "4", "1e-9", "999999.999", "0.1"}) {
    const std::string first = dump_json(
        parse(std::string(R"({"version": 1, "default": {"kernel_overhead_us": )") + us + "}}")
            .to_json());
    EXPECT_EQ(dump_json(parse(first).to_json()), first) << us;
  }
  auto json = parse_json_text(R"({"version": 1, "default": {"kernel_overhead_us": 0.023}})", "p");
  EXPECT_EQ(Profile::from_json(*json, "p")->to_json()["default"]["kernel_overhead_us"], 0.023);
}

}  // namespace
}  // namespace hexi
