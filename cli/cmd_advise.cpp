// hexisim advise ADVISE.json [--json] [--max-plans N] [--simulate N]: what to buy (or rent):
// the Pareto front of tokens/s against cost over the mixes of machines a request allows,
// and the marginal value of each machine type added to what is owned (studies/advise_search.hpp).
// Progress goes to stderr; stdout is the same bytes for the same request.

#include <chrono>
#include <cmath>
#include <iostream>

#include "cli/commands.hpp"
#include "studies/advise_search.hpp"
#include "topologies/text.hpp"

namespace hexi::cli {
namespace {

struct AdviseOptions {
  std::string file;
  std::optional<int> max_plans;
  std::optional<int> simulate;
  bool json = false;
};

// Whole dollars, cents below $100 (hourly prices): "$1,234,568", "$2.15", "$0".
std::string money(double usd) {
  return "$" + grouped(usd, std::abs(usd) < 100 && usd != std::round(usd) ? 2 : 0);
}

std::string cost_text(const AdviseRequest& r, double cost) {
  return r.budget.pricing == Pricing::kPurchase ? money(cost) : money(cost) + "/h";
}

void print_header(const AdviseRequest& r, const AdviseResult& res, std::ostream& out) {
  const TrainingConfig& t = r.training;
  out << "advise " << r.name << ": " << r.model.name << ", global batch " << t.global_batch << " x "
      << t.seq_len << " tokens, planned with "
      << (r.long_context() ? "HexiSeq (long context)" : "HexiScale") << "\n";
  out << "prices: " << r.prices.name << " (" << r.prices.date << "), "
      << (r.budget.pricing == Pricing::kPurchase ? "buying at purchase prices; budget: capex <= "
                                                 : "renting at cloud prices; budget: <= ")
      << cost_text(r, r.budget.limit) << "\n";
  out << "workload: ";
  if (r.workload.tokens) out << format("%.3g", *r.workload.tokens) << " tokens to train";
  if (r.workload.tokens && r.workload.tokens_per_s) out << "; ";
  if (r.workload.tokens_per_s) out << "target " << grouped(*r.workload.tokens_per_s) << " tokens/s";
  out << "\nmachines:";
  for (std::size_t i = 0; i < r.types.size(); ++i) {
    const MachineType& m = r.types[i];
    out << (i ? ";" : "") << " " << m.label() << ": " << m.owned << " owned, up to " << m.max_buy
        << " more";
    if (i < res.phi.size() && !std::isnan(res.phi[i]))
      out << " (calibration " << fmt(res.phi[i], 2) << " of the bound)";
  }
  const AdviseStats& s = res.stats;
  out << "\nsearch: " << s.combinations << " combinations: " << s.candidates << " candidates ("
      << s.over_budget << " over budget, " << s.no_memory << " without the memory any plan needs); "
      << s.planned << " planned, " << s.dominated << " proven dominated by the bound, ";
  if (s.presumed_no_plan > 0)
    out << s.presumed_no_plan << " skipped (no more machines than a mix with no plan), ";
  out << s.open << " open";
  if (s.complete) {
    out << ": the front is exact";
  } else {
    out << " ("
        << (std::isfinite(s.open_gain)
                ? "an open mix could beat the front at its cost by at most " +
                      fmt(100 * s.open_gain, 1) + " %"
                : "some open mixes cost less than every planned mix with a plan")
        << "; raise search.max_plans, now " << r.search.max_plans << ")";
  }
  if (r.workload.tokens_per_s && s.target_open > 0) {
    out << "; " << s.target_open << " open could still reach the target for less than the "
        << "cheapest planned mix that does";
  }
  out << "; " << s.calibration_plans << " calibration plans, " << s.scheduler_runs
      << " scheduler runs\n\n";
}

// "$203,000 (x0.72)": the added machines' price at break-even; "-" without one.
std::string break_even_text(const Point& p) {
  if (!p.break_even) return "-";
  return money(p.break_even->cost) + " (x" + fmt(p.break_even->factor, 2) + ")";
}

void print_front(const AdviseRequest& r, const AdviseResult& res, std::ostream& out) {
  if (res.front.empty()) {
    out << "no candidate mix has a plan: raise the budget or the max_machines\n";
    return;
  }
  const bool purchase = r.budget.pricing == Pricing::kPurchase;
  out << "Pareto front: tokens/s against " << (purchase ? "capex" : "$/h") << ", cheapest first\n";
  // Columns: the cost axis, $/h too when buying, SimGrid's tokens/s when anything was
  // simulated (HexiSeq layouts are not).
  bool simulated = false;
  for (int i : res.front) simulated = simulated || res.evaluated[i].simulated_tokens_per_s;
  std::vector<std::string> head = {"added", "GPUs", purchase ? "capex" : "$/h"};
  if (purchase) head.push_back("$/h");
  head.push_back("tokens/s");
  if (simulated) head.push_back("simulated");
  for (const char* h : {"$/M tokens", "break-even", "J/token", "days to train", "plan"}) {
    head.push_back(h);
  }
  Table t(head);
  for (int i : res.front) {
    const Point& p = res.evaluated[i];
    const PointMetrics& m = p.metrics;
    std::vector<std::string> row = {buy_label(r, p.buy), std::to_string(p.gpus),
                                    money(purchase ? p.cost.capex_usd : p.cost.usd_per_hour)};
    if (purchase) row.push_back(money(p.cost.usd_per_hour));
    row.push_back(grouped(p.plan.tokens_per_s));
    if (simulated)
      row.push_back(p.simulated_tokens_per_s ? grouped(*p.simulated_tokens_per_s) : "-");
    row.push_back(fmt(m.usd_per_m_tokens, 3));
    row.push_back(break_even_text(p));
    row.push_back(fmt(m.joules_per_token, 3));
    row.push_back(m.days_to_train ? fmt(*m.days_to_train, 1) : "-");
    row.push_back(p.plan.summary);
    t.add(std::move(row));
  }
  t.print(out);
  out << "  $/h: "
      << (purchase ? "purchases written off over " + fmt(r.prices.amortization_years.value, 1) +
                         " years + energy of every machine"
                   : "rent (power included) + energy of owned machines")
      << "; J/token at the wall (GPUs at TDP, hosts, PUE " << fmt(r.prices.pue.value, 2) << ")"
      << (simulated ? "; simulated: SimGrid, stage fidelity" : "") << "\n"
      << "  break-even: what the machines added would have to cost for the mix to match the "
         "winner's $/M tokens (the lowest of the mixes that buy and reach the target; x: of "
         "today's "
      << (purchase ? "prices" : "rents") << ")\n";
  if (r.workload.tokens_per_s) {
    if (res.cheapest_meeting_target) {
      const Point& p = res.evaluated[*res.cheapest_meeting_target];
      out << "cheapest mix reaching " << grouped(*r.workload.tokens_per_s)
          << " tokens/s: " << buy_label(r, p.buy) << " (" << p.gpus
          << " GPUs): " << cost_text(r, p.cost_axis) << ", " << grouped(p.plan.tokens_per_s)
          << " tokens/s\n";
    } else {
      out << "no planned mix reaches " << grouped(*r.workload.tokens_per_s) << " tokens/s\n";
    }
  }
}

// A point against the front: "on the front", "dominated by +1 H100-SXM x8", or why no plan.
std::string verdict_text(const AdviseRequest& r, const Point& p) {
  if (!p.plan.ok) return "no plan: " + p.plan.error;
  if (p.on_front) return "on the front";
  if (p.dominated_by) return "dominated by " + buy_label(r, *p.dominated_by);
  return "beyond the limits";
}

// Each machine type that may be bought, alone at the most the limits allow: shown whether or
// not the search planned it, with what dominates it.
void print_types_alone(const AdviseRequest& r, const AdviseResult& res, std::ostream& out) {
  if (res.alone.empty()) return;
  const bool purchase = r.budget.pricing == Pricing::kPurchase;
  out << "\nEach type alone (the most machines the budget and max_machines allow)\n";
  Table t({"added", "GPUs", purchase ? "capex" : "$/h", "tokens/s", "$/M tokens", "break-even",
           "against the front"});
  for (const Point& p : res.alone) {
    t.add({buy_label(r, p.buy), std::to_string(p.gpus),
           money(purchase ? p.cost.capex_usd : p.cost.usd_per_hour),
           p.plan.ok ? grouped(p.plan.tokens_per_s) : "-",
           p.plan.ok ? fmt(p.metrics.usd_per_m_tokens, 3) : "-", break_even_text(p),
           verdict_text(r, p)});
  }
  t.print(out);
}

void print_marginal(const AdviseRequest& r, const AdviseResult& res, std::ostream& out) {
  if (res.marginal.empty()) return;
  const bool purchase = r.budget.pricing == Pricing::kPurchase;
  out << "\nMarginal value of adding to what is owned";
  if (res.owned && res.owned->plan.ok) {
    out << " (" << res.owned->gpus << " GPUs: " << grouped(res.owned->plan.tokens_per_s)
        << " tokens/s, " << fmt(res.owned->metrics.usd_per_m_tokens, 3) << " $/M tokens)";
  } else if (res.owned) {
    out << " (" << res.owned->gpus << " GPUs: no plan on their own)";
  } else {
    out << " (nothing)";
  }
  out << "\n";
  Table t({"add", purchase ? "+capex" : "+$/h", "tokens/s", "+tokens/s",
           purchase ? "+tokens/s per $1M" : "+tokens/s per $/h", "$/M tokens", "J/token",
           "break-even", "days to train", "within limits", "against the front"});
  for (const MarginalRow& m : res.marginal) {
    const Point& p = m.point;
    const double per = purchase ? 1e6 : 1.0;
    t.add({buy_label(r, p.buy), cost_text(r, m.delta_cost),
           p.plan.ok ? grouped(p.plan.tokens_per_s) : "no plan",
           p.plan.ok ? (m.delta_tokens_per_s >= 0 ? "+" : "") + grouped(m.delta_tokens_per_s) : "-",
           p.plan.ok && m.delta_cost > 0 ? grouped(m.delta_tokens_per_s / m.delta_cost * per) : "-",
           p.plan.ok ? fmt(p.metrics.usd_per_m_tokens, 3) : "-",
           p.plan.ok ? fmt(p.metrics.joules_per_token, 3) : "-", break_even_text(p),
           p.plan.ok && p.metrics.days_to_train ? fmt(*p.metrics.days_to_train, 1) : "-",
           p.candidate ? "yes" : "no", p.plan.ok ? verdict_text(r, p) : "-"});
  }
  t.print(out);
}

int run_advise_command(const AdviseOptions& opt) {
  const auto start = std::chrono::steady_clock::now();
  auto catalogs = load_shipped_catalogs();
  if (!catalogs) return report(catalogs.error());
  auto request = load_advise(opt.file, catalogs->gpus, catalogs->models);
  if (!request) return report(request.error());
  if (opt.max_plans) request->search.max_plans = *opt.max_plans;
  if (opt.simulate) request->search.simulate = *opt.simulate;
  MixPlanner planner(*request, catalogs->gpus);
  if (auto st = planner.check_options(); !st) return report(st.error());
  const AdviseResult res =
      run_advise(*request, mix_model(*request), planner,
                 [](const std::string& line) { std::cerr << "hexisim: advise: " << line << "\n"; });
  if (opt.json) {
    print_json(to_json(*request, res));
  } else {
    print_header(*request, res, std::cout);
    print_front(*request, res, std::cout);
    print_types_alone(*request, res, std::cout);
    print_marginal(*request, res, std::cout);
  }
  std::cerr << "hexisim: advise: done in "
            << fmt(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                   1)
            << " s\n";
  return 0;
}

}  // namespace

void add_advise_command(CLI::App& app, Runner& run) {
  auto opt = std::make_shared<AdviseOptions>();
  auto* cmd = app.add_subcommand(
      "advise",
      "What to buy or rent: the Pareto front of tokens/s against cost over the GPU mixes an "
      "advise file allows, and the marginal value of each machine type (see README \"Advise\")");
  cmd->add_option("ADVISE", opt->file, "Advise request file (examples: scenarios/advise/)")
      ->required();
  cmd->add_option("--max-plans", opt->max_plans,
                  "Mixes the guided search plans at most (default: the file's search.max_plans, "
                  "else 24)")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--simulate", opt->simulate,
                  "Front points simulated with SimGrid, the cheapest reaching the target first, "
                  "then spread along the front (default: the file's "
                  "search.simulate, else 6)")
      ->check(CLI::Range(0, 1000));
  cmd->add_flag("--json", opt->json,
                "Print one JSON object (request, search, front, cheapest_meeting_target, owned, "
                "marginal, types_alone, evaluated)");
  cmd->callback([&run, opt] { run = [opt] { return run_advise_command(*opt); }; });
}

}  // namespace hexi::cli
