#pragma once
// Registration of every subcommand. Each add_* function creates its subcommand on
// `app` and, when that subcommand is parsed, sets `run` to its body.

#include <CLI/CLI.hpp>

#include "cli/common.hpp"
#include "cli/options.hpp"

namespace hexi::cli {

void add_info_command(CLI::App& app, Runner& run);
void add_cluster_commands(CLI::App& app, Runner& run);
void add_estimate_command(CLI::App& app, Runner& run);
void add_lower_command(CLI::App& app, Runner& run);
void add_simulate_command(CLI::App& app, Runner& run);
void add_train_command(CLI::App& app, Runner& run);
void add_plan_command(CLI::App& app, Runner& run);
void add_seq_command(CLI::App& app, Runner& run);
void add_sweep_command(CLI::App& app, Runner& run);
void add_plot_command(CLI::App& app, Runner& run);
void add_advise_command(CLI::App& app, Runner& run);
void add_reproduce_command(CLI::App& app, Runner& run);
void add_calibrate_command(CLI::App& app, Runner& run);
void add_validate_command(CLI::App& app, Runner& run);
void add_testbed_command(CLI::App& app, Runner& run);
void add_export_command(CLI::App& app, Runner& run);

inline void add_all_commands(CLI::App& app, Runner& run) {
  add_info_command(app, run);
  add_cluster_commands(app, run);
  add_estimate_command(app, run);
  add_lower_command(app, run);
  add_simulate_command(app, run);
  add_train_command(app, run);
  add_plan_command(app, run);
  add_seq_command(app, run);
  add_sweep_command(app, run);
  add_plot_command(app, run);
  add_advise_command(app, run);
  add_reproduce_command(app, run);
  add_export_command(app, run);
  add_calibrate_command(app, run);
  add_validate_command(app, run);
  add_testbed_command(app, run);
}

}  // namespace hexi::cli
