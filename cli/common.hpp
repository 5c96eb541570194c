#pragma once
// Shared pieces of the hexisim subcommands: catalogs, error reporting, tables. No CLI11 here
// (its header costs seconds per file): the option helpers are in cli/options.hpp.

#include <filesystem>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <string>
#include <vector>

#include "scenarios/model.hpp"
#include "scenarios/question.hpp"
#include "scenarios/scenario.hpp"
#include "topologies/gpu_catalog.hpp"
#include "topologies/json_input.hpp"
#include "topologies/paths.hpp"
#include "topologies/status.hpp"

namespace hexi {
inline namespace studies {
struct SweepSummary;  // studies/sweep_run.hpp
}  // namespace studies
}  // namespace hexi

namespace hexi::cli {

// What a parsed subcommand runs; returns the process exit code.
using Runner = std::function<int()>;

// Prints "hexisim: error: <message>" to stderr; returns 2 (bad input) or 1 (failure).
int report(const Error& error);

// The note of a cluster that names no network transport (unnamed_transport_note), on stderr.
void note_unnamed_transport(const Cluster& c);

// Loads a scenario by name or path with the shipped catalogs; with a `profile` file, that
// profile replaces the scenario's (--profile).
Result<Scenario> load_scenario_arg(const std::string& ref, const std::string& profile = {});

// A command's scenario: a file or shipped name, parts asked on the command line, or both
// (cli/options.hpp's add_scenario_options).
struct ScenarioFlags {
  ScenarioQuestion question;  // question.base: the SCENARIO argument
  std::string save;           // --save-scenario: write the scenario the flags made here
  std::string profile;        // --profile
};

// The scenario of `flags`: load_scenario_arg when no part is asked, else the asked scenario
// (scenarios/question.hpp), checked, then written to --save-scenario when given.
Result<Scenario> load_scenario_flags(const ScenarioFlags& flags);

// The scenario as a later command line names it: the --save-scenario file, else the SCENARIO
// and the parts asked.
std::string scenario_command_text(const ScenarioFlags& flags);

// One JSON object on stdout.
void print_json(const Json& json);

// Every file a command reads: the scenario's (scenario, cluster, plan, profile) and
// those named on its command line (empty names are skipped).
std::vector<std::filesystem::path> command_inputs(const Scenario& scenario,
                                                  std::initializer_list<std::string> more = {});

// Writes text to a file atomically (topologies/paths.hpp), creating parent folders;
// names the file on failure, and says on stderr when it replaced an existing file.
// Output paths are checked before the work with check_output_file.
Status write_file(const std::string& path, const std::string& text);

// A line of the planning call's log (studies/planning.hpp) on stderr: "hexisim: LINE".
void print_planning_note(const std::string& line);

// The end of a sweep's run: one JSON object, or the done/failed counts and the files written.
void print_sweep_summary(const SweepSummary& summary, bool json);

// A plain aligned text table.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& out) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// Fixed-point formatting: fmt(3.14159, 2) == "3.14".
std::string fmt(double value, int decimals);

// The path of this hexisim executable (/proc/self/exe; "hexisim" when unreadable).
std::string this_executable();

// Runs /usr/bin/python3 (Debian's, with python3-matplotlib) with `args`, no shell; returns
// its exit status.
Result<int> run_python(const std::vector<std::string>& args);

}  // namespace hexi::cli
