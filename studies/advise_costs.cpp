#include "studies/advise_costs.hpp"

namespace hexi {
inline namespace studies {

MixCost& MixCost::operator+=(const MixCost& o) {
  capex_usd += o.capex_usd;
  usd_per_hour += o.usd_per_hour;
  watts += o.watts;
  return *this;
}

MixCost operator*(int n, const MixCost& c) {
  return {n * c.capex_usd, n * c.usd_per_hour, n * c.watts};
}

double cost_axis(Pricing pricing, const MixCost& c) {
  return pricing == Pricing::kPurchase ? c.capex_usd : c.usd_per_hour;
}

MixCost CostTable::of(const std::vector<int>& buy) const {
  MixCost c = owned;
  for (std::size_t i = 0; i < buy.size() && i < per_machine.size(); ++i)
    c += buy[i] * per_machine[i];
  return c;
}

CostTable cost_table(const AdviseRequest& r) {
  const PriceBook& b = r.prices;
  CostTable t;
  for (const MachineType& m : r.types) {
    const double watts = b.machine_watts(m.price, m.gpus);
    t.owned += m.owned * MixCost{0, b.energy_usd_per_hour(watts), watts};
    if (r.budget.pricing == Pricing::kPurchase) {
      t.per_machine.push_back(
          {b.machine_usd(m.price, m.gpus), b.machine_owned_usd_per_hour(m.price, m.gpus), watts});
    } else {
      t.per_machine.push_back({0, b.machine_rent_usd_per_hour(m.price, m.gpus), watts});
    }
  }
  return t;
}

PointMetrics point_metrics(const MixCost& cost, double tokens_per_s, const Workload& w) {
  PointMetrics m;
  m.usd_per_m_tokens = cost.usd_per_hour / (tokens_per_s * 3600.0 / 1e6);
  m.joules_per_token = cost.watts / tokens_per_s;
  if (w.tokens) {
    const double seconds = *w.tokens / tokens_per_s;
    m.days_to_train = seconds / 86400.0;
    m.cost_to_train_usd = cost.usd_per_hour * seconds / 3600.0;
  }
  if (w.tokens_per_s) m.meets_target = tokens_per_s >= *w.tokens_per_s;
  return m;
}

std::optional<BreakEven> break_even(const AdviseRequest& r, const CostTable& t,
                                    const std::vector<int>& buy, double tokens_per_s,
                                    double usd_per_m_tokens) {
  // $/h split into what scales with the machines' prices and what does not; their cost.
  double priced = 0, fixed = t.owned.usd_per_hour, axis = 0;
  for (std::size_t i = 0; i < buy.size() && i < t.per_machine.size(); ++i) {
    if (buy[i] == 0) continue;
    const MixCost m = buy[i] * t.per_machine[i];
    const double energy =
        r.budget.pricing == Pricing::kPurchase ? r.prices.energy_usd_per_hour(m.watts) : 0.0;
    priced += m.usd_per_hour - energy;
    fixed += energy;
    axis += cost_axis(r.budget.pricing, m);
  }
  if (priced <= 0 || tokens_per_s <= 0) return std::nullopt;
  const double affordable = usd_per_m_tokens * tokens_per_s * 3600.0 / 1e6;  // $/h
  if (affordable <= fixed) return std::nullopt;
  const double factor = (affordable - fixed) / priced;
  return BreakEven{factor, factor * axis};
}

}  // namespace studies
}  // namespace hexi
