// hexisim reproduce hexiscale|hexiseq [--quick] [--out DIR] [--jobs N]: runs a paper's
// experiment grid (a shipped sweep file, studies/reproduce.hpp) as a resumable sweep, then writes
// DIR/report.md (tables beside the paper's published figures) and its figures, and prints the
// report.

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <thread>

#include "cli/commands.hpp"
#include "studies/reproduce.hpp"
#include "studies/sweep_run.hpp"

namespace hexi::cli {
namespace {

namespace fs = std::filesystem;

struct ReproduceOptions {
  std::string paper;
  bool quick = false;
  std::string out;  // default: out/reproduce/<paper>[-quick]
  int jobs = 0;     // 0: the machine's cores, at most 8
  bool figures = true;
};

int default_jobs() {
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
}

// Draws the report's figures with scripts/plot.py; returns the markdown that shows those
// drawn (a figure that fails is reported on stderr and left out).
std::string draw_figures(const Report& rep, const fs::path& dir) {
  const fs::path script = data_root() / "scripts/plot.py";
  std::string md;
  for (const Figure& f : rep.figures) {
    std::vector<std::string> args = {script.string(), (dir / "results.jsonl").string()};
    args.insert(args.end(), f.args.begin(), f.args.end());
    args.insert(args.end(), {"--out", (dir / f.file).string(), "--quiet"});
    auto code = run_python(args);
    if (!code || *code != 0) {
      std::cerr << "hexisim: warning: figure " << f.file << " not drawn"
                << (code ? "" : ": " + code.error().message) << "\n";
      continue;
    }
    md += "![" + f.caption + "](" + f.file + ")\n\n";
  }
  return md.empty() ? md : "\n## Figures\n\n" + md;
}

int run_reproduce(const ReproduceOptions& o) {
  const std::string rel = reproduce_sweep_file(o.paper, o.quick);
  auto ctx = load_sweep_context((data_root() / rel).string());
  if (!ctx) return report(ctx.error());
  SweepRunOptions run;
  run.out = o.out.empty() ? fs::path("out/reproduce") / (o.paper + (o.quick ? "-quick" : ""))
                          : fs::path(o.out);
  run.jobs = o.jobs > 0 ? o.jobs : default_jobs();
  auto summary = run_sweep_local(*ctx, run);
  if (!summary) return report(summary.error());
  print_sweep_summary(*summary, false);
  if (summary->interrupted) return 130;

  auto store = ResultStore::open(run.out);
  if (!store) return report(store.error());
  auto rows = resume(*ctx, **store, false);
  if (!rows) return report(rows.error());
  store->reset();  // releases DIR/.lock
  const ResultTable table(rows->rows);
  const std::string command = "hexisim reproduce " + o.paper + (o.quick ? " --quick" : "");
  auto rep = reproduce_report(o.paper, table, o.quick, rel, command);
  if (!rep) return report(rep.error());
  if (o.figures) rep->markdown += draw_figures(*rep, run.out);
  const fs::path md = run.out / "report.md";
  if (auto st = write_file(md.string(), rep->markdown); !st) return report(st.error());
  std::cout << "\n" << rep->markdown << "\nwrote " << md.string() << "\n";
  return 0;
}

}  // namespace

void add_reproduce_command(CLI::App& app, Runner& run) {
  auto opt = std::make_shared<ReproduceOptions>();
  std::string papers;
  for (const Paper& p : reproducible_papers())
    papers += std::string("\n  ") + p.name + ": " + p.title;
  auto* cmd = app.add_subcommand(
      "reproduce",
      "Run a paper's experiment grid (a shipped sweep file) and write report.md: hexisim's "
      "tables beside the paper's published figures, what differs and why, and figures");
  std::vector<std::string> names;
  for (const Paper& p : reproducible_papers()) names.emplace_back(p.name);
  cmd->add_option("PAPER", opt->paper, "hexiscale or hexiseq")
      ->required()
      ->check(CLI::IsMember(names));
  cmd->add_flag("--quick", opt->quick,
                "The smaller grid (scenarios/sweeps/reproduce-PAPER-quick.json): a few minutes "
                "on 2 cores instead of up to an hour");
  cmd->add_option("--out", opt->out,
                  "Results folder (default: out/reproduce/PAPER[-quick]); a rerun computes only "
                  "the points missing from its results.jsonl, then rewrites the report");
  cmd->add_option("--jobs", opt->jobs, "Worker processes (default: the machine's cores, at most 8)")
      ->check(CLI::Range(1, 1024));
  cmd->add_flag(
      "--no-figures", [opt](std::int64_t) { opt->figures = false; },
      "Write the report without figures (no matplotlib needed)");
  cmd->footer(
      "Papers:" + papers +
      "\nAcross machines: `mpirun -np N hexisim sweep scenarios/sweeps/reproduce-PAPER.json "
      "--out DIR`, then `hexisim reproduce PAPER --out DIR` writes the report from the "
      "finished rows.\n");
  cmd->callback([&run, opt] { run = [opt] { return run_reproduce(*opt); }; });
}

}  // namespace hexi::cli
