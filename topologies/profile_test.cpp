// Device profiles: shipped defaults with sources, version-1 (constant) and version-2
// (shape-aware) files, and the file round trip.
#include "topologies/profile.hpp"

#include <gtest/gtest.h>

namespace hexi {
namespace {

Profile parse_profile(const std::string& text) {
  auto json = parse_json_text(text, "p.json");
  EXPECT_TRUE(json.ok()) << json.error().message;
  auto profile = Profile::from_json(*json, "p.json");
  EXPECT_TRUE(profile.ok()) << profile.error().message;
  return profile.ok() ? *profile : Profile{};
}

GpuSpec spec(const std::string& name, Architecture a) {
  GpuSpec g;
  g.name = name;
  g.architecture = a;
  return g;
}

const GpuSpec kH100 = spec("H100-SXM", Architecture::kHopper);
const GpuSpec kA100 = spec("A100-SXM-80GB", Architecture::kAmpere);

// A version-1 file is the constant model: what it leaves out takes the version-1 defaults
// (0.75, 0.55, 0.80, 4 us), and a GPU entry starts from the file's default.
TEST(Profile, Version1FilesAreTheConstantModel) {
  const Profile p = parse_profile(R"({"version": 1, "default": {"gemm_efficiency": 0.6},
      "devices": {"H100-SXM": {"kernel_overhead_us": 2}}})");
  for (const GpuSpec& g : {kH100, kA100}) {
    const DeviceProfile d = p.device(g);
    EXPECT_DOUBLE_EQ(d.gemm_ceiling, 0.6);
    EXPECT_DOUBLE_EQ(d.gemm_tile_m, 0);  // no shape terms
    EXPECT_DOUBLE_EQ(d.gemm_k_half, 0);
    EXPECT_DOUBLE_EQ(d.attention_fwd, 0.55);
    EXPECT_DOUBLE_EQ(d.attention_s_half_fwd, 0);
    EXPECT_DOUBLE_EQ(d.memory_efficiency, 0.80);
  }
  EXPECT_DOUBLE_EQ(p.device(kH100).kernel_overhead_s, 2e-6);
  EXPECT_DOUBLE_EQ(p.device(kA100).kernel_overhead_s, 4e-6);
  EXPECT_EQ(p.source(kH100, Param::kGemmCeiling),
            "p.json: gemm_efficiency (constant, no shape terms)");
  EXPECT_EQ(p.source(kH100, Param::kKernelOverheadUs), "p.json");
  // A version-1 file knows only the four constants.
  auto bad = Profile::from_json(
      *parse_json_text(R"({"version": 1, "default": {"gemm_ceiling": 0.5}})", "p"), "p");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("unknown field \"gemm_ceiling\""), std::string::npos)
      << bad.error().message;
}

TEST(Profile, RefusesOutOfRangeValues) {
  for (const char* text :
       {R"({"version": 1, "default": {"gemm_efficiency": 0}})",
        R"({"version": 1, "default": {"kernel_overhead_us": -1}})",
        R"({"version": 1, "devices": {"A100": {"typo": 1}}})", R"({"version": 3})",
        R"({"version": 2, "architectures": {"pascal": {}}})",
        R"({"version": 2, "default": {"gemm_misaligned": 1.5}})",
        R"({"version": 2, "default": {"gemm_ceiling": {"value": 0.5}}})",
        R"({"version": 2, "default": {"gemm_ceiling": {"value": 0.5, "source": "x", "y": 1}}})"}) {
    auto profile = Profile::from_json(*parse_json_text(text, "p.json"), "p.json");
    ASSERT_FALSE(profile.ok()) << text;
    EXPECT_EQ(profile.error().kind, ErrorKind::kBadInput);
  }
}

// Version 2: a number (source: the file) or {"value", "source"}, for every GPU ("default"),
// a family ("architectures") or a GPU type ("devices"); the rest stays shipped.
TEST(Profile, Version2OverridesLayerOnTheShippedModel) {
  const Profile shipped;
  const Profile p = parse_profile(R"({"version": 2,
      "default": {"kernel_overhead_us": 3},
      "architectures": {"hopper": {"gemm_ceiling": {"value": 0.5, "source": "my sweep"}}},
      "devices": {"H100-SXM": {"memory_efficiency": 0.7}}})");
  EXPECT_DOUBLE_EQ(p.device(kH100).gemm_ceiling, 0.5);
  EXPECT_EQ(p.source(kH100, Param::kGemmCeiling), "my sweep");
  EXPECT_DOUBLE_EQ(p.device(kH100).memory_efficiency, 0.7);
  EXPECT_EQ(p.source(kH100, Param::kMemoryEfficiency), "p.json");
  EXPECT_DOUBLE_EQ(p.device(kH100).kernel_overhead_s, 3e-6);
  EXPECT_DOUBLE_EQ(p.device(kH100).attention_fwd, shipped.device(kH100).attention_fwd);
  EXPECT_EQ(p.source(kH100, Param::kAttentionFwd), shipped.source(kH100, Param::kAttentionFwd));
  // Another hopper GPU takes the family's override but not the H100's.
  const GpuSpec h200 = spec("H200", Architecture::kHopper);
  EXPECT_DOUBLE_EQ(p.device(h200).gemm_ceiling, 0.5);
  EXPECT_DOUBLE_EQ(p.device(h200).memory_efficiency, shipped.device(h200).memory_efficiency);
  EXPECT_DOUBLE_EQ(p.device(kA100).gemm_ceiling, shipped.device(kA100).gemm_ceiling);
}

