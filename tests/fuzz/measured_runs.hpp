#pragma once
// The runs fuzz_measured reads measured traces against, and that seeds.cpp writes traces of:
// the tiny shipped CPU scenario tiny-llama-cpu with two shipped plans (two pipeline stages
// with TP collectives and point-to-point messages, at stage granularity; one device, at layer
// granularity, the engine's), each with its simulated trace under the scenario's profile
// (`simulate --measured` compares against it). Their traces stay under 80 KB (libFuzzer
// mutates inputs up to the largest seed; a sequence mesh's ring steps take hundreds of KB). A
// measured trace names its plan file in its otherData; the run whose plan file has that name
// is the one it is read against.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "scenarios/scenario.hpp"
#include "scheduler/plan/plan_file.hpp"
#include "scheduler/program/lower_sequence.hpp"
#include "scheduler/program/trace_schema.hpp"
#include "sim/simulator.hpp"
#include "topologies/paths.hpp"
#include "validation/calibrate.hpp"

namespace hexi::fuzz {

struct FixedRun {
  validation::MeasuredRun run;  // origin, scenario, plan file and program; no trace
  std::string simulated_json;   // the simulator's trace.json of the program
  Trace simulated;
};

// Aborts with the message of a failed step (shipped data that must load, lower and simulate).
template <class T>
T fixed_run_must(Result<T> result, const std::string& what) {
  if (!result) {
    std::fprintf(stderr, "fuzz: %s: %s\n", what.c_str(), result.error().message.c_str());
    std::abort();
  }
  return std::move(*result);
}

inline FixedRun fixed_run(const std::string& scenario_name, const std::string& plan_name,
                          Granularity granularity, const GpuCatalog& gpus,
                          const ModelCatalog& models) {
  FixedRun f;
  validation::MeasuredRun& r = f.run;
  r.scenario = fixed_run_must(load_scenario(scenario_name, gpus, models), scenario_name);
  r.plan_file = (data_root() / "scenarios/plans" / (plan_name + ".json")).string();
  r.origin = plan_name + ".trace.json";
  const PlanFile plan = fixed_run_must(read_plan_file(r.plan_file), r.plan_file);
  LowerOptions lo;
  lo.granularity = granularity;
  lo.scenario = r.scenario.name;
  const Scenario& sc = r.scenario;
  r.program = fixed_run_must(
      lower_plan_file(plan, sc.cluster, sc.model, sc.training, lo, r.plan_file), r.plan_file);
  SimOptions so;
  so.scenario = sc.name;
  so.trace = true;
  auto out = fixed_run_must(simulate(r.program, sc.cluster, sc.model, sc.training, sc.profile, so),
                            "simulate");
  f.simulated_json = std::move(out.trace_json);
  const Json json = fixed_run_must(parse_json_text(f.simulated_json, "simulated"), "simulated");
  f.simulated = fixed_run_must(trace_from_json(json, "simulated"), "simulated trace");
  return f;
}

// The fixed runs, the first the default for a trace that names no known plan.
inline std::vector<FixedRun> fixed_runs(const GpuCatalog& gpus, const ModelCatalog& models) {
  std::vector<FixedRun> runs;
  runs.push_back(
      fixed_run("tiny-llama-cpu", "tiny-pp2-tp2-tp1", Granularity::kStage, gpus, models));
  runs.push_back(fixed_run("tiny-llama-cpu", "tiny-single", Granularity::kLayer, gpus, models));
  return runs;
}

}  // namespace hexi::fuzz
