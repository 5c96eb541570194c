// advise: cost arithmetic by hand, the tokens/s bound, the search against exhaustive
// planning (a fake evaluator on a larger grid, the real planner on a small one), marginal
// values, grouped planning, determinism and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "scenarios/testing.hpp"
#include "scheduler/cost/cost_model.hpp"
#include "scheduler/estimate/estimate.hpp"
#include "studies/advise_bound.hpp"
#include "studies/advise_costs.hpp"
#include "studies/advise_planner.hpp"
#include "studies/advise_request.hpp"
#include "studies/advise_search.hpp"
#include "topologies/paths.hpp"

namespace hexi {
namespace {

using testing::shipped_gpus;
using testing::shipped_models;

// A price book with round numbers: energy 0.10 $/kWh at PUE 1.5; per machine network
// 1 000 $, server 10 000 $ (H100: its own 40 000 $), host 500 W; written off over 4 years.
const char* kBook = R"({"version": 1, "name": "round", "date": "2026-01-01",
  "energy": {"usd_per_kwh": {"value": 0.1, "source": "s"}, "pue": {"value": 1.5, "source": "s"}},
  "machine": {"network_usd": {"value": 1000, "source": "s"},
              "server_usd": {"value": 10000, "source": "s"},
              "host_watts": {"value": 500, "source": "s"},
              "amortization_years": {"value": 4, "source": "s"}},
  "gpus": [{"gpu": "H100-SXM", "purchase_usd": {"value": 20000, "source": "s"},
            "server_usd": {"value": 40000, "source": "s"},
            "cloud_usd_per_hour": {"value": 2.0, "source": "s"},
            "tdp_watts": {"value": 700, "source": "s"}},
           {"gpu": "A100-SXM-80GB", "purchase_usd": {"value": 10000, "source": "s"},
            "cloud_usd_per_hour": {"value": 1.0, "source": "s"},
            "tdp_watts": {"value": 400, "source": "s"}},
           {"gpu": "RTX4090", "purchase_usd": {"value": 1500, "source": "s"},
            "cloud_usd_per_hour": {"value": 0.5, "source": "s"},
            "tdp_watts": {"value": 450, "source": "s"}},
           {"gpu": "L40S", "purchase_usd": {"value": 8000, "source": "s"},
            "cloud_usd_per_hour": {"value": 1.5, "source": "s"},
            "tdp_watts": {"value": 350, "source": "s"}}]})";

// `body` is the rest of an advise request (after "prices").
std::string request_text(const std::string& body) {
  return std::string(R"({"version": 1, "name": "t", "model": "llama2-7b",
    "training": {"global_batch": 32, "seq_len": 2048}, "prices": )") +
         kBook + ", " + body + "}";
}

Result<AdviseRequest> parse(const std::string& text) {
  auto json = parse_json_text(text, "a.json");
  if (!json) return json.error();
  return advise_from_json(*json, "a.json", shipped_gpus(), shipped_models());
}

AdviseRequest request(const std::string& body) {
  auto r = parse(request_text(body));
  if (!r) throw std::runtime_error(r.error().message);
  return std::move(*r);
}