// Every default of the shipped profile has a source: the GPU families from
// profile_defaults.cpp (each parameter exactly once), "other" and "cpu" the constant model.
TEST(Profile, EveryShippedDefaultHasASource) {
  std::array<std::array<int, kNumParams>, kNumArchitectures> seen{};
  for (const auto& d : default_params()) {
    ++seen[static_cast<int>(d.architecture)][static_cast<int>(d.param)];
    EXPECT_FALSE(d.source.empty());
    const ParamInfo& info = param_info(d.param);
    EXPECT_GE(d.value, info.min) << info.name;
    EXPECT_LE(d.value, info.max) << info.name;
  }
  const Profile p;
  for (int a = 0; a < kNumArchitectures; ++a) {
    const auto arch = static_cast<Architecture>(a);
    const bool fitted = arch != Architecture::kOther && arch != Architecture::kCpu;
    for (const auto& info : param_infos()) {
      EXPECT_EQ(seen[a][static_cast<int>(info.param)], fitted ? 1 : 0)
          << to_string(arch) << " " << info.name;
      EXPECT_FALSE(p.architecture_source(arch, info.param).empty());
    }
  }
  EXPECT_NE(p.architecture_source(Architecture::kCpu, Param::kGemmCeiling).find("version 1"),
            std::string_view::npos);
  EXPECT_NE(p.architecture_source(Architecture::kOther, Param::kGemmCeiling).find("version 1"),
            std::string_view::npos);
  EXPECT_DOUBLE_EQ(p.architecture(Architecture::kCpu).gemm_ceiling, 0.75);
}

// Found by tests/fuzz (fuzz_profile): a kernel overhead of 0.023 us was read as
// 0.023 * 1e-6 s and written as 0.022999999999999996 us, drifting on every write and read.
TEST(Profile, WrittenAndReadBackIsTheSameProfile) {
  for (const char* us : {"0.023", "0.037", "4", "1e-9", "999999.999", "0.1"}) {
    const std::string first = dump_json(
        parse_profile(std::string(R"({"version": 1, "default": {"kernel_overhead_us": )") + us +
                      "}}")
            .to_json());
    EXPECT_EQ(dump_json(parse_profile(first).to_json()), first) << us;
  }
  auto json = parse_json_text(R"({"version": 1, "default": {"kernel_overhead_us": 0.023}})", "p");
  EXPECT_EQ(Profile::from_json(*json, "p")
                ->to_json()["architectures"]["hopper"]["kernel_overhead_us"]["value"],
            0.023);
}

// The shipped profile written out (version 2, every value with its source) reads back as
// itself, sources included; so does one with a per-GPU override.
TEST(Profile, ShippedProfileRoundTripsWithSources) {
  Profile shipped;
  shipped.set_device("RTX4090", DeviceProfile::constant(0.6, 0.5, 0.7, 5e-6), "bench 2025");
  const Json written = shipped.to_json();
  EXPECT_EQ(written["version"], 2);
  EXPECT_EQ(written["architectures"]["hopper"]["gemm_ceiling"]["source"],
            std::string(shipped.architecture_source(Architecture::kHopper, Param::kGemmCeiling)));
  const Profile back = parse_profile(dump_json(written));
  EXPECT_EQ(dump_json(back.to_json()), dump_json(written));
  const GpuSpec g = spec("RTX4090", Architecture::kAda);
  EXPECT_DOUBLE_EQ(back.device(g).gemm_ceiling, 0.6);
  EXPECT_EQ(back.source(g, Param::kGemmCeiling), "bench 2025");
}

