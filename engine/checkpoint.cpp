#include "engine/checkpoint.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include "topologies/text.hpp"

namespace hexi::engine {

void Fnv1a::update(const void* data, std::size_t bytes) {
  hash_ = fnv1a64(std::string_view(static_cast<const char*>(data), bytes), hash_);
}

std::string Fnv1a::hex() const {
  return format("%016llx", static_cast<unsigned long long>(hash_));
}

std::uint64_t CheckpointHeader::data_bytes() const {
  return sizeof(float) * static_cast<std::uint64_t>(params + 2 * moments);
}

namespace {

constexpr std::string_view kHeaderFormat = "hexisim-checkpoint";
constexpr std::string_view kManifestFormat = "hexisim-checkpoint-manifest";
constexpr std::int64_t kMaxDevice = 2147483647;
// Elements of one section: 2^40 floats (4 TiB) is far above any device's share and keeps
// data_bytes() far from overflowing.
constexpr std::int64_t kMaxSectionElements = std::int64_t{1} << 40;
constexpr std::size_t kMaxFileName = 255;  // NAME_MAX of common file systems

void require_format(const JsonNode& node, std::string_view format) {
  const JsonNode f = node.at("format");
  if (f.str() != format) f.fail("\"" + std::string(format) + "\"");
  node.require_version(kCheckpointVersion);
}

int read_steps(const JsonNode& node) {
  return static_cast<int>(node.integer_in("steps", 0, kMaxCheckpointSteps));
}

int read_device(const JsonNode& node) {
  return static_cast<int>(node.integer_in("device", 0, kMaxDevice));
}

// The loader opens and the saver deletes files by these names: a plain name inside the
// checkpoint folder, never a path ("../x") or a hidden file.
std::string read_file_name(const JsonNode& node) {
  std::string name = node.str();
  const bool plain = !name.empty() && name.size() <= kMaxFileName && name.front() != '.' &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                              (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
                     });
  if (!plain) node.fail("a plain file name (letters, digits, '.', '_', '-'; no folder)");
  return name;
}

std::string read_digest(const JsonNode& node) {
  std::string hex = node.str();
  const bool ok = hex.size() == 16 && std::all_of(hex.begin(), hex.end(), [](char c) {
                    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                  });
  if (!ok) node.fail("16 lowercase hex digits (FNV-1a 64)");
  return hex;
}

CheckpointHeader header_from_json(const JsonNode& node) {
  node.allow_only({"format", "version", "device", "steps", "fingerprint", "params", "moments"});
  require_format(node, kHeaderFormat);
  CheckpointHeader h;
  h.device = read_device(node);
  h.steps = read_steps(node);
  h.fingerprint = node.str("fingerprint");
  h.params = node.integer_in("params", 0, kMaxSectionElements);
  h.moments = node.integer_in("moments", 0, kMaxSectionElements);
  return h;
}

ManifestFile entry_from_json(const JsonNode& node) {
  node.allow_only({"device", "file", "bytes", "fnv1a64"});
  ManifestFile f;
  f.device = read_device(node);
  f.file = read_file_name(node.at("file"));
  f.bytes = static_cast<std::uint64_t>(node.integer_in("bytes", 1, INT64_MAX));
  f.fnv1a64 = read_digest(node.at("fnv1a64"));
  return f;
}

CheckpointManifest manifest_from_json(const JsonNode& node) {
  node.allow_only({"format", "version", "steps", "devices", "files"});
  require_format(node, kManifestFormat);
  CheckpointManifest m;
  m.steps = read_steps(node);
  m.devices = static_cast<int>(node.integer_in("devices", 1, kMaxDevice));
  const JsonNode files = node.at("files");
  if (files.size() != static_cast<std::size_t>(m.devices)) {
    files.fail("one entry per device (" + std::to_string(m.devices) + ")");
  }
  std::set<int> devices;
  std::set<std::string> names;
  for (std::size_t i = 0; i < files.size(); ++i) {
    ManifestFile f = entry_from_json(files.at(i));
    if (!devices.insert(f.device).second) files.at(i).at("device").fail("a device not listed yet");
    if (!names.insert(f.file).second) files.at(i).at("file").fail("a file not listed yet");
    m.files.push_back(std::move(f));
  }
  return m;
}

// Parses `text` and reads it with `read`, every failure a bad-input Error naming `origin`.
template <class Read>
auto parse_with(std::string_view text, const std::string& origin, Read read)
    -> Result<decltype(read(std::declval<JsonNode>()))> {
  auto json = parse_json_text(text, origin);
  if (!json.ok()) return json.error();
  return load_with([&] { return read(JsonNode(*json, origin)); });
}

Json to_json(const ManifestFile& f) {
  return {{"device", f.device}, {"file", f.file}, {"bytes", f.bytes}, {"fnv1a64", f.fnv1a64}};
}

}  // namespace

Result<CheckpointHeader> parse_checkpoint_header(std::string_view text, const std::string& origin) {
  return parse_with(text, origin, header_from_json);
}

Result<CheckpointManifest> parse_checkpoint_manifest(std::string_view text,
                                                     const std::string& origin) {
  return parse_with(text, origin, manifest_from_json);
}

Result<ManifestFile> parse_manifest_file(std::string_view text, const std::string& origin) {
  return parse_with(text, origin, entry_from_json);
}

std::string to_text(const CheckpointHeader& h) {
  return dump_json({{"format", kHeaderFormat},
                    {"version", kCheckpointVersion},
                    {"device", h.device},
                    {"steps", h.steps},
                    {"fingerprint", h.fingerprint},
                    {"params", h.params},
                    {"moments", h.moments}});
}

std::string to_text(const CheckpointManifest& m) {
  Json files = Json::array();
  for (const auto& f : m.files) files.push_back(to_json(f));
  return dump_json({{"format", kManifestFormat},
                    {"version", kCheckpointVersion},
                    {"steps", m.steps},
                    {"devices", m.devices},
                    {"files", files}},
                   2) +
         "\n";
}

std::string to_text(const ManifestFile& f) {
  return dump_json(to_json(f));
}

}  // namespace hexi::engine