// Purchase: one H100 machine costs 8 x 20 000 + 40 000 + 1 000 = 201 000 $ and draws
// (8 x 700 + 500) x 1.5 = 9 150 W, i.e. 0.915 $/h of energy; written off over 4 x 8 766 h,
// it costs 201 000 / 35 064 = 5.732375... $/h. The owned A100 machine costs its energy only:
// (8 x 400 + 500) x 1.5 = 5 550 W, 0.555 $/h. At 10 000 tokens/s the mix of both makes
// 36 M tokens an hour: (5.732375 + 0.915 + 0.555) / 36 $/M tokens, (9 150 + 5 550) / 10 000
// = 1.47 J/token, and 1e9 tokens take 1e5 s = 1.157 days and 27.78 h of that $/h.
TEST(AdviseCosts, PurchaseByHand) {
  const AdviseRequest r = request(R"(
    "workload": {"tokens": 1e9, "tokens_per_s": 20000}, "budget": {"capex_usd": 1e6},
    "buy": [{"gpu": "H100", "max_machines": 2}],
    "owned": [{"gpu": "A100", "machines": 1}])");
  const CostTable t = cost_table(r);
  const MixCost c = t.of({1, 0});
  const double amortised = 201000.0 / (4 * 8766.0);
  EXPECT_DOUBLE_EQ(c.capex_usd, 201000);
  EXPECT_DOUBLE_EQ(c.watts, 9150 + 5550);
  EXPECT_NEAR(c.usd_per_hour, amortised + 0.915 + 0.555, 1e-12);
  EXPECT_DOUBLE_EQ(cost_axis(Pricing::kPurchase, c), 201000);
  const PointMetrics m = point_metrics(c, 10000, r.workload);
  EXPECT_NEAR(m.usd_per_m_tokens, (amortised + 1.47) / 36.0, 1e-12);
  EXPECT_DOUBLE_EQ(m.joules_per_token, 1.47);
  ASSERT_TRUE(m.days_to_train && m.cost_to_train_usd && m.meets_target);
  EXPECT_DOUBLE_EQ(*m.days_to_train, 1e5 / 86400);
  EXPECT_NEAR(*m.cost_to_train_usd, (amortised + 1.47) * 1e5 / 3600, 1e-9);
  EXPECT_FALSE(*m.meets_target);  // 10 000 < 20 000
  // Owned alone: no capex, energy only.
  EXPECT_DOUBLE_EQ(t.of({0, 0}).capex_usd, 0);
  EXPECT_DOUBLE_EQ(t.of({0, 0}).usd_per_hour, 0.555);
}

// Cloud: renting the H100 machine costs 8 x 2 $/h = 16 $/h (power included), the owned A100
// machine 0.555 $/h of energy; both draw power per token.
TEST(AdviseCosts, CloudByHand) {
  const AdviseRequest r = request(R"(
    "workload": {"tokens_per_s": 1000}, "budget": {"usd_per_hour": 100},
    "buy": [{"gpu": "H100", "max_machines": 2}],
    "owned": [{"gpu": "A100", "machines": 1}])");
  const MixCost c = cost_table(r).of({2, 0});
  EXPECT_DOUBLE_EQ(c.capex_usd, 0);
  EXPECT_DOUBLE_EQ(c.usd_per_hour, 32 + 0.555);
  EXPECT_DOUBLE_EQ(c.watts, 2 * 9150 + 5550);
  EXPECT_DOUBLE_EQ(cost_axis(Pricing::kCloud, c), 32.555);
  EXPECT_FALSE(point_metrics(c, 500, r.workload).days_to_train.has_value());
}

