// libFuzzer target: a measured trace (trace_from_json) as `hexisim simulate --measured`,
// `hexisim calibrate` and `hexisim validate` use it, against a fixed program lowered from a
// tiny shipped CPU scenario (measured_runs.hpp; the trace's otherData.plan_file picks which):
// compared per op class with the program's simulated trace (compare_traces, measured_ops),
// fitted into a profile (calibrate), and joined with itself as two rounds of one run
// (join_rounds). Each answers bad input or a result whose numbers are finite: the
// comparison's times >= 0 and its steps counted consistently, the calibrated profile written
// and read back (Profile::from_json), the joined rounds' steps as consistent as one run's.

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz.hpp"
#include "tests/fuzz/measured_runs.hpp"
#include "validation/calibrate.hpp"
#include "validation/trace_compare.hpp"
#include "validation/validate.hpp"

namespace {

using hexi::fuzz::FixedRun;

// The run whose plan file the trace names (its file name), else the first.
const FixedRun& run_of(const std::vector<FixedRun>& runs, const hexi::Json& other_data) {
  if (other_data.is_object() && other_data.contains("plan_file") &&
      other_data["plan_file"].is_string()) {
    const auto name = std::filesystem::path(other_data["plan_file"].get<std::string>()).filename();
    for (const FixedRun& f : runs) {
      if (std::filesystem::path(f.run.plan_file).filename() == name) return f;
    }
  }
  return runs.front();
}

bool finite_at_least_zero(double x) {
  return std::isfinite(x) && x >= 0;
}

void check_measured(const hexi::validation::MeasuredOps& m, const hexi::Program& program,
                    std::string_view what) {
  using namespace hexi;
  fuzz::check(m.steps >= 1 && (m.first == 0 || m.first == 1) && m.first < m.steps,
              "measured steps and warm-up out of range", what);
  fuzz::check(static_cast<int>(m.by_op.size()) == program.num_ops(),
              "measured ops not one list per program op", what);
  for (const auto& events : m.by_op) fuzz::check(!events.empty(), "a program op unmeasured", what);
  fuzz::check(!m.step_seconds.empty(), "no measured step span", what);
  for (double s : m.step_seconds) {
    fuzz::check(finite_at_least_zero(s), "a step span not finite and >= 0", what);
  }
}

void check_comparison(const hexi::validation::TraceComparison& c) {
  using namespace hexi;
  fuzz::check(c.measured_steps >= c.steps_used && c.steps_used >= 1, "steps used out of range");
  fuzz::check(
      finite_at_least_zero(c.simulated_iteration_s) && finite_at_least_zero(c.measured_iteration_s),
      "an iteration time not finite and >= 0", dump_json(validation::to_json(c)));
  for (const auto& k : c.classes) {
    fuzz::check(finite_at_least_zero(k.simulated_s) && finite_at_least_zero(k.measured_s),
                "an op class time not finite and >= 0", k.op_class);
  }
}

void check_calibration(const hexi::validation::Calibration& c) {
  using namespace hexi;
  for (const auto& t : c.terms) {
    for (const auto& p : t.params) {
      fuzz::check(std::isfinite(p.after), "a fitted parameter not finite", t.term + " " + p.name);
    }
  }
  const std::string written = dump_json(c.profile.to_json(), 2);
  auto reread = Profile::from_json(fuzz::reparse(written, "a calibrated profile is not JSON"),
                                   fuzz::kOrigin + " (calibrated profile)");
  if (!reread) fuzz::fail("a calibrated profile does not read back", reread.error().message);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hexi;
  static const ModelCatalog models = fuzz::must(ModelCatalog::load_shipped(), "shipped models");
  static const std::vector<FixedRun> runs = fuzz::fixed_runs(fuzz::shipped_gpus(), models);
  auto json = fuzz::parse(data, size);
  if (!json) return 0;
  auto trace = trace_from_json(*json, fuzz::kOrigin);
  if (!trace) return 0;
  const FixedRun& f = run_of(runs, trace->other_data);
  const Program& program = f.run.program;

  auto measured = validation::measured_ops(program, *trace, fuzz::kOrigin);
  if (measured) check_measured(*measured, program, "measured_ops");
  auto compared = validation::compare_traces(program, f.simulated, *trace, fuzz::kOrigin);
  fuzz::check(compared.ok() == measured.ok(), "compare_traces and measured_ops disagree");
  if (compared) check_comparison(*compared);

  validation::MeasuredRun run = f.run;
  run.trace = std::move(*trace);
  auto calibrated = validation::calibrate({run}, run.scenario.profile);
  if (calibrated) check_calibration(*calibrated);

  auto joined = validation::join_rounds({run, run});
  if (!joined) return 0;
  auto joined_measured = validation::measured_ops(program, joined->trace, fuzz::kOrigin);
  if (joined_measured) check_measured(*joined_measured, program, "measured_ops of joined rounds");
  return 0;
}
