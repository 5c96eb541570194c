#pragma once
// Device profiles: the shape-aware compute model of each GPU type. The cost model and the
// simulator time a kernel (scheduler/cost/cost_model.cpp) as
//   time = overhead + max(FLOPs / (peak x eff(shape)), bytes / (HBM x memory_efficiency))
// with, per kernel class:
//   GEMM (m x k)(k x n): eff = gemm_ceiling x waves(m, n) x k / (k + gemm_k_half)
//                              x m / (m + gemm_m_half)
//                              x (gemm_misaligned when m, n or k is a whole number not a
//                                 multiple of 8: no 16-byte aligned tensor-core loads)
//     waves(m, n) = m n / (ceil(tiles / SMs) x SMs x tile_m x tile_n),
//     tiles = ceil(m / tile_m) x ceil(n / tile_n): tile and wave quantisation (NVIDIA's
//     "Matrix Multiplication Background" guide); the last partial wave leaves SMs idle.
//   flash attention (causal; sequence s, head dim d; FLOPs as cost_model counts them):
//     eff = attention_{fwd,bwd} x s / (s + attention_s_half_{fwd,bwd})
//           x [d / (d + attention_d_half)] / [128 / (128 + attention_d_half)]
//     (attention_fwd/bwd: a long sequence at head dim 128).
//   dense (materialised) attention: separate kernels, whose times add: the score GEMMs at
//     gemm_ceiling x d / (d + gemm_k_half) x s / (s + gemm_m_half), then the bytes: q, k, v, o
//     times attention_dense_token_traffic (layout copies) + the s^2 scores times
//     attention_dense_traffic_{fwd,bwd}, at memory_efficiency.
//   element-wise: bytes at memory_efficiency (fraction of the datasheet HBM GB/s).
// kernel_overhead: launch + tail per kernel.
//
// The shipped defaults are per architecture family (GpuSpec::architecture), fitted by
// scripts/fit_compute.py to public kernel-level measurements (topologies/measurements/:
// cuBLAS GEMM sweeps, FlashAttention benchmark tables, STREAM-like copies); every value
// carries its `source`. A profile file overrides them: version 2 per parameter (a number, or
// {"value", "source"}), for every GPU ("default"), per family ("architectures") or per GPU
// type ("devices"); version 2 may also replace a transport's achieved-rate curve
// ("transports": {"tcp": {"step_latency_us": 400, "efficiency": [[bytes, eta], ...],
// "collective_step_latency_us": 900, "cpu_us_per_op": 30, "cpu_ns_per_byte": 0.1,
// "collective_cpu_us_per_op": 300, "collective_cpu_ns_per_byte": 2, "poll_cpu_fraction": 0.02
// (each optional), "devices": {"cpu-20": {the same five keys: that device type's own law,
// each key not given the transport's}},
// "source": "..."}}, topologies/transport.hpp;
// `hexisim calibrate` writes them from measured point-to-point transfers); version 1 files
// (gemm_efficiency, attention_efficiency, memory_efficiency, kernel_overhead_us) describe the
// constant model and still load. Never fitted to end-to-end training throughput: that is the blind
// test set.

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "topologies/gpu_catalog.hpp"
#include "topologies/json_input.hpp"
#include "topologies/status.hpp"
#include "topologies/transport.hpp"

namespace hexi {

// The parameters of a device model, in file order.
enum class Param {
  kGemmCeiling,
  kGemmTileM,
  kGemmTileN,
  kGemmKHalf,
  kGemmMHalf,
  kGemmMisaligned,
  kAttentionFwd,
  kAttentionBwd,
  kAttentionSHalfFwd,
  kAttentionSHalfBwd,
  kAttentionDHalf,
  kAttentionDenseTokenTraffic,
  kAttentionDenseTrafficFwd,
  kAttentionDenseTrafficBwd,
  kMemoryEfficiency,
  kKernelOverheadUs,
  kOpTimeSpread,
  kUncertaintyGemm,
  kUncertaintyAttention,
  kUncertaintyMemory,
};
inline constexpr int kNumParams = 20;

struct DeviceProfile {
  // GEMM: fraction of peak tensor FLOP/s of a large aligned GEMM; tile (0: no quantisation);
  // k at which the main loop reaches half its rate (prologue/epilogue); rows m at which it
  // does (a CPU BLAS packs the k x n operand once per call, whatever m: 0 on GPUs, whose small
  // m the waves cover); misaligned factor.
  double gemm_ceiling = 0.75;
  double gemm_tile_m = 0;
  double gemm_tile_n = 0;
  double gemm_k_half = 0;
  double gemm_m_half = 0;
  double gemm_misaligned = 1;
  // Flash attention: fractions of peak (long sequence, head dim 128), half points (tokens,
  // head dim; 0: no saturation).
  double attention_fwd = 0.55;
  double attention_bwd = 0.55;
  double attention_s_half_fwd = 0;
  double attention_s_half_bwd = 0;
  double attention_d_half = 0;
  // Dense attention: achieved / modelled bytes of its per-token and s^2 score traffic.
  double attention_dense_token_traffic = 1;
  double attention_dense_traffic_fwd = 1;
  double attention_dense_traffic_bwd = 1;
  double memory_efficiency = 0.80;  // element-wise kernels, fraction of HBM GB/s
  double kernel_overhead_s = 4e-6;  // s per kernel: launch + tail
  // Compute ops' spread from op to op: the relative standard deviation of an op's time
  // around the model's (its mean). The simulator draws each compute op's time from a
  // log-normal of mean 1 and this deviation (sim/simulator.cpp); 0 (every GPU family): each
  // op takes the model's time. A device under a CPU quota needs it: ops of a fixed time
  // lock into the quota's periods, real ones do not (hexisim calibrate fits it there).
  double op_time_spread = 0;
  // How far the model's kernel times may be off on this family (relative, 0: not stated):
  // GEMMs, flash attention, element-wise kernels. From the fits' leave-one-out errors
  // (scripts/fit_compute.py); Profile::at_bound moves every kernel to either end.
  double uncertainty_gemm = 0;
  double uncertainty_attention = 0;
  double uncertainty_memory = 0;

