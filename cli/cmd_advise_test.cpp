// `hexisim advise` end to end: the table and the JSON contract, the same bytes twice, exit
// code 2 naming the file, JSON path and expectation for bad input.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/cli_runner.hpp"

namespace hexi::testing {
namespace {

using nlohmann::json;

// Llama-2 7B on an owned 4-GPU A100 machine; up to one 4-GPU H100 and two 4-GPU RTX 4090
// machines may be bought: 6 mixes, seconds to plan them all.
const char* kRequest = R"({"version": 1, "name": "small",
  "model": "llama2-7b", "training": {"global_batch": 32, "seq_len": 2048},
  "prices": "public-2026-11",
  "workload": {"tokens": 1e11, "tokens_per_s": 8000},
  "budget": {"capex_usd": 500000},
  "owned": [{"gpu": "A100-SXM-80GB", "gpus_per_machine": 4, "machines": 1}],
  "buy": [{"gpu": "H100-SXM", "gpus_per_machine": 4, "max_machines": 1},
          {"gpu": "RTX4090", "gpus_per_machine": 4, "max_machines": 2}],
  "search": {"simulate": 1}})";

TEST(CliAdvise, TableJsonAndTheSameBytesTwice) {
  auto dir = scratch_dir("advise");
  const auto file = dir / "a.json";
  write_text(file, kRequest);
  auto t1 = run_cli("advise " + file.string());
  ASSERT_EQ(t1.code, 0) << t1.err;
  for (const char* text : {"Pareto front", "Marginal value of adding to what is owned",
                           "the front is exact", "+1 H100-SXM x4", "+2 RTX4090 x4"}) {
    EXPECT_NE(t1.out.find(text), std::string::npos) << text << "\n" << t1.out;
  }
  EXPECT_NE(t1.err.find("hexisim: advise: "), std::string::npos);  // progress on stderr
  auto t2 = run_cli("advise " + file.string());
  EXPECT_EQ(t1.out, t2.out);

  auto j1 = run_cli("advise " + file.string() + " --json");
  ASSERT_EQ(j1.code, 0) << j1.err;
  auto j2 = run_cli("advise " + file.string() + " --json");
  EXPECT_EQ(j1.out, j2.out);
  json j = json::parse(j1.out);
  for (const char* key :
       {"request", "search", "front", "cheapest_meeting_target", "owned", "marginal", "evaluated"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_TRUE(j["search"]["complete"].get<bool>());
  ASSERT_FALSE(j["front"].empty());
  for (const auto& p : j["front"]) {
    for (const char* key :
         {"buy", "gpus", "capex_usd", "usd_per_hour", "tokens_per_s", "usd_per_m_tokens",
          "joules_per_token", "days_to_train", "plan_summary", "plan"})
      EXPECT_TRUE(p.contains(key)) << key;
  }
  int simulated = 0;  // search.simulate = 1: the cheapest point reaching the target
  for (const auto& p : j["front"]) simulated += p.contains("simulated_tokens_per_s");
  EXPECT_EQ(simulated, 1);
  ASSERT_FALSE(j["cheapest_meeting_target"].is_null());
  EXPECT_TRUE(j["cheapest_meeting_target"].contains("simulated_tokens_per_s"));
  ASSERT_EQ(j["marginal"].size(), 2u);  // one machine of each type that may be bought
  EXPECT_GT(j["marginal"][0]["delta_tokens_per_s"].get<double>(), 0);
  std::filesystem::remove_all(dir);
}

TEST(CliAdvise, BadInputExitsWithTwoNamingFileAndPath) {
  auto dir = scratch_dir("advise-bad");
  const auto file = dir / "a.json";
  std::string text = kRequest;
  text.replace(text.find("500000"), 6, "-5");
  write_text(file, text);
  auto r = run_cli("advise " + file.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(file.string() + ": /budget/capex_usd: expected a number in [0, "),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(r.out.empty());
  text = kRequest;
  text.replace(text.find("public-2026-11"), 14, "no-book");
  write_text(file, text);
  r = run_cli("advise " + file.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown price book \"no-book\""), std::string::npos) << r.err;
  r = run_cli("advise " + (dir / "missing.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("missing.json"), std::string::npos) << r.err;
  r = run_cli("advise " + file.string() + " --max-plans -1");
  EXPECT_EQ(r.code, 2);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hexi::testing
