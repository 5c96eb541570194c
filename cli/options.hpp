#pragma once
// CLI11 pieces shared by the subcommands' option definitions (the cmd_*.cpp files).

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/common.hpp"

namespace hexi::cli {

// SCENARIO (a file or shipped name; optional), the flags that ask without one or replace its
// parts (--mix, --cluster, --nic-GBps, --nics, --transport, --model, --global-batch,
// --micro-batch, --seq-len, --zero-stage, --precision, --recompute), --save-scenario and
// --profile: what load_scenario_flags reads.
void add_scenario_options(CLI::App* cmd, ScenarioFlags& flags);

// After a parse error, "did you mean": for an unknown subcommand the nearest one's name, for
// an unknown --flag of a subcommand the nearest flag it (or a subcommand above it) has, as one
// line ("plan has no option --scheduer: did you mean --scheduler?"); "" when nothing is near.
// `args`: the command line without the program name.
std::string parse_hint(const CLI::App& app, const std::vector<std::string>& args);

// --profile FILE: a device profile that replaces the scenario's (load_scenario_arg).
void add_profile_option(CLI::App* cmd, std::string& profile);

// Checks for flag values, on the text as typed. CLI11 2.1 lets "nan" through CLI::Range
// (every comparison with NaN is false), takes "inf", and turns "-1" or 2^70 given to an
// unsigned option into a wrapped or clamped number without a word.
CLI::Validator finite_in(double min, double max);  // a finite number in [min, max]
CLI::Validator finite_positive();                  // a finite number > 0
CLI::Validator unsigned_64();                      // decimal digits that fit in 64 bits
CLI::Validator utf8_text();                        // valid UTF-8 (it reaches JSON output)

}  // namespace hexi::cli
