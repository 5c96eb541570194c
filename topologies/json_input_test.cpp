// Error messages name the file, the JSON path and what was expected.
#include "topologies/json_input.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "topologies/text.hpp"

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

// nlohmann reports a number that overflows a double as out_of_range, not parse_error:
// it used to escape every loader and abort the process.
TEST(JsonInput, NumberOverflowIsBadInputNotAnException) {
  auto r = parse_json_text(R"({"version": 1e400})", "o.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kBadInput);
  EXPECT_EQ(r.error().message, "o.json: invalid JSON: number overflow parsing '1e400'");
}

// 100 000 levels parse fine but overflow the stack when dumped or copied later.
TEST(JsonInput, DeepNestingIsRefusedAtTheLimit) {
  const auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  EXPECT_TRUE(parse_json_text(nested(kMaxJsonDepth), "d.json").ok());
  auto r = parse_json_text(nested(100000), "d.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message,
            "d.json: invalid JSON at line 1, column 257: nested deeper than 256 levels");
  // Brackets inside strings do not count.
  EXPECT_TRUE(parse_json_text("[\"" + std::string(1000, '[') + "\\\"{\"]", "s.json").ok());
}

TEST(JsonInput, OnlyRegularFilesAreRead) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("hexisim-json-input-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "folder.json");
  auto r = read_json_file(dir / "folder.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("folder.json: is a folder"), std::string::npos);
  ASSERT_EQ(::mkfifo((dir / "fifo.json").c_str(), 0600), 0);
  r = read_json_file(dir / "fifo.json");  // used to block in open() forever
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("fifo.json: not a regular file"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Error messages show a bounded preview, without rendering the whole value.
TEST(JsonInput, DescribeIsShortForHugeValues) {
  Json big = Json::array();
  for (int i = 0; i < 100000; ++i) big.push_back(i);
  const std::string d = describe_json(big);
  EXPECT_LE(d.size(), 80u);
  EXPECT_EQ(d.rfind("an array [0,1,2,", 0), 0u) << d;
  EXPECT_EQ(describe_json(Json("a\xff")), "the string \"a\xef\xbf\xbd\"");
}

TEST(JsonInput, DumpReplacesBytesThatAreNotUtf8) {
  Json j = {{"name", "n\xff"}};
  EXPECT_THROW((void)j.dump(), Json::type_error);  // what used to abort after a training run
  EXPECT_EQ(dump_json(j), "{\"name\":\"n\xef\xbf\xbd\"}");
}

TEST(Text, FormatHasNoLengthLimit) {
  const std::string long_name(600, 'x');
  EXPECT_EQ(format("[%s]", long_name.c_str()).size(), 602u);
  EXPECT_EQ(fnv1a64_hex(""), "cbf29ce484222325");
}

TEST(Text, ClosestNameWithinAThirdOfTheWord) {
  const std::vector<std::string> names = {"scheduler", "seed", "simulate", "seq-len", "seq"};
  EXPECT_EQ(closest("scheduer", names), "scheduler");   // a deletion
  EXPECT_EQ(closest("shceduler", names), "scheduler");  // a swap of neighbours: 1
  EXPECT_EQ(closest("seqlen", names), "seq-len");
  EXPECT_EQ(closest("sed", names), "");    // "seed" and "seq" both 1 away: no suggestion
  EXPECT_EQ(closest("xyzzy", names), "");  // nothing near
  EXPECT_EQ(closest("simualte", names), "simulate");
  EXPECT_EQ(closest("sq", {"seq", "sa"}), "");  // a tie: no suggestion
  EXPECT_EQ(closest("anything", {}), "");
  EXPECT_EQ(duration_text(42.4), "42s");
  EXPECT_EQ(duration_text(187), "3m07s");
  EXPECT_EQ(duration_text(3720), "1h02m");
  EXPECT_EQ(duration_text(-5), "0s");
}

}  // namespace
}  // namespace hexi