// Break-even, by hand. Purchase (the H100 machine above: 5.732375 $/h written off + 0.915 $/h
// of energy, the owned A100 0.555 $/h): at 10 000 tokens/s, to cost 0.1 $/M tokens the mix
// may spend 3.6 $/h, of which 1.47 is energy, so the machine may cost (3.6 - 1.47) / 5.732375
// of its price. Cloud (two rented H100 machines, 32 $/h, the owned A100's energy 0.555 $/h): at
// 1 000 tokens/s and 5 $/M tokens, 18 $/h: (18 - 0.555) / 32. Nothing bought, or a target
// below the energy alone: none.
TEST(AdviseCosts, BreakEvenByHand) {
  const AdviseRequest buy = request(R"(
    "workload": {"tokens": 1e9}, "budget": {"capex_usd": 1e6},
    "buy": [{"gpu": "H100", "max_machines": 2}],
    "owned": [{"gpu": "A100", "machines": 1}])");
  const CostTable t = cost_table(buy);
  const auto f = break_even(buy, t, {1, 0}, 10000, 0.1);
  ASSERT_TRUE(f.has_value());
  EXPECT_NEAR(f->factor, (3.6 - 1.47) / (201000.0 / (4 * 8766.0)), 1e-12);
  EXPECT_NEAR(f->cost, f->factor * 201000, 1e-6);  // the machine's capex at break-even
  // At the mix's own $/M tokens the factor is 1.
  const double own = point_metrics(t.of({1, 0}), 10000, buy.workload).usd_per_m_tokens;
  EXPECT_NEAR(break_even(buy, t, {1, 0}, 10000, own)->factor, 1.0, 1e-12);
  EXPECT_FALSE(break_even(buy, t, {0, 0}, 10000, 0.1).has_value());
  EXPECT_FALSE(break_even(buy, t, {1, 0}, 10000, 0.04).has_value());  // 1.44 < 1.47 $/h
  const AdviseRequest rent = request(R"(
    "workload": {"tokens_per_s": 1000}, "budget": {"usd_per_hour": 100},
    "buy": [{"gpu": "H100", "max_machines": 2}],
    "owned": [{"gpu": "A100", "machines": 1}])");
  const auto g = break_even(rent, cost_table(rent), {2, 0}, 1000, 5);
  ASSERT_TRUE(g.has_value());
  EXPECT_NEAR(g->factor, (18 - 0.555) / 32, 1e-12);
  EXPECT_NEAR(g->cost, g->factor * 32, 1e-12);  // the rent in $/h at break-even
}

// The bound with a constant device model: every GEMM at 0.5 of peak, attention at 0.4, so
// best_efficiency is 0.5 and one GPU adds peak x 0.5 / F per token; F counts forward and
// backward of GEMMs and attention without recompute: 3x the model's forward FLOPs.
TEST(AdviseBound, ConstantProfileByHand) {
  const Model& m = *shipped_models().find("llama2-7b");
  TrainingConfig t;
  t.seq_len = 2048;
  t.global_batch = 8;
  EXPECT_NEAR(min_flops_per_token(m, t) * t.tokens_per_iteration(), model_flops(m, t),
              1e-9 * model_flops(m, t));
  Profile p;
  p.set_default(DeviceProfile::constant(0.5, 0.4, 0.8, 4e-6));
  const GpuSpec& h100 = *shipped_gpus().find("H100-SXM");
  EXPECT_DOUBLE_EQ(best_efficiency(p.device(h100), m), 0.5);
  EXPECT_NEAR(tokens_per_s_bound(h100, p, m, t), 989e12 * 0.5 / min_flops_per_token(m, t), 1e-6);
  // Pipeline plans: with shape terms off a kernel's time is overhead + max(compute, memory),
  // both linear in phi, so time(phi) / phi is least at phi = 1: the whole layer.
  double layer_s = 0;
  for (Block b : {Block::kAttention, Block::kMlp}) {
    layer_s +=
        kernels_time(block_forward(m, t, b, 1, 1.0), h100, p.device(h100)) +
        kernels_time(block_backward(m, t, b, 1, 1.0, Recompute::kNone), h100, p.device(h100));
  }
  EXPECT_NEAR(layer_tokens_per_s_bound(h100, p, m, t), 2048 / (32 * layer_s), 1e-6);
  EXPECT_LT(layer_tokens_per_s_bound(h100, p, m, t), tokens_per_s_bound(h100, p, m, t));
}

// A fake planner: a mix trains at a fixed share of its bound that shrinks with every GPU
// type it mixes (so the ranking by prediction is imperfect), or fails below 2 machines.
class FakeEvaluator : public MixEvaluator {
 public:
  FakeEvaluator(const AdviseRequest& r, const MixModel& m) : r_(r), m_(m) {}
  MixPlan plan(const std::vector<int>& n) override {
    ++calls;
    MixPlan p;
    double bound = 0;
    int machines = 0, types = 0;
    for (std::size_t i = 0; i < n.size(); ++i) {
      bound += n[i] * r_.types[i].gpus * m_.bound_per_gpu[i] * share(i);
      machines += n[i];
      types += n[i] > 0;
    }
    p.ok = machines >= 2;
    p.error = p.ok ? "" : "fewer than 2 machines";
    p.tokens_per_s = bound * (1.0 - 0.03 * (types - 1)) * (slow_when && n == *slow_when ? 0.1 : 1);
    p.summary = "fake";
    return p;
  }
  Json plan_json(const std::vector<int>&) override { return nullptr; }
  Result<double> simulate(const std::vector<int>&) override {
    return failure("fake: no simulator");
  }
  double share(std::size_t i) const { return 0.8 + 0.05 * static_cast<double>(i % 3); }

