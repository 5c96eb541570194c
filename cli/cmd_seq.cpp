// hexisim seq SCENARIO: the context + head parallel layout of one long sequence over the
// whole cluster (HexiSeq, scheduler/hexiseq/): plan it with HexiSeq or a baseline, evaluate
// a layout file, or compare every sequence scheduler on the scenario. The per-device tables
// come with --explain; a layout or a pipeline of meshes ends with the answer line.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <numeric>

#include "cli/commands.hpp"
#include "cli/plan_report.hpp"
#include "scheduler/baselines/sequence.hpp"
#include "scheduler/cost/cost_model.hpp"
#include "scheduler/hexiseq/exact.hpp"
#include "scheduler/hexiseq/mesh_pipeline.hpp"
#include "scheduler/program/lower.hpp"
#include "scheduler/program/lower_sequence.hpp"
#include "scheduler/scheduler.hpp"
#include "sim/simulator.hpp"
#include "studies/planning.hpp"
#include "topologies/text.hpp"

namespace hexi::cli {
namespace {

struct SeqOptions {
  ScenarioFlags scenario;  // SCENARIO, its parts, --profile
  std::string scheduler = "best";
  std::string layout;
  std::string solver;  // empty: each scheduler's default
  std::string out;
  std::string sim_out;
  double time_budget_s = 0;
  bool compare = false;
  bool simulate = false;
  bool json = false;
  bool explain = false;       // --explain: the per-device tables
  bool pipeline = false;      // --pipeline
  bool every_gpu = false;     // --every-gpu
  bool ulysses_only = false;  // --ulysses-only
  int max_stages = 0;
  std::optional<double> exact_budget_s;  // --exact-budget: hexiseq-exact's in --compare
};

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

void print_layout(const Scenario& sc, const std::string& name, const HexiSeqResult& r, bool explain,
                  std::ostream& out) {
  const IterationTime& t = r.time;
  std::string proof;  // hexiseq-exact only
  if (r.proven && *r.proven) proof = "; every program proven optimal";
  if (r.proven && !*r.proven) {
    proof = "; NOT proven: a program stopped at its time limit or the budget";
    if (r.exact_gap > 0) {
      proof += " (largest gap to its bound " + fmt(100 * r.exact_gap, 1) + " %)";
    }
  }
  out << "scenario " << sc.name << ": " << sc.model.name << ", one sequence of "
      << sc.training.seq_len << " tokens over " << sc.cluster.num_devices() << " GPUs ("
      << sc.cluster.name() << "), " << sc.training.global_batch << " per iteration, ZeRO-"
      << training_of(sc.training, r).zero_stage << "\n";
  out << name << ": " << t.layer.devices.size() << " devices in " << r.layout.groups.size()
      << " groups (" << r.grouping << "); " << r.candidates << " layouts scored, " << r.solves
      << " LPs / integer programs, " << fmt(r.search_time_s, 3) << " s"
      << (r.budget_exhausted ? " (time budget reached)" : "") << proof << "\n";
  Table head({"iteration s", "tokens/s", "sequence s", "layer ms", "sync s", "fits"});
  head.add({fmt(t.iteration_s, 3), fmt(t.tokens_per_s, 0), fmt(t.sequence_s, 3),
            fmt(t.layer.time_s * 1e3, 2), fmt(t.sync_s, 3), t.fits ? "yes" : "NO"});
  head.print(out);
  if (!explain) {
    out << "(--explain shows every device: tokens, heads, layer time by part, memory)\n";
    return;
  }
  out << "\n";
  std::map<int, const DeviceMemory*> memory;
  for (const auto& m : t.memory) memory[m.device] = &m;
  Table table({"group", "device", "GPU", "tokens", "heads", "token-wise ms", "all-to-all ms",
               "ring ms", "attention ms", "mem GiB", "of GiB"});
  for (const auto& d : t.layer.devices) {
    const SequenceGroup& g = r.layout.groups[d.group];
    const DeviceMemory* m = memory.count(d.device) ? memory[d.device] : nullptr;
    table.add({std::to_string(d.group), std::to_string(d.device), sc.cluster.gpu(d.device).name,
               std::to_string(g.shards[d.rank]), std::to_string(g.heads[d.rank]),
               fmt(d.token_wise_s * 1e3, 2), fmt(d.ulysses_s * 1e3, 2), fmt(d.ring_s * 1e3, 2),
               fmt(d.attention_s * 1e3, 2), m ? fmt(m->total() / kGiB, 2) : "-",
               m ? fmt(m->capacity / kGiB, 0) : "-"});
  }
  table.print(out);
  out << "per layer, forward + backward; ring ms: the group's ring until its slowest member "
         "ends (its attention inside)\n";
}

// The layout lowered (scheduler/program/lower_sequence.hpp) and simulated: its report beside
// the closed form's iteration, per device the all-to-all and ring waits.
struct SeqSimulation {
  SimReport report;
  double closed_form_s = 0;
};

Result<SeqSimulation> simulate_layout(const Scenario& sc, const HexiSeqResult& r,
                                      const std::string& out_dir) {
  const TrainingConfig training = training_of(sc.training, r);
  auto program = lower_sequence(r.layout, sc.cluster, sc.model, training, sc.name, "the layout");
  if (!program) return program.error();
  std::cerr << "hexisim: seq: simulating " << program->num_ops() << " ops on "
            << program->devices.size() << " devices...\n";
  SimOptions so;
  so.scenario = sc.name;
  so.plan = "a sequence layout: " + r.grouping;
  so.plan_digest = input_digest(to_json(r.layout));
  so.trace = !out_dir.empty();
  auto out = simulate(*program, sc.cluster, sc.model, training, sc.profile, so);
  if (!out) return out.error();
  if (!out_dir.empty()) {
    if (auto st = write_file(out_dir + "/report.json", out->report_json); !st) return st.error();
    if (auto st = write_file(out_dir + "/trace.json", out->trace_json); !st) return st.error();
  }
  return SeqSimulation{std::move(out->report), r.time.iteration_s};
}

Json simulation_json(const SeqSimulation& s) {
  Json devices = Json::array();
  for (const auto& d : s.report.devices) {
    devices.push_back({{"device", d.device},
                       {"busy_s", d.busy_s},
                       {"ulysses_wait_s", d.ulysses_wait_s},
                       {"ring_wait_s", d.ring_wait_s},
                       {"exposed_comm_s", d.exposed_comm_s},
                       {"idle_s", d.idle_s}});
  }
  return {{"iteration_time_s", s.report.iteration_time_s},
          {"tokens_per_s", s.report.tokens_per_s},
          {"closed_form_over_simulated", s.closed_form_s / s.report.iteration_time_s},
          {"ops", s.report.ops},
          {"devices", devices}};
}

void print_simulation(const SeqSimulation& s, bool explain, std::ostream& out) {
  const SimReport& r = s.report;
  out << "\nsimulated: " << fmt(r.iteration_time_s, 3) << " s per iteration, "
      << fmt(r.tokens_per_s, 0) << " tokens/s (" << r.ops << " ops); closed form "
      << fmt(s.closed_form_s, 3) << " s = " << fmt(s.closed_form_s / r.iteration_time_s, 3)
      << " x simulated\n";
  if (!explain) return;
  Table table(
      {"device", "GPU", "busy s", "all-to-all wait s", "ring wait s", "other comm s", "idle s"});
  for (const auto& d : r.devices) {
    table.add({std::to_string(d.device), d.gpu, fmt(d.busy_s, 3), fmt(d.ulysses_wait_s, 3),
               fmt(d.ring_wait_s, 3), fmt(d.exposed_comm_s - d.ulysses_wait_s - d.ring_wait_s, 3),
               fmt(d.idle_s, 3)});
  }
  table.print(out);
}

// One row of --compare: a sequence scheduler's layout (or why it has none), and with
// --simulate its simulation. `every_gpu`: run with idle_slow_types off (every layout over
// every GPU, as the HexiSeq paper ran its baselines).
struct CompareRow {
  std::string name;
  bool every_gpu = false;
  std::optional<HexiSeqResult> result;
  std::string error;
  std::optional<SeqSimulation> sim;

