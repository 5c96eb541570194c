#include "topologies/profile.hpp"

namespace hexi {
namespace {

DeviceProfile read_device(const JsonNode& node, const DeviceProfile& base) {
  node.allow_only(
      {"gemm_efficiency", "attention_efficiency", "memory_efficiency", "kernel_overhead_us"});
  DeviceProfile p = base;
  if (auto v = node.find("gemm_efficiency")) p.gemm_efficiency = v->number_in(1e-3, 1.0);
  if (auto v = node.find("attention_efficiency")) p.attention_efficiency = v->number_in(1e-3, 1.0);
  if (auto v = node.find("memory_efficiency")) p.memory_efficiency = v->number_in(1e-3, 1.0);
  // Divided (not multiplied by 1e-6): then us -> s -> us (to_json) -> s gives the same s,
  // so a profile written and read back is the same profile (x * 1e-6 * 1e6 drifts by ulps).
  if (auto v = node.find("kernel_overhead_us")) p.kernel_overhead_s = v->number_in(0, 1e6) / 1e6;
  return p;
}

Json device_json(const DeviceProfile& p) {
  return {{"gemm_efficiency", p.gemm_efficiency},
          {"attention_efficiency", p.attention_efficiency},
          {"memory_efficiency", p.memory_efficiency},
          {"kernel_overhead_us", p.kernel_overhead_s * 1e6}};
}

}  // namespace

Result<Profile> Profile::from_json(const Json& json, const std::string& origin) {
  return load_with([&] {
    JsonNode root(json, origin);
    root.allow_only({"version", "comment", "default", "devices"});
    root.require_version(1);
    Profile p;
    if (auto d = root.find("default")) p.default_ = read_device(*d, p.default_);
    if (auto devices = root.find("devices")) {
      devices->require_object();
      for (const auto& [name, _] : devices->json().items()) {
        p.devices_[name] = read_device(devices->at(name), p.default_);
      }
    }
    return p;
  });
}

Result<Profile> Profile::load(const std::filesystem::path& path) {
  auto json = read_json_file(path);
  if (!json) return json.error();
  return from_json(*json, path.string());
}

Json Profile::to_json() const {
  Json devices = Json::object();
  for (const auto& [name, p] : devices_) devices[name] = device_json(p);
  return {{"version", 1}, {"default", device_json(default_)}, {"devices", devices}};
}

const DeviceProfile& Profile::device(const std::string& gpu_name) const {
  auto it = devices_.find(gpu_name);
  return it == devices_.end() ? default_ : it->second;
}

}  // namespace hexi
