// Error messages name the file, the JSON path and what was expected.
#include "topologies/json_input.hpp"

#include <gtest/gtest.h>

namespace hexi {
namespace {

TEST(JsonInput, SyntaxErrorNamesLineAndColumn) {
  auto r = parse_json_text("{\n  \"a\": 1,\n  \"b\": ]\n}", "x.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(r.error().message.find("x.json: invalid JSON at line 3"), std::string::npos)
      << r.error().message;
}

TEST(JsonInput, MissingFileIsBadInput) {
  auto r = read_json_file("/nonexistent/cluster.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(r.error().message.find("/nonexistent/cluster.json: cannot open"), std::string::npos);
}

TEST(JsonInput, TypedReadsReportPathAndValue) {
  Json j = Json::parse(R"({"machines": [{"gpus": 8}, {"gpus": -3}], "name": 5})");
  JsonNode root(j, "c.json");
  auto r = load_with([&] { return root.at("machines").at(1).integer_in("gpus", 1, 1024); });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message,
            "c.json: /machines/1/gpus: expected an integer in [1, 1024], got -3");
  auto s = load_with([&] { return root.str("name"); });
  EXPECT_EQ(s.error().message, "c.json: /name: expected a string, got 5");
  auto missing = load_with([&] { return root.at("machines").at(0).str("gpu"); });
  EXPECT_EQ(missing.error().message, "c.json: /machines/0: missing required field \"gpu\"");
}

TEST(JsonInput, PositiveRejectsZeroAndNegative) {
  Json j = Json::parse(R"({"a": 0, "b": -1.5, "c": 2.5})");
  JsonNode root(j, "f.json");
  EXPECT_FALSE(load_with([&] { return root.positive("a"); }).ok());
  EXPECT_FALSE(load_with([&] { return root.positive("b"); }).ok());
  EXPECT_DOUBLE_EQ(*load_with([&] { return root.positive("c"); }), 2.5);
}

TEST(JsonInput, UnknownFieldsAreRejected) {
  Json j = Json::parse(R"({"nic_GBPs": 12})");
  JsonNode root(j, "n.json");
  auto r = load_with([&] {
    root.allow_only({"nic_GBps"});
    return 0;
  });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("unknown field \"nic_GBPs\" (allowed: nic_GBps)"),
            std::string::npos);
}

TEST(JsonInput, VersionIsRequired) {
  Json j = Json::parse(R"({"version": 2})");
  JsonNode root(j, "v.json");
  auto r = load_with([&] {
    root.require_version(1);
    return 0;
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "v.json: /version: expected format version 1, got 2");
}

}  // namespace
}  // namespace hexi
