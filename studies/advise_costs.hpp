#pragma once
// What a mix of machines costs and what one token costs on it: plain arithmetic over the
// price book, checked by hand in advise_test.cpp.
//
//   bought machine (purchase)  capex = GPUs x purchase_usd + server_usd + network_usd
//                              $/h   = capex / (amortization_years x 8 766 h) + energy
//   rented machine (cloud)     $/h   = GPUs x cloud_usd_per_hour (power included)
//   owned machine              $/h   = energy (the hardware is paid for)
//   energy                     $/h   = W / 1 000 x usd_per_kwh
//   W (at the wall)            = (GPUs x tdp_watts + host_watts) x pue, every machine
//                                (rented ones too: their energy is in the price, but it is
//                                still spent per token)
// and per point, at T tokens/s: $/M tokens = $/h / (T x 3 600 / 1e6), J/token = W / T,
// days to train = tokens / T / 86 400, cost to train = $/h x hours to train. GPUs are
// counted at their TDP: an upper bound on the power a training run draws.

#include <optional>
#include <vector>

#include "studies/advise_request.hpp"

namespace hexi {
inline namespace studies {

struct MixCost {
  double capex_usd = 0;     // machines bought (purchase pricing); 0 when renting
  double usd_per_hour = 0;  // running cost, amortisation or rent + energy
  double watts = 0;         // at the wall, PUE included

  MixCost& operator+=(const MixCost& o);
};
MixCost operator*(int n, const MixCost& c);

// The cost axis of the Pareto front and of the budget: capex (purchase) or $/h (cloud).
double cost_axis(Pricing pricing, const MixCost& c);

// Costs are linear in machine counts: a mix costs what is owned plus, per type, its
// bought (or rented) machines times one machine's cost.
struct CostTable {
  MixCost owned;                     // every owned machine
  std::vector<MixCost> per_machine;  // one more machine of each type, bought or rented

  MixCost of(const std::vector<int>& buy) const;  // machines bought per type
};
CostTable cost_table(const AdviseRequest& r);

struct PointMetrics {
  double usd_per_m_tokens = 0;
  double joules_per_token = 0;
  std::optional<double> days_to_train;      // with workload.tokens
  std::optional<double> cost_to_train_usd;  // with workload.tokens
  std::optional<bool> meets_target;         // with a throughput target
};
// The metrics of a mix that trains at `tokens_per_s` (> 0).
PointMetrics point_metrics(const MixCost& cost, double tokens_per_s, const Workload& workload);

// Break-even: the factor on the prices of the machines a mix buys (or rents) at which, training
// at `tokens_per_s`, its $/M tokens would equal `usd_per_m_tokens` (energy and owned machines
// as they are): 1 matches it already, 0.8 needs the machines 20 % cheaper, above 1 has room;
// and what those machines would then cost on the cost axis (capex, or their rent in $/h).
// None when the mix buys nothing, or when free machines would still cost more per token.
struct BreakEven {
  double factor = 0;
  double cost = 0;
};
std::optional<BreakEven> break_even(const AdviseRequest& r, const CostTable& t,
                                    const std::vector<int>& buy, double tokens_per_s,
                                    double usd_per_m_tokens);

}  // namespace studies
}  // namespace hexi
