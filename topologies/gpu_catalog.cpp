#include "topologies/gpu_catalog.hpp"

#include <cctype>

#include "topologies/enum_names.hpp"
#include "topologies/paths.hpp"

namespace hexi {
namespace {

std::string normalise(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == '-' || c == '_' || c == ' ') continue;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

// Within what any device could be (a 1e-320 TFLOP/s GPU would make every time infinite).
constexpr double kMinSpec = 1e-6, kMaxSpec = 1e6;

double spec_number(const JsonNode& node) {
  return node.number_in(kMinSpec, kMaxSpec);
}

GpuSpec read_gpu(const JsonNode& node) {
  node.allow_only({"name", "aliases", "tflops", "tflops_fp16_accumulate", "precision", "memory_gib",
                   "memory_GBps", "pcie_GBps", "intra", "architecture", "sms", "quota", "sustained",
                   "source"});
  GpuSpec g;
  g.name = node.str("name");
  if (auto aliases = node.find("aliases")) {
    for (std::size_t i = 0; i < aliases->size(); ++i) g.aliases.push_back(aliases->at(i).str());
  }
  g.tflops = spec_number(node.at("tflops"));
  if (auto fp16 = node.find("tflops_fp16_accumulate"))
    g.tflops_fp16_accumulate = spec_number(*fp16);
  g.precision = node.str("precision");
  g.memory_gib = spec_number(node.at("memory_gib"));
  g.memory_GBps = spec_number(node.at("memory_GBps"));
  g.pcie_GBps = spec_number(node.at("pcie_GBps"));
  auto intra = node.at("intra");
  intra.allow_only({"kind", "GBps"});
  auto kind = parse_intra_kind(intra.str("kind"));
  if (!kind) intra.at("kind").fail("one of " + kIntraKindNames.list());
  g.intra_kind = *kind;
  g.intra_GBps = spec_number(intra.at("GBps"));
  // Optional, so that older catalogs load: no family = the constant model, no SMs = no waves.
  if (auto arch = node.find("architecture")) {
    auto a = kArchitectureNames.parse(arch->str());
    if (!a) arch->fail("one of " + kArchitectureNames.list());
    g.architecture = *a;
  }
  if (auto sms = node.find("sms")) g.sms = static_cast<int>(sms->integer_in(0, 100000));
  if (auto quota = node.find("quota")) {
    quota->allow_only({"share", "period_us"});
    g.quota_share = quota->at("share").number_in(0.01, 1);
    g.quota_period_s = quota->at("period_us").number_in(1000, 1e6) * 1e-6;
  }
  if (auto sustained = node.find("sustained")) {
    sustained->allow_only({"value", "uncertainty", "source"});
    g.sustained = sustained->at("value").number_in(0.1, 1.5);
    g.sustained_uncertainty = sustained->at("uncertainty").number_in(0, 0.5);
    g.sustained_source = sustained->str("source");
  }
  g.source = node.str("source");
  return g;
}

}  // namespace

std::string_view to_string(Architecture a) {
  return kArchitectureNames.name(a);
}

std::string_view to_string(IntraKind kind) {
  return kIntraKindNames.name(kind);
}

std::optional<IntraKind> parse_intra_kind(std::string_view text) {
  return kIntraKindNames.parse(text);
}

Result<GpuCatalog> GpuCatalog::from_json(const Json& json, const std::string& origin) {
  return load_with([&] {
    JsonNode root(json, origin);
    root.allow_only({"version", "comment", "gpus"});
    root.require_version(1);
    GpuCatalog catalog;
    auto gpus = root.at("gpus");
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      GpuSpec g = read_gpu(gpus.at(i));
      std::vector<std::string> names = g.aliases;
      names.push_back(g.name);
      for (const auto& n : names) {
        if (catalog.find(n) != nullptr) {
          gpus.at(i).fail_message("GPU name or alias \"" + n + "\" is already defined");
        }
      }
      catalog.gpus_.push_back(std::move(g));
    }
    return catalog;
  });
}

Result<GpuCatalog> GpuCatalog::load(const std::filesystem::path& path) {
  auto json = read_json_file(path);
  if (!json) return json.error();
  return from_json(*json, path.string());
}

Result<GpuCatalog> GpuCatalog::load_shipped() {
  return load(data_root() / "topologies/gpus.json");
}

const GpuSpec* GpuCatalog::find(std::string_view name) const {
  int i = index_of(name);
  return i < 0 ? nullptr : &gpus_[i];
}

int GpuCatalog::index_of(std::string_view name) const {
  std::string key = normalise(name);
  for (std::size_t i = 0; i < gpus_.size(); ++i) {
    if (normalise(gpus_[i].name) == key) return static_cast<int>(i);
    for (const auto& a : gpus_[i].aliases) {
      if (normalise(a) == key) return static_cast<int>(i);
    }
  }
  return -1;
}

std::string GpuCatalog::names() const {
  std::string out;
  for (const auto& g : gpus_) out += (out.empty() ? "" : ", ") + g.name;
  return out;
}

}  // namespace hexi
