// hexisim sweep SWEEP.json [--jobs N] [--out DIR] [--retry-failed] [--list] [--json]:
// computes every point of a sweep file (scenarios/sweep.hpp) into DIR/results.jsonl and
// DIR/results.csv, resumably, on local worker processes or across MPI ranks (under mpirun).

#include <cstdlib>
#include <iostream>

#include "cli/commands.hpp"
#include "studies/sweep_run.hpp"
#include "topologies/text.hpp"

namespace hexi::cli {
namespace {

struct SweepOptions {
  std::string file;
  std::string out;  // default: out/sweeps/<name>
  int jobs = 1;
  bool retry_failed = false;
  bool list = false;
  bool json = false;
};

// --list: the points and their keys, nothing computed.
int list_points(const SweepContext& ctx, bool json) {
  if (json) {
    Json points = Json::array();
    for (const auto& p : ctx.sweep.points) {
      points.push_back({{"index", p.index}, {"key", p.key}, {"point", ctx.sweep.point_json(p)}});
    }
    print_json({{"sweep", ctx.sweep.name}, {"points", points}});
    return 0;
  }
  std::cout << "sweep " << ctx.sweep.name << ": " << ctx.sweep.points.size() << " points\n";
  for (const auto& p : ctx.sweep.points) std::cout << "  " << p.index << "  " << p.key << "\n";
  return 0;
}

int run_sweep(const SweepOptions& opt) {
  const bool mpi = launcher_world_size() > 1;
  auto ctx = load_sweep_context(opt.file);
  if (!ctx) {
    // Under mpirun every rank reads the same file: one message is enough.
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (!mpi || rank == nullptr || std::string(rank) == "0") return report(ctx.error());
    return exit_code(ctx.error());
  }
  if (opt.list) return list_points(*ctx, opt.json);
  SweepRunOptions run;
  run.out = opt.out.empty() ? std::filesystem::path("out/sweeps") / ctx->sweep.name
                            : std::filesystem::path(opt.out);
  run.jobs = opt.jobs;
  run.retry_failed = opt.retry_failed;
  run.json = opt.json;
  auto summary = run_sweep_context(*ctx, run);
  if (!summary) return report(summary.error());
  if (summary->parent) print_sweep_summary(*summary, opt.json);
  return summary->interrupted ? 130 : 0;
}

std::string metrics_help() {
  std::string text = "Metrics a sweep file may keep (\"metrics\"; default: all):";
  for (const auto& m : sweep_metrics()) text += "\n  " + std::string(m.name) + ": " + m.what;
  return text;
}

}  // namespace

void add_sweep_command(CLI::App& app, Runner& run) {
  auto opt = std::make_shared<SweepOptions>();
  auto* cmd = app.add_subcommand(
      "sweep",
      "Compute every point of a sweep file (axes x metrics) into DIR/results.jsonl and "
      "DIR/results.csv; resumable (rerun the same command after an interruption), parallel "
      "(--jobs), across hosts under mpirun");
  cmd->add_option("SWEEP", opt->file, "Sweep file (scenarios/README.md \"Sweep file\")")
      ->required();
  cmd->add_option("--out", opt->out,
                  "Results folder (default: out/sweeps/<the sweep's name>); points already in "
                  "its results.jsonl are not computed again");
  cmd->add_option("--jobs", opt->jobs, "Worker processes computing points (per rank under mpirun)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_flag("--retry-failed", opt->retry_failed,
                "Compute the points whose row holds an error again (their rows are removed)");
  cmd->add_flag("--list", opt->list, "List the points and their keys; compute nothing");
  cmd->add_flag("--json", opt->json,
                "Print one JSON object (points, done, failed, computed, files) at the end");
  cmd->footer(metrics_help());
  cmd->callback([&run, opt] { run = [opt] { return run_sweep(*opt); }; });
}

}  // namespace hexi::cli
