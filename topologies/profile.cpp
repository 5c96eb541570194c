#include "topologies/profile.hpp"

#include <algorithm>

namespace hexi {
namespace {

constexpr double kMaxEfficiency = 1.5;  // a card boosting past its datasheet clock exceeds 1

struct Field {
  Param param;
  double DeviceProfile::*member;
};

// File order, as Param.
constexpr std::array<Field, kNumParams> kFields = {{
    {Param::kGemmCeiling, &DeviceProfile::gemm_ceiling},
    {Param::kGemmTileM, &DeviceProfile::gemm_tile_m},
    {Param::kGemmTileN, &DeviceProfile::gemm_tile_n},
    {Param::kGemmKHalf, &DeviceProfile::gemm_k_half},
    {Param::kGemmMHalf, &DeviceProfile::gemm_m_half},
    {Param::kGemmMisaligned, &DeviceProfile::gemm_misaligned},
    {Param::kAttentionFwd, &DeviceProfile::attention_fwd},
    {Param::kAttentionBwd, &DeviceProfile::attention_bwd},
    {Param::kAttentionSHalfFwd, &DeviceProfile::attention_s_half_fwd},
    {Param::kAttentionSHalfBwd, &DeviceProfile::attention_s_half_bwd},
    {Param::kAttentionDHalf, &DeviceProfile::attention_d_half},
    {Param::kAttentionDenseTokenTraffic, &DeviceProfile::attention_dense_token_traffic},
    {Param::kAttentionDenseTrafficFwd, &DeviceProfile::attention_dense_traffic_fwd},
    {Param::kAttentionDenseTrafficBwd, &DeviceProfile::attention_dense_traffic_bwd},
    {Param::kMemoryEfficiency, &DeviceProfile::memory_efficiency},
    {Param::kKernelOverheadUs, &DeviceProfile::kernel_overhead_s},
    {Param::kOpTimeSpread, &DeviceProfile::op_time_spread},
    {Param::kUncertaintyGemm, &DeviceProfile::uncertainty_gemm},
    {Param::kUncertaintyAttention, &DeviceProfile::uncertainty_attention},
    {Param::kUncertaintyMemory, &DeviceProfile::uncertainty_memory},
}};

constexpr std::array<ParamInfo, kNumParams> kInfos = {{
    {Param::kGemmCeiling, "gemm_ceiling", 1e-3, kMaxEfficiency,
     "GEMM: fraction of peak tensor FLOP/s of a large aligned GEMM"},
    {Param::kGemmTileM, "gemm_tile_m", 0, 4096, "GEMM: CTA tile rows (0: no wave quantisation)"},
    {Param::kGemmTileN, "gemm_tile_n", 0, 4096, "GEMM: CTA tile columns"},
    {Param::kGemmKHalf, "gemm_k_half", 0, 1e6, "GEMM: k at which efficiency halves"},
    {Param::kGemmMHalf, "gemm_m_half", 0, 1e6,
     "GEMM: rows m at which efficiency halves (a CPU BLAS's packing; 0 on GPUs)"},
    {Param::kGemmMisaligned, "gemm_misaligned", 1e-3, 1,
     "GEMM: factor when a dimension is not a multiple of 8"},
    {Param::kAttentionFwd, "attention_fwd", 1e-3, kMaxEfficiency,
     "flash attention forward: fraction of peak (long sequence, head dim 128)"},
    {Param::kAttentionBwd, "attention_bwd", 1e-3, kMaxEfficiency,
     "flash attention backward: fraction of peak"},
    {Param::kAttentionSHalfFwd, "attention_s_half_fwd", 0, 1e7,
     "flash forward: sequence length at half efficiency"},
    {Param::kAttentionSHalfBwd, "attention_s_half_bwd", 0, 1e7,
     "flash backward: sequence length at half efficiency"},
    {Param::kAttentionDHalf, "attention_d_half", 0, 1e5, "flash: head dim at half efficiency"},
    {Param::kAttentionDenseTokenTraffic, "attention_dense_token_traffic", 1e-3, 1e3,
     "dense attention: achieved / modelled q, k, v, o bytes"},
    {Param::kAttentionDenseTrafficFwd, "attention_dense_traffic_fwd", 1e-3, 1e3,
     "dense attention forward: achieved / modelled s^2 score bytes"},
    {Param::kAttentionDenseTrafficBwd, "attention_dense_traffic_bwd", 1e-3, 1e3,
     "dense attention backward: achieved / modelled s^2 score bytes"},
    {Param::kMemoryEfficiency, "memory_efficiency", 1e-3, kMaxEfficiency,
     "element-wise kernels: fraction of datasheet HBM GB/s"},
    {Param::kKernelOverheadUs, "kernel_overhead_us", 0, 1e6, "us per kernel: launch + tail"},
    {Param::kOpTimeSpread, "op_time_spread", 0, 1,
     "compute ops: relative standard deviation of an op's time from op to op (0: none)"},
    {Param::kUncertaintyGemm, "uncertainty_gemm", 0, 0.9,
     "GEMM: relative error the model's times may have (0: not stated)"},
    {Param::kUncertaintyAttention, "uncertainty_attention", 0, 0.9,
     "flash attention: relative error the model's times may have (0: not stated)"},
    {Param::kUncertaintyMemory, "uncertainty_memory", 0, 0.9,
     "element-wise kernels: relative error the model's times may have (0: not stated)"},
}};

constexpr std::uint32_t kAllParams = (1u << kNumParams) - 1;
constexpr std::string_view kVersion1Source =
    "profile version 1 default: the constant model (documented guesses, no shape terms)";
constexpr std::string_view kCpuSource =
    "not a GPU (the engine's CPU ranks; the catalog's rate is a measured Eigen GEMM rate): the "
    "constant model of profile version 1, until calibrated from engine traces";

int index(Param p) {
  return static_cast<int>(p);
}

// A profile file's entry: the parameters it sets, over a base.
struct FileEntry {
  DeviceProfile values;
  std::array<std::string, kNumParams> sources;
  std::uint32_t set = 0;  // bit per Param

