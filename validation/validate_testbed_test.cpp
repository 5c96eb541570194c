// `hexisim validate --quick` on the testbed (a suite's two quick plans after its calibration
// runs) and `hexisim testbed up|status|down`, where this machine can build one (root,
// namespaces, cgroups, hexisim-nfdelay); skipped with the reason where not. One testbed per
// machine: ctest runs these one at a time (RESOURCE_LOCK hexisim-testbed). Other tests may run
// beside it: it checks that the report is whole, not how close it is (validation/README.md has the
// measured suite).
#include <gtest/gtest.h>

#include <map>

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
                   "--steps 3 --no-plot --json --out " +
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

// status measures what up built: every machine pair's link beside the cluster file's rate and
// latency, every rank's GEMM rate beside its type's CPU share; refused once it is down. Its
// measurements depend on the machine's load, so only their presence is checked here.
TEST(CliTestbed, UpStatusDown) {
  if (const std::string why = validation::testbed_unavailable(); !why.empty()) {
    GTEST_SKIP() << "no testbed on this machine: " << why;
  }
  const std::string cluster = "testbed-cpu-3m";
  auto up = run_cli("testbed up " + cluster);
  ASSERT_EQ(up.code, 0) << up.err;
  EXPECT_NE((up.out + up.err).find("3 machines, 6 ranks"), std::string::npos) << up.err;
  auto st = run_cli("testbed status " + cluster + " --json");
  auto down = run_cli("testbed down");
  ASSERT_EQ(st.code, 0) << st.err;
  EXPECT_EQ(down.code, 0) << down.err;
  const json j = json::parse(st.out);
  EXPECT_EQ(j["cluster"], cluster);
  EXPECT_GT(j["one_core_gflops"].get<double>(), 0);
  ASSERT_EQ(j["links"].size(), 3u);  // m0-m1, m0-m2, m1-m2
  std::map<std::string, double> rate;
  for (const auto& l : j["links"]) {
    rate[l["from"].get<std::string>() + "-" + l["to"].get<std::string>()] = l["expected_Mbps"];
    EXPECT_GT(l["throughput_Mbps"].get<double>(), 0) << l.dump();
    EXPECT_GT(l["latency_us"].get<double>(), 0) << l.dump();
  }
  EXPECT_EQ(rate, (std::map<std::string, double>{{"m0-m1", 1000}, {"m0-m2", 200}, {"m1-m2", 200}}));
  ASSERT_EQ(j["ranks"].size(), 6u);
  for (const auto& r : j["ranks"]) {
    const double share = r["type"] == "cpu-40" ? 0.4 : 0.2;
    EXPECT_DOUBLE_EQ(r["share"].get<double>(), share) << r.dump();
    EXPECT_GT(r["gflops"].get<double>(), 0) << r.dump();
  }
  auto gone = run_cli("testbed status " + cluster);
  EXPECT_EQ(gone.code, 2);
  EXPECT_NE(gone.err.find("is not up: run hexisim testbed up " + cluster), std::string::npos)
      << gone.err;
}

}  // namespace
}  // namespace hexi::testing
