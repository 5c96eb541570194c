// hexisim sweep SWEEP.json [--jobs N] [--out DIR] [--retry-failed] [--list] [--json]:
// computes every point of a sweep file (scenarios/sweep.hpp) into DIR/results.jsonl and
// DIR/results.csv, resumably, on local worker processes or across MPI ranks (under mpirun).

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/sweep_run.hpp"
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

Result<SweepContext> load_context(const std::string& file) {
  auto catalogs = load_catalogs();
  if (!catalogs) return catalogs.error();
  auto sweep = load_sweep(file, catalogs->gpus, catalogs->models, sweep_vocabulary());
  if (!sweep) return sweep.error();
  auto gpus = read_json_file(data_root() / "topologies/gpus.json");
  if (!gpus) return gpus.error();
  return SweepContext{std::move(*sweep), fnv1a64_hex(dump_json(*gpus))};
}

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

// Worker processes run the sweep's points; the parent appends their rows.
int run_local(const SweepContext& ctx, const SweepRunOptions& opt) {
  install_interrupt_handlers();
  auto store = ResultStore::open(opt.out);
  if (!store) return report(store.error());
  if (!store.value()->dropped().empty()) {
    std::cerr << "hexisim: note: " << store.value()->path().string()
              << " ended in a partial row (an interrupted write: \"" << store.value()->dropped()
              << "...\"); dropped it, its point is computed again\n";
  }
  auto todo = resume(ctx, **store, opt.retry_failed);
  if (!todo) return report(todo.error());
  const std::vector<int> points = todo->todo;
  const int jobs = std::max(1, std::min<int>(opt.jobs, static_cast<int>(points.size())));
  const std::string where = std::to_string(jobs) + " local worker" + (jobs > 1 ? "s" : "");
  if (!opt.json) {
    std::cout << "sweep " << ctx.sweep.name << ": " << ctx.sweep.points.size() << " points, "
              << ctx.sweep.points.size() - points.size() << " already in "
              << store.value()->path().string() << ", " << points.size() << " to compute on "
              << where << std::endl;
  }
  SweepRecorder rec(ctx, **store, std::move(*todo));
  ResultStore* s = store->get();
  auto pool = make_pool(ctx, jobs, [s] { s->close_in_child(); });
  const double start = steady_seconds();
  if (!points.empty()) {
    if (auto st = pool->start(); !st) return report(st.error());
  }
  std::size_t next = 0;
  while (!interrupted() && (next < points.size() || pool->busy() > 0)) {
    while (pool->idle() > 0 && next < points.size()) {
      if (auto st = pool->submit(points[next++]); !st) return report(st.error());
    }
    auto done = pool->wait(1000);
    if (!done) return report(done.error());
    for (const auto& d : *done) {
      if (auto st = rec.add(d); !st) return report(st.error());
    }
    rec.progress().tick();
  }
  pool->stop();
  rec.progress().finish();
  if (auto st = rec.write_csv(opt.out); !st) return report(st.error());
  print_summary(ctx, rec, opt, steady_seconds() - start, where, interrupted());
  return interrupted() ? 130 : 0;
}

int run_sweep(const SweepOptions& opt) {
  const bool mpi = launcher_world_size() > 1;
  auto ctx = load_context(opt.file);
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
  if (mpi) return run_sweep_mpi(*ctx, run);
  return run_local(*ctx, run);
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