  int calls = 0;
  std::optional<std::vector<int>> slow_when;  // this mix is 10x slower

 private:
  const AdviseRequest& r_;
  const MixModel& m_;
};

// The front must be non-dominated, and equal to the front of planning every candidate.
void expect_same_front(const AdviseResult& a, const AdviseResult& b) {
  ASSERT_EQ(a.front.size(), b.front.size());
  for (std::size_t i = 0; i < a.front.size(); ++i) {
    const Point& p = a.evaluated[a.front[i]];
    const Point& q = b.evaluated[b.front[i]];
    EXPECT_EQ(p.buy, q.buy) << "front point " << i;
    EXPECT_DOUBLE_EQ(p.plan.tokens_per_s, q.plan.tokens_per_s);
  }
}

void expect_non_dominated(const AdviseResult& res) {
  for (int i : res.front) {
    const Point& p = res.evaluated[i];
    EXPECT_LE(p.plan.tokens_per_s, p.bound_tokens_per_s * (1 + 1e-12));
    for (const Point& q : res.evaluated) {
      if (!q.plan.ok || &q == &p) continue;
      const bool dominates =
          q.cost_axis <= p.cost_axis && q.plan.tokens_per_s >= p.plan.tokens_per_s &&
          (q.cost_axis < p.cost_axis || q.plan.tokens_per_s > p.plan.tokens_per_s);
      EXPECT_FALSE(dominates) << "front point at cost " << p.cost_axis << " beaten by one at "
                              << q.cost_axis;
    }
  }
}

const char* kGrid = R"(
    "workload": {"tokens": 1e12, "tokens_per_s": 30000}, "budget": {"capex_usd": 3e6},
    "buy": [{"gpu": "H100", "max_machines": 5}, {"gpu": "A100", "max_machines": 5},
            {"gpu": "RTX4090", "max_machines": 5}, {"gpu": "L40S", "max_machines": 5}],
    "search": {"max_plans": 2000, "simulate": 0)";

TEST(AdviseSearch, PrunedFrontEqualsExhaustiveWithFewerPlans) {
  const AdviseRequest pruned = request(std::string(kGrid) + "}");
  const AdviseRequest all = request(std::string(kGrid) + ", \"prune\": false}");
  const MixModel m = mix_model(pruned);
  FakeEvaluator fp(pruned, m), fa(all, m);
  const AdviseResult a = run_advise(pruned, m, fp);
  const AdviseResult b = run_advise(all, m, fa);
  EXPECT_EQ(a.stats.combinations, 6 * 6 * 6 * 6);
  EXPECT_TRUE(a.stats.complete);
  EXPECT_EQ(a.stats.open, 0);
  EXPECT_GT(a.stats.dominated, 0);
  EXPECT_EQ(b.stats.planned, b.stats.candidates);
  EXPECT_LT(a.stats.planned, b.stats.planned) << "pruning must save plans";
  EXPECT_EQ(a.stats.planned + a.stats.dominated + a.stats.presumed_no_plan, a.stats.candidates);
  expect_same_front(a, b);
  expect_non_dominated(a);
  // The brute-force optima: the fastest mix within the budget, and the cheapest reaching the
  // target, are the last front point and cheapest_meeting_target.
  const Point* fastest = nullptr;
  const Point* cheapest = nullptr;
  for (const Point& p : b.evaluated) {
    if (!p.plan.ok) continue;
    if (!fastest || p.plan.tokens_per_s > fastest->plan.tokens_per_s) fastest = &p;
    if (p.plan.tokens_per_s >= 30000 && (!cheapest || p.cost_axis < cheapest->cost_axis))
      cheapest = &p;
  }
  ASSERT_TRUE(fastest && cheapest && a.cheapest_meeting_target);
  EXPECT_EQ(a.evaluated[a.front.back()].buy, fastest->buy);
  EXPECT_DOUBLE_EQ(a.evaluated[*a.cheapest_meeting_target].cost_axis, cheapest->cost_axis);
}

