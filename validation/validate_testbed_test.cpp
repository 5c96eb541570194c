// `hexisim validate --quick` on the testbed (a suite's two quick plans after its calibration
// runs), where this machine can build one (root, namespaces, cgroups, hexisim-nfdelay);
// skipped with the reason where not. Other tests may run beside it: it checks that the report
// is whole, not how close it is (validation/README.md has the measured suite).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/cli_runner.hpp"
#include "validation/testbed.hpp"

namespace hexi::testing {
namespace {

using nlohmann::json;

TEST(CliValidate, QuickOnTheTestbed) {
  if (const std::string why = validation::testbed_unavailable(); !why.empty()) {
    GTEST_SKIP() << "no testbed on this machine: " << why;
  }
  const auto dir = scratch_dir("validate-quick");
  auto r = run_cli("validate " HEXISIM_TEST_ROOT
                   "/validation/suites/testbed-cpu.json --quick "
                   "--steps 4 --no-plot --json --out " +
                   (dir / "out").string());
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_GE(j["mape"].get<double>(), 0.0);
  EXPECT_LE(std::abs(j["kendall_tau"].get<double>()), 1.0);
  ASSERT_EQ(j["plans"].size(), 2u);
  for (const auto& p : j["plans"]) {
    EXPECT_GT(p["measured_s"].get<double>(), 0.0) << p["name"];
    EXPECT_GT(p["simulated_s"].get<double>(), 0.0) << p["name"];
  }
  EXPECT_TRUE(std::filesystem::exists(dir / "out" / "report.md"));
  // Nothing of the testbed is left behind.
  auto ns = std::system("ip netns list | grep -q hxtb-");
  EXPECT_NE(WEXITSTATUS(ns), 0) << "a hxtb-* namespace is left";
}

}  // namespace
}  // namespace hexi::testing