  // The constant model (profile version 1): shape terms off.
  static DeviceProfile constant(double gemm, double attention, double memory, double overhead_s);
  double get(Param p) const;  // in file units (kernel_overhead in us)
  void set(Param p, double value);
};

// A parameter's file name, range and meaning.
struct ParamInfo {
  Param param;
  std::string_view name;
  double min = 0, max = 0;  // inclusive, in file units
  std::string_view meaning;
};
const std::array<ParamInfo, kNumParams>& param_infos();
const ParamInfo& param_info(Param p);

class Profile {
 public:
  // The shipped defaults: per architecture family, from public kernel-level measurements.
  Profile();
  static Result<Profile> load(const std::filesystem::path& path);
  static Result<Profile> from_json(const Json& json, const std::string& origin);
  // Version 2: every family and every GPU entry in full, each value with its source.
  Json to_json() const;

  // The model of a GPU type: its own entry, else its architecture family's; the shipped
  // GEMM and flash-attention rates times the card's sustained share (gpus.json). By value
  // (a map lookup by name): hot callers resolve once per GPU type.
  DeviceProfile device(const GpuSpec& gpu) const;
  // Whether `gpu` takes `p` from the shipped defaults (no file, entry or code replaced it).
  bool shipped(const GpuSpec& gpu, Param p) const;
  // This profile with every kernel moved across its uncertainty, from the fast (side -1) to
  // the slow (+1) end: GEMM, flash attention and element-wise efficiencies divided by
  // 1 + side x their uncertainty (device() answers so; 0: as stated; side clamped to
  // [-1, 1]). Links are not moved here (moved_curve, transport.hpp).
  Profile at_bound(double side) const;
  double bound_side() const { return side_; }
  std::string_view source(const GpuSpec& gpu, Param p) const;
  const DeviceProfile& architecture(Architecture a) const;
  std::string_view architecture_source(Architecture a, Param p) const;

  // Every family and GPU type takes `p` (hand-checkable tests: a constant profile).
  void set_default(const DeviceProfile& p, const std::string& source = "set in code");
  void set_device(const std::string& gpu_name, const DeviceProfile& p,
                  const std::string& source = "set in code");
  // Per-parameter form of set_device: the GPU entry's `param` only.
  void set_device_param(const std::string& gpu_name, Param param, double value,
                        const std::string& source);

  // Transports whose achieved-rate curve this profile replaces (a cluster takes them with
  // Cluster::set_curves).
  const std::map<Transport, TransportCurve>& transports() const { return transports_; }
  void set_transport(TransportCurve curve);
  // Per transport, the extra latency per collective step ("collective_step_latency_us"
  // in a transport's entry; Cluster::collective_step_latency).
  const std::map<Transport, double>& collective_step_latencies() const {
    return collective_step_latency_s_;
  }
  void set_collective_step_latency(Transport t, double seconds);

 private:
  struct Entry {
    DeviceProfile values;
    std::array<std::string, kNumParams> sources;
    std::uint32_t set = 0;  // GPU entries: the parameters they override (bit per Param)
  };
  std::array<Entry, kNumArchitectures> families_;
  std::map<std::string, Entry> devices_;  // by GPU catalog name
  std::map<Transport, TransportCurve> transports_;
  std::map<Transport, double> collective_step_latency_s_;
  double side_ = 0;  // at_bound
};

// The shipped defaults (topologies/profile_defaults.cpp, generated by scripts/fit_compute.py).
struct DefaultParam {
  Architecture architecture;
  Param param;
  double value;  // file units
  std::string_view source;
};
const std::vector<DefaultParam>& default_params();

}  // namespace hexi
