// The Python module's C++ half (`hexisim._hexisim`, pybind11): the planning library's calls
// with JSON in and out, as the CLI's --json prints them. The package (hexisim/__init__.py)
// turns the JSON into dicts and DataFrames. Bad input raises ValueError, failures
// RuntimeError, each with the message the CLI prints. The long calls release the GIL.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "scenarios/question.hpp"
#include "scenarios/scenario.hpp"
#include "scheduler/estimate/estimate.hpp"
#include "scheduler/plan/plan_file.hpp"
#include "scheduler/program/lower_sequence.hpp"
#include "scheduler/scheduler.hpp"
#include "studies/planning.hpp"
#include "studies/sweep_run.hpp"

namespace py = pybind11;

namespace hexi {
namespace {

[[noreturn]] void raise(const Error& e) {
  if (e.kind == ErrorKind::kBadInput) throw py::value_error(e.message);
  throw std::runtime_error(e.message);
}

template <class T>
T value_or_raise(Result<T> r) {
  if (!r) raise(r.error());
  return std::move(*r);
}

const ShippedCatalogs& catalogs() {
  static const ShippedCatalogs c = value_or_raise(load_shipped_catalogs());
  return c;
}

Json parse(const std::string& text, const char* what) {
  auto j = parse_json_text(text, what);
  if (!j) raise(j.error());
  return std::move(*j);
}

// A scenario: `spec` a shipped name or file path ("" for none) or a scenario document
// (JSON text, `spec_json`), with the parts of `parts_json` (an object of the question's fields
// by their keyword names) replacing or filling its fields.
Scenario scenario_of(const std::string& spec, const std::string& spec_json,
                     const std::string& parts_json) {
  ScenarioQuestion q;
  q.base = spec;
  const Json parts = parse(parts_json, "the keyword arguments");
  // A part's value of the expected JSON type, or ValueError naming the keyword.
  auto get = [&](const char* key, auto& into, const char* expected) {
    if (!parts.contains(key)) return;
    using T = std::remove_reference_t<decltype(into)>;
    const Json& v = parts[key];
    const bool ok = std::is_same_v<T, std::string> ? v.is_string() : v.is_number();
    if (!ok)
      throw py::value_error(std::string(key) + "=: expected " + expected + ", got " + v.dump());
    into = v.get<typename std::conditional_t<std::is_same_v<T, std::string>, std::string,
                                             typename T::value_type>>();
  };
  auto text = [&](const char* key, std::string& into) { get(key, into, "a string"); };
  auto integer = [&](const char* key, std::optional<int>& into) { get(key, into, "a number"); };
  text("mix", q.mix);
  text("cluster", q.cluster);
  get("nic_GBps", q.nic_GBps, "a number");
  integer("nics", q.nics_per_machine);
  text("transport", q.transport);
  text("model", q.model);
  integer("global_batch", q.global_batch);
  integer("micro_batch", q.micro_batch);
  integer("seq_len", q.seq_len);
  integer("zero_stage", q.zero_stage);
  text("precision", q.precision);
  text("recompute", q.recompute);
  std::optional<Json> base;
  if (!spec_json.empty()) base = parse(spec_json, "the scenario");
  if (!base && !q.any_part()) {
    if (spec.empty()) {
      throw py::value_error(
          "no scenario: give a shipped name, a file path or a dict, or mix= (or cluster=) and "
          "model=");
    }
    return value_or_raise(load_scenario(spec, catalogs().gpus, catalogs().models));
  }
  AskedScenario asked = value_or_raise(ask_scenario(q, catalogs().gpus, base ? &*base : nullptr));
  const std::string origin = asked.file.empty() ? "<python>" : asked.file.string();
  return value_or_raise(scenario_from_json(asked.json, origin, catalogs().gpus, catalogs().models));
}

// What a scenario resolves to: name, cluster, GPUs, model, training config, scheduler, seed.
std::string py_scenario_json(const std::string& spec, const std::string& spec_json,
                             const std::string& parts_json) {
  const Scenario sc = scenario_of(spec, spec_json, parts_json);
  return dump_json(Json{{"name", sc.name},
                        {"cluster", sc.cluster.name()},
                        {"gpus", sc.cluster.num_devices()},
                        {"model", sc.model.name},
                        {"training", to_json(sc.training)},
                        {"scheduler", sc.scheduler},
                        {"seed", sc.seed}});
}

// A plan document: JSON text, a file path, or (both empty) the scenario's "plan".
PlanFile plan_of(const Scenario& sc, const std::string& path, const std::string& json) {
  if (!json.empty()) return value_or_raise(plan_file_from_json(parse(json, "plan"), "plan"));
  if (!path.empty()) return value_or_raise(read_plan_file(path));
  if (!sc.plan) {
    throw py::value_error(
        "no plan: give plan= (a dict, e.g. plan(...)[\"plan\"], or a file "
        "path); the scenario names none");
  }
  return value_or_raise(read_plan_file(sc.plan->string()));
}

std::string py_plan(const std::string& spec, const std::string& spec_json,
                    const std::string& parts_json, const std::string& scheduler,
                    std::optional<std::uint64_t> seed, double time_budget_s,
                    std::optional<int> verify) {
  const Scenario sc = scenario_of(spec, spec_json, parts_json);
  SearchOptions so;
  so.seed = seed.value_or(sc.seed);
  so.time_budget_s = time_budget_s;
  const SearchResult result = value_or_raise([&] {
    py::gil_scoped_release free;
    return plan_pipeline(scheduler, sc, so, verify);
  }());
  Json out = result.to_json();
  out["scenario"] = sc.name;
  out["seed"] = so.seed;
  out["plan"] = to_json(result.plan);
  Estimate est = result.estimate;
  est.iteration_time_range_s = CostModel(sc.cluster, sc.model, sc.training, sc.profile)
                                   .iteration_time_range(result.plan, est);
  out["estimate"] = est.to_json();
  return dump_json(out);
}

std::string py_estimate(const std::string& spec, const std::string& spec_json,
                        const std::string& parts_json, const std::string& plan_path,
                        const std::string& plan_json) {
  const Scenario sc = scenario_of(spec, spec_json, parts_json);
  const PlanFile file = plan_of(sc, plan_path, plan_json);
  if (!file.plan) throw py::value_error("estimate takes a pipeline plan (seq() scores layouts)");
  if (auto st = validate_plan(*file.plan, sc.cluster, sc.model, sc.training, "plan"); !st) {
    raise(st.error());
  }
  Json out = CostModel(sc.cluster, sc.model, sc.training, sc.profile)
                 .estimate_with_range(*file.plan)
                 .to_json();
  out["scenario"] = sc.name;
  return dump_json(out);
}

std::string py_simulate(const std::string& spec, const std::string& spec_json,
                        const std::string& parts_json, const std::string& plan_path,
                        const std::string& plan_json, const std::string& fidelity) {
  const Scenario sc = scenario_of(spec, spec_json, parts_json);
  const PlanFile file = plan_of(sc, plan_path, plan_json);
  LowerOptions lo;
  lo.scenario = sc.name;
  const auto g = kGranularityNames.parse(fidelity);
  if (!g) throw py::value_error("fidelity: expected " + kGranularityNames.list("\"", " or "));
  lo.granularity = *g;
  const SimReport report = value_or_raise([&] {
    py::gil_scoped_release free;
    return simulate_untraced(sc,
                             lower_plan_file(file, sc.cluster, sc.model, sc.training, lo, "plan"));
  }());
  return dump_json(report.to_json());
}

std::string py_seq(const std::string& spec, const std::string& spec_json,
                   const std::string& parts_json, const std::string& scheduler,
                   double time_budget_s) {
  const Scenario sc = scenario_of(spec, spec_json, parts_json);
  SchedulerOptions o;
  o.sequence.time_budget_s = time_budget_s;
  if (scheduler == "best") {
    const SequencePlanning best = value_or_raise([&] {
      py::gil_scoped_release free;
      return plan_sequence(sc, o);
    }());
    Json out;
    if (best.layout) {
      out = best.layout->to_json(best.layout_scheduler);
    } else {
      const MeshPipelineResult& p = *best.pipeline;
      out = p.to_json(mesh_pipeline_zero_stage(sc.training, o.sequence));
      out["scheduler"] = "mesh-pipeline";
      out["fits"] = p.estimate.feasible;
    }
    out["scenario"] = sc.name;
    out["best_of"] = best.rows;
    return dump_json(out);
  }
  const Scheduled s = value_or_raise([&] {
    py::gil_scoped_release free;
    return run_scheduler(scheduler, sc, o);
  }());
  if (!s.sequence) {
    throw py::value_error(scheduler + " is not a sequence scheduler (seq: " +
                          scheduler_names(SchedulerKind::kSequence) + ")");
  }
  Json out = s.sequence->to_json(scheduler);
  out["scenario"] = sc.name;
  return dump_json(out);
}

// Runs a sweep file into `out` (resumable, `jobs` worker processes); its rows as JSON lines.
std::string py_sweep(const std::string& file, const std::string& out, int jobs) {
  const SweepContext ctx = value_or_raise(load_sweep_context(file));
  SweepRunOptions opt;
  opt.out = out;
  opt.jobs = jobs;
  opt.json = true;  // no opening line on stdout
  value_or_raise([&] {
    py::gil_scoped_release free;
    return run_sweep_local(ctx, opt);
  }());
  std::ifstream in(std::filesystem::path(out) / "results.jsonl");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> split_names(const std::string& list) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at < list.size();) {
    const std::size_t end = std::min(list.find(", ", at), list.size());
    out.push_back(list.substr(at, end - at));
    at = end + 2;
  }
  return out;
}

std::string py_info() {
  return dump_json(Json{{"gpus", split_names(catalogs().gpus.names())},
                        {"models", split_names(catalogs().models.names())},
                        {"clusters", shipped_clusters()},
                        {"scenarios", shipped_scenarios()},
                        {"pipeline_schedulers", scheduler_names(SchedulerKind::kPipeline)},
                        {"sequence_schedulers", scheduler_names(SchedulerKind::kSequence)}});
}

}  // namespace
}  // namespace hexi

PYBIND11_MODULE(_hexisim, m) {
  m.doc() = "hexisim's planning library (the package hexisim wraps it)";
  m.def("info", &hexi::py_info);
  m.def("scenario", &hexi::py_scenario_json);
  m.def("plan", &hexi::py_plan);
  m.def("estimate", &hexi::py_estimate);
  m.def("simulate", &hexi::py_simulate);
  m.def("seq", &hexi::py_seq);
  m.def("sweep", &hexi::py_sweep);
}