TEST(AdviseSearch, BudgetOfPlansLeavesOpenCandidatesWithTheirMostPossibleGain) {
  const AdviseRequest r = request(
      R"("workload": {"tokens": 1e12}, "budget": {"capex_usd": 3e6},
         "buy": [{"gpu": "H100", "max_machines": 5}, {"gpu": "RTX4090", "max_machines": 20}],
         "search": {"max_plans": 3, "simulate": 0})");
  const MixModel m = mix_model(r);
  FakeEvaluator f(r, m);
  const AdviseResult a = run_advise(r, m, f);
  EXPECT_FALSE(a.stats.complete);
  EXPECT_GT(a.stats.open, 0);
  EXPECT_GT(a.stats.open_gain, 0);
  EXPECT_EQ(a.stats.planned + a.stats.dominated + a.stats.presumed_no_plan + a.stats.open,
            a.stats.candidates);
  // + the marginal mixes, + each type alone
  EXPECT_LE(a.stats.planned, 3 + a.stats.calibration_plans + 2 + 2);
}

// Each type alone at the most the limits allow is planned and shown even where the guided search
// plans nothing else (max_plans 0), and every point with a plan is on the front or names the
// cheapest front point that costs no more and plans at least as many tokens/s.
TEST(AdviseSearch, EachTypeAloneIsShownWithWhatDominatesIt) {
  const AdviseRequest r = request(
      R"("workload": {"tokens": 1e12}, "budget": {"capex_usd": 2.5e6},
         "buy": [{"gpu": "H100", "max_machines": 3}, {"gpu": "A100", "max_machines": 3},
                 {"gpu": "RTX4090", "max_machines": 40}],
         "search": {"max_plans": 0, "simulate": 0})");
  const MixModel m = mix_model(r);
  FakeEvaluator f(r, m);
  f.slow_when = std::vector<int>{3, 0, 0};  // H100 alone: slower than the cheaper A100 alone
  const AdviseResult a = run_advise(r, m, f);
  ASSERT_EQ(a.alone.size(), 3u);
  EXPECT_EQ(a.alone[0].buy, (std::vector<int>{3, 0, 0}));
  int dominated = 0;
  for (std::size_t t = 0; t < a.alone.size(); ++t) {
    const Point& p = a.alone[t];
    for (std::size_t i = 0; i < p.buy.size(); ++i) EXPECT_EQ(p.buy[i] > 0, i == t) << t;
    EXPECT_TRUE(p.candidate) << t;
    // The most machines within the budget: one more is over it, or beyond max_machines.
    std::vector<int> more = p.buy;
    ++more[t];
    const CostTable table = cost_table(r);
    EXPECT_TRUE(more[t] > r.types[t].max_buy ||
                cost_axis(r.budget.pricing, table.of(more)) > r.budget.limit)
        << t;
    ASSERT_TRUE(p.plan.ok) << p.plan.error;
    EXPECT_NE(p.on_front, p.dominated_by.has_value()) << t;
    dominated += p.dominated_by.has_value();
  }
  EXPECT_GT(dominated, 0) << "no type alone is dominated: the test checks little";
  auto on_front = [&](const std::vector<int>& buy) -> const Point* {
    for (int i : a.front) {
      if (a.evaluated[i].buy == buy) return &a.evaluated[i];
    }
    return nullptr;
  };
  std::vector<const Point*> all;
  for (const Point& p : a.evaluated) all.push_back(&p);
  for (const Point& p : a.alone) all.push_back(&p);
  for (const Point* p : all) {
    if (!p->plan.ok) continue;
    EXPECT_EQ(p->on_front, on_front(p->buy) != nullptr);
    if (!p->dominated_by) continue;
    const Point* q = on_front(*p->dominated_by);
    ASSERT_NE(q, nullptr) << "dominated by a point not on the front";
    EXPECT_LE(q->cost_axis, p->cost_axis);
    EXPECT_GE(q->plan.tokens_per_s, p->plan.tokens_per_s);
    for (int i : a.front) {  // the cheapest such front point
      const Point& o = a.evaluated[i];
      if (o.plan.tokens_per_s >= p->plan.tokens_per_s) {
        EXPECT_GE(o.cost_axis, q->cost_axis);
      }
    }
  }
}

