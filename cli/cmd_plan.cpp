// hexisim plan SCENARIO [--scheduler NAME] [--seed N] [--out FILE] [--time-budget S]
//                       [--verify K] [--explain] [--compare] [--json]: searches a plan (the
//                       contract: README command table).

#include <iostream>
#include <map>

#include "cli/commands.hpp"
#include "cli/plan_report.hpp"
#include "scheduler/scheduler.hpp"
#include "studies/planning.hpp"

namespace hexi::cli {
namespace {

struct PlanOptions {
  ScenarioFlags scenario;  // SCENARIO, its parts, --profile
  std::string scheduler;   // default: the scenario's
  std::string options;     // scheduler options as JSON text (replace the scenario's)
  std::optional<std::uint64_t> seed;
  std::string out;
  double time_budget_s = 0;
  std::optional<int> verify;  // default: default_verify(scenario)
  bool explain = false;
  bool compare = false;
  bool json = false;
};

// Every scheduler the default plan compared: closed form, simulated, GPUs, time; the one
// returned marked.
void print_compared(const SearchResult& r) {
  std::cout << "schedulers compared (the plan returned: *):\n";
  Table t({"scheduler", "tokens/s", "simulated", "GPUs", "time s", "note"});
  for (const ComparedScheduler& c : r.compared) {
    if (!c.error.empty()) {
      t.add({"  " + c.scheduler, "-", "-", "-", fmt(c.search_time_s, 2), c.error});
      continue;
    }
    t.add({(c.scheduler == r.scheduler ? "* " : "  ") + c.scheduler, fmt(c.tokens_per_s, 0),
           c.simulated_tokens_per_s > 0 ? fmt(c.simulated_tokens_per_s, 0) : "-",
           std::to_string(c.gpus), fmt(c.search_time_s, 2), c.fits ? "" : "does not fit"});
  }
  t.print(std::cout);
}

// One line: the plan returned against the best other scheduler, by what decided.
void print_margin(const SearchResult& r) {
  const ComparedScheduler* self = nullptr;
  const ComparedScheduler* other = nullptr;
  bool simulated = true;
  for (const ComparedScheduler& c : r.compared) {
    if (c.error.empty()) simulated = simulated && c.simulated_tokens_per_s > 0;
  }
  auto score = [&](const ComparedScheduler& c) {
    return simulated ? c.simulated_tokens_per_s : c.tokens_per_s;
  };
  for (const ComparedScheduler& c : r.compared) {
    if (!c.error.empty()) continue;
    if (c.scheduler == r.scheduler) {
      self = &c;
    } else if (!other || score(c) > score(*other)) {
      other = &c;
    }
  }
  if (!self) return;
  std::cout << "best of " << r.compared.size() << " schedulers ("
            << (simulated ? "simulated" : "closed form") << "): " << r.scheduler << "'s plan";
  if (other) {
    std::cout << ", " << fmt(100.0 * (score(*self) / score(*other) - 1), 1) << " % over the next, "
              << other->scheduler << " (" << fmt(score(*other), 0) << " tokens/s)";
  }
  std::cout << (r.compared.size() > 1 ? " (--compare lists every one)" : "") << "\n";
}

// The GPUs the plan leaves idle, by type, and what the best plan on all of them gives.
void print_idle(const Scenario& sc, const SearchResult& r) {
  const Cluster& c = sc.cluster;
  std::vector<bool> used(c.num_devices(), false);
  for (const auto& p : r.plan.pipelines) {
    for (const auto& s : p.stages) {
      for (int d : s.devices) used[d] = true;
    }
  }
  std::map<std::string, int> idle;
  int total = 0;
  for (int d = 0; d < c.num_devices(); ++d) {
    if (used[d]) continue;
    ++idle[c.gpu_types()[c.machines()[c.devices()[d].machine].gpu_type].name];
    ++total;
  }
  if (total == 0) return;
  std::string list;
  for (const auto& [type, n] : idle)
    list += (list.empty() ? "" : ", ") + std::to_string(n) + " " + type;
  std::cout << "idle: the plan leaves " << total << " of " << c.num_devices() << " GPUs idle ("
            << list << "): using them slows the iteration";
  if (r.all_gpus) {
    const Plan& every = r.all_gpus->plan;
    std::cout << "; the best plan found on every GPU gives "
              << fmt(r.all_gpus->estimate.tokens_per_s, 0) << " tokens/s by the closed form ("
              << (every.comment.empty() ? every.scheduler + "'s plan" : every.comment) << ")";
  } else {
    std::cout << "; no plan on every GPU was found that fits";
  }
  std::cout << "\n";
}

void print_text(const Scenario& sc, const SearchResult& r, const PlanOptions& opt) {
  std::cout << "scheduler " << r.scheduler << ": " << r.candidates << " candidates in "
            << fmt(r.search_time_s, 2) << " s"
            << (r.budget_exhausted ? " (stopped by --time-budget)" : "") << "\n";
  if (!r.verified.empty()) {
    std::cout << "verified: " << r.verified.size() << " best plans by the closed form simulated at "
              << r.verified_fidelity << " fidelity in " << fmt(r.verify_time_s, 2)
              << " s; returned: the closed form's "
              << (r.verified[r.verified_chosen].rank == 0
                      ? std::string("best")
                      : "plan " + std::to_string(r.verified[r.verified_chosen].rank + 1))
              << ", " << fmt(r.verified[r.verified_chosen].simulated_tokens_per_s, 0)
              << " tokens/s simulated\n";
  }
  if (!r.compared.empty()) print_margin(r);
  if (opt.compare) print_compared(r);
  if (!r.plan.comment.empty()) std::cout << r.plan.comment << "\n";
  for (const auto& n : r.notes) std::cout << "note: " << n << "\n";
  print_idle(sc, r);
  print_estimate_summary(sc, r.estimate, opt.explain, std::cout);
  if (opt.explain) {
    std::cout << "search: " << r.summary() << "\n";
    print_plan_table(sc, r.plan, r.estimate, std::cout);
  } else {
    print_plan_outline(r.plan, std::cout);
  }
  if (opt.out.empty()) std::cout << "(--out FILE saves the plan)\n";
  Answer a{r.estimate.iteration_time_s,
           r.estimate.tokens_per_s,
           r.estimate.mfu,
           std::nullopt,
           static_cast<int>(r.estimate.devices.size()),
           r.scheduler + "'s"};
  if (!r.verified.empty()) {
    a.simulated_tokens_per_s = r.verified[r.verified_chosen].simulated_tokens_per_s;
  }
  if (!opt.out.empty()) a.source += ", written to " + opt.out;
  print_answer(sc, a, std::cout);
}

int run_plan(const PlanOptions& opt) {
  auto sc = load_scenario_flags(opt.scenario);
  if (!sc) return report(sc.error());
  if (!opt.out.empty()) {
    if (auto st = check_output_file("--out", opt.out, command_inputs(*sc)); !st)
      return report(st.error());
  }
  SearchOptions so;
  so.seed = opt.seed.value_or(sc->seed);
  so.time_budget_s = opt.time_budget_s;
  so.progress = print_search_progress;
  if (opt.compare && !opt.scheduler.empty() && opt.scheduler != kBestPlan) {
    return report(
        bad_input("--compare lists every scheduler the default plan runs; drop "
                  "--scheduler " +
                  opt.scheduler + " (it runs that scheduler alone)"));
  }
  const std::string name = opt.scheduler.empty() ? std::string(kBestPlan) : opt.scheduler;
  if (!opt.options.empty()) {
    auto json = parse_json_text(opt.options, "--options");
    if (!json) return report(json.error());
    if (!json->is_object())
      return report(bad_input("--options: expected a JSON object, e.g. '{\"seeds\": 4}'"));
    if (name != kBestPlan) sc->scheduler = name;  // the options are for the scheduler run
    sc->scheduler_options = std::move(*json);
    sc->scheduler_options_origin = "--options";
  }
  auto result = plan_pipeline(name, *sc, so, opt.verify, print_planning_note);
  if (!result) return report(result.error());
  if (auto st = validate_plan(result->plan, sc->cluster, sc->model, sc->training, name); !st) {
    return report(failure("internal error: " + st.error().message));
  }
  if (!opt.out.empty()) {
    if (auto st = write_file(opt.out, plan_text(result->plan)); !st) return report(st.error());
  }
  result->estimate.iteration_time_range_s =
      CostModel(sc->cluster, sc->model, sc->training, sc->profile)
          .iteration_time_range(result->plan, result->estimate);
  if (opt.json) {
    Json out = result->to_json();
    out["scenario"] = sc->name;
    out["seed"] = so.seed;
    out["plan"] = to_json(result->plan);
    out["estimate"] = result->estimate.to_json();
    print_json(out);
  } else {
    print_text(*sc, *result, opt);
  }
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, Runner& run) {
  auto opt = std::make_shared<PlanOptions>();
  auto* cmd = app.add_subcommand("plan", "Search a parallel plan for a scenario");
  add_scenario_options(cmd, opt->scenario);
  cmd->add_option("--scheduler", opt->scheduler,
                  "Run one scheduler alone: " + scheduler_names(SchedulerKind::kPipeline) +
                      " (default: " + std::string(kBestPlan) +
                      ", every scheduler but exact, each verified, the fastest returned)");
  cmd->add_option("--seed", opt->seed, "Random seed (default: the scenario's \"seed\")")
      ->check(unsigned_64());
  cmd->add_option("--options", opt->options,
                  "Scheduler options as a JSON object, replacing the scenario's (see README), e.g. "
                  "'{\"seeds\": 4}' for hexiscale or '{\"d_range\": \"full\"}' for random");
  cmd->add_option("--out", opt->out, "Write the plan JSON to this file");
  cmd->add_option("--time-budget", opt->time_budget_s,
                  "Stop searching after this many seconds and return the best plan so far (default "
                  "0: run to "
                  "convergence; only then is the result independent of machine speed)")
      ->check(finite_in(0, 1e7));  // seconds (about 115 days at most)
  cmd->add_option("--verify", opt->verify,
                  "Simulate the search's best plan and its next K by the closed form (stage "
                  "fidelity) and return the fastest simulated (default: " +
                      std::to_string(kDefaultVerify) + " up to " + std::to_string(kVerifyMaxGpus) +
                      " GPUs, 0 above; 0: the closed form's best, no simulation; schedulers "
                      "that keep no runners-up: hexiscale keeps them)")
      ->check(CLI::Range(0, 64));
  cmd->add_flag(
      "--explain", opt->explain,
      "Also print per pipeline: devices by type, stages, TP degrees, layers, batch share, stage "
      "compute and communication time, memory headroom; and the FLOPs in every convention (MFU, "
      "HFU, Megatron-LM's formula)");
  cmd->add_flag("--compare", opt->compare,
                "Print every scheduler the default plan ran: tokens/s (closed form, simulated), "
                "GPUs used, time");
  cmd->add_flag("--json", opt->json,
                "Print one JSON object (plan, estimate, search_time_s, scheduler, ...)");
  cmd->callback([&run, opt] { run = [opt] { return run_plan(*opt); }; });
}

}  // namespace hexi::cli
