// hexisim validate SUITE: run plans on the testbed, calibrate on some, validate on the others
// (validation/validate.hpp).

#include <cstdlib>
#include <iostream>

#include "cli/commands.hpp"
#include "topologies/paths.hpp"
#include "topologies/text.hpp"
#include "validation/testbed.hpp"
#include "validation/validate.hpp"

namespace hexi::cli {
namespace {

namespace fs = std::filesystem;

struct ValidateOptions {
  std::string suite;
  std::string out = "validation-out";
  bool quick = false;
  bool json = false;
  bool local = false;
  bool keep_testbed = false;
  bool no_plot = false;
  bool rescore = false;
  int steps = 0;   // 0: the suite's
  int rounds = 0;  // 0: the suite's (1 with --quick)
};

std::vector<std::string> train_args(const std::string& exe, const validation::SuiteRun& r,
                                    int steps, const std::string& trace) {
  return {exe,       "train", r.scenario,  "--plan",  r.plan,  "--steps", std::to_string(steps),
          "--trace", trace,   "--backend", r.backend, "--json"};
}

// The suite with the flags' steps and rounds (one round with --quick).
Result<validation::Suite> load_suite(const ValidateOptions& opt) {
  auto catalogs = load_shipped_catalogs();
  if (!catalogs) return catalogs.error();
  auto suite = validation::load_suite(opt.suite, opt.quick, catalogs->gpus, catalogs->models);
  if (!suite) return suite.error();
  if (opt.steps > 0) suite->steps = opt.steps;
  if (opt.rounds > 0) {
    suite->rounds = opt.rounds;
  } else if (opt.quick) {
    suite->rounds = 1;
  }
  return suite;
}

// --rescore: nothing runs; every run's trace must be in --out already.
validation::Launcher rescore_launcher(const ValidateOptions& opt) {
  std::cerr << "hexisim: note: --rescore: no run is started; the traces in " << opt.out
            << " are calibrated and scored\n";
  return [](const validation::SuiteRun& r, int, const std::string& trace,
            const std::string&) -> Result<int> {
    if (fs::exists(trace)) return 0;
    return bad_input("--rescore: no trace of run \"" + r.name + "\" at " + trace +
                     " (run the suite into that folder first, without --rescore, with as "
                     "many --rounds)");
  };
}

// --local: plain mpirun on this machine (one process for a one-device run).
validation::Launcher local_launcher(const std::string& exe, bool cpu_suite) {
  if (cpu_suite) {
    std::cerr << "hexisim: note: --local runs the ranks with plain mpirun on this machine: no "
                 "shaped links, no CPU quotas (the measurements are not of the suite's "
                 "cluster)\n";
  }
  return [exe](const validation::SuiteRun& r, int steps, const std::string& trace,
               const std::string& log) {
    if (r.devices == 1) return validation::run_logged(train_args(exe, r, steps, trace), log);
    std::vector<std::string> args = {"mpirun", "--oversubscribe", "-np", std::to_string(r.devices)};
    for (auto& a : train_args(exe, r, steps, trace)) args.push_back(a);
    return validation::run_logged(args, log);
  };
}

// The testbed brought up, each run launched inside it.
Result<validation::Launcher> testbed_launcher(const std::string& exe, const ValidateOptions& opt,
                                              const validation::Suite& suite) {
  if (suite.backend != "cpu") {
    return bad_input(opt.suite + ": the suite runs the " + suite.backend +
                     " backend, and the testbed realises CPU clusters only: run it with "
                     "--local on a machine that has the suite's hardware");
  }
  auto up = validation::run_logged({exe, "testbed", "up", suite.cluster},
                                   (fs::path(opt.out) / "testbed-up.log").string());
  if (!up) return up.error();
  if (*up != 0) {
    return failure("hexisim testbed up " + suite.cluster + " failed (exit " + std::to_string(*up) +
                   "; its output: " + opt.out +
                   "/testbed-up.log); --local runs without the testbed");
  }
  return validation::Launcher([exe, cluster = suite.cluster](const validation::SuiteRun& r,
                                                             int steps, const std::string& trace,
                                                             const std::string& log) {
    std::vector<std::string> args = {exe, "testbed", "run", cluster, "--plan", r.plan, "--"};
    for (auto& a : train_args(exe, r, steps, trace)) args.push_back(a);
    return validation::run_logged(args, log);
  });
}

// report.json, report.md and (unless --no-plot) the plots in --out; the report printed.
Status write_report(const ValidateOptions& opt, const validation::ValidationReport& rep) {
  const fs::path out(opt.out);
  Json j = validation::to_json(rep);
  if (Status s = write_file((out / "report.json").string(), dump_json(j, 2) + "\n"); !s) return s;
  if (Status s = write_file((out / "report.md").string(), validation::to_markdown(rep)); !s)
    return s;
  if (!opt.no_plot) {
    for (const char* ext : {"png", "svg"}) {
      auto rc = run_python({(data_root() / "scripts" / "plot.py").string(),
                            (out / "report.json").string(), "--kind", "validation", "--out",
                            (out / (std::string("validation.") + ext)).string(), "--quiet"});
      if (!rc || *rc != 0) {
        std::cerr << "hexisim: warning: the plot was not drawn (scripts/plot.py failed)\n";
        break;
      }
    }
  }
  if (opt.json) {
    print_json(j);
  } else {
    std::cout << validation::to_markdown(rep) << "\nreport: " << (out / "report.md").string()
              << ", " << (out / "report.json").string() << "\n";
  }
  return {};
}

int run_validate(const ValidateOptions& opt) {
  auto suite = load_suite(opt);
  if (!suite) return report(suite.error());
  if (Status s = check_output_folder("--out", opt.out); !s) return report(s.error());
  const std::string exe = this_executable();
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  validation::Launcher launch;
  if (opt.rescore) {
    launch = rescore_launcher(opt);
  } else if (opt.local) {
    launch = local_launcher(exe, suite->backend == "cpu");
  } else {
    auto testbed = testbed_launcher(exe, opt, *suite);
    if (!testbed) return report(testbed.error());
    launch = std::move(*testbed);
  }
  auto rep = validation::validate(*suite, launch, opt.out,
                                  [](const std::string& line) { std::cerr << line << "\n"; });
  if (!opt.local && !opt.rescore && !opt.keep_testbed) {
    (void)validation::run_logged({exe, "testbed", "down"},
                                 (fs::path(opt.out) / "testbed-down.log").string());
  }
  if (!rep) return report(rep.error());
  if (Status s = write_report(opt, *rep); !s) return report(s.error());
  return 0;
}

}  // namespace

void add_validate_command(CLI::App& app, Runner& run) {
  auto opt = std::make_shared<ValidateOptions>();
  auto* cmd = app.add_subcommand(
      "validate",
      "Run a suite's plans on the testbed, calibrate a profile on some and report simulated "
      "against measured iteration time on the others (MAPE, Kendall tau, per op class)");
  cmd->add_option("SUITE", opt->suite, "Suite file (validation/suites/*.json)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--out", opt->out,
                  "Folder for traces, logs, profile.json, report.md/json and the plots");
  cmd->add_flag("--quick", opt->quick, "Only the suite's \"quick\" runs (the CI check)");
  cmd->add_option("--steps", opt->steps, "Training steps per run (default: the suite's)")
      ->check(CLI::Range(3, 1000));
  cmd->add_option("--rounds", opt->rounds,
                  "Executions of every run, interleaved, joined into one measurement (default: "
                  "the suite's; 1 with --quick)")
      ->check(CLI::Range(1, 100));
  cmd->add_flag("--local", opt->local,
                "Run on this machine instead of the testbed (plain mpirun; a one-device run in "
                "one process): for a suite of this machine's own hardware (a GPU suite), or "
                "to try a CPU suite without shaped links or CPU quotas");
  cmd->add_flag("--keep-testbed", opt->keep_testbed, "Leave the testbed up afterwards");
  cmd->add_flag("--rescore", opt->rescore,
                "Run nothing: calibrate and score the traces an earlier validate left in --out "
                "(after a change to the simulator or the catalog)");

  cmd->add_flag("--no-plot", opt->no_plot, "Do not draw validation.png/svg");
  cmd->add_flag("--json", opt->json, "Print the report as one JSON object");
  cmd->callback([&run, opt] { run = [opt] { return run_validate(*opt); }; });
}

}  // namespace hexi::cli
