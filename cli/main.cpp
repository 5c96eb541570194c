// hexisim: plan, simulate and run LLM training on heterogeneous GPU clusters.
// One executable, one subcommand per task (the contract: README command table). Only main() turns
// errors into exit codes: 0 success, 2 bad input (files, flags), 1 failure. An exception that
// escapes a command is a bug, but it still ends as one message and exit 1, never std::terminate
// (whose abort would, under mpirun, print once per rank and leave no exit code to act on).

#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "cli/options.hpp"

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
    if (rc != 0) {
      if (const std::string hint = hexi::cli::parse_hint(app, {argv + 1, argv + argc});
          !hint.empty()) {
        std::cerr << "hexisim: " << hint << "\n";
      }
    }
    return rc == 0 ? 0 : 2;
  }
  try {
    return run ? run() : 0;
  } catch (const std::exception& e) {
    std::cerr << "hexisim: error: internal error (a bug; please report it with the command): "
              << e.what() << "\n";
  } catch (...) {
    std::cerr << "hexisim: error: internal error (a bug; please report it with the command)\n";
  }
  return 1;
}
