// hexisim estimate SCENARIO --plan FILE [--explain] [--json]: closed-form cost model of a plan.

#include <cmath>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/plan_report.hpp"
#include "scheduler/estimate/estimate.hpp"

namespace hexi::cli {
namespace {

struct EstimateOptions {
  ScenarioFlags scenario;  // SCENARIO, its parts, --profile
  std::string plan;
  bool explain = false;
  bool json = false;
};

int run_estimate(const EstimateOptions& opt) {
  auto sc = load_scenario_flags(opt.scenario);
  if (!sc) return report(sc.error());
  auto plan = load_checked_plan(*sc, opt.plan);
  if (!plan) return report(plan.error());
  CostModel model(sc->cluster, sc->model, sc->training, sc->profile);
  const Estimate est = model.estimate_with_range(*plan);
  // Input bounds keep every time finite; if one is not, say so rather than print "inf, fits".
  if (!std::isfinite(est.iteration_time_s) || !(est.iteration_time_s > 0)) {
    return report(failure("internal error: the estimated iteration time is " +
                          std::to_string(est.iteration_time_s) + " s (please report it)"));
  }
  if (opt.json) {
    Json out = est.to_json();
    out["scenario"] = sc->name;
    out["plan"] = to_json(*plan);
    print_json(out);
  } else {
    print_estimate_summary(*sc, est, opt.explain, std::cout);
    if (opt.explain) {
      print_plan_table(*sc, *plan, est, std::cout);
    } else {
      print_plan_outline(*plan, std::cout);
    }
    print_answer(*sc,
                 {est.iteration_time_s, est.tokens_per_s, est.mfu, std::nullopt,
                  static_cast<int>(est.devices.size()),
                  plan_file_text(*sc, opt.plan) + " (" + plan->scheduler + "), closed form"},
                 std::cout);
  }
  return 0;
}

}  // namespace

void add_estimate_command(CLI::App& app, Runner& run) {
  auto opt = std::make_shared<EstimateOptions>();
  auto* cmd = app.add_subcommand("estimate", "Evaluate a plan with the closed-form cost model");
  add_scenario_options(cmd, opt->scenario);
  cmd->add_option("--plan", opt->plan, "Plan file (default: the scenario's \"plan\")");
  cmd->add_flag("--explain", opt->explain,
                "Also print every stage (TP, layers, recompute, compute and communication time, "
                "memory headroom) and the FLOPs in every convention (MFU, HFU, Megatron-LM's "
                "formula)");
  cmd->add_flag("--json", opt->json, "Print one JSON object instead of tables");
  cmd->callback([&run, opt] { run = [opt] { return run_estimate(*opt); }; });
}

}  // namespace hexi::cli
