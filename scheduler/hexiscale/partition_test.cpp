// Phase 1's METIS partition: every unit in a part, deterministic, and nothing printed.
#include "scheduler/hexiscale/partition.hpp"

#include <gtest/gtest.h>

#include "scheduler/search/testing.hpp"

namespace hexi {
namespace {

// 30 GPUs of four types over 17 machines of one and two GPUs: METIS's initial bisections of
// its coarsened graph meet empty sides for some part counts and print so on standard
// output, which would land inside a command's --json answer.
TEST(Partition, MetisPrintsNothingAndPlacesEveryUnit) {
  std::vector<std::pair<std::string, int>> machines;
  for (int i = 0; i < 8; ++i) machines.emplace_back("RTX3080Ti", 2);
  machines.emplace_back("B200", 1);
  for (int i = 0; i < 3; ++i) machines.emplace_back("A100-SXM-80GB", 1);
  for (int i = 0; i < 5; ++i) machines.emplace_back("H100-PCIe", 2);
  auto sc = testing::make_scenario(testing::cluster_json("mixed-30", machines, 3.0), "llama2-7b",
                                   {{"global_batch", 64}, {"seq_len", 2048}});
  ASSERT_TRUE(sc.ok()) << sc.error().message;
  for (const bool per_machine : {false, true}) {
    const std::vector<Unit> units = make_units(sc->cluster, per_machine);
    const int n = static_cast<int>(units.size());
    for (const CutMode mode : {CutMode::kDpOnSlowLinks, CutMode::kDpOnFastLinks}) {
      for (int parts = 2; parts < n; ++parts) {
        ::testing::internal::CaptureStdout();
        const std::vector<int> part = metis_partition(sc->cluster, units, parts, mode, 7, 0.3);
        const std::string printed = ::testing::internal::GetCapturedStdout();
        EXPECT_EQ(printed, "") << "parts " << parts << (per_machine ? " machines" : " devices");
        ASSERT_EQ(part.size(), units.size());
        for (int p : part) {
          EXPECT_GE(p, 0);
          EXPECT_LT(p, parts);
        }
        EXPECT_EQ(part, metis_partition(sc->cluster, units, parts, mode, 7, 0.3));
      }
    }
  }
}

}  // namespace
}  // namespace hexi
