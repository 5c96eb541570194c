// The --json answer of `hexisim advise` (the contract: README "Advise"). No wall-clock
// times: the same request gives the same bytes.

#include <cmath>

#include "studies/advise_search.hpp"

namespace hexi {
inline namespace studies {
namespace {

// A double, or null when it is not finite (JSON has no infinity).
Json number(double v) {
  return std::isfinite(v) ? Json(v) : Json(nullptr);
}

template <class T>
Json optional(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}

Json counts(const AdviseRequest& r, const std::vector<int>& n) {
  Json j = Json::object();
  for (std::size_t i = 0; i < n.size(); ++i) {
    if (n[i] > 0) j[r.types[i].label()] = n[i];
  }
  return j;
}

Json point_json(const AdviseRequest& r, const Point& p) {
  Json j = {{"buy", counts(r, p.buy)},
            {"machines", counts(r, p.machines)},
            {"gpus", p.gpus},
            {"capex_usd", p.cost.capex_usd},
            {"usd_per_hour", p.cost.usd_per_hour},
            {"watts", p.cost.watts},
            {"cost", p.cost_axis},
            {"bound_tokens_per_s", p.bound_tokens_per_s},
            {"planned", p.plan.ok}};
  if (!p.plan.ok) {
    j["error"] = p.plan.error;
    return j;
  }
  j["tokens_per_s"] = p.plan.tokens_per_s;
  j["usd_per_m_tokens"] = p.metrics.usd_per_m_tokens;
  j["joules_per_token"] = p.metrics.joules_per_token;
  j["days_to_train"] = optional(p.metrics.days_to_train);
  j["cost_to_train_usd"] = optional(p.metrics.cost_to_train_usd);
  j["meets_target"] = optional(p.metrics.meets_target);
  if (p.break_even) j["break_even_price_factor"] = p.break_even->factor;
  j["on_front"] = p.on_front;
  j["dominated_by"] = p.dominated_by ? Json(buy_label(r, *p.dominated_by)) : Json(nullptr);
  j["plan_summary"] = p.plan.summary;
  j["plan_groups"] = p.plan.groups;
  if (p.simulated_tokens_per_s) {
    j["simulated_tokens_per_s"] = *p.simulated_tokens_per_s;
  } else if (!p.simulation_note.empty()) {
    j["simulation_note"] = p.simulation_note;
  }
  if (!p.plan_json.is_null()) j["plan"] = p.plan_json;
  return j;
}

Json request_json(const AdviseRequest& r, const AdviseResult& res) {
  Json types = Json::array();
  for (std::size_t i = 0; i < r.types.size(); ++i) {
    const MachineType& t = r.types[i];
    Json j = {{"machine", t.label()},
              {"gpu", t.gpu.name},
              {"gpus_per_machine", t.gpus},
              {"owned", t.owned},
              {"max_buy", t.max_buy}};
    if (i < res.phi.size()) j["calibration"] = number(res.phi[i]);
    types.push_back(std::move(j));
  }
  return {{"name", r.name},
          {"model", r.model.name},
          {"training", to_json(r.training)},
          {"planner", r.long_context() ? "hexiseq" : "hexiscale"},
          {"prices", {{"name", r.prices.name}, {"date", r.prices.date}}},
          {"pricing", r.budget.pricing == Pricing::kPurchase ? "purchase" : "cloud"},
          {"cost_axis", r.budget.pricing == Pricing::kPurchase ? "capex_usd" : "usd_per_hour"},
          {"budget", r.budget.limit},
          {"workload",
           {{"tokens", optional(r.workload.tokens)},
            {"tokens_per_s", optional(r.workload.tokens_per_s)}}},
          {"machine_types", types}};
}

Json stats_json(const AdviseStats& s) {
  return {{"combinations", s.combinations},
          {"over_budget", s.over_budget},
          {"no_memory", s.no_memory},
          {"candidates", s.candidates},
          {"planned", s.planned},
          {"dominated", s.dominated},
          {"presumed_no_plan", s.presumed_no_plan},
          {"open", s.open},
          {"open_gain", number(s.open_gain)},
          {"target_open", s.target_open},
          {"complete", s.complete},
          {"calibration_plans", s.calibration_plans},
          {"scheduler_runs", s.scheduler_runs}};
}

}  // namespace

Json to_json(const AdviseRequest& r, const AdviseResult& res) {
  Json out = {{"request", request_json(r, res)}, {"search", stats_json(res.stats)}};
  Json front = Json::array();
  for (int i : res.front) front.push_back(point_json(r, res.evaluated[i]));
  out["front"] = std::move(front);
  out["cheapest_meeting_target"] = res.cheapest_meeting_target
                                       ? point_json(r, res.evaluated[*res.cheapest_meeting_target])
                                       : Json(nullptr);
  out["owned"] = res.owned ? point_json(r, *res.owned) : Json(nullptr);
  Json marginal = Json::array();
  for (const MarginalRow& m : res.marginal) {
    Json j = {{"add", {{"machine", r.types[m.add.type].label()}, {"machines", m.add.machines}}},
              {"delta_cost", m.delta_cost},
              {"point", point_json(r, m.point)}};
    j["delta_tokens_per_s"] = m.point.plan.ok ? Json(m.delta_tokens_per_s) : Json(nullptr);
    if (m.point.plan.ok && m.delta_cost > 0) {
      j["tokens_per_s_per_usd"] = m.delta_tokens_per_s / m.delta_cost;
    }
    marginal.push_back(std::move(j));
  }
  out["marginal"] = std::move(marginal);
  Json alone = Json::array();
  for (const Point& p : res.alone) alone.push_back(point_json(r, p));
  out["types_alone"] = std::move(alone);
  Json evaluated = Json::array();
  for (const Point& p : res.evaluated) {
    Json j = point_json(r, p);
    j.erase("plan");
    evaluated.push_back(std::move(j));
  }
  out["evaluated"] = std::move(evaluated);
  return out;
}

}  // namespace studies
}  // namespace hexi
