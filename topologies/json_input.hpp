#pragma once
// Reading user JSON files with errors that name the file, the JSON path and what
// was expected, e.g.
//   clusters/x.json: /machines/2/count: expected an integer >= 1, got -3
// Readers walk a JsonNode; a violated expectation throws InputError, which the
// public loaders turn into a Result (see load_with()). Nothing escapes as an
// exception from a loader.

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "topologies/status.hpp"

namespace hexi {

using Json = nlohmann::json;

// Thrown only inside loaders; carries the full user-facing message.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Limits of every JSON input: nesting (no hexisim format needs more than a few levels)
// and file size (a 10 000-GPU program is well under this).
inline constexpr int kMaxJsonDepth = 256;
inline constexpr std::uintmax_t kMaxJsonFileBytes = std::uintmax_t{1} << 30;

// Reads and parses a JSON file; a syntax error names the line and column. Only regular
// files are read (a FIFO or a folder is refused, not waited on).
Result<Json> read_json_file(const std::filesystem::path& path);

// Parses JSON text that came from `origin` (a file name or "<inline>"). Every failure,
// numbers that overflow a double and nesting deeper than kMaxJsonDepth included, is a
// bad-input Error naming `origin`.
Result<Json> parse_json_text(std::string_view text, std::string_view origin);

// JSON text of `value` for output: strings that are not valid UTF-8 (a byte 0xff in a
// machine name or path) are written with U+FFFD in place of the bad bytes instead of
// throwing. Every JSON hexisim writes goes through here.
std::string dump_json(const Json& value, int indent = -1);

// A position inside a parsed document: the value, the file it came from and its
// JSON-pointer path. Cheap to copy (holds a pointer into the document).
class JsonNode {
 public:
  JsonNode(const Json& value, std::string origin, std::string path = "");

  const Json& json() const { return *value_; }
  const std::string& origin() const { return origin_; }
  const std::string& path() const { return path_; }

  bool has(std::string_view key) const;
  JsonNode at(std::string_view key) const;  // required member
  std::optional<JsonNode> find(std::string_view key) const;
  JsonNode at(std::size_t index) const;  // element of an array
  std::size_t size() const;              // of an array (fails if not an array)

  // Typed reads of this node.
  std::string str() const;
  bool boolean() const;
  double number() const;
  double number_in(double min, double max) const;  // inclusive range
  double positive() const;                         // > 0 and finite
  std::int64_t integer() const;
  std::int64_t integer_in(std::int64_t min, std::int64_t max) const;

  // Shorthands for members.
  std::string str(std::string_view key) const { return at(key).str(); }
  std::string str_or(std::string_view key, std::string fallback) const;
  double positive(std::string_view key) const { return at(key).positive(); }
  double positive_or(std::string_view key, double fallback) const;
  std::int64_t integer_in(std::string_view key, std::int64_t min, std::int64_t max) const {
    return at(key).integer_in(min, max);
  }
  std::int64_t integer_or(std::string_view key, std::int64_t min, std::int64_t max,
                          std::int64_t fallback) const;
  bool boolean_or(std::string_view key, bool fallback) const;

  void require_object() const;
  void require_array() const;
  // Rejects members not listed (catches typos such as "nic_GBPs").
  void allow_only(std::initializer_list<std::string_view> keys) const;
  // Requires "version" == `version` (every file format carries one).
  void require_version(std::int64_t version) const;

  // Throws InputError: "<origin>: <path>: expected <what>, got <value>".
  [[noreturn]] void fail(std::string_view expected) const;
  // Throws InputError: "<origin>: <path>: <message>".
  [[noreturn]] void fail_message(std::string_view message) const;

 private:
  const Json* value_;
  std::string origin_;
  std::string path_;
};

// A short rendering of a JSON value for error messages (at most ~60 chars).
std::string describe_json(const Json& value);

// Runs `read` and converts an InputError into a bad-input Error.
template <class F>
auto load_with(F&& read) -> Result<decltype(read())> {
  try {
    return read();
  } catch (const InputError& e) {
    return bad_input(e.what());
  }
}

}  // namespace hexi