// Adding a machine normally adds tokens/s; the value is negative when the larger mix plans
// slower (HexiScale uses every GPU), and the row says so.
TEST(AdviseSearch, MarginalValueSign) {
  const AdviseRequest r = request(
      R"("workload": {"tokens": 1e12}, "budget": {"capex_usd": 3e6},
         "buy": [{"gpu": "H100", "max_machines": 2}, {"gpu": "RTX4090", "max_machines": 8}],
         "owned": [{"gpu": "A100", "machines": 2}],
         "marginal": [{"gpu": "H100", "machines": 1}, {"gpu": "RTX4090", "machines": 4}],
         "search": {"max_plans": 0, "simulate": 0})");
  const MixModel m = mix_model(r);
  FakeEvaluator f(r, m);
  f.slow_when = std::vector<int>{0, 4, 2};
  const AdviseResult a = run_advise(r, m, f);
  ASSERT_TRUE(a.owned && a.owned->plan.ok);
  ASSERT_EQ(a.marginal.size(), 2u);
  EXPECT_EQ(a.marginal[0].add.machines, 1);
  EXPECT_GT(a.marginal[0].delta_tokens_per_s, 0);
  EXPECT_NEAR(a.marginal[0].delta_tokens_per_s,
              a.marginal[0].point.plan.tokens_per_s - a.owned->plan.tokens_per_s, 1e-9);
  EXPECT_DOUBLE_EQ(a.marginal[0].delta_cost, 201000);
  EXPECT_LT(a.marginal[1].delta_tokens_per_s, 0);
  const Json j = to_json(r, a);
  EXPECT_GT(j["marginal"][0]["tokens_per_s_per_usd"].get<double>(), 0);
  EXPECT_LT(j["marginal"][1]["tokens_per_s_per_usd"].get<double>(), 0);
}

