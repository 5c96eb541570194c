// hexisim plot RESULTS --x AXIS --y METRIC [--by AXIS] [--kind K] [--out FILE.png|.svg]:
// a figure of sweep results, drawn by scripts/plot.py with Debian's matplotlib
// (/usr/bin/python3). The script reads the rows and reports bad fields (exit 2).

#include <cctype>
#include <filesystem>
#include <iostream>
#include <string_view>

#include "cli/commands.hpp"

namespace hexi::cli {
namespace {

namespace fs = std::filesystem;

struct PlotOptions {
  std::string results;
  std::string x, y, by;
  std::string kind = "auto";
  std::string out;  // default: <results folder>/<y>-vs-<x>[-by-<by>].png
  std::string title;
  std::vector<std::string> where;  // AXIS=VALUE filters
  bool log_x = false, log_y = false;
  bool json = false;
};

// RESULTS as given: a results.jsonl file or the sweep's folder holding one; with --kind
// breakdown, a simulation's report.json or the folder holding one.
Result<fs::path> results_file(const std::string& arg, bool breakdown) {
  const char* name = breakdown ? "report.json" : "results.jsonl";
  fs::path p = arg;
  std::error_code ec;
  if (fs::is_directory(p, ec)) p /= name;
  if (!fs::is_regular_file(p, ec)) {
    return bad_input("RESULTS " + arg + ": expected " +
                     (breakdown ? "a simulation's report.json" : "a sweep's results.jsonl") +
                     " or its folder (" + p.string() + " is not a file)");
  }
  return p;
}

// <y>-vs-<x>[-by-<by>][-<where>...].png (breakdown-by-<by>.png), beside RESULTS: each --where
// filter in the name (characters other than letters, digits and ._+=- as _), so figures of
// different filters do not replace each other.
std::string default_out(const fs::path& results, const PlotOptions& o) {
  std::string name = o.kind == "breakdown"
                         ? "breakdown-by-" + (o.by.empty() ? std::string("gpu") : o.by)
                         : o.y + "-vs-" + o.x + (o.by.empty() ? "" : "-by-" + o.by);
  for (const std::string& w : o.where) {
    name += '-';
    for (char c : w) {
      const bool keep = std::isalnum(static_cast<unsigned char>(c)) ||
                        std::string_view("._+=-").find(c) != std::string_view::npos;
      name += keep ? c : '_';
    }
  }
  return (results.parent_path() / (name + ".png")).string();
}

int run_plot(const PlotOptions& o) {
  const bool breakdown = o.kind == "breakdown";
  if (!breakdown && (o.x.empty() || o.y.empty())) {
    return report(bad_input("--x and --y are required (but with --kind breakdown)"));
  }
  auto results = results_file(o.results, breakdown);
  if (!results) return report(results.error());
  const std::string out = o.out.empty() ? default_out(*results, o) : o.out;
  const fs::path ext = fs::path(out).extension();
  if (ext != ".png" && ext != ".svg") {
    return report(bad_input("--out " + out + ": expected a .png or .svg file name"));
  }
  if (auto st = check_output_file("--out", out, {*results}); !st) return report(st.error());
  const fs::path script = data_root() / "scripts/plot.py";
  std::error_code ec;
  if (!fs::is_regular_file(script, ec)) {
    return report(failure(script.string() + " is missing (a broken installation?)"));
  }
  std::vector<std::string> args = {script.string(), results->string(), "--kind",
                                   o.kind,          "--out",           out};
  if (!breakdown) args.insert(args.end(), {"--x", o.x, "--y", o.y});
  if (!o.by.empty()) args.insert(args.end(), {"--by", o.by});
  if (!o.title.empty()) args.insert(args.end(), {"--title", o.title});
  for (const auto& w : o.where) args.insert(args.end(), {"--where", w});
  if (o.log_x) args.emplace_back("--log-x");
  if (o.log_y) args.emplace_back("--log-y");
  if (o.json) args.emplace_back("--quiet");
  const bool existed = fs::exists(out, ec);
  std::cout.flush();
  auto code = run_python(args);
  if (!code) return report(code.error());
  if (*code != 0) return *code == 2 ? 2 : 1;  // the script said why on stderr
  if (existed) std::cerr << "hexisim: note: replaced the existing " << out << "\n";
  if (o.json) print_json({{"files", {out}}});
  return 0;
}

}  // namespace

void add_plot_command(CLI::App& app, Runner& run) {
  auto opt = std::make_shared<PlotOptions>();
  auto* cmd = app.add_subcommand(
      "plot",
      "Draw sweep results (PNG or SVG, matplotlib): a metric against an axis, one line or bar "
      "per value of another axis; or where a simulated iteration goes (--kind breakdown)");
  cmd->add_option("RESULTS", opt->results,
                  "A sweep's results.jsonl, or its results folder; with --kind breakdown, a "
                  "simulation's report.json (simulate --out, seq --sim-out) or its folder")
      ->required();
  cmd->add_option("--x", opt->x,
                  "Axis (cluster, model, seq_len, global_batch, scheduler, fidelity, seed) or "
                  "metric for the x axis (required but with --kind breakdown)");
  cmd->add_option("--y", opt->y,
                  "Metric for the y axis, e.g. tokens_per_s, mfu (required but with --kind "
                  "breakdown)");
  cmd->add_option("--by", opt->by,
                  "One line / bar colour per value of this axis, e.g. scheduler; with --kind "
                  "breakdown one bar per gpu (default), stage, pipeline or device");
  cmd->add_option("--kind", opt->kind,
                  "line (mean per x), scatter (every point), bar (grouped bars), auto (line "
                  "when x is numeric, else bar), pareto (every point and the front of low x, "
                  "high y, e.g. --x usd_per_hour --y tokens_per_s), breakdown (a report's "
                  "iteration per device: "
                  "compute, TP, PP bubble, DP, CP ring, HP all-to-all, idle, stacked)")
      ->check(CLI::IsMember({"auto", "line", "scatter", "bar", "pareto", "breakdown"}))
      ->capture_default_str();
  cmd->add_option("--where", opt->where,
                  "Keep only the points whose axis (or metric) has this value, AXIS=VALUE, e.g. "
                  "cluster=A100+4090 (repeatable)")
      ->check(utf8_text());
  cmd->add_option("--out", opt->out,
                  "Figure to write, .png or .svg (default: <y>-vs-<x>[-by-<by>][-<where>...].png "
                  "beside RESULTS; an existing file is replaced, with a note)");
  cmd->add_option("--title", opt->title, "Title (default: \"<y> vs <x> by <by>\")")
      ->check(utf8_text());
  cmd->add_flag("--log-x", opt->log_x, "Logarithmic x axis");
  cmd->add_flag("--log-y", opt->log_y, "Logarithmic y axis");
  cmd->add_flag("--json", opt->json, "Print one JSON object: {\"files\": [the figure]}");
  cmd->callback([&run, opt] { run = [opt] { return run_plot(*opt); }; });
}

}  // namespace hexi::cli
