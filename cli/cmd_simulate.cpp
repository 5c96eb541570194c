// hexisim simulate SCENARIO [--plan FILE] [--fidelity layer|stage] [--out DIR]:
// lower the plan and simulate one training iteration with SimGrid (sim/).

#include <algorithm>
#include <iostream>
#include <map>
#include <optional>

#include "cli/commands.hpp"
#include "cli/plan_report.hpp"
#include "scheduler/estimate/estimate.hpp"
#include "scheduler/program/lower.hpp"
#include "scheduler/scheduler.hpp"
#include "sim/simulator.hpp"

namespace hexi::cli {
namespace {

struct SimulateOptions {
  std::string scenario;
  std::string plan;
  std::string program;
  std::string scheduler;
  std::optional<std::uint64_t> seed;
  std::string fidelity = "layer";
  std::string all_reduce = "auto";
  std::string out;
  bool no_trace = false;
  bool json = false;
};

std::string pct(double part, double whole) {
  return whole > 0 ? fmt(100 * part / whole, 1) + "%" : "-";
}

// One row per pipeline stage: the slowest device's numbers.
void print_stages(const SimReport& r, std::ostream& out) {
  std::map<std::pair<int, int>, std::vector<const DeviceMetrics*>> stages;
  for (const auto& d : r.devices) stages[{d.pipeline, d.stage}].push_back(&d);
  Table t({"pipeline", "stage", "devices", "GPU", "busy", "bubble", "exposed comm", "idle",
           "in flight", "mem GiB", "free GiB"});
  const double it = r.iteration_time_s;
  for (const auto& [key, devs] : stages) {
    const DeviceMetrics* worst = devs.front();
    double free_gib = 1e300;
    for (const auto* d : devs) {
      if (d->busy_s > worst->busy_s) worst = d;
      free_gib = std::min(free_gib, (d->capacity_bytes - d->peak_memory_bytes) / kGiB);
    }
    std::string ids = std::to_string(devs.front()->device);
    if (devs.size() > 1) ids += ".." + std::to_string(devs.back()->device);
    t.add({std::to_string(key.first), std::to_string(key.second), ids, worst->gpu,
           pct(worst->busy_s, it), pct(worst->bubble_s, it), pct(worst->exposed_comm_s, it),
           pct(worst->idle_s, it), std::to_string(worst->max_in_flight),
           fmt(worst->peak_memory_bytes / kGiB, 2), fmt(free_gib, 2)});
  }
  t.print(out);
}

void print_links(const SimReport& r, std::ostream& out, std::size_t top) {
  std::vector<const LinkMetrics*> ls;
  for (const auto& l : r.links) ls.push_back(&l);
  std::stable_sort(ls.begin(), ls.end(),
                   [](auto* a, auto* b) { return a->utilisation > b->utilisation; });
  if (ls.size() > top) ls.resize(top);
  Table t({"link", "kind", "GB/s", "GB moved", "utilisation"});
  for (const auto* l : ls) {
    t.add({l->name, l->kind, fmt(l->bandwidth_Bps / 1e9, 1), fmt(l->bytes / 1e9, 2),
           pct(l->utilisation, 1)});
  }
  t.print(out);
}

void print_summary(const Scenario& sc, const SimReport& r, const std::optional<Estimate>& est,
                   std::ostream& out) {
  out << "simulated " << sc.name << ": " << sc.model.name << " on " << sc.cluster.name() << " ("
      << sc.cluster.num_devices() << " GPUs, " << r.devices_used << " used), " << r.fidelity
      << " fidelity, " << r.schedule << ", all-reduce " << r.algorithm << "\n";
  Table t({"iteration s", "tokens/s", "MFU", "PFLOP/s", "pipeline s", "estimate s", "sim/estimate",
           "ops", "activities", "wall s", "peak RSS GiB"});
  t.add({fmt(r.iteration_time_s, 3), fmt(r.tokens_per_s, 0), fmt(100 * r.mfu, 1) + "%",
         fmt(r.achieved_pflops, 3), fmt(r.pipeline_s, 3), est ? fmt(est->iteration_time_s, 3) : "-",
         est ? fmt(r.iteration_time_s / est->iteration_time_s, 3) : "-", std::to_string(r.ops),
         std::to_string(r.activities), fmt(r.wall_time_s, 2), fmt(r.peak_rss_bytes / kGiB, 2)});
  t.print(out);
  for (std::size_t i = 0; i < r.problems.size() && i < 3; ++i)
    out << "  over memory: " << r.problems[i] << "\n";
  if (r.problems.size() > 3) {
    out << "  ... and " << r.problems.size() - 3
        << " more devices over memory (report.json lists them)\n";
  }
  out << "\nper stage (slowest device; shares of the iteration):\n";
  print_stages(r, out);
  out << "\nbusiest links:\n";
  print_links(r, out, 8);
}

// The plan to simulate, by priority: --plan; a search with --scheduler; the scenario's
// "plan"; a search with the scenario's scheduler. `origin` names it in messages.
Result<Plan> plan_for(const Scenario& sc, const SimulateOptions& opt, std::string& origin) {
  if (!opt.plan.empty() || (opt.scheduler.empty() && sc.plan)) {
    origin = opt.plan.empty() ? sc.plan->string() : opt.plan;
    return load_checked_plan(sc, opt.plan);
  }
  SearchOptions so;
  so.seed = opt.seed.value_or(sc.seed);
  so.progress = print_search_progress;
  const std::string scheduler = opt.scheduler.empty() ? sc.scheduler : opt.scheduler;
  auto found = run_scheduler(scheduler, sc, so);
  if (!found) return found.error();
  std::cerr << "planned with " << scheduler << " in " << fmt(found->search_time_s, 2) << " s\n";
  origin = scheduler + " plan";
  return std::move(found->plan);
}

// What to simulate: a program read from --program (as written by `hexisim lower`),
// or the plan lowered at the requested fidelity, with its closed-form estimate.
struct Work {
  Program program;
  std::optional<Estimate> estimate;
};

Result<Work> work_for(const Scenario& sc, const SimulateOptions& opt) {
  if (!opt.program.empty()) {
    if (!opt.plan.empty()) return bad_input("give either --plan or --program, not both");
    std::cerr << "reading " << opt.program << "...\n";
    auto program = read_program(opt.program);
    if (!program) return program.error();
    if (auto st = check_program_inputs(*program, sc.model, sc.training, opt.program); !st) {
      return st.error();
    }
    return Work{std::move(*program), std::nullopt};
  }
  std::string origin;
  auto plan = plan_for(sc, opt, origin);
  if (!plan) return plan.error();
  LowerOptions lo;
  lo.scenario = sc.name;
  lo.granularity = opt.fidelity == "stage" ? Granularity::kStage : Granularity::kLayer;
  std::cerr << "lowering " << origin << " (" << opt.fidelity << " fidelity)...\n";
  auto program = lower_plan(*plan, sc.cluster, sc.model, sc.training, lo, origin);
  if (!program) return program.error();
  return Work{std::move(*program),
              CostModel(sc.cluster, sc.model, sc.training, sc.profile).estimate(*plan)};
}

SimOptions sim_options(const Scenario& sc, const SimulateOptions& opt) {
  SimOptions so;
  so.scenario = sc.name;
  so.trace = !opt.no_trace && !opt.out.empty();
  so.all_reduce = opt.all_reduce == "ring"           ? sim::Algorithm::kRing
                  : opt.all_reduce == "hierarchical" ? sim::Algorithm::kHierarchical
                                                     : sim::Algorithm::kAuto;
  return so;
}

Status write_outputs(const SimOutput& out, const std::string& dir) {
  if (auto st = write_file(dir + "/report.json", out.report_json); !st) return st;
  if (!out.trace_json.empty()) return write_file(dir + "/trace.json", out.trace_json);
  return {};
}

int run_simulate(const SimulateOptions& opt) {
  auto sc = load_scenario_arg(opt.scenario);
  if (!sc) return report(sc.error());
  if (!opt.out.empty()) {
    const auto inputs = command_inputs(*sc, {opt.plan, opt.program});
    for (const char* name : {"report.json", "trace.json"}) {
      const std::string file = opt.out + "/" + name;
      if (auto st = check_output_file("--out", file, inputs); !st) return report(st.error());
    }
  }
  auto work = work_for(*sc, opt);
  if (!work) return report(work.error());
  std::cerr << "simulating " << work->program.num_ops() << " ops on "
            << work->program.devices.size() << " devices...\n";
  const SimOptions so = sim_options(*sc, opt);
  auto out = simulate(work->program, sc->cluster, sc->model, sc->training, sc->profile, so);
  if (!out) return report(out.error());
  if (!opt.out.empty()) {
    if (auto st = write_outputs(*out, opt.out); !st) return report(st.error());
  }
  if (opt.json) {
    Json j = Json::parse(out->report_json);
    j["wall_time_s"] = out->report.wall_time_s;
    j["peak_rss_gib"] = out->report.peak_rss_bytes / kGiB;
    if (work->estimate) {
      const Estimate& e = *work->estimate;
      j["estimate"] = {{"iteration_time_s", e.iteration_time_s},
                       {"tokens_per_s", e.tokens_per_s},
                       {"mfu", e.mfu},
                       {"pipeline_s", e.pipeline_s},
                       {"dp_sync_s", e.dp_sync_s},
                       {"optimizer_s", e.optimizer_s}};
    }
    print_json(j);
    return 0;
  }
  print_summary(*sc, out->report, work->estimate, std::cout);
  if (!opt.out.empty()) {
    std::cout << "\nwrote " << opt.out << "/report.json"
              << (so.trace ? " and " + opt.out + "/trace.json" : "") << "\n";
  }
  return 0;
}

}  // namespace

void add_simulate_command(CLI::App& app, Runner& run) {
  auto opt = std::make_shared<SimulateOptions>();
  auto* cmd =
      app.add_subcommand("simulate", "Simulate one training iteration of a plan with SimGrid");
  cmd->add_option("SCENARIO", opt->scenario, "Scenario file, or the name of a shipped scenario")
      ->required();
  cmd->add_option("--plan", opt->plan, "Plan file (default: the scenario's \"plan\")");
  cmd->add_option("--program", opt->program,
                  "Simulate this program file (from `hexisim lower`) instead of lowering a plan");
  cmd->add_option("--scheduler", opt->scheduler,
                  "Plan with this scheduler instead of using the scenario's \"plan\" (without "
                  "either, the scenario's scheduler plans)");
  cmd->add_option("--seed", opt->seed, "Seed for planning (default: the scenario's \"seed\")")
      ->check(unsigned_64());
  cmd->add_option(
         "--fidelity", opt->fidelity,
         "layer: every op of the program; stage: a stage's ops fused, intra-machine TP folded")
      ->check(CLI::IsMember({"layer", "stage"}))
      ->capture_default_str();
  cmd->add_option("--all-reduce", opt->all_reduce,
                  "All-reduce algorithm: auto (hierarchical when members fill machines evenly), "
                  "ring, hierarchical")
      ->check(CLI::IsMember({"auto", "ring", "hierarchical"}))
      ->capture_default_str();
  cmd->add_option("--out", opt->out,
                  "Folder for report.json and trace.json (nothing written without it)");
  cmd->add_flag("--no-trace", opt->no_trace, "Do not build trace.json (large for big clusters)");
  cmd->add_flag("--json", opt->json,
                "Print one JSON object (the report plus wall time and the estimate)");
  cmd->callback([&run, opt] { run = [opt] { return run_simulate(*opt); }; });
}

}  // namespace hexi::cli
