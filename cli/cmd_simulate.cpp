// hexisim simulate SCENARIO [--plan FILE] [--fidelity layer|stage] [--out DIR] [--measured TRACE]
//                           [--explain]:
// lower the plan and simulate one training iteration with SimGrid (sim/). The headline
// says where the plan came from (the scenario's file, --plan, or which scheduler searched);
// --measured compares per op class with a trace the engine measured; --explain adds the
// FLOP conventions, every stage and the busiest links.

#include <algorithm>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "cli/commands.hpp"
#include "cli/plan_report.hpp"
#include "scheduler/estimate/estimate.hpp"
#include "scheduler/program/lower.hpp"
#include "scheduler/program/lower_sequence.hpp"
#include "scheduler/program/trace_schema.hpp"
#include "scheduler/scheduler.hpp"
#include "sim/simulator.hpp"
#include "studies/planning.hpp"
#include "topologies/enum_names.hpp"
#include "validation/trace_compare.hpp"

namespace hexi::cli {
namespace {

struct SimulateOptions {
  ScenarioFlags scenario;  // SCENARIO, its parts, --profile
  std::string plan;
  std::string program;
  std::string scheduler;
  std::optional<std::uint64_t> seed;
  std::optional<int> verify;  // when it searches; default: default_verify(scenario)
  std::string fidelity = "layer";
  std::string all_reduce = "auto";
  std::string out;
  std::string measured;  // a trace of `hexisim train --trace` to compare with
  bool no_trace = false;
  bool no_fold = false;
  bool explain = false;
  bool json = false;
};

// Where the simulated plan (or program) came from: the headline's "plan:" line and
// --json's `plan_source`.
enum class PlanOrigin { kScenario, kPlanFile, kSearch, kProgramFile };
constexpr auto kPlanOriginNames =
    enum_names<PlanOrigin>({{PlanOrigin::kScenario, "scenario"},
                            {PlanOrigin::kPlanFile, "plan_file"},
                            {PlanOrigin::kSearch, "search"},
                            {PlanOrigin::kProgramFile, "program_file"}});

struct PlanSource {
  PlanOrigin origin = PlanOrigin::kScenario;
  std::string file;             // scenario, plan_file, program_file: the file
  std::string scheduler;        // search: the scheduler
  bool scheduler_flag = false;  // search: named by --scheduler (else the scenario's)
  double search_time_s = 0;     // search

