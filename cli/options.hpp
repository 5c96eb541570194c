#pragma once
// CLI11 pieces shared by the subcommands' option definitions (the cmd_*.cpp files).

#include <string>

#include <CLI/CLI.hpp>

#include "cli/common.hpp"

namespace hexi::cli {

// SCENARIO (a file or shipped name; optional), the flags that ask without one or replace its
// parts (--mix, --cluster, --nic-GBps, --nics, --transport, --model, --global-batch,
// --micro-batch, --seq-len, --zero-stage, --precision, --recompute), --save-scenario and
// --profile: what load_scenario_flags reads.
void add_scenario_options(CLI::App* cmd, ScenarioFlags& flags);

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
