// hexisim calibrate TRACE... --out FILE: a device profile fitted to measured engine traces
// (validation/calibrate.hpp).

#include <iostream>

#include "cli/commands.hpp"
#include "topologies/text.hpp"
#include "validation/calibrate.hpp"

namespace hexi::cli {
namespace {

struct CalibrateOptions {
  std::vector<std::string> traces;
  std::string out;
  std::string base;  // --base profile file
  bool json = false;
};

std::string seconds_text(double s) {
  return s >= 1e-3 ? fmt(s * 1e3, 2) + " ms" : fmt(s * 1e6, 1) + " us";
}

void print_calibration(const validation::Calibration& c, std::ostream& out) {
  for (const auto& t : c.terms) {
    out << t.term << ": " << t.points << " points (" << t.samples << " measured ops), R^2 "
        << fmt(t.r2, 4) << " (base profile " << fmt(t.r2_before, 4) << "), rms error "
        << fmt(100 * t.rms_rel, 1) << " % (base " << fmt(100 * t.rms_rel_before, 1) << " %), worst "
        << fmt(100 * t.max_rel, 1) << " %\n";
    Table params({"parameter", "base", "fitted", ""});
    for (const auto& p : t.params) {
      params.add({p.name, format("%.4g", p.before), format("%.4g", p.after),
                  p.fitted ? "" : "not exercised (kept)"});
    }
    params.print(out);
    Table classes({"op class", "points", "measured", "fitted", "base", "fitted error"});
    for (const auto& k : t.classes) {
      classes.add({k.op_class, std::to_string(k.points), seconds_text(k.measured_s),
                   seconds_text(k.fitted_s), seconds_text(k.before_s),
                   fmt(100 * (k.fitted_s / k.measured_s - 1), 1) + " %"});
    }
    classes.print(out);
    out << "\n";
  }
}

int run_calibrate(const CalibrateOptions& opt) {
  auto catalogs = load_shipped_catalogs();
  if (!catalogs) return report(catalogs.error());
  Profile base;
  if (!opt.base.empty()) {
    auto p = Profile::load(opt.base);
    if (!p) return report(p.error());
    base = std::move(*p);
  }
  std::vector<std::filesystem::path> inputs;
  std::vector<validation::MeasuredRun> runs;
  for (const auto& t : opt.traces) {
    std::cerr << "reading " << t << "...\n";
    auto run = validation::load_measured_run(t, catalogs->gpus, catalogs->models);
    if (!run) return report(run.error());
    for (const auto& f : run->scenario.inputs) inputs.push_back(f);
    inputs.emplace_back(t);
    runs.push_back(std::move(*run));
  }
  if (!opt.base.empty()) inputs.emplace_back(opt.base);
  if (Status s = check_output_file("--out", opt.out, inputs); !s) return report(s.error());
  auto c = validation::calibrate(runs, base);
  if (!c) return report(c.error());
  Json profile = c->profile.to_json();
  profile["comment"] = "fitted by hexisim calibrate from " + std::to_string(runs.size()) +
                       " trace(s); fit quality per term in each parameter's source";
  if (Status s = write_file(opt.out, dump_json(profile, 2) + "\n"); !s) return report(s.error());
  if (opt.json) {
    Json out = to_json(*c);
    out["profile"] = opt.out;
    print_json(out);
  } else {
    print_calibration(*c, std::cout);
    std::cout << "profile: " << opt.out
              << " (use it with --profile, or \"profile\" in a scenario)\n";
  }
  return 0;
}

}  // namespace

void add_calibrate_command(CLI::App& app, Runner& run) {
  auto opt = std::make_shared<CalibrateOptions>();
  auto* cmd = app.add_subcommand(
      "calibrate",
      "Fit a device profile (compute model per device type, link latency and bandwidth per "
      "transport) to measured traces of hexisim train --trace");
  cmd->add_option("TRACE", opt->traces, "Traces written by hexisim train --trace")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--out", opt->out, "Profile file to write (version 2)")->required();
  cmd->add_option("--base", opt->base,
                  "Profile to start from and keep where the traces say nothing (default: the "
                  "shipped defaults)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--json", opt->json, "Print the fit as one JSON object instead of tables");
  cmd->callback([&run, opt] { run = [opt] { return run_calibrate(*opt); }; });
}

}  // namespace hexi::cli
