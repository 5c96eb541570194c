#pragma once
// Device profiles: how close each GPU type gets to its datasheet peak. The cost
// model and the simulator time a kernel as
//   time = overhead + max(FLOPs / (peak * efficiency[class]), bytes / (HBM * memory_efficiency))
// i.e. a roofline with a per-class ceiling and a fixed launch/tail cost, so the
// achieved fraction of peak is a curve over op size and arithmetic intensity.
// The defaults below are documented guesses until validation/ calibrates a profile
// from measured traces (profile JSON, format version 1).

#include <filesystem>
#include <map>
#include <string>

#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi {

struct DeviceProfile {
  double gemm_efficiency = 0.75;       // large bf16 GEMMs, fraction of peak tensor FLOP/s
  double attention_efficiency = 0.55;  // fused (flash) attention, fraction of peak
  double memory_efficiency = 0.80;     // elementwise kernels, fraction of HBM GB/s
  double kernel_overhead_s = 4e-6;     // s per kernel: launch + tail
};

class Profile {
 public:
  static Result<Profile> load(const std::filesystem::path& path);
  static Result<Profile> from_json(const Json& json, const std::string& origin);
  Json to_json() const;

  // The profile of a GPU type (its own entry, else the default).
  const DeviceProfile& device(const std::string& gpu_name) const;
  const DeviceProfile& default_device() const { return default_; }
  void set_device(const std::string& gpu_name, const DeviceProfile& p) { devices_[gpu_name] = p; }
  void set_default(const DeviceProfile& p) { default_ = p; }

 private:
  DeviceProfile default_;
  std::map<std::string, DeviceProfile> devices_;  // by GPU catalog name
};

}  // namespace hexi