// The real planner (HexiScale, the closed form, SimGrid for the front) on a small grid:
// pruned and exhaustive agree, every plan stays under the bound, the output is the same bytes
// twice.
TEST(AdvisePlanner, SmallGridAgainstExhaustiveAndDeterministic) {
  const std::string body = R"(
    "workload": {"tokens": 1e11, "tokens_per_s": 5000}, "budget": {"capex_usd": 1e6},
    "buy": [{"gpu": "H100", "gpus_per_machine": 4, "max_machines": 1},
            {"gpu": "A100", "gpus_per_machine": 4, "max_machines": 1},
            {"gpu": "RTX4090", "gpus_per_machine": 4, "max_machines": 2}],
    "owned": [{"gpu": "A100", "gpus_per_machine": 4, "machines": 1}],
    "search": {"max_plans": 100, "simulate": 2)";
  const AdviseRequest pruned = request(body + "}");
  const AdviseRequest all = request(body + ", \"prune\": false}");
  const MixModel m = mix_model(pruned);
  MixPlanner p1(pruned, shipped_gpus()), p2(all, shipped_gpus());
  ASSERT_TRUE(p1.check_options().ok());
  const AdviseResult a = run_advise(pruned, m, p1);
  const AdviseResult b = run_advise(all, m, p2);
  EXPECT_TRUE(a.stats.complete);
  expect_same_front(a, b);
  expect_non_dominated(a);
  for (const Point& p : b.evaluated) {
    if (p.plan.ok) {
      EXPECT_LE(p.plan.tokens_per_s, p.bound_tokens_per_s) << p.plan.summary;
    }
  }
  ASSERT_FALSE(a.front.empty());
  const Point& first = a.evaluated[a.front.front()];
  ASSERT_TRUE(first.simulated_tokens_per_s) << first.simulation_note;
  EXPECT_NEAR(*first.simulated_tokens_per_s / first.plan.tokens_per_s, 1.0, 0.1);
  EXPECT_FALSE(first.plan_json.is_null());
  // Marginal: one more H100 machine to the owned A100 machine adds tokens/s.
  ASSERT_TRUE(a.owned && a.owned->plan.ok);
  ASSERT_EQ(a.marginal.size(), 3u);
  EXPECT_GT(a.marginal[0].delta_tokens_per_s, 0);
  // Same request, fresh planner: the same bytes.
  MixPlanner p3(pruned, shipped_gpus());
  EXPECT_EQ(dump_json(to_json(pruned, a), 2),
            dump_json(to_json(pruned, run_advise(pruned, m, p3)), 2));
}

// A mix above search.plan_gpus is planned in groups whose plans, put together, are valid on
// the whole cluster and scored there (the groups' DP sync across machines included): the
// tokens/s reported is the estimate of that plan.
TEST(AdvisePlanner, GroupsPutTogetherAreOnePlanOfTheWholeMix) {
  const AdviseRequest r = request(R"(
    "workload": {"tokens": 1e11}, "budget": {"capex_usd": 1e7},
    "buy": [{"gpu": "H100", "gpus_per_machine": 4, "max_machines": 2},
            {"gpu": "RTX4090", "gpus_per_machine": 4, "max_machines": 2}],
    "search": {"plan_gpus": 8})");
  MixPlanner g(r, shipped_gpus());
  const MixPlan pg = g.plan({2, 2});
  ASSERT_TRUE(pg.ok) << pg.error;
  EXPECT_EQ(pg.groups, 2);
  EXPECT_EQ(pg.scheduler_runs, 1);  // two equal groups: one HexiScale run
  auto plan = plan_from_json(g.plan_json({2, 2}), "groups");
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  auto cluster = g.cluster({2, 2});
  ASSERT_TRUE(cluster.ok());
  EXPECT_EQ(plan->num_devices(), 16);
  EXPECT_TRUE(validate_plan(*plan, *cluster, r.model, r.training, "groups").ok());
  const Profile profile;
  EXPECT_DOUBLE_EQ(CostModel(*cluster, r.model, r.training, profile).estimate(*plan).tokens_per_s,
                   pg.tokens_per_s);
  const MixModel m = mix_model(r);
  EXPECT_LE(pg.tokens_per_s, 8 * (m.bound_per_gpu[0] + m.bound_per_gpu[1]));
  EXPECT_EQ(g.plan({2, 2}).scheduler_runs, 0);  // cached
  // search.verify 0: each mix's plan is the closed form's best, never below the one the
  // simulator re-ranked (which may trade closed-form tokens/s for simulated ones).
  AdviseRequest fast = r;
  fast.search.verify = 0;
  MixPlanner f(fast, shipped_gpus());
  const MixPlan pf = f.plan({2, 2});
  ASSERT_TRUE(pf.ok) << pf.error;
  EXPECT_GE(pf.tokens_per_s, pg.tokens_per_s * (1 - 1e-12));
}