  void put(Param p, double value, const std::string& source) {
    values.set(p, value);
    sources[index(p)] = source;
    set |= 1u << index(p);
  }
};

// Reads one entry (default, architecture or GPU) of a profile file.
FileEntry read_entry(const JsonNode& node, int version) {
  node.require_object();
  const std::string& origin = node.origin();
  for (const auto& [key, _] : node.json().items()) {
    bool known = key == "gemm_efficiency" || key == "attention_efficiency";
    if (version == 1) {
      known = known || key == "memory_efficiency" || key == "kernel_overhead_us";
    } else {
      for (const auto& info : kInfos) known = known || info.name == key;
    }
    if (!known) {
      std::string list = "gemm_efficiency, attention_efficiency";
      if (version == 1) list += ", memory_efficiency, kernel_overhead_us";
      for (const auto& info : kInfos) {
        if (version == 2) list += ", " + std::string(info.name);
      }
      node.fail_message("unknown field \"" + key + "\" (allowed in version " +
                        std::to_string(version) + ": " + list + ")");
    }
  }
  FileEntry e;
  // The version-1 shorthands: a constant efficiency, its shape terms off.
  if (auto v = node.find("gemm_efficiency")) {
    const std::string src = origin + ": gemm_efficiency (constant, no shape terms)";
    e.put(Param::kGemmCeiling, v->number_in(1e-3, kMaxEfficiency), src);
    e.put(Param::kGemmTileM, 0, src);
    e.put(Param::kGemmTileN, 0, src);
    e.put(Param::kGemmKHalf, 0, src);
    e.put(Param::kGemmMHalf, 0, src);
    e.put(Param::kGemmMisaligned, 1, src);
  }
  if (auto v = node.find("attention_efficiency")) {
    const std::string src = origin + ": attention_efficiency (constant, no shape terms)";
    const double x = v->number_in(1e-3, kMaxEfficiency);
    e.put(Param::kAttentionFwd, x, src);
    e.put(Param::kAttentionBwd, x, src);
    for (Param p : {Param::kAttentionSHalfFwd, Param::kAttentionSHalfBwd, Param::kAttentionDHalf})
      e.put(p, 0, src);
    for (Param p : {Param::kAttentionDenseTokenTraffic, Param::kAttentionDenseTrafficFwd,
                    Param::kAttentionDenseTrafficBwd})
      e.put(p, 1, src);
  }
  for (const auto& info : kInfos) {
    auto v = node.find(info.name);
    if (!v) continue;
    if (v->json().is_object()) {
      v->allow_only({"value", "source"});
      e.put(info.param, v->at("value").number_in(info.min, info.max), v->str("source"));
    } else {
      e.put(info.param, v->number_in(info.min, info.max), origin);
    }
  }
  return e;
}

Json entry_json(const DeviceProfile& p, const std::array<std::string, kNumParams>& sources,
                std::uint32_t set) {
  Json out = Json::object();
  for (const auto& info : kInfos) {
    if ((set & (1u << index(info.param))) == 0) continue;
    out[std::string(info.name)] = {{"value", p.get(info.param)},
                                   {"source", sources[index(info.param)]}};
  }
  return out;
}

void apply(const FileEntry& e, DeviceProfile& values, std::array<std::string, kNumParams>& src) {
  for (const auto& f : kFields) {
    const int i = index(f.param);
    if ((e.set & (1u << i)) == 0) continue;
    values.*f.member = e.values.*f.member;
    src[i] = e.sources[i];
  }
}

// A communication CPU law (TransportCurve::cpu); a key not given keeps `law`'s value.
CommCpuLaw read_cpu_law(const JsonNode& node, CommCpuLaw law) {
  if (auto v = node.find("cpu_us_per_op")) law.op_s = v->number_in(0, 1e7) / 1e6;
  if (auto v = node.find("cpu_ns_per_byte")) law.byte_s = v->number_in(0, 1e6) / 1e9;
  if (auto v = node.find("collective_cpu_us_per_op"))
    law.collective_op_s = v->number_in(0, 1e7) / 1e6;
  if (auto v = node.find("collective_cpu_ns_per_byte"))
    law.collective_byte_s = v->number_in(0, 1e6) / 1e9;
  if (auto v = node.find("poll_cpu_fraction")) law.poll_fraction = v->number_in(0, 1);
  return law;
}

void write_cpu_law(const CommCpuLaw& law, Json& out) {
  out["cpu_us_per_op"] = law.op_s * 1e6;
  out["cpu_ns_per_byte"] = law.byte_s * 1e9;
  out["collective_cpu_us_per_op"] = law.collective_op_s * 1e6;
  out["collective_cpu_ns_per_byte"] = law.collective_byte_s * 1e9;
  out["poll_cpu_fraction"] = law.poll_fraction;
}

// One transport's curve: {"step_latency_us": x, "efficiency": [[bytes, eta], ...] (bytes
// increasing), "source": "...", the communication CPU law's keys, "devices": {TYPE: {the
// law's keys: that device type's own law}}}.
TransportCurve read_transport(const JsonNode& node, Transport t) {
  node.allow_only({"step_latency_us", "efficiency", "collective_step_latency_us", "source",
                   "uncertainty", "devices", "cpu_us_per_op", "cpu_ns_per_byte",
                   "collective_cpu_us_per_op", "collective_cpu_ns_per_byte", "poll_cpu_fraction"});
  TransportCurve c;
  c.transport = t;
  c.source = node.find("source") ? node.str("source") : node.origin();
  c.step_latency_s = node.at("step_latency_us").number_in(-1e4, 1e7) / 1e6;
  if (auto u = node.find("uncertainty")) c.uncertainty = u->number_in(0, 0.9);
  c.cpu = read_cpu_law(node, {});
  if (auto devices = node.find("devices")) {
    devices->require_object();
    for (const auto& item : devices->json().items()) {
      const std::string& type = item.key();
      auto law = devices->at(type);
      law.allow_only({"cpu_us_per_op", "cpu_ns_per_byte", "collective_cpu_us_per_op",
                      "collective_cpu_ns_per_byte", "poll_cpu_fraction"});
      c.cpu_by_device[type] = read_cpu_law(law, c.cpu);
    }
  }
  auto table = node.at("efficiency");
  table.require_array();
  for (std::size_t i = 0; i < table.json().size(); ++i) {
    auto point = table.at(i);
    point.require_array();
    if (point.json().size() != 2) point.fail("a pair [message bytes, efficiency]");
    const double bytes = point.at(0).number_in(1, 1e15);
    if (!c.points.empty() && bytes <= c.points.back().bytes)
      point.at(0).fail("message bytes larger than the previous point's");
    c.points.push_back({bytes, point.at(1).number_in(1e-4, kMaxEfficiency)});
  }
  return c;
}

}  // namespace

DeviceProfile DeviceProfile::constant(double gemm, double attention, double memory,
                                      double overhead_s) {
  DeviceProfile p;
  p.gemm_ceiling = gemm;
  p.attention_fwd = p.attention_bwd = attention;
  p.memory_efficiency = memory;
  p.kernel_overhead_s = overhead_s;
  return p;
}

double DeviceProfile::get(Param p) const {
  const double v = this->*kFields[index(p)].member;
  return p == Param::kKernelOverheadUs ? v * 1e6 : v;
}

void DeviceProfile::set(Param p, double value) {
  // Divided (not multiplied by 1e-6): then us -> s -> us (to_json) -> s gives the same s,
  // so a profile written and read back is the same profile (x * 1e-6 * 1e6 drifts by ulps).
  this->*kFields[index(p)].member = p == Param::kKernelOverheadUs ? value / 1e6 : value;
}

const std::array<ParamInfo, kNumParams>& param_infos() {
  return kInfos;
}

const ParamInfo& param_info(Param p) {
  return kInfos[index(p)];
}

Profile::Profile() {
  for (int a = 0; a < kNumArchitectures; ++a) {
    families_[a].sources.fill(std::string(kVersion1Source));
  }
  families_[static_cast<int>(Architecture::kCpu)].sources.fill(std::string(kCpuSource));
  for (const auto& d : default_params()) {
    Entry& e = families_[static_cast<int>(d.architecture)];
    e.values.set(d.param, d.value);
    e.sources[index(d.param)] = std::string(d.source);
  }
}

Result<Profile> Profile::from_json(const Json& json, const std::string& origin) {
  return load_with([&] {
    JsonNode root(json, origin);
    auto version_node = root.at("version");
    const Json& v = version_node.json();
    const std::int64_t version = v.is_number_integer() ? v.get<std::int64_t>() : 0;
    if (version != 1 && version != 2) {
      version_node.fail("format version 1 (constant efficiencies) or 2 (shape-aware model)");
    }
    if (version == 1) {
      root.allow_only({"version", "comment", "default", "devices"});
    } else {
      root.allow_only({"version", "comment", "default", "architectures", "devices", "transports"});
    }
    Profile p;
    if (version == 1) {  // the constant model: what the file leaves out takes its defaults
      for (auto& e : p.families_) {
        e.values = DeviceProfile{};
        e.sources.fill(std::string(kVersion1Source));
      }
    }
    if (auto d = root.find("default")) {
      const FileEntry e = read_entry(*d, static_cast<int>(version));
      for (auto& f : p.families_) apply(e, f.values, f.sources);
    }
    if (auto archs = root.find("architectures")) {
      archs->require_object();
      for (const auto& [name, _] : archs->json().items()) {
        auto a = kArchitectureNames.parse(name);
        if (!a)
          archs->fail_message("unknown architecture \"" + name +
                              "\" (allowed: " + kArchitectureNames.list() + ")");
        Entry& f = p.families_[static_cast<int>(*a)];
        apply(read_entry(archs->at(name), 2), f.values, f.sources);
      }
    }
    if (auto devices = root.find("devices")) {
      devices->require_object();
      for (const auto& [name, _] : devices->json().items()) {
        const FileEntry e = read_entry(devices->at(name), static_cast<int>(version));
        p.devices_[name] = {e.values, e.sources, e.set};
      }
    }
    if (auto transports = root.find("transports")) {
      transports->require_object();
      for (const auto& [name, _] : transports->json().items()) {
        auto t = kTransportNames.parse(name);
        if (!t || *t == Transport::kNominal)
          transports->fail_message("unknown transport \"" + name +
                                   "\" (allowed: nvlink, pcie, host, rdma, efa, tcp)");
        auto node = transports->at(name);
        p.set_transport(read_transport(node, *t));
        if (auto extra = node.find("collective_step_latency_us"))
          p.set_collective_step_latency(*t, extra->number_in(0, 1e7) / 1e6);
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
  Json archs = Json::object(), devices = Json::object();
  for (int a = 0; a < kNumArchitectures; ++a) {
    archs[std::string(to_string(static_cast<Architecture>(a)))] =
        entry_json(families_[a].values, families_[a].sources, kAllParams);
  }
  for (const auto& [name, e] : devices_) devices[name] = entry_json(e.values, e.sources, e.set);
  Json out = {{"version", 2}, {"architectures", archs}, {"devices", devices}};
  if (!transports_.empty()) {
    Json transports = Json::object();
    for (const auto& [t, c] : transports_) {
      Json table = Json::array();
      for (const auto& point : c.points) table.push_back({point.bytes, point.efficiency});
      Json entry = {
          {"step_latency_us", c.step_latency_s * 1e6}, {"efficiency", table}, {"source", c.source}};
      if (c.uncertainty > 0) entry["uncertainty"] = c.uncertainty;
      if (c.costs_cpu()) write_cpu_law(c.cpu, entry);
      if (!c.cpu_by_device.empty()) {
        Json laws = Json::object();
        for (const auto& [type, law] : c.cpu_by_device) write_cpu_law(law, laws[type]);
        entry["devices"] = laws;
      }
      auto extra = collective_step_latency_s_.find(t);
      if (extra != collective_step_latency_s_.end())
        entry["collective_step_latency_us"] = extra->second * 1e6;
      transports[std::string(to_string(t))] = entry;
    }
    out["transports"] = transports;
  }
  return out;
}

bool Profile::shipped(const GpuSpec& gpu, Param p) const {
  // Per family and parameter, the shipped default's source (empty: no shipped default).
  static const auto kShippedSources = [] {
    std::array<std::array<std::string_view, kNumParams>, kNumArchitectures> sources{};
    for (const auto& d : default_params())
      sources[static_cast<int>(d.architecture)][index(d.param)] = d.source;
    return sources;
  }();
  auto it = devices_.find(gpu.name);
  if (it != devices_.end() && (it->second.set & (1u << index(p)))) return false;
  const std::string_view shipped = kShippedSources[static_cast<int>(gpu.architecture)][index(p)];
  return !shipped.empty() && architecture_source(gpu.architecture, p) == shipped;
}

DeviceProfile Profile::device(const GpuSpec& gpu) const {
  DeviceProfile out = architecture(gpu.architecture);
  auto it = devices_.find(gpu.name);
  if (it != devices_.end()) {
    for (const auto& f : kFields) {
      if (it->second.set & (1u << index(f.param))) out.*f.member = it->second.values.*f.member;
    }
  }
  // The shipped tensor-core rates are fitted to burst measurements: a card's sustained share
  // takes them to steady state (a rate a file or a calibration sets is taken as it is).
  double sustained_uncertainty = 0;
  if (gpu.sustained != 1) {
    if (shipped(gpu, Param::kGemmCeiling)) out.gemm_ceiling *= gpu.sustained;
    if (shipped(gpu, Param::kAttentionFwd)) out.attention_fwd *= gpu.sustained;
    if (shipped(gpu, Param::kAttentionBwd)) out.attention_bwd *= gpu.sustained;
    sustained_uncertainty = gpu.sustained_uncertainty;
  }
  if (side_ != 0) {
    out.gemm_ceiling /= 1 + side_ * (out.uncertainty_gemm + sustained_uncertainty);
    out.attention_fwd /= 1 + side_ * (out.uncertainty_attention + sustained_uncertainty);
    out.attention_bwd /= 1 + side_ * (out.uncertainty_attention + sustained_uncertainty);
    out.memory_efficiency /= 1 + side_ * out.uncertainty_memory;
  }
  return out;
}

Profile Profile::at_bound(double side) const {
  Profile p = *this;
  p.side_ = std::clamp(side, -1.0, 1.0);
  return p;
}

std::string_view Profile::source(const GpuSpec& gpu, Param p) const {
  auto it = devices_.find(gpu.name);
  if (it != devices_.end() && (it->second.set & (1u << index(p)))) {
    return it->second.sources[index(p)];
  }
  return architecture_source(gpu.architecture, p);
}

const DeviceProfile& Profile::architecture(Architecture a) const {
  return families_[static_cast<int>(a)].values;
}

std::string_view Profile::architecture_source(Architecture a, Param p) const {
  return families_[static_cast<int>(a)].sources[index(p)];
}

void Profile::set_default(const DeviceProfile& p, const std::string& source) {
  for (auto& f : families_) {
    f.values = p;
    f.sources.fill(source);
  }
  devices_.clear();
}

void Profile::set_device(const std::string& gpu_name, const DeviceProfile& p,
                         const std::string& source) {
  Entry e{p, {}, kAllParams};
  e.sources.fill(source);
  devices_[gpu_name] = std::move(e);
}

void Profile::set_device_param(const std::string& gpu_name, Param param, double value,
                               const std::string& source) {
  Entry& e = devices_[gpu_name];
  e.values.set(param, value);
  e.sources[index(param)] = source;
  e.set |= 1u << index(param);
}

void Profile::set_collective_step_latency(Transport t, double seconds) {
  collective_step_latency_s_[t] = seconds;
}

void Profile::set_transport(TransportCurve curve) {
  const Transport t = curve.transport;
  transports_[t] = std::move(curve);
}

}  // namespace hexi