  std::string label() const { return every_gpu ? name + " (every GPU)" : name; }
  bool baseline() const { return name.rfind("hexiseq", 0) != 0; }
  bool fits() const { return result && result->time.fits; }
};

// Every sequence scheduler of the registry on the scenario (hexiseq-exact skipped above its
// size limit or with an exact budget of 0, else bounded by it); hexiseq and each baseline a
// second time on every GPU where the cluster has GPU subsets to leave idle. Each run's start
// and time on stderr.
std::vector<CompareRow> compare_rows(const Scenario& sc, const SchedulerOptions& o,
                                     std::optional<double> exact_budget_s) {
  std::vector<int> all(sc.cluster.num_devices());
  std::iota(all.begin(), all.end(), 0);
  const bool subsets = baseline_subsets(sc.cluster, all).size() > 1;
  std::vector<CompareRow> rows;
  for (const auto& s : schedulers()) {
    if (s.kind != SchedulerKind::kSequence) continue;
    if (s.name == "hexiseq-exact" && sc.cluster.num_devices() > kExactMaxDevices) {
      rows.push_back({s.name, false, std::nullopt,
                      "skipped: more than " + std::to_string(kExactMaxDevices) + " GPUs",
                      std::nullopt});
      continue;
    }
    const bool exact = s.name == "hexiseq-exact";
    if (exact && exact_budget_s && *exact_budget_s == 0) {
      rows.push_back({s.name, false, std::nullopt, "skipped: --exact-budget 0", std::nullopt});
      continue;
    }
    for (bool every : {false, true}) {
      CompareRow row{s.name, every, std::nullopt, "", std::nullopt};
      if (every && (!subsets || !(row.baseline() || s.name == "hexiseq"))) continue;
      std::cerr << "hexisim: seq: " << row.label()
                << (exact && !exact_budget_s
                        ? " (proves each grouping's program: minutes on 16 GPUs; --exact-budget S "
                          "bounds it, 0 skips it)"
                        : "")
                << "...\n";
      SchedulerOptions so = o;
      so.sequence.idle_slow_types = o.sequence.idle_slow_types && !every;
      if (exact && exact_budget_s) so.sequence.time_budget_s = *exact_budget_s;
      const auto start = std::chrono::steady_clock::now();
      auto r = s.run(sc, so);
      std::cerr
          << "hexisim: seq: " << row.label() << ": "
          << fmt(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2)
          << " s\n";
      if (r) {
        row.result = std::move(*r->sequence);
      } else {
        row.error = r.error().message;
      }
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

// With --simulate, every fitting layout simulated (layouts alike simulated once).
void simulate_rows(const Scenario& sc, std::vector<CompareRow>& rows) {
  std::map<std::string, SeqSimulation> done;
  for (auto& row : rows) {
    if (!row.fits()) continue;
    const std::string key = to_json(row.result->layout).dump() + "@zero" +
                            std::to_string(training_of(sc.training, *row.result).zero_stage);
    if (!done.count(key)) {
      std::cerr << "hexisim: seq: simulating " << row.label() << "'s layout...\n";
      auto s = simulate_layout(sc, *row.result, "");
      if (!s) {
        row.error = s.error().message;
        continue;
      }
      done.emplace(key, std::move(*s));
    }
    row.sim = done.at(key);
  }
}

// The strongest baseline of one kind (the fastest fitting layout of a scheduler not named
// hexiseq*), closed form and simulated; none where no baseline fits.
struct BestBaseline {
  const CompareRow* closed = nullptr;
  const CompareRow* simulated = nullptr;
  double closed_tps() const { return closed ? closed->result->time.tokens_per_s : 0; }
  double simulated_tps() const { return simulated ? simulated->sim->report.tokens_per_s : 0; }
};
// `every_gpu`: of the rows on every GPU (the paper's definition; the default rows where the
// cluster has no subsets), else of the rows with the same freedoms as hexiseq.
BestBaseline best_baseline(const std::vector<CompareRow>& rows, bool every_gpu) {
  const bool any_every =
      std::any_of(rows.begin(), rows.end(), [](const CompareRow& r) { return r.every_gpu; });
  BestBaseline best;
  for (const auto& row : rows) {
    if (!row.baseline() || !row.fits() || row.every_gpu != (every_gpu && any_every)) continue;
    if (row.result->time.tokens_per_s > best.closed_tps()) best.closed = &row;
    if (row.sim && row.sim->report.tokens_per_s > best.simulated_tps()) best.simulated = &row;
  }
  return best;
}

struct CompareBest {
  BestBaseline same, every;
};

// Model TFLOP/s per GPU of a layout: over the GPUs it uses, and over the cluster's.
std::pair<double, double> tflops_per_gpu(const Scenario& sc, const HexiSeqResult& r) {
  const double tflops = model_flops(sc.model, sc.training) / r.time.iteration_s / 1e12;
  return {tflops / r.layout.num_devices(), tflops / sc.cluster.num_devices()};
}

Json best_json(const BestBaseline& b) {
  Json j = Json::object();
  if (b.closed) {
    j["closed_form"] = {{"scheduler", b.closed->label()},
                        {"grouping", b.closed->result->grouping},
                        {"tokens_per_s", b.closed_tps()}};
  }
  if (b.simulated) {
    j["simulated"] = {{"scheduler", b.simulated->label()},
                      {"grouping", b.simulated->result->grouping},
                      {"tokens_per_s", b.simulated_tps()}};
  }
  return j;
}

void print_compare_json(const Scenario& sc, const std::vector<CompareRow>& rows,
                        const CompareBest& best) {
  Json out = {{"scenario", sc.name},
              {"num_gpus", sc.cluster.num_devices()},
              {"best_baseline", best_json(best.same)},
              {"best_every_gpu_baseline", best_json(best.every)},
              {"schedulers", Json::array()}};
  for (const auto& row : rows) {
    Json j = row.result ? row.result->to_json(row.name)
                        : Json{{"scheduler", row.name}, {"error", row.error}};
    j["every_gpu"] = row.every_gpu;
    if (row.result) {
      const auto [used, all] = tflops_per_gpu(sc, *row.result);
      j["gpus_used"] = row.result->layout.num_devices();
      j["model_tflops_per_used_gpu"] = used;
      j["model_tflops_per_cluster_gpu"] = all;
      if (best.same.closed)
        j["vs_best_baseline"] = row.result->time.tokens_per_s / best.same.closed_tps();
      if (best.every.closed) {
        j["vs_best_every_gpu_baseline"] = row.result->time.tokens_per_s / best.every.closed_tps();
      }
    }
    if (row.sim) {
      j["simulated"] = simulation_json(*row.sim);
      const double tps = row.sim->report.tokens_per_s;
      if (best.same.simulated) j["simulated"]["vs_best_baseline"] = tps / best.same.simulated_tps();
      if (best.every.simulated) {
        j["simulated"]["vs_best_every_gpu_baseline"] = tps / best.every.simulated_tps();
      }
    }
    out["schedulers"].push_back(std::move(j));
  }
  print_json(out);
}

std::string ratio(double num, double den) {
  return den > 0 ? fmt(num / den, 3) + "x" : "-";
}

std::vector<std::string> compare_cells(const Scenario& sc, const CompareRow& row,
                                       const CompareBest& best, bool simulated,
                                       std::size_t columns) {
  if (!row.result) {
    std::vector<std::string> cells(columns, "-");
    cells.front() = row.label();
    cells.back() = row.error.substr(0, 60);
    return cells;
  }
  const HexiSeqResult& r = *row.result;
  const auto [used, all] = tflops_per_gpu(sc, r);
  const double tps = r.time.tokens_per_s;
  std::vector<std::string> cells = {
      row.label(),
      std::to_string(r.layout.num_devices()),
      std::to_string(training_of(sc.training, r).zero_stage),
      r.grouping.size() > 40 ? r.grouping.substr(0, 37) + "..." : r.grouping,
      fmt(r.time.iteration_s, 3),
      fmt(tps, 0),
      fmt(used, 1),
      fmt(all, 1),
      ratio(tps, best.same.closed_tps()),
      ratio(tps, best.every.closed_tps()),
      r.time.fits ? "yes" : "NO"};
  if (simulated) {
    const double sim = row.sim ? row.sim->report.tokens_per_s : 0;
    cells.push_back(row.sim ? fmt(row.sim->report.iteration_time_s, 3) : "-");
    cells.push_back(row.sim ? ratio(sim, best.same.simulated_tps()) : "-");
    cells.push_back(row.sim ? ratio(sim, best.every.simulated_tps()) : "-");
  }
  cells.push_back(fmt(r.search_time_s, 3));
  return cells;
}

void print_best(const std::string& what, const BestBaseline& b, std::ostream& out) {
  out << what << ": ";
  if (!b.closed) {
    out << "none fits\n";
    return;
  }
  out << b.closed->label() << " (" << b.closed->result->grouping << "), " << fmt(b.closed_tps(), 0)
      << " tokens/s closed form";
  if (b.simulated) {
    out << "; simulated " << b.simulated->label() << " (" << b.simulated->result->grouping << "), "
        << fmt(b.simulated_tps(), 0) << " tokens/s";
  }
  out << "\n";
}

void print_compare_table(const Scenario& sc, const std::vector<CompareRow>& rows,
                         const CompareBest& best, bool simulated) {
  std::cout << "scenario " << sc.name << ": " << sc.model.name << ", " << sc.training.global_batch
            << " sequence(s) of " << sc.training.seq_len << " tokens per iteration over "
            << sc.cluster.num_devices() << " GPUs\n";
  std::vector<std::string> header = {
      "scheduler",        "GPUs",     "ZeRO",    "configuration",     "iteration s", "tokens/s",
      "TFLOP/s/GPU used", "/GPU all", "vs best", "vs best every-GPU", "fits"};
  if (simulated) {
    header.insert(header.end(), {"simulated s", "sim vs best", "sim vs every-GPU"});
  }
  header.push_back("search s");
  Table table(header);
  for (const auto& row : rows) table.add(compare_cells(sc, row, best, simulated, header.size()));
  table.print(std::cout);
  print_best(
      "best baseline, same freedoms as hexiseq (each GPU type alone, the fastest "
      "machines or all; every degree and placement; each ZeRO stage)",
      best.same, std::cout);
  print_best("best baseline on every GPU (the HexiSeq paper's definition)", best.every, std::cout);
  std::cout << "TFLOP/s/GPU: model FLOPs per second over the GPUs the layout uses (used) and "
               "over all "
            << sc.cluster.num_devices() << " of the cluster (all)\n";
}

int run_compare(const Scenario& sc, const SchedulerOptions& o, bool json, bool simulated,
                std::optional<double> exact_budget_s) {
  std::vector<CompareRow> rows = compare_rows(sc, o, exact_budget_s);
  if (simulated) simulate_rows(sc, rows);
  const CompareBest best{best_baseline(rows, false), best_baseline(rows, true)};
  if (json) {
    print_compare_json(sc, rows, best);
  } else {
    print_compare_table(sc, rows, best, simulated);
  }
  // Printed either way; a scenario no scheduler can lay out in memory is bad input.
  if (std::none_of(rows.begin(), rows.end(), [](const CompareRow& r) { return r.fits(); })) {
    return report(bad_input(sc.name + ": no sequence scheduler found a layout that fits in "
                                      "memory (each one's reason above)"));
  }
  return 0;
}

// --pipeline: pipelines of sequence meshes (scheduler/hexiseq/mesh_pipeline.hpp), every number of
// stages. The plan of a pipeline of meshes, printed (or as JSON); with the default scheduler, what
// it was chosen from. --simulate lowers it at stage granularity under its ZeRO stage.
Status show_pipeline(const Scenario& sc, const SeqOptions& opt, const SchedulerOptions& o,
                     const MeshPipelineResult* r, const SequencePlanning* chosen) {
  if (!opt.out.empty()) {
    if (auto st = write_file(opt.out, to_json(r->plan).dump(2) + "\n"); !st) return st.error();
  }
  const int best = static_cast<int>(r->plan.pipelines.front().stages.size());
  const int zero = mesh_pipeline_zero_stage(sc.training, o.sequence);
  std::optional<SimReport> sim;
  if (opt.simulate) {
    Scenario staged = sc;
    staged.training.zero_stage = zero;
    LowerOptions lo;
    lo.granularity = Granularity::kStage;
    lo.scenario = sc.name;
    std::cerr << "hexisim: seq: simulating the pipeline of meshes...\n";
    auto s = simulate_untraced(staged, lower_plan(r->plan, sc.cluster, sc.model, staged.training,
                                                  lo, "the pipeline of meshes"));
    if (!s) return s.error();
    sim = std::move(*s);
  }
  if (opt.json) {
    Json out = r->to_json(zero);
    out["scenario"] = sc.name;
    if (sim) {
      out["simulated"] = {
          {"iteration_time_s", sim->iteration_time_s},
          {"tokens_per_s", sim->tokens_per_s},
          {"closed_form_over_simulated", r->estimate.iteration_time_s / sim->iteration_time_s}};
    }
    if (chosen) {
      out["scheduler"] = "mesh-pipeline";
      out["best_of"] = chosen->rows;
    }
    print_json(out);
    return {};
  }
  if (chosen) std::cout << chosen->line << "\n";
  std::cout << "scenario " << sc.name << ": " << sc.model.name << ", " << sc.training.global_batch
            << " sequences of " << sc.training.seq_len << " tokens per iteration over "
            << sc.cluster.num_devices() << " GPUs; pipelines of sequence meshes, "
            << fmt(r->search_time_s, 2) << " s\n";
  Table table({"stages", "GPUs per stage", "layers per stage", "iteration s", "tokens/s", "fits"});
  for (const auto& c : r->tried) {
    if (c.plan.pipelines.empty()) {
      table.add({std::to_string(c.stages), "-", "-", "-", "-", c.problem.substr(0, 60)});
      continue;
    }
    table.add({std::to_string(c.stages) + (c.stages == best ? " (best)" : ""),
               stage_gpus_text(c.plan), stage_layers_text(c.plan),
               fmt(c.estimate.iteration_time_s, 3), fmt(c.estimate.tokens_per_s, 0),
               c.fits ? "yes" : "NO"});
  }
  table.print(std::cout);
  std::cout << "1 stage: the whole cluster as one mesh; each stage's mesh is HexiSeq's over its "
               "machines\n";
  if (zero != sc.training.zero_stage) {
    std::cout << "ZeRO-" << zero << ": pipeline plans model ZeRO 0 and 1, the scenario asks for "
              << sc.training.zero_stage << " (simulate the plan with training.zero_stage " << zero
              << ")\n";
  }
  if (sim) {
    std::cout << "simulated: " << fmt(sim->iteration_time_s, 3) << " s per iteration, "
              << fmt(sim->tokens_per_s, 0) << " tokens/s; closed form "
              << fmt(r->estimate.iteration_time_s / sim->iteration_time_s, 3) << " x simulated\n";
  }
  if (!opt.out.empty()) {
    std::cout << "wrote " << opt.out << " (simulate it: hexisim simulate "
              << scenario_command_text(opt.scenario) << " --plan " << opt.out << ")\n";
  }
  const Estimate& e = r->estimate;
  Answer a{e.iteration_time_s,
           e.tokens_per_s,
           e.mfu,
           std::nullopt,
           r->plan.num_devices(),
           "a pipeline of " + std::to_string(best) + " sequence meshes"};
  if (sim) a.simulated_tokens_per_s = sim->tokens_per_s;
  if (!opt.out.empty()) a.source += ", written to " + opt.out;
  print_answer(sc, a, std::cout);
  return {};
}

int run_pipeline(const Scenario& sc, const SeqOptions& opt, SchedulerOptions o) {
  o.max_stages = opt.max_stages;
  auto found = run_scheduler("mesh-pipeline", sc, o);
  if (!found) return report(found.error());
  if (auto st = show_pipeline(sc, opt, o, &*found->hybrid, nullptr); !st) return report(st.error());
  return 0;
}

// The registry's options from the flags: --solver for both HexiSeq backends, --time-budget.
Result<SchedulerOptions> scheduler_options(const SeqOptions& opt) {
  SchedulerOptions o;
  if (!opt.solver.empty()) {
    auto backend = kBackendNames.parse(opt.solver);
    if (!backend) {
      return bad_input("--solver: unknown solver \"" + opt.solver + "\"; expected " +
                       kBackendNames.list());
    }
    o.sequence.backend = o.sequence.exact_backend = *backend;
  }
  o.sequence.time_budget_s = opt.time_budget_s;
  o.sequence.idle_slow_types = !opt.every_gpu;
  o.sequence.tensor_groups = !opt.ulysses_only;
  return o;
}

// The output files may be written (none is an input), and the flags go together.
Status check_outputs(const Scenario& sc, const SeqOptions& opt) {
  if (!opt.out.empty()) {
    if (auto st = check_output_file("--out", opt.out, command_inputs(sc, {opt.layout})); !st)
      return st.error();
  }
  if (!opt.sim_out.empty()) {
    for (const char* file : {"report.json", "trace.json"}) {
      if (auto st = check_output_file("--sim-out", opt.sim_out + "/" + file,
                                      command_inputs(sc, {opt.layout}));
          !st)
        return st.error();
    }
  }
  if (opt.exact_budget_s && !opt.compare) {
    return bad_input(
        "--exact-budget bounds hexiseq-exact inside --compare (alone: --scheduler "
        "hexiseq-exact --time-budget S)");
  }
  if (opt.compare && opt.every_gpu) {
    return bad_input("--compare and --every-gpu: --compare runs each scheduler both ways");
  }
  if (opt.compare && !opt.sim_out.empty()) {
    return bad_input("--compare and --sim-out: reports are written for one layout");
  }
  if (opt.pipeline && (opt.compare || !opt.layout.empty() || opt.simulate || !opt.sim_out.empty() ||
                       (opt.scheduler != "hexiseq" && opt.scheduler != "best"))) {
    return bad_input(
        "--pipeline searches pipelines of HexiSeq meshes: not with "
        "--compare, --layout, --simulate, --sim-out or --scheduler");
  }
  return {};
}

// --layout FILE: the layout read, validated and scored by the closed form.
Result<HexiSeqResult> layout_of_file(const Scenario& sc, const std::string& file) {
  auto doc = read_json_file(file);
  if (!doc) return doc.error();
  const Json* node = doc->is_object() && doc->contains("sequence") ? &(*doc)["sequence"] : nullptr;
  if (!node) {
    return bad_input(file +
                     ": expected an object with a \"sequence\" layout "
                     "(as `hexisim seq --out` writes)");
  }
  auto layout = layout_from_json(*node, file);
  if (!layout) return layout.error();
  if (auto st = validate(*layout, sc.model, sc.training, sc.cluster, file); !st) return st.error();
  HexiSeqResult result;
  result.layout = std::move(*layout);
  result.time =
      SequenceCost(sc.cluster, sc.model, sc.training, sc.profile).iteration(result.layout);
  result.grouping = "from " + file;
  return result;
}

// --scheduler NAME: a sequence scheduler of the registry.
Result<HexiSeqResult> layout_of_scheduler(const Scenario& sc, const std::string& name,
                                          const SchedulerOptions& o) {
  const SchedulerInfo* s = find_scheduler(name);
  if (!s || s->kind != SchedulerKind::kSequence) {
    return bad_input("--scheduler: unknown sequence scheduler \"" + name +
                     "\"; expected best or one of " + scheduler_names(SchedulerKind::kSequence));
  }
  auto r = s->run(sc, o);
  if (!r) return r.error();
  return std::move(*r->sequence);
}

// One layout: written with --out, simulated with --simulate / --sim-out, printed.
Status show_layout(const Scenario& sc, const SeqOptions& opt, const std::string& name,
                   const HexiSeqResult& result, const SequencePlanning* chosen = nullptr) {
  if (!std::isfinite(result.time.iteration_s) || !(result.time.iteration_s > 0)) {
    return failure("internal error: the layout's iteration time is " +
                   std::to_string(result.time.iteration_s) + " s (please report it)");
  }
  if (!opt.out.empty()) {
    Json plan = {{"version", 1}, {"scheduler", name}, {"sequence", to_json(result.layout)}};
    if (auto st = write_file(opt.out, plan.dump(2) + "\n"); !st) return st.error();
  }
  std::optional<SeqSimulation> sim;
  if (opt.simulate || !opt.sim_out.empty()) {
    auto s = simulate_layout(sc, result, opt.sim_out);
    if (!s) return s.error();
    sim = std::move(*s);
  }
  if (opt.json) {
    Json out = result.to_json(name);
    out["scenario"] = sc.name;
    if (sim) out["simulated"] = simulation_json(*sim);
    if (chosen) out["best_of"] = chosen->rows;
    print_json(out);
    return {};
  }
  if (chosen) std::cout << chosen->line << "\n";
  print_layout(sc, name, result, opt.explain, std::cout);
  if (sim) print_simulation(*sim, opt.explain, std::cout);
  if (!opt.sim_out.empty()) {
    std::cout << "wrote " << opt.sim_out << "/report.json and " << opt.sim_out << "/trace.json\n";
  }
  const IterationTime& t = result.time;
  const double peak = sc.cluster.peak_flops();
  Answer a{t.iteration_s,
           t.tokens_per_s,
           peak > 0
               ? model_flops(sc.model, training_of(sc.training, result)) / (t.iteration_s * peak)
               : 0,
           std::nullopt,
           static_cast<int>(t.layer.devices.size()),
           name == "layout" ? "the layout " + opt.layout : name + "'s layout"};
  if (sim) a.simulated_tokens_per_s = sim->report.tokens_per_s;
  if (!opt.out.empty()) a.source += ", written to " + opt.out;
  if (!t.fits) a.source += "; it does NOT fit in memory (the table's fits column)";
  print_answer(sc, a, std::cout);
  return {};
}

// The default (--scheduler best): plan_sequence's choice, with what it was chosen from.
Status run_best(const Scenario& sc, const SeqOptions& opt, SchedulerOptions o) {
  o.max_stages = opt.max_stages;
  auto best = plan_sequence(
      sc, o, [](const std::string& line) { std::cerr << "hexisim: seq: " << line << "\n"; });
  if (!best) return best.error();
  if (best->pipeline) return show_pipeline(sc, opt, o, &*best->pipeline, &*best);
  return show_layout(sc, opt, best->layout_scheduler, *best->layout, &*best);
}

int run_seq(const SeqOptions& opt) {
  auto sc = load_scenario_flags(opt.scenario);
  if (!sc) return report(sc.error());
  auto o = scheduler_options(opt);
  if (!o) return report(o.error());
  if (auto st = check_outputs(*sc, opt); !st) return report(st.error());
  if (opt.pipeline) return run_pipeline(*sc, opt, *o);
  if (opt.compare) return run_compare(*sc, *o, opt.json, opt.simulate, opt.exact_budget_s);
  if (opt.layout.empty() && opt.scheduler == "best") {
    if (auto st = run_best(*sc, opt, *o); !st) return report(st.error());
    return 0;
  }
  auto result = opt.layout.empty() ? layout_of_scheduler(*sc, opt.scheduler, *o)
                                   : layout_of_file(*sc, opt.layout);
  if (!result) return report(result.error());
  const std::string name = opt.layout.empty() ? opt.scheduler : "layout";
  if (auto st = show_layout(*sc, opt, name, *result); !st) return report(st.error());
  return 0;
}

}  // namespace

void add_seq_command(CLI::App& app, Runner& run) {
  auto opt = std::make_shared<SeqOptions>();
  auto* cmd = app.add_subcommand(
      "seq",
      "Long-context training: plan one sequence's context + head parallel layout (HexiSeq) or a "
      "baseline's, evaluate a layout file, or compare them all");
  add_scenario_options(cmd, opt->scenario);
  cmd->add_option(
      "--scheduler", opt->scheduler,
      "Sequence scheduler: best (the default: the fastest of hexiseq, ring, ulysses, usp, "
      "megatron-cp and, with several sequences per iteration, pipelines of meshes), " +
          scheduler_names(SchedulerKind::kSequence));
  cmd->add_flag("--compare", opt->compare,
                "Run every sequence scheduler (hexiseq and each baseline also on every GPU) and "
                "compare them with the strongest baseline given HexiSeq's freedoms and with the "
                "strongest on every GPU (the HexiSeq paper's definition)");
  cmd->add_option("--exact-budget", opt->exact_budget_s,
                  "With --compare: at most this many seconds for hexiseq-exact (its layout then "
                  "unproven; 0 skips it; default: to the end, minutes on 16 GPUs)")
      ->check(finite_in(0, 1e7));
  cmd->add_option("--layout", opt->layout,
                  "Evaluate this layout file ({\"sequence\": {\"groups\": [...]}}) instead of "
                  "planning");
  cmd->add_option("--solver", opt->solver,
                  "MILP solver for hexiseq and hexiseq-exact: glpk or cbc (default: glpk for "
                  "hexiseq, cbc for hexiseq-exact)");
  cmd->add_option("--time-budget", opt->time_budget_s,
                  "Stop searching after this many seconds (default 0: every candidate)")
      ->check(finite_in(0, 1e7));
  cmd->add_option("--out", opt->out, "Write the layout to this file");
  cmd->add_flag("--simulate", opt->simulate,
                "Lower the layout to a program and simulate one iteration (SimGrid): simulated "
                "vs closed-form time, per device the all-to-all and ring waits; with --compare, "
                "every scheduler's layout");
  cmd->add_option("--sim-out", opt->sim_out,
                  "With --simulate (implied): write report.json and trace.json to this "
                  "directory");
  cmd->add_flag("--pipeline", opt->pipeline,
                "Search pipelines of sequence meshes instead: the machines cut into 1, 2, ... "
                "stages, each a HexiSeq mesh over its layers (--time-budget bounds each stage's "
                "search); --out writes the best as a plan file");
  cmd->add_option("--max-stages", opt->max_stages,
                  "With --pipeline: at most this many stages (default: one per machine)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--every-gpu", opt->every_gpu,
                "Lay the sequence over every GPU: no GPU subsets (HexiSeq's fastest-type mesh, "
                "a baseline's GPU types and fastest machines) are tried");
  cmd->add_flag("--ulysses-only", opt->ulysses_only,
                "Lay meshes out in Ulysses groups only: no tensor-parallel groups (which HexiSeq "
                "also tries under ZeRO 0-2, each device holding its share of the weights)");
  cmd->add_flag("--explain", opt->explain,
                "Also print every device of the layout (tokens, heads, layer time by part, "
                "memory) and, with --simulate, its simulated waits");
  cmd->add_flag("--json", opt->json, "Print one JSON object instead of tables");
  cmd->callback([&run, opt] { run = [opt] { return run_seq(*opt); }; });
}

}  // namespace hexi::cli
