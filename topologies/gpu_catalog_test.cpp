// The shipped GPU catalog: every required type, datasheet values, and the FLOPS
// ratios of the HexiScale paper settings.
#include "topologies/gpu_catalog.hpp"

#include <gtest/gtest.h>

namespace hexi {
namespace {

const GpuCatalog& catalog() {
  static const GpuCatalog c = [] {
    auto r = GpuCatalog::load_shipped();
    EXPECT_TRUE(r.ok()) << r.error().message;
    return *r;
  }();
  return c;
}

TEST(GpuCatalog, HasEveryRequiredType) {
  for (const char* name : {"V100",
                           "T4",
                           "A10",
                           "L4",
                           "L40S",
                           "A6000",
                           "A100-PCIe-40GB",
                           "A100-PCIe-80GB",
                           "A100-SXM-40GB",
                           "A100-SXM-80GB",
                           "A800-PCIe-80GB",
                           "A800-SXM-80GB",
                           "H100-PCIe",
                           "H100-SXM",
                           "H800",
                           "H200",
                           "B200",
                           "RTX3080Ti",
                           "RTX3090",
                           "RTX4090"}) {
    const GpuSpec* g = catalog().find(name);
    ASSERT_NE(g, nullptr) << name;
    EXPECT_GT(g->tflops, 0);
    EXPECT_GT(g->memory_gib, 0);
    EXPECT_GT(g->memory_GBps, 0);
    EXPECT_FALSE(g->source.empty()) << name;
  }
}

TEST(GpuCatalog, DenseNotSparseDatasheetValues) {
  // Datasheets print sparse figures with an asterisk; the catalog holds half of them.
  EXPECT_DOUBLE_EQ(catalog().find("A100")->tflops, 312);
  EXPECT_DOUBLE_EQ(catalog().find("H100-SXM")->tflops, 989);
  EXPECT_DOUBLE_EQ(catalog().find("L4")->tflops, 121);
  // GeForce: the fp32-accumulate rate trains; the fp16-accumulate rate is twice it.
  EXPECT_DOUBLE_EQ(catalog().find("RTX4090")->tflops, 165.2);
  EXPECT_NEAR(catalog().find("RTX4090")->tflops_fp16_accumulate, 2 * 165.2, 0.2);
  EXPECT_EQ(catalog().find("RTX3090")->intra_kind, IntraKind::kHost);  // no peer-to-peer
}

// A sustained share is a kernel-level steady-state measurement of the card, or says which
// card it comes from (inherited or derived) with a wider uncertainty; a card without one keeps
// the burst-fitted rates (1).
TEST(GpuCatalog, SustainedSharesSayWhereTheyComeFrom) {
  int measured = 0, inherited = 0;
  for (const GpuSpec& g : catalog().gpus()) {
    if (g.sustained_source.empty()) {
      EXPECT_EQ(g.sustained, 1) << g.name;
      continue;
    }
    EXPECT_NE(g.sustained_source.find("gpu-fryer"), std::string::npos) << g.name;
    const bool from_other = g.sustained_source.rfind("inherited", 0) == 0 ||
                            g.sustained_source.rfind("derived", 0) == 0;
    (from_other ? inherited : measured)++;
    EXPECT_GE(g.sustained_uncertainty, from_other ? 0.04 : 0.02) << g.name;
  }
  EXPECT_EQ(measured, 3);  // A100-SXM4-80GB, A100-PCIe-40GB, H100-SXM5
  EXPECT_GE(inherited, 1);
  EXPECT_DOUBLE_EQ(catalog().find("A100-PCIe-40GB")->sustained, 0.845);
  auto bad = GpuCatalog::from_json(
      Json::parse(R"({"version": 1, "gpus": [{"name": "X", "tflops": 1, "precision": "bf16",
        "memory_gib": 1, "memory_GBps": 1, "pcie_GBps": 1, "intra": {"kind": "pcie", "GBps": 1},
        "sustained": {"value": 2, "uncertainty": 0.1, "source": "s"}, "source": "s"}]})"),
      "g.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("/gpus/0/sustained/value"), std::string::npos)
      << bad.error().message;
}

TEST(GpuCatalog, NamesAreCaseAndDashInsensitiveWithAliases) {
  EXPECT_EQ(catalog().find("a800-nvlink")->name, "A800-SXM-80GB");
  EXPECT_EQ(catalog().find("rtx_4090")->name, "RTX4090");
  EXPECT_EQ(catalog().find("4090")->name, "RTX4090");
  EXPECT_EQ(catalog().find("GTX1080"), nullptr);
}

// Total FLOP/s of a setting against n A800s.
double ratio(const std::vector<std::pair<double, int>>& mix, double a800, int baseline) {
  double sum = 0;
  for (auto [tflops, n] : mix) sum += tflops * n;
  return sum / (a800 * baseline);
}

