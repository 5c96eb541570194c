#include "topologies/json_input.hpp"

#include <cmath>
#include <fstream>
#include <sstream>
#include <system_error>

namespace hexi {
namespace {

std::string escape_pointer_token(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

// nlohmann reports a byte offset; users want line:column.
std::string line_and_column(std::string_view text, std::size_t byte) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

}  // namespace

namespace {

// The byte offset where `text` nests deeper than kMaxJsonDepth, if it does. nlohmann's
// parser is iterative but dumping and copying are recursive: a document 100 000 levels
// deep would overflow the stack later, far from the input. No hexisim format nests
// deeper than ~6 levels.
std::optional<std::size_t> too_deep(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

}  // namespace

Result<Json> parse_json_text(std::string_view text, std::string_view origin) {
  if (auto at = too_deep(text)) {
    return bad_input(std::string(origin) + ": invalid JSON at " + line_and_column(text, *at) +
                     ": nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    std::string what = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 2: ".
    auto colon = what.find(": ", what.find("parse error"));
    std::string detail = colon == std::string::npos ? what : what.substr(colon + 2);
    return bad_input(std::string(origin) + ": invalid JSON at " +
                     line_and_column(text, e.byte == 0 ? 0 : e.byte - 1) + ": " + detail);
  } catch (const Json::exception& e) {
    // A number that overflows a double (1e400) is out_of_range, not a parse_error.
    std::string what = e.what();
    auto bracket = what.find("] ");
    return bad_input(std::string(origin) + ": invalid JSON: " +
                     (bracket == std::string::npos ? what : what.substr(bracket + 2)));
  }
}

Result<Json> read_json_file(const std::filesystem::path& path) {
  // Only regular files: a FIFO would block forever, a folder is not "invalid JSON".
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    return bad_input(path.string() + ": cannot open file (does it exist?)");
  }
  if (std::filesystem::is_directory(status)) {
    return bad_input(path.string() + ": is a folder, expected a JSON file");
  }
  if (!std::filesystem::is_regular_file(status)) {
    return bad_input(path.string() +
                     ": not a regular file (a FIFO, socket or device?), expected a JSON file");
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxJsonFileBytes) {
    return bad_input(path.string() + ": " + std::to_string(size) +
                     " bytes; hexisim reads JSON files of at most " +
                     std::to_string(kMaxJsonFileBytes >> 20) + " MiB");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return bad_input(path.string() + ": cannot open file (permission?)");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return parse_json_text(buffer.str(), path.string());
}

std::string dump_json(const Json& value, int indent) {
  return value.dump(indent, ' ', false, Json::error_handler_t::replace);
}

namespace {

// At most about `budget` characters of `value`'s JSON text, without rendering all of a
// large value (an error message must not copy a 100 MB array).
void preview(const Json& value, std::string& out, std::size_t budget) {
  if (out.size() > budget) return;
  if (value.is_array() || value.is_object()) {
    out += value.is_array() ? '[' : '{';
    bool first = true;
    for (auto it = value.begin(); it != value.end() && out.size() <= budget; ++it) {
      if (!first) out += ',';
      first = false;
      if (value.is_object()) out += dump_json(Json(it.key())) + ':';
      preview(*it, out, budget);
    }
    out += value.is_array() ? ']' : '}';
    return;
  }
  out += dump_json(value);
}

}  // namespace

std::string describe_json(const Json& value) {
  std::string text;
  preview(value, text, 60);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  switch (value.type()) {
    case Json::value_t::object:
      return "an object " + text;
    case Json::value_t::array:
      return "an array " + text;
    case Json::value_t::string:
      return "the string " + text;
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "the boolean " + text;
    default:
      return text;
  }
}

JsonNode::JsonNode(const Json& value, std::string origin, std::string path)
    : value_(&value), origin_(std::move(origin)), path_(std::move(path)) {}

void JsonNode::fail(std::string_view expected) const {
  throw InputError(origin_ + ": " + (path_.empty() ? "/" : path_) + ": expected " +
                   std::string(expected) + ", got " + describe_json(*value_));
}

void JsonNode::fail_message(std::string_view message) const {
  throw InputError(origin_ + ": " + (path_.empty() ? "/" : path_) + ": " + std::string(message));
}

void JsonNode::require_object() const {
  if (!value_->is_object()) fail("an object");
}

void JsonNode::require_array() const {
  if (!value_->is_array()) fail("an array");
}

bool JsonNode::has(std::string_view key) const {
  return value_->is_object() && value_->contains(key);
}

JsonNode JsonNode::at(std::string_view key) const {
  require_object();
  auto it = value_->find(key);
  if (it == value_->end()) {
    throw InputError(origin_ + ": " + (path_.empty() ? "/" : path_) +
                     ": missing required field \"" + std::string(key) + "\"");
  }
  return JsonNode(*it, origin_, path_ + "/" + escape_pointer_token(key));
}

std::optional<JsonNode> JsonNode::find(std::string_view key) const {
  require_object();
  auto it = value_->find(key);
  if (it == value_->end() || it->is_null()) return std::nullopt;
  return JsonNode(*it, origin_, path_ + "/" + escape_pointer_token(key));
}

JsonNode JsonNode::at(std::size_t index) const {
  require_array();
  if (index >= value_->size())
    fail("an array with more than " + std::to_string(index) + " elements");
  return JsonNode((*value_)[index], origin_, path_ + "/" + std::to_string(index));
}

std::size_t JsonNode::size() const {
  require_array();
  return value_->size();
}

std::string JsonNode::str() const {
  if (!value_->is_string()) fail("a string");
  return value_->get<std::string>();
}

bool JsonNode::boolean() const {
  if (!value_->is_boolean()) fail("true or false");
  return value_->get<bool>();
}

double JsonNode::number() const {
  if (!value_->is_number()) fail("a number");
  double v = value_->get<double>();
  if (!std::isfinite(v)) fail("a finite number");
  return v;
}

double JsonNode::number_in(double min, double max) const {
  double v = number();
  if (v < min || v > max) {
    std::ostringstream want;
    want << "a number in [" << min << ", " << max << "]";
    fail(want.str());
  }
  return v;
}

double JsonNode::positive() const {
  if (!value_->is_number()) fail("a number > 0");
  double v = value_->get<double>();
  if (!(v > 0) || !std::isfinite(v)) fail("a number > 0");
  return v;
}

std::int64_t JsonNode::integer() const {
  if (value_->is_number_integer()) return value_->get<std::int64_t>();
  if (value_->is_number_float()) {
    double v = value_->get<double>();
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e15) {
      return static_cast<std::int64_t>(v);
    }
  }
  fail("an integer");
}

std::int64_t JsonNode::integer_in(std::int64_t min, std::int64_t max) const {
  if (!value_->is_number()) fail("an integer >= " + std::to_string(min));
  std::int64_t v = integer();
  if (v < min || v > max) {
    if (max == INT64_MAX) fail("an integer >= " + std::to_string(min));
    fail("an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return v;
}

std::string JsonNode::str_or(std::string_view key, std::string fallback) const {
  auto node = find(key);
  return node ? node->str() : std::move(fallback);
}

double JsonNode::positive_or(std::string_view key, double fallback) const {
  auto node = find(key);
  return node ? node->positive() : fallback;
}

std::int64_t JsonNode::integer_or(std::string_view key, std::int64_t min, std::int64_t max,
                                  std::int64_t fallback) const {
  auto node = find(key);
  return node ? node->integer_in(min, max) : fallback;
}

bool JsonNode::boolean_or(std::string_view key, bool fallback) const {
  auto node = find(key);
  return node ? node->boolean() : fallback;
}

void JsonNode::allow_only(std::initializer_list<std::string_view> keys) const {
  require_object();
  for (const auto& [key, _] : value_->items()) {
    bool known = false;
    for (auto k : keys) known = known || k == key;
    if (!known) {
      std::string list;
      for (auto k : keys) list += (list.empty() ? "" : ", ") + std::string(k);
      fail_message("unknown field \"" + key + "\" (allowed: " + list + ")");
    }
  }
}

void JsonNode::require_version(std::int64_t version) const {
  auto v = at("version");
  if (!v.json().is_number_integer() || v.json().get<std::int64_t>() != version) {
    v.fail("format version " + std::to_string(version));
  }
}

}  // namespace hexi
