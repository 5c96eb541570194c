#pragma once
// Validation (`hexisim validate SUITE`): measured against simulated on plans the calibration
// never saw.
//
// A suite file (validation/suites/*.json) names a cluster, the runs whose traces calibrate
// the profile and a disjoint set of runs that validate it (each a scenario and a plan):
//   {"version": 1, "name": "...", "cluster": "testbed-cpu-3m", "steps": 6, "rounds": 2,
//    "backend": "cpu",
//    "calibration": [{"name": "cal-...", "what": "...", "scenario": "...", "plan": "..."}],
//    "validation": [{"name": "...", "what": "TP across a shaped link", ...}],
//    "quick": {"calibration": ["cal-..."], "validation": ["..."]},
//    "compare": ["hexiscale-plan-run", "uniform-plan-run"]}
// Paths are relative to the suite file; scenarios may be shipped names. Every run's
// scenario must use the suite's cluster. `compare` names two validation runs whose measured
// ratio is set against the simulated one (the scheduler's plan against the uniform one).
// `backend` is the engine's (`hexisim train --backend`): "cpu" (the default) or "cuda".
// `rounds` (default 1): every run is executed that many times, interleaved (round k runs
// every calibration and validation run once, in suite order), and each run's rounds are
// joined into one measurement (join_rounds), so that a drift of the machine's speed over
// the minutes of a suite reaches calibration and validation alike.
//
// The steps: every run is executed by the engine (`hexisim train --trace`, launched by the
// caller: on the testbed, or plain mpirun); the calibration runs' traces are fitted
// (calibrate.hpp); every validation run is simulated at layer fidelity (the program the
// engine ran) with the calibrated profile and with the uncalibrated defaults, and compared
// with its trace per op class (trace_compare.hpp). Per run: the measured iteration (median
// over the steps after the first, with min and max), the simulated ones and their errors;
// over the runs: MAPE, the worst error, and Kendall's tau between the measured and the
// simulated ranking (with every discordant pair and its measured difference).

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "topologies/json_input.hpp"
#include "topologies/status.hpp"
#include "validation/calibrate.hpp"
#include "validation/trace_compare.hpp"

namespace hexi::validation {

struct SuiteRun {
  std::string name;
  std::string what;             // what the run exercises, for the report
  std::string scenario;         // shipped name or resolved path
  std::string plan;             // resolved path
  int devices = 0;              // ranks the engine needs (the plan's devices)
  std::string backend = "cpu";  // the suite's engine backend: cpu | cuda
};

struct Suite {
  std::string name;
  std::string description;
  std::filesystem::path file;
  std::string cluster;  // shipped name or resolved path
  int steps = 6;
  int rounds = 1;               // executions of every run, interleaved
  std::string backend = "cpu";  // the engine's, for every run: cpu | cuda
  std::vector<SuiteRun> calibration;
  std::vector<SuiteRun> validation;
  std::optional<std::pair<std::string, std::string>> compare;  // (plan, baseline)
};

// The canonical path of a scenario's cluster file (runs of a suite share one cluster).
std::string cluster_file_of(const Scenario& s);

// Loads a suite; `quick` keeps only its "quick" lists. Errors name the file and JSON path.
Result<Suite> load_suite(const std::string& path, bool quick, const GpuCatalog& gpus,
                         const ModelCatalog& models);

// Runs `hexisim train SCENARIO --plan PLAN --steps N --trace TRACE` on `devices` ranks,
// its output into `log`; returns the exit status.
using Launcher = std::function<Result<int>(const SuiteRun& run, int steps, const std::string& trace,
                                           const std::string& log)>;

// Rounds of one run (the same program) as one measurement: the first round's steps, then
// each later round's steps after its first (which warms up again), numbered on. Refused
// when the rounds' programs differ.
Result<MeasuredRun> join_rounds(std::vector<MeasuredRun> rounds);

struct RunResult {
  std::string name, what;
  std::string trace;
  double measured_s = 0;  // median over the steps used
  double measured_min_s = 0, measured_max_s = 0;
  int steps_used = 0;
  std::vector<double> round_measured_s;  // each round's median (Suite::rounds > 1)
  double simulated_s = 0;                // calibrated profile
  double simulated_default_s = 0;        // shipped defaults
  double error() const { return simulated_s / measured_s - 1; }
  double error_default() const { return simulated_default_s / measured_s - 1; }
  TraceComparison classes;  // per op class, calibrated profile
};

struct Ranking {
  double tau = 0;
  std::vector<std::string> discordant;  // "a vs b: measured x % apart"
};

// The measurement against itself (Suite::rounds > 1): each round's medians taken as a prediction
// of another round's, over every ordered pair of rounds: the mean of the pairs' MAPE, the
// worst error of any plan, the lowest Kendall tau of any pair: the noise that any score
// against one run carries.
struct Reproducibility {
  double mape = 0, max_error = 0, tau = 1;
  int pairs = 0;  // ordered pairs of rounds
};

struct ValidationReport {
  std::string suite;
  int rounds = 1;  // executions of every run (Suite::rounds)
  std::string profile_file;
  Calibration calibration;
  std::vector<RunResult> runs;
  double mape = 0, max_error = 0;  // |error|, calibrated
  double mape_default = 0, max_error_default = 0;
  Ranking ranking, ranking_default;
  std::optional<Reproducibility> reproducibility;  // rounds > 1
  // compare: measured and simulated ratio of the baseline's iteration to the plan's.
  std::optional<std::pair<std::string, std::string>> compare;
  double compare_measured = 0, compare_simulated = 0;
};

// Progress lines go to `log` (one per step of the work).
Result<ValidationReport> validate(const Suite& suite, const Launcher& launch,
                                  const std::filesystem::path& out_dir,
                                  const std::function<void(const std::string&)>& log);

Json to_json(const ValidationReport& r);
std::string to_markdown(const ValidationReport& r);

// Kendall's tau-a of two orderings of the same items (1: the same order).
Ranking kendall_tau(const std::vector<std::string>& names, const std::vector<double>& measured,
                    const std::vector<double>& simulated);

}  // namespace hexi::validation