TEST(GpuCatalog, PaperSettingFlopsRatios) {
  // HexiScale's table: setting 1 +1.36 %, setting 2 -1.59 % against 16 A800. They follow
  // from 56.9 / 80 / 165.2 / 312 TFLOP/s (3080 Ti / 3090 / 4090 / A800):
  EXPECT_NEAR(ratio({{56.9, 8}, {80, 8}, {165.2, 24}}, 312, 16), 1.0136, 1e-4);
  EXPECT_NEAR(ratio({{56.9, 8}, {80, 8}, {165.2, 8}, {312, 8}}, 312, 16), 1 - 0.0159, 1e-4);
  // Setting 3 (16 x 3090, 32 x 4090, 8 x A800 vs 32 A800) gives -9.23 % with those numbers,
  // not the paper's -4.67 %; -4.67 % is what 8 more 3080 Ti would add (a likely table error).
  EXPECT_NEAR(ratio({{80, 16}, {165.2, 32}, {312, 8}}, 312, 32), 1 - 0.0923, 1e-4);
  EXPECT_NEAR(ratio({{56.9, 8}, {80, 16}, {165.2, 32}, {312, 8}}, 312, 32), 1 - 0.0467, 1e-4);
  // Our datasheet catalog (3080 Ti 68.2, 3090 71, fp32 accumulate) gives:
  auto tf = [](const char* n) { return catalog().find(n)->tflops; };
  const double a800 = tf("A800-PCIe-80GB");
  EXPECT_NEAR(ratio({{tf("RTX3080Ti"), 8}, {tf("RTX3090"), 8}, {tf("RTX4090"), 24}}, a800, 16),
              1.0173, 1e-4);
  EXPECT_NEAR(ratio({{tf("RTX3080Ti"), 8}, {tf("RTX3090"), 8}, {tf("RTX4090"), 8}, {tf("A800"), 8}},
                    a800, 16),
              0.9878, 1e-4);
  EXPECT_NEAR(ratio({{tf("RTX3090"), 16}, {tf("RTX4090"), 32}, {tf("A800"), 8}}, a800, 32), 0.8933,
              1e-4);
}

// Every GPU names the family whose compute model it follows, and its SM count (the
// datasheets' / whitepapers' figures) for GEMM wave quantisation.
TEST(GpuCatalog, ArchitectureAndSmsOfEveryGpu) {
  for (const auto& g : catalog().gpus()) {
    EXPECT_NE(g.architecture, Architecture::kOther) << g.name;
    EXPECT_EQ(g.sms > 0, g.architecture != Architecture::kCpu) << g.name;
  }
  EXPECT_EQ(catalog().find("A100")->architecture, Architecture::kAmpere);
  EXPECT_EQ(catalog().find("A6000")->architecture, Architecture::kAmpereGa10x);
  EXPECT_EQ(catalog().find("RTX3090")->architecture, Architecture::kAmpereGa10x);
  EXPECT_EQ(catalog().find("RTX4090")->architecture, Architecture::kAda);
  EXPECT_EQ(catalog().find("H100")->sms, 132);
  EXPECT_EQ(catalog().find("A100")->sms, 108);
  // Optional fields: a catalog without them loads (no family, no SM count).
  auto old = GpuCatalog::from_json(
      *parse_json_text(R"({"version": 1, "gpus": [{"name": "X", "tflops": 1, "precision": "p",
          "memory_gib": 1, "memory_GBps": 1, "pcie_GBps": 1, "intra": {"kind": "pcie",
          "GBps": 1}, "source": "s"}]})",
                       "c.json"),
      "c.json");
  ASSERT_TRUE(old.ok()) << old.error().message;
  EXPECT_EQ(old->gpus()[0].architecture, Architecture::kOther);
  EXPECT_EQ(old->gpus()[0].sms, 0);
}

TEST(GpuCatalog, DuplicateNamesAreRejected) {
  Json j = Json::parse(R"({"version": 1, "gpus": [
    {"name": "X", "tflops": 1, "precision": "p", "memory_gib": 1, "memory_GBps": 1, "pcie_GBps": 1,
     "intra": {"kind": "pcie", "GBps": 1}, "source": "s"},
    {"name": "Y", "aliases": ["x"], "tflops": 1, "precision": "p", "memory_gib": 1, "memory_GBps": 1,
     "pcie_GBps": 1, "intra": {"kind": "pcie", "GBps": 1}, "source": "s"}]})");
  auto r = GpuCatalog::from_json(j, "g.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("g.json: /gpus/1: GPU name or alias \"x\" is already defined"),
            std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace hexi
