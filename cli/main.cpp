// hexisim: plan, simulate and run LLM training on heterogeneous GPU clusters.
// One executable, one subcommand per task (the contract: README command table). Only main() turns
// errors into exit codes: 0 success, 2 bad input (files, flags), 1 failure.

#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"hexisim: plan, simulate and run LLM training on heterogeneous GPU clusters"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "hexisim 0.1.0");
  hexi::cli::Runner run;
  hexi::cli::add_all_commands(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return run ? run() : 0;
}