TEST(AdviseRequest, EveryShippedExampleLoads) {
  int n = 0;
  for (const auto& name : json_stems(data_root() / "scenarios/advise")) {
    auto r = load_advise(data_root() / "scenarios/advise" / (name + ".json"), shipped_gpus(),
                         shipped_models());
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->name, name);
    MixPlanner p(*r, shipped_gpus());
    EXPECT_TRUE(p.check_options().ok());
    ++n;
  }
  EXPECT_GE(n, 2);
}

TEST(AdviseRequest, BadInputNamesFilePathAndExpectation) {
  const std::string buy = R"("buy": [{"gpu": "H100", "max_machines": 2}])";
  const std::string ok = R"("workload": {"tokens": 1e9}, "budget": {"capex_usd": 1e6}, )";
  for (
      auto [body, expected] : std::vector<std::pair<std::string, std::string>>{
          {R"("workload": {"tokens": 1e9}, )" + buy,
           "a.json: /: missing required field \"budget\""},
          {R"("workload": {"tokens": 1e9}, "budget": {"capex_usd": 1, "usd_per_hour": 1}, )" + buy,
           "a.json: /budget: expected exactly one of"},
          {R"("workload": {}, "budget": {"capex_usd": 1e6}, )" + buy,
           "a.json: /workload: expected \"tokens\""},
          {R"("workload": {"tokens_per_s": 5, "days": 3}, "budget": {"capex_usd": 1e6}, )" + buy,
           "a.json: /workload/days: \"days\" needs \"tokens\""},
          {ok + R"("buy": [{"gpu": "H1000", "max_machines": 2}])",
           "a.json: /buy/0/gpu: expected a GPU type of the catalog"},
          {ok + R"("buy": [{"gpu": "A6000", "max_machines": 2}])",
           "a.json: /buy/0/gpu: GPU type \"A6000\" is not in price book \"round\""},
          {ok + R"("buy": [{"gpu": "H100", "max_machines": -1}])",
           "a.json: /buy/0/max_machines: expected an integer"},
          {ok +
               R"("buy": [{"gpu": "H100", "max_machines": 2}, {"gpu": "H100-SXM", "max_machines": 1}])",
           "a.json: /buy/1: machine type H100-SXM x8 is listed twice"},
          {ok + buy + R"(, "owned": [{"gpu": "A100", "machines": 0}])",
           "a.json: /owned/0/machines: expected an integer"},
          {ok + buy + R"(, "marginal": [{"gpu": "RTX4090", "machines": 1}])",
           "a.json: /marginal/0/gpu: RTX4090 x8 is not a machine type of \"buy\""},
          {ok + buy + R"(, "search": {"max_plan": 3})",
           "a.json: /search: unknown field \"max_plan\""},
          {ok + buy + R"(, "search": {"verify": 65})",
           "a.json: /search/verify: expected an integer in [0, 64], got 65"},
          {ok + R"("buy": [{"gpu": "H100", "gpus_per_machine": 1, "max_machines": 50000},
                             {"gpu": "RTX4090", "gpus_per_machine": 1, "max_machines": 50000}])",
           "a.json: /buy: 2500100001 combinations of machine counts"},
          {R"("workload": {"tokens": 1e9}, "budget": {"usd_per_hour": 10}, )" + buy +
               R"(, "owned": [{"gpu": "L40S", "machines": 1}, {"gpu": "L40S", "machines": 2}])",
           "a.json: /owned/1: machine type L40S x8 is owned twice"},
      }) {
    auto r = parse(request_text(body));
    ASSERT_FALSE(r.ok()) << expected;
    EXPECT_EQ(r.error().kind, ErrorKind::kBadInput);
    EXPECT_NE(r.error().message.find(expected), std::string::npos) << r.error().message;
  }
  // HexiScale's options are checked before any planning.
  const AdviseRequest r = request(ok + buy + R"(, "search": {"scheduler_options": {"tau": 0}})");
  MixPlanner p(r, shipped_gpus());
  const Status st = p.check_options();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("a.json (search.scheduler_options): /tau"), std::string::npos)
      << st.error().message;
}

}  // namespace
}  // namespace hexi