  static PlanSource of_file(PlanOrigin origin, std::string file) {
    PlanSource s;
    s.origin = origin;
    s.file = std::move(file);
    return s;
  }
  static PlanSource of_search(std::string scheduler, bool flag, double seconds) {
    PlanSource s;
    s.origin = PlanOrigin::kSearch;
    s.scheduler = std::move(scheduler);
    s.scheduler_flag = flag;
    s.search_time_s = seconds;
    return s;
  }
  std::string description() const {
    switch (origin) {
      case PlanOrigin::kScenario:
        return file + " (from the scenario)";
      case PlanOrigin::kPlanFile:
        return file + " (--plan)";
      case PlanOrigin::kProgramFile:
        return "program " + file + " (--program)";
      case PlanOrigin::kSearch:
        break;
    }
    return "searched by " + scheduler +
           (scheduler_flag ? " (--scheduler)" : " (the scenario's scheduler)") + " in " +
           fmt(search_time_s, 2) + " s";
  }
  Json to_json() const {
    Json j = {{"kind", kPlanOriginNames.name(origin)}, {"description", description()}};
    if (origin == PlanOrigin::kSearch) {
      j["scheduler"] = scheduler;
      j["chosen_by"] = scheduler_flag ? "--scheduler" : "scenario";
      j["search_time_s"] = search_time_s;
    } else {
      j["file"] = file;
    }
    return j;
  }
};

// What to simulate: a program read from --program (as written by `hexisim lower`),
// or the plan lowered at the requested fidelity, with its closed-form estimate.
struct Work {
  Program program;
  std::optional<Estimate> estimate;
  PlanSource source;
  std::string plan_digest;  // input_digest of the plan's JSON (empty for a program file)
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

// The closed form's range (Estimate::iteration_time_range_s) scaled to the simulated time.
std::optional<std::pair<double, double>> simulated_range(const SimReport& r,
                                                         const std::optional<Estimate>& est) {
  if (!est || !(est->iteration_time_range_s.second > 0) || !(est->iteration_time_s > 0)) {
    return std::nullopt;
  }
  const double scale = r.iteration_time_s / est->iteration_time_s;
  return std::pair{est->iteration_time_range_s.first * scale,
                   est->iteration_time_range_s.second * scale};
}

void print_summary(const Scenario& sc, const SimReport& r, const Work& w, bool explain,
                   std::ostream& out) {
  const std::optional<Estimate>& est = w.estimate;
  out << "simulated " << sc.name << ": " << sc.model.name << " on " << sc.cluster.name() << " ("
      << sc.cluster.num_devices() << " GPUs, " << r.devices_used << " used), " << r.fidelity
      << " fidelity, " << r.schedule << ", all-reduce " << r.algorithm << "\n";
  out << "plan: " << w.source.description() << "\n";
  if (r.replicas.folded()) {
    out << "folded: " << r.replicas.simulated << " of " << r.replicas.pipelines
        << " identical pipelines simulated, the rest by symmetry (exact; --no-fold runs all; ops, "
           "activities and the per-device and per-link tables are theirs)\n";
  } else if (r.replicas.pipelines > 1) {
    out << "not folded: " << r.replicas.why_not << "\n";
  }
  Table t({"iteration s", "tokens/s", "MFU", "PFLOP/s", "pipeline s", "estimate s", "sim/estimate",
           "ops", "activities", "wall s", "peak RSS GiB"});
  t.add({fmt(r.iteration_time_s, 3), fmt(r.tokens_per_s, 0), fmt(100 * r.mfu, 1) + "%",
         fmt(r.achieved_pflops, 3), fmt(r.pipeline_s, 3), est ? fmt(est->iteration_time_s, 3) : "-",
         est ? fmt(r.iteration_time_s / est->iteration_time_s, 3) : "-", std::to_string(r.ops),
         std::to_string(r.activities), fmt(r.wall_time_s, 2), fmt(r.peak_rss_bytes / kGiB, 2)});
  t.print(out);
  if (const auto range = simulated_range(r, est)) {
    out << "  " << fmt(range->first, 3) << " to " << fmt(range->second, 3)
        << " s per iteration with every kernel and transfer moved across its uncertainty (the "
           "closed form's range, scaled to the simulated time)\n";
  }
  for (std::size_t i = 0; i < r.problems.size() && i < 3; ++i)
    out << "  over memory: " << r.problems[i] << "\n";
  if (r.problems.size() > 3) {
    out << "  ... and " << r.problems.size() - 3
        << " more devices over memory (report.json lists them)\n";
  }
  if (!explain) {
    out << "(--explain shows the FLOPs in every convention, every stage and the busiest links)\n";
    return;
  }
  print_flop_figures(sc, r.mfu, r.figures, r.devices_used, out);
  out << "\nper stage (slowest device; shares of the iteration):\n";
  print_stages(r, out);
  out << "\nbusiest links:\n";
  print_links(r, out, 8);
}

// The plan to simulate, by priority: --plan; a search with --scheduler; the scenario's
// "plan"; a search with the scenario's scheduler. Whenever one choice hides another
// (--scheduler beside --plan, or beside the scenario's plan) a note on stderr says which.
Result<Plan> plan_for(const Scenario& sc, const SimulateOptions& opt, PlanSource& source) {
  if (!opt.plan.empty()) {
    if (!opt.scheduler.empty()) {
      std::cerr << "hexisim: note: simulating --plan " << opt.plan << "; --scheduler "
                << opt.scheduler << " is ignored (no search)\n";
    }
    source = PlanSource::of_file(PlanOrigin::kPlanFile, opt.plan);
    return load_checked_plan(sc, opt.plan);
  }
  const std::string scenario_plan = plan_file_text(sc, "");
  if (opt.scheduler.empty() && sc.plan) {
    std::cerr << "hexisim: note: simulating the scenario's plan " << scenario_plan
              << " (no search; --scheduler NAME searches one instead)\n";
    source = PlanSource::of_file(PlanOrigin::kScenario, scenario_plan);
    return load_checked_plan(sc, opt.plan);
  }
  if (sc.plan) {
    std::cerr << "hexisim: note: --scheduler " << opt.scheduler
              << " searches a new plan; the scenario's plan " << scenario_plan
              << " is not used (drop --scheduler to simulate it)\n";
  }
  SearchOptions so;
  so.seed = opt.seed.value_or(sc.seed);
  so.progress = print_search_progress;
  const bool flag = !opt.scheduler.empty();
  const std::string scheduler = flag ? opt.scheduler : std::string(kBestPlan);
  auto found = plan_pipeline(scheduler, sc, so, opt.verify, print_planning_note);
  if (!found) return found.error();
  source = PlanSource::of_search(found->scheduler, flag, found->search_time_s);
  std::cerr << "planned with " << found->scheduler
            << (found->compared.empty()
                    ? ""
                    : " (the best of " + std::to_string(found->compared.size()) + " schedulers)")
            << " in " << fmt(found->search_time_s, 2) << " s\n";
  return std::move(found->plan);
}

Result<Work> work_for(const Scenario& sc, const SimulateOptions& opt) {
  if (!opt.measured.empty() && opt.fidelity != "layer") {
    return bad_input(
        "--measured compares op for op with the program hexisim train runs, "
        "lowered at layer fidelity: drop --fidelity " +
        opt.fidelity);
  }
  if (!opt.plan.empty() && opt.program.empty()) {
    // A sequence mesh (as `hexisim seq --out` writes it): lowered as hexisim train does.
    auto file = read_plan_file(opt.plan);
    if (!file) return file.error();
    if (file->layout) {
      LowerOptions lo;
      lo.scenario = sc.name;
      std::cerr << "lowering the sequence mesh " << opt.plan << "...\n";
      auto program = lower_plan_file(*file, sc.cluster, sc.model, sc.training, lo, opt.plan);
      if (!program) return program.error();
      return Work{std::move(*program), std::nullopt,
                  PlanSource::of_file(PlanOrigin::kPlanFile, opt.plan),
                  input_digest(to_json(*file->layout))};
    }
  }
  if (!opt.program.empty()) {
    if (!opt.plan.empty()) return bad_input("give either --plan or --program, not both");
    if (!opt.scheduler.empty()) {
      std::cerr << "hexisim: note: simulating --program " << opt.program << "; --scheduler "
                << opt.scheduler << " is ignored (no search)\n";
    }
    std::cerr << "reading " << opt.program << "...\n";
    auto program = read_program(opt.program);
    if (!program) return program.error();
    if (auto st = check_program_inputs(*program, sc.model, sc.training, opt.program); !st) {
      return st.error();
    }
    return Work{std::move(*program), std::nullopt,
                PlanSource::of_file(PlanOrigin::kProgramFile, opt.program), ""};
  }
  // Every pipeline plan lowers to at least this many ops: refused before any search.
  if (auto st = check_program_size(
          sc.model, sc.training,
          opt.fidelity == "stage" ? Granularity::kStage : Granularity::kLayer, "simulate");
      !st) {
    return st.error();
  }
  PlanSource source;
  auto plan = plan_for(sc, opt, source);
  if (!plan) return plan.error();
  const std::string origin =
      source.origin == PlanOrigin::kSearch ? source.scheduler + " plan" : source.file;
  LowerOptions lo;
  lo.scenario = sc.name;
  lo.granularity = opt.fidelity == "stage" ? Granularity::kStage : Granularity::kLayer;
  // Identical pipelines are simulated once per symmetric block (ReplicaFold); a measured
  // trace is compared op for op with the whole program.
  lo.fold_replicas = !opt.no_fold && opt.measured.empty();
  std::cerr << "lowering " << origin << " (" << opt.fidelity << " fidelity)...\n";
  auto program = lower_plan(*plan, sc.cluster, sc.model, sc.training, lo, origin);
  if (!program) return program.error();
  if (program->replicas.folded()) {
    std::cerr << "lowered " << program->replicas.simulated << " of " << program->replicas.pipelines
              << " identical pipelines\n";
  }
  return Work{std::move(*program),
              CostModel(sc.cluster, sc.model, sc.training, sc.profile).estimate_with_range(*plan),
              std::move(source), input_digest(to_json(*plan))};
}

SimOptions sim_options(const Scenario& sc, const SimulateOptions& opt, const Work& work) {
  SimOptions so;
  so.scenario = sc.name;
  so.plan = work.source.description();
  so.plan_digest = work.plan_digest;
  so.trace = (!opt.no_trace && !opt.out.empty()) || !opt.measured.empty();
  so.all_reduce = opt.all_reduce == "ring"           ? sim::Algorithm::kRing
                  : opt.all_reduce == "hierarchical" ? sim::Algorithm::kHierarchical
                                                     : sim::Algorithm::kAuto;
  return so;
}

// The simulation's trace against a measured one of the same program, per op class.
Result<validation::TraceComparison> compare_with_measured(const Program& program,
                                                          const std::string& sim_trace,
                                                          const std::string& measured_path) {
  auto measured = load_trace(measured_path);
  if (!measured) return measured.error();
  auto json = parse_json_text(sim_trace, "the simulated trace");
  if (!json) return json.error();
  auto simulated = trace_from_json(*json, "the simulated trace");
  if (!simulated) return simulated.error();
  return validation::compare_traces(program, *simulated, *measured, measured_path);
}

void print_measured(const validation::TraceComparison& c, const std::string& file,
                    std::ostream& out) {
  out << "\nsimulated vs measured (" << file << ": " << c.steps_used << " of " << c.measured_steps
      << " steps, median per op; sends only for point-to-point)\n";
  Table t({"op class", "ops", "simulated ms", "measured ms", "measured/simulated"});
  auto ratio = [](double m, double s) { return s > 0 ? fmt(m / s, 2) : std::string("-"); };
  for (const auto& k : c.classes) {
    t.add({k.op_class, std::to_string(k.ops), fmt(k.simulated_s * 1e3, 3),
           fmt(k.measured_s * 1e3, 3), ratio(k.measured_s, k.simulated_s)});
  }
  t.add({"iteration", "", fmt(c.simulated_iteration_s * 1e3, 3),
         fmt(c.measured_iteration_s * 1e3, 3),
         ratio(c.measured_iteration_s, c.simulated_iteration_s)});
  t.print(out);
}

// report.json, and trace.json when the run built one and `with_trace` (--measured builds
// it for the comparison even under --no-trace).
Status write_outputs(const SimOutput& out, const std::string& dir, bool with_trace) {
  if (auto st = write_file(dir + "/report.json", out.report_json); !st) return st;
  if (with_trace && !out.trace_json.empty()) {
    return write_file(dir + "/trace.json", out.trace_json);
  }
  return {};
}

int run_simulate(const SimulateOptions& opt) {
  auto sc = load_scenario_flags(opt.scenario);
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
  // The simulator runs 250 000 to 500 000 ops a second on one core (sim/README.md's scaling
  // table), fewer where thousands of transfers contend at once (an unfolded plan of tens of
  // thousands of GPUs): the faster case says what a long run costs at least.
  const double expected_s = work->program.num_ops() / 2.5e5;
  std::cerr << "simulating " << work->program.num_ops() << " ops on "
            << work->program.devices.size() << " devices"
            << (expected_s >= 5 ? " (at 250 000 ops/s, about " + fmt(expected_s, 0) +
                                      " s; more where many transfers contend)"
                                : "")
            << "...\n";
  const SimOptions so = sim_options(*sc, opt, *work);
  auto out = simulate(work->program, sc->cluster, sc->model, sc->training, sc->profile, so);
  if (!out) return report(out.error());
  if (!opt.out.empty()) {
    if (auto st = write_outputs(*out, opt.out, !opt.no_trace); !st) return report(st.error());
  }
  std::optional<validation::TraceComparison> measured;
  if (!opt.measured.empty()) {
    auto c = compare_with_measured(work->program, out->trace_json, opt.measured);
    if (!c) return report(c.error());
    measured = std::move(*c);
  }
  if (opt.json) {
    Json j = Json::parse(out->report_json);
    j["wall_time_s"] = out->report.wall_time_s;
    j["peak_rss_gib"] = out->report.peak_rss_bytes / kGiB;
    j["plan_source"] = work->source.to_json();
    if (work->estimate) {
      const Estimate& e = *work->estimate;
      j["estimate"] = {{"iteration_time_s", e.iteration_time_s},
                       {"tokens_per_s", e.tokens_per_s},
                       {"mfu", e.mfu},
                       {"pipeline_s", e.pipeline_s},
                       {"dp_sync_s", e.dp_sync_s},
                       {"optimizer_s", e.optimizer_s}};
      if (e.iteration_time_range_s.second > 0) {
        j["estimate"]["iteration_time_s_range"] = {e.iteration_time_range_s.first,
                                                   e.iteration_time_range_s.second};
      }
      e.figures.add_to(j["estimate"]);
    }
    if (const auto range = simulated_range(out->report, work->estimate)) {
      j["iteration_time_s_range"] = {range->first, range->second};
    }
    if (measured) j["measured"] = validation::to_json(*measured);
    print_json(j);
    return 0;
  }
  const SimReport& r = out->report;
  print_summary(*sc, r, *work, opt.explain, std::cout);
  if (measured) print_measured(*measured, opt.measured, std::cout);
  if (!opt.out.empty()) {
    std::cout << "\nwrote " << opt.out << "/report.json"
              << (!opt.no_trace ? " and " + opt.out + "/trace.json" : "") << "\n";
  }
  std::cout << "\n";
  print_answer(*sc,
               {r.iteration_time_s, r.tokens_per_s, r.mfu, std::nullopt, r.devices_used,
                work->source.description() + ", simulated at " + r.fidelity + " fidelity"},
               std::cout);
  return 0;
}

}  // namespace

void add_simulate_command(CLI::App& app, Runner& run) {
  auto opt = std::make_shared<SimulateOptions>();
  auto* cmd =
      app.add_subcommand("simulate", "Simulate one training iteration of a plan with SimGrid");
  add_scenario_options(cmd, opt->scenario);
  cmd->add_option("--plan", opt->plan,
                  "Plan file (default: the scenario's \"plan\"; the headline names the plan used)");
  cmd->add_option("--program", opt->program,
                  "Simulate this program file (from `hexisim lower`) instead of lowering a plan");
  cmd->add_option("--scheduler", opt->scheduler,
                  "Plan with this scheduler instead of using the scenario's \"plan\" (a note on "
                  "stderr says so; ignored beside --plan; without either, the scenario's "
                  "scheduler plans)");
  cmd->add_option("--seed", opt->seed, "Seed for planning (default: the scenario's \"seed\")")
      ->check(unsigned_64());
  cmd->add_option("--verify", opt->verify,
                  "When it searches: as hexisim plan --verify (the plan simulated is the one "
                  "hexisim plan returns)")
      ->check(CLI::Range(0, 64));
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
  cmd->add_flag("--no-fold", opt->no_fold,
                "Simulate every pipeline, even where the plan's pipelines are identical and "
                "symmetric on the cluster (by default one block of them is simulated and the "
                "rest follow exactly; the report's `replicas` says how many)");
  cmd->add_option("--measured", opt->measured,
                  "A trace of `hexisim train --trace` of the same plan: print per op class "
                  "(compute kind, point-to-point tensor, collective) the simulated time beside "
                  "the measured one (layer fidelity)");
  cmd->add_flag("--explain", opt->explain,
                "Also print the FLOPs in every convention (MFU, HFU, Megatron-LM's formula), every "
                "stage's busy, bubble and exposed-communication shares and memory, and the "
                "busiest links");
  cmd->add_flag("--json", opt->json,
                "Print one JSON object (the report plus wall time and the estimate)");
  cmd->callback([&run, opt] { run = [opt] { return run_simulate(*opt); }; });
}

}  // namespace hexi::cli
