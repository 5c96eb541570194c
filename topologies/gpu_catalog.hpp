#pragma once
// GPU types: datasheet peak compute, memory and links (topologies/gpus.json).

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "topologies/enum_names.hpp"
#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi {

// How GPUs inside one machine talk to each other.
enum class IntraKind {
  kNvSwitch,  // NVLink through NVSwitch (or a full NVLink mesh): every pair at full rate
  kPcie,      // PCIe peer-to-peer through the PCIe switch / root complex
  kHost,      // no peer-to-peer: each copy is staged through host memory
};
// "nvlink" is an alias: the same model as "nvswitch".
inline constexpr auto kIntraKindNames = enum_names<IntraKind>({{IntraKind::kNvSwitch, "nvswitch"},
                                                               {IntraKind::kNvSwitch, "nvlink"},
                                                               {IntraKind::kPcie, "pcie"},
                                                               {IntraKind::kHost, "host"}});

std::string_view to_string(IntraKind kind);
// Parses "nvswitch" | "nvlink" (same model) | "pcie" | "host"; nullopt otherwise.
std::optional<IntraKind> parse_intra_kind(std::string_view text);

// The GPU's architecture family: which shape-aware compute model its kernels follow
// (topologies/profile.hpp). ampere = GA100 (A100, A800); ampere-ga10x = the GA10x dies of
// GeForce, workstation and A10 cards; other = no family (the constant model of profile
// version 1); cpu = the engine's CPU ranks.
enum class Architecture {
  kOther,
  kCpu,
  kVolta,
  kTuring,
  kAmpere,
  kAmpereGa10x,
  kAda,
  kHopper,
  kBlackwell,
};
inline constexpr int kNumArchitectures = 9;
inline constexpr auto kArchitectureNames =
    enum_names<Architecture>({{Architecture::kOther, "other"},
                              {Architecture::kCpu, "cpu"},
                              {Architecture::kVolta, "volta"},
                              {Architecture::kTuring, "turing"},
                              {Architecture::kAmpere, "ampere"},
                              {Architecture::kAmpereGa10x, "ampere-ga10x"},
                              {Architecture::kAda, "ada"},
                              {Architecture::kHopper, "hopper"},
                              {Architecture::kBlackwell, "blackwell"}});
std::string_view to_string(Architecture a);

struct GpuSpec {
  std::string name;
  std::vector<std::string> aliases;
  double tflops = 0;  // dense fp16/bf16 tensor TFLOP/s used for training (fp32 accumulate)
  double tflops_fp16_accumulate = 0;  // GeForce only: the (unused) fp16-accumulate rate; 0 if n/a
  std::string precision;              // what `tflops` means, in words
  double memory_gib = 0;              // GiB
  double memory_GBps = 0;             // GB/s, HBM / GDDR
  double pcie_GBps = 0;               // GB/s per direction, the GPU's PCIe link
  IntraKind intra_kind = IntraKind::kPcie;
  double intra_GBps = 0;  // GB/s per direction, the GPU's intra-machine link
  Architecture architecture = Architecture::kOther;
  int sms = 0;         // streaming multiprocessors (GEMM wave quantisation); 0: unknown
  std::string source;  // datasheet reference
  // Steady state: the share of the shipped (burst-fitted) tensor-core rates the card keeps
  // over a long run at its power limit, from a sustained kernel-level measurement of this
  // card or one it inherits from (sustained_source says which); 1: not measured.
  // sustained_uncertainty widens estimate's range for it.
  double sustained = 1;
  double sustained_uncertainty = 0;
  std::string sustained_source;
  // A device under a CPU quota (the testbed's cpu-NN ranks): it runs at full speed until it
  // has spent quota_share of each period of quota_period_s, then waits for the next period;
  // `tflops` is its average rate. 0: no quota (every GPU).
  double quota_share = 0;
  double quota_period_s = 0;

  // Whether a quota ever pauses it (a share of 1 is the whole core: it never does).
  bool quota_pauses() const { return quota_share > 0 && quota_share < 1; }
  double flops() const { return tflops * 1e12; }                     // FLOP/s
  double memory_bytes() const { return memory_gib * 1073741824.0; }  // bytes
};

class GpuCatalog {
 public:
  // The shipped catalog, topologies/gpus.json under data_root().
  static Result<GpuCatalog> load_shipped();
  static Result<GpuCatalog> load(const std::filesystem::path& path);
  static Result<GpuCatalog> from_json(const Json& json, const std::string& origin);

  const std::vector<GpuSpec>& gpus() const { return gpus_; }
  // Case-insensitive, ignoring '-', '_' and spaces; aliases accepted. nullptr if unknown.
  const GpuSpec* find(std::string_view name) const;
  // The index of `name` in gpus(), or -1.
  int index_of(std::string_view name) const;
  // "A100-SXM-80GB, H100-SXM, ..." for error messages.
  std::string names() const;

 private:
  std::vector<GpuSpec> gpus_;
};

}  // namespace hexi