// A transport's communication CPU law, and a device type's own: each key a device type
// leaves out is the transport's; written out and read back, every type's law is whole.
TEST(Profile, DeviceTypesHaveTheirOwnCommunicationCpuLaw) {
  const Profile p = parse_profile(R"({"version": 2, "transports": {"host": {
      "step_latency_us": 10, "efficiency": [[1024, 0.5]], "cpu_us_per_op": 40,
      "collective_cpu_us_per_op": 300, "poll_cpu_fraction": 0.02,
      "devices": {"cpu-20": {"collective_cpu_us_per_op": 600, "poll_cpu_fraction": 0.05}}}}})");
  const TransportCurve& host = p.transports().at(Transport::kHost);
  EXPECT_DOUBLE_EQ(host.cpu_of("cpu-40").seconds(0, true), 300e-6);
  EXPECT_DOUBLE_EQ(host.cpu_of("cpu-20").seconds(0, true), 600e-6);
  EXPECT_DOUBLE_EQ(host.cpu_of("cpu-20").seconds(0, false), 40e-6);  // the transport's
  EXPECT_DOUBLE_EQ(host.cpu_of("cpu-20").poll_fraction, 0.05);
  EXPECT_DOUBLE_EQ(host.cpu_of("cpu-40").poll_fraction, 0.02);
  const Json written = p.to_json();
  EXPECT_EQ(written["transports"]["host"]["devices"]["cpu-20"]["cpu_us_per_op"], 40.0);
  EXPECT_EQ(dump_json(parse_profile(dump_json(written)).to_json()), dump_json(written));
  for (const char* bad : {R"({"cpu-20": {"cpu_us_per_opp": 1}})",
                          R"({"cpu-20": {"poll_cpu_fraction": 2}})", R"([1])"}) {
    const std::string text =
        std::string(
            R"({"version": 2, "transports": {"host": {"step_latency_us": 10, "efficiency": [], "devices": )") +
        bad + "}}}";
    auto profile = Profile::from_json(*parse_json_text(text, "p.json"), "p.json");
    ASSERT_FALSE(profile.ok()) << bad;
    EXPECT_NE(profile.error().message.find("/transports/host/devices"), std::string::npos)
        << profile.error().message;
  }
}

// at_bound moves each kernel class by its own uncertainty, from a GPU entry or its family,
// and nothing else; every shipped GPU family states its three uncertainties.
TEST(Profile, AtBoundMovesEachKernelClassByItsUncertainty) {
  Profile p = parse_profile(R"({"version": 2,
    "architectures": {"hopper": {"gemm_ceiling": 0.8, "attention_fwd": 0.6, "attention_bwd": 0.5,
                                 "memory_efficiency": 0.9, "uncertainty_gemm": 0.1,
                                 "uncertainty_attention": 0.2, "uncertainty_memory": 0.05}},
    "devices": {"H100-SXM": {"uncertainty_gemm": 0.25}}})");
  const DeviceProfile base = p.device(kH100);
  EXPECT_EQ(p.bound_side(), 0);
  EXPECT_EQ(p.at_bound(3).bound_side(), 1);  // clamped
  for (double side : {-1.0, -0.5, 1.0}) {
    const Profile b = p.at_bound(side);
    EXPECT_EQ(b.bound_side(), side);
    const DeviceProfile d = b.device(kH100);
    EXPECT_DOUBLE_EQ(d.gemm_ceiling, 0.8 / (1 + side * 0.25));  // the GPU entry's
    EXPECT_DOUBLE_EQ(d.attention_fwd, 0.6 / (1 + side * 0.2));
    EXPECT_DOUBLE_EQ(d.attention_bwd, 0.5 / (1 + side * 0.2));
    EXPECT_DOUBLE_EQ(d.memory_efficiency, 0.9 / (1 + side * 0.05));
    EXPECT_EQ(d.gemm_k_half, base.gemm_k_half);
    EXPECT_EQ(d.kernel_overhead_s, base.kernel_overhead_s);
    // Another hopper GPU takes the family's GEMM uncertainty.
    EXPECT_DOUBLE_EQ(b.device(spec("H800", Architecture::kHopper)).gemm_ceiling,
                     0.8 / (1 + side * 0.1));
  }
  EXPECT_DOUBLE_EQ(p.at_bound(1).at_bound(0).device(kH100).gemm_ceiling, 0.8);
  const Profile shipped;
  for (Architecture a : {Architecture::kVolta, Architecture::kTuring, Architecture::kAmpere,
                         Architecture::kAmpereGa10x, Architecture::kAda, Architecture::kHopper,
                         Architecture::kBlackwell}) {
    const DeviceProfile& d = shipped.architecture(a);
    for (double u : {d.uncertainty_gemm, d.uncertainty_attention, d.uncertainty_memory}) {
      EXPECT_GT(u, 0) << static_cast<int>(a);
      EXPECT_LT(u, 0.5) << static_cast<int>(a);
    }
    EXPECT_NE(shipped.architecture_source(a, Param::kUncertaintyGemm).find("fit_compute.py"),
              std::string_view::npos);
  }
}

