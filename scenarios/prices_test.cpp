#include "scenarios/prices.hpp"

#include <gtest/gtest.h>

#include "topologies/testing.hpp"

namespace hexi {
namespace {

using testing::shipped_gpus;

Result<PriceBook> parse_prices(const std::string& text) {
  auto json = parse_json_text(text, "p.json");
  if (!json) return json.error();
  return price_book_from_json(*json, "p.json", shipped_gpus());
}

const char* kBook = R"({"version": 1, "name": "b", "date": "2026-01-02",
  "energy": {"usd_per_kwh": {"value": 0.1, "source": "s"}, "pue": {"value": 1.5, "source": "s"}},
  "machine": {"network_usd": {"value": 1000, "source": "s"},
              "server_usd": {"value": 10000, "source": "s"},
              "host_watts": {"value": 500, "source": "s"},
              "amortization_years": {"value": 4, "source": "s"}},
  "gpus": [{"gpu": "H100", "purchase_usd": {"value": 20000, "source": "s"},
            "server_usd": {"value": 40000, "source": "s"},
            "tdp_watts": {"value": 700, "source": "s"}},
           {"gpu": "4090", "cloud_usd_per_hour": {"value": 0.5, "source": "s"},
            "purchase_usd": {"value": 1500, "source": "s"},
            "tdp_watts": {"value": 450, "source": "s"}}]})";

TEST(PriceBook, EveryShippedBookLoadsWithASourceForEveryNumber) {
  const auto names = shipped_price_books();
  ASSERT_FALSE(names.empty());
  for (const auto& n : names) {
    auto b = load_price_book(n, shipped_gpus());
    ASSERT_TRUE(b.ok()) << b.error().message;
    EXPECT_EQ(b->name, n);
    EXPECT_FALSE(b->usd_per_kwh.source.empty());
    for (const auto& g : b->gpus) EXPECT_FALSE(g.tdp_watts.source.empty()) << g.gpu;
  }
  // The types the issue asks for: H100, A100, and L40S or RTX 4090.
  auto b = load_price_book("public-2026-11", shipped_gpus());
  ASSERT_TRUE(b.ok());
  for (const char* gpu : {"H100-SXM", "A100-SXM-80GB", "L40S", "RTX4090"})
    EXPECT_NE(b->find(gpu), nullptr) << gpu;
}

// One H100 machine of 8 GPUs: 8 x 20 000 + its own 40 000 server + 1 000 network =
// 201 000 $; at the wall (8 x 700 + 500) x 1.5 = 9 150 W. An RTX 4090 machine takes the
// book's 10 000 $ server: 8 x 1 500 + 10 000 + 1 000 = 23 000 $.
TEST(PriceBook, MachinePriceAndPowerByHand) {
  auto b = parse_prices(kBook);
  ASSERT_TRUE(b.ok()) << b.error().message;
  const GpuPrice* h100 = b->find("H100-SXM");
  const GpuPrice* rtx = b->find("RTX4090");
  ASSERT_NE(h100, nullptr);
  ASSERT_NE(rtx, nullptr);  // aliases resolve to catalog names
  EXPECT_DOUBLE_EQ(b->machine_usd(*h100, 8), 201000);
  EXPECT_DOUBLE_EQ(b->machine_watts(*h100, 8), 9150);
  EXPECT_DOUBLE_EQ(b->machine_usd(*rtx, 8), 23000);
  EXPECT_FALSE(h100->cloud_usd_per_hour.has_value());
}

TEST(PriceBook, BadInputNamesFilePathAndExpectation) {
  const std::string good = kBook;
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  for (auto [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {with("\"2026-01-02\"", "\"Jan 2026\""), "p.json: /date: expected the date"},
           {with("{\"value\": 0.1, \"source\": \"s\"}", "0.1"),
            "p.json: /energy/usd_per_kwh: expected an object"},
           {with("{\"value\": 1.5, \"source\": \"s\"}", "{\"value\": 1.5, \"source\": \" \"}"),
            "p.json: /energy/pue/source: expected where the number comes from"},
           {with("{\"value\": 1.5, \"source\": \"s\"}", "{\"value\": 0.5, \"source\": \"s\"}"),
            "p.json: /energy/pue/value: expected a number in [1, 5]"},
           {with("\"gpu\": \"H100\"", "\"gpu\": \"H1000\""),
            "p.json: /gpus/0/gpu: expected a GPU type of the catalog"},
           {with("\"gpu\": \"4090\"", "\"gpu\": \"H100-SXM\""),
            "p.json: /gpus/1/gpu: GPU type \"H100-SXM\" is priced twice"},
           {with("\"tdp_watts\": {\"value\": 700", "\"tdp_watt\": {\"value\": 700"),
            "p.json: /gpus/0: unknown field \"tdp_watt\""},
       }) {
    auto b = parse_prices(text);
    ASSERT_FALSE(b.ok()) << expected;
    EXPECT_EQ(b.error().kind, ErrorKind::kBadInput);
    EXPECT_NE(b.error().message.find(expected), std::string::npos) << b.error().message;
  }
  auto missing = load_price_book("no-such-book", shipped_gpus());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("shipped price books: public-2026-11"), std::string::npos)
      << missing.error().message;
}

}  // namespace
}  // namespace hexi