// A card's sustained share (gpus.json) takes the shipped GEMM and flash-attention rates,
// fitted to burst measurements, to steady state; a rate a file sets is taken as it is, the
// element-wise rate is not a tensor-core rate, and the range widens by the share's
// uncertainty.
TEST(Profile, ACardsSustainedShareScalesTheShippedTensorCoreRatesOnly) {
  GpuSpec pcie = spec("A100-PCIe-40GB", Architecture::kAmpere);
  pcie.sustained = 0.845;
  pcie.sustained_uncertainty = 0.02;
  const Profile shipped;
  const DeviceProfile& fam = shipped.architecture(Architecture::kAmpere);
  const DeviceProfile d = shipped.device(pcie);
  EXPECT_DOUBLE_EQ(d.gemm_ceiling, fam.gemm_ceiling * 0.845);
  EXPECT_DOUBLE_EQ(d.attention_fwd, fam.attention_fwd * 0.845);
  EXPECT_DOUBLE_EQ(d.attention_bwd, fam.attention_bwd * 0.845);
  EXPECT_DOUBLE_EQ(d.memory_efficiency, fam.memory_efficiency);
  EXPECT_DOUBLE_EQ(shipped.device(kA100).gemm_ceiling, fam.gemm_ceiling);  // share 1
  EXPECT_DOUBLE_EQ(shipped.at_bound(1).device(pcie).gemm_ceiling,
                   fam.gemm_ceiling * 0.845 / (1 + fam.uncertainty_gemm + 0.02));
  Profile file = parse_profile(R"({"version": 2,
    "architectures": {"ampere": {"gemm_ceiling": 0.8}},
    "devices": {"A100-PCIe-40GB": {"attention_fwd": 0.5}}})");
  EXPECT_DOUBLE_EQ(file.device(pcie).gemm_ceiling, 0.8);
  EXPECT_DOUBLE_EQ(file.device(pcie).attention_fwd, 0.5);
  EXPECT_DOUBLE_EQ(file.device(pcie).attention_bwd, fam.attention_bwd * 0.845);
  Profile constant;
  constant.set_default(DeviceProfile::constant(0.7, 0.5, 0.8, 4e-6));
  EXPECT_DOUBLE_EQ(constant.device(pcie).gemm_ceiling, 0.7);
}

// A transport's curve moved across its uncertainty: efficiencies divided and the step
// latency multiplied by 1 + side x uncertainty; every shipped network and link table states
// one; a profile's transport may state its own, and writes it back.
TEST(Profile, TransportCurvesMoveAcrossTheirUncertainty) {
  const TransportCurve& tcp = transport_curve(Transport::kTcp);
  ASSERT_GT(tcp.uncertainty, 0);
  for (double side : {-1.0, 0.5}) {
    const TransportCurve m = moved_curve(tcp, side);
    const double k = 1 + side * tcp.uncertainty;
    EXPECT_DOUBLE_EQ(m.step_latency_s, tcp.step_latency_s * k);
    for (double bytes : {1e3, 1e6, 1e9}) {
      EXPECT_NEAR(m.efficiency(bytes), tcp.efficiency(bytes) / k, 1e-12) << bytes;
    }
  }
  EXPECT_DOUBLE_EQ(moved_curve(tcp, 0).efficiency(1e6), tcp.efficiency(1e6));
  for (Transport t : kMeasuredTransports) {
    EXPECT_GT(transport_curve(t).uncertainty, 0) << to_string(t);
    EXPECT_LT(transport_curve(t).uncertainty, 0.5) << to_string(t);
  }
  Profile p = parse_profile(R"({"version": 2, "transports": {"tcp": {"step_latency_us": 40,
      "efficiency": [[1024, 0.5], [1048576, 0.9]], "uncertainty": 0.2}}})");
  EXPECT_DOUBLE_EQ(p.transports().at(Transport::kTcp).uncertainty, 0.2);
  auto again = Profile::from_json(p.to_json(), "again.json");
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_DOUBLE_EQ(again->transports().at(Transport::kTcp).uncertainty, 0.2);
  auto bad = parse_json_text(R"({"version": 2, "transports": {"tcp": {"step_latency_us": 40,
      "efficiency": [[1024, 0.5]], "uncertainty": 2}}})",
                             "bad.json");
  ASSERT_TRUE(bad.ok());
  EXPECT_FALSE(Profile::from_json(*bad, "bad.json").ok());
}

}  // namespace
}  // namespace hexi
