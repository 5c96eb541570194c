#include "studies/sweep_run.hpp"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>

#include "scenarios/scenario.hpp"
#include "topologies/paths.hpp"
#include "topologies/text.hpp"

namespace hexi {
inline namespace studies {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;

void on_interrupt(int) {
  g_interrupted = 1;
}

// The first digest of `row` that differs from `want`, as "cluster (a vs b)"; empty if none.
std::string digest_change(const Json& row, const Json& want) {
  const Json have = row.value("digests", Json::object());
  for (const auto& [name, value] : want.items()) {
    const Json old = have.contains(name) ? have[name] : Json();
    if (old != value)
      return name + " (" + (old.is_string() ? old.get<std::string>() : "none") + " in the file, " +
             value.get<std::string>() + " now)";
  }
  return "";
}

}  // namespace

bool interrupted() {
  return g_interrupted != 0;
}

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: poll() returns EINTR and the loop sees the flag
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a dead worker's pipe: EPIPE, seen by the pool
}

Result<Resume> resume(const SweepContext& ctx, ResultStore& store, bool retry_failed) {
  if (retry_failed) {
    if (auto st = store.keep_only([](const Json& r) { return !r.contains("error"); }); !st) {
      return st.error();
    }
  }
  std::map<std::string, int> by_key;
  for (const SweepPoint& p : ctx.sweep.points) by_key[p.key] = p.index;
  const std::string file = store.path().string();
  const std::string advice =
      "; it holds another sweep's results: choose another --out, or move the file away";
  Resume r;
  std::set<int> done;
  for (std::size_t i = 0; i < store.rows().size(); ++i) {
    Json row = store.rows()[i];
    const std::string where = file + ": row " + std::to_string(i + 1) + ": ";
    const std::string key = row["key"].get<std::string>();
    auto it = by_key.find(key);
    if (it == by_key.end()) {
      return bad_input(where + "point \"" + key + "\" is not a point of " +
                       ctx.sweep.file.string() + advice);
    }
    const SweepPoint& p = ctx.sweep.points[it->second];
    if (auto change = digest_change(row, point_digests(ctx, p)); !change.empty()) {
      return bad_input(where + "point \"" + key + "\" was computed from other inputs: its " +
                       change + " digest differs" + advice);
    }
    if (!done.insert(p.index).second) {
      return bad_input(where + "a second row for point \"" + key +
                       "\" (two sweeps wrote this folder?); move the file away to start over");
    }
    row["index"] = p.index;  // the sweep file may have grown since
    row["point"] = ctx.sweep.point_json(p);
    r.rows.push_back(std::move(row));
  }
  for (const SweepPoint& p : ctx.sweep.points) {
    if (!done.count(p.index)) r.todo.push_back(p.index);
  }
  return r;
}

Progress::Progress(int total, int done, int failed, int todo)
    : tty_(::isatty(STDERR_FILENO) != 0),
      total_(total),
      done_(done),
      failed_(failed),
      todo_(todo),
      start_(steady_seconds()) {}

void Progress::point(bool failed) {
  ++done_;
  ++computed_;
  failed_ += failed ? 1 : 0;
  tick();
}

void Progress::tick() {
  const double now = steady_seconds();
  if (now - last_draw_ < (tty_ ? 0.2 : 10.0)) return;
  last_draw_ = now;
  draw(false);
}

void Progress::finish() {
  draw(true);
}

void Progress::draw(bool final_line) {
  if (todo_ == 0) return;
  const double elapsed = steady_seconds() - start_;
  const int left = total_ - done_;
  std::string eta = "--";
  if (left == 0) {
    eta = "0s";
  } else if (computed_ > 0) {
    eta = duration_text(elapsed / computed_ * left);
  }
  std::string text = std::to_string(done_) + "/" + std::to_string(total_) + " points, " +
                     std::to_string(failed_) + " failed, " + duration_text(elapsed) +
                     " elapsed, ETA " + eta;
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled =
        total_ > 0 ? static_cast<int>(static_cast<double>(kWidth) * done_ / total_) : 0;
    std::fprintf(stderr, "\r[%s%s] %s\x1b[K%s", std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, '.').c_str(), text.c_str(), final_line ? "\n" : "");
  } else {
    std::fprintf(stderr, "sweep: %s\n", text.c_str());
  }
  std::fflush(stderr);
}

namespace {

int count_failed(const std::vector<Json>& rows) {
  int n = 0;
  for (const Json& r : rows) n += r.contains("error") ? 1 : 0;
  return n;
}

}  // namespace

SweepRecorder::SweepRecorder(const SweepContext& ctx, ResultStore& store, Resume resume)
    : ctx_(ctx),
      store_(store),
      rows_(std::move(resume.rows)),
      todo_(static_cast<int>(resume.todo.size())),
      progress_(static_cast<int>(ctx.sweep.points.size()), static_cast<int>(rows_.size()),
                count_failed(rows_), todo_) {}

Status SweepRecorder::add(const WorkerPool::Done& done) {
  const SweepPoint& p = ctx_.sweep.points[static_cast<std::size_t>(done.index)];
  std::string row = done.row;
  if (done.died) {
    row = error_row(ctx_, p, failure(*done.died + " (rerun with --retry-failed to try it again)"),
                    done.wall_s);
  }
  auto parsed = parse_json_text(row, "a sweep worker's row");
  if (!parsed || !parsed->is_object() || (*parsed).value("key", "") != p.key) {
    return failure("internal error: a sweep worker sent a bad row for point " + p.key);
  }
  if (auto st = store_.append(row); !st) return st;
  ++computed_;
  progress_.point(parsed->contains("error"));
  rows_.push_back(std::move(*parsed));
  return {};
}

Status SweepRecorder::write_csv(const std::filesystem::path& dir) const {
  return write_file_atomically(dir / "results.csv", results_csv(rows_, ctx_.sweep.metrics));
}

std::unique_ptr<WorkerPool> make_pool(const SweepContext& ctx, int jobs,
                                      std::function<void()> in_child) {
  const SweepContext* c = &ctx;
  return std::make_unique<WorkerPool>(
      jobs, [c](int i) { return run_point(*c, c->sweep.points[static_cast<std::size_t>(i)]); },
      std::move(in_child));
}

int launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* v = std::getenv(name); v != nullptr && std::atoi(v) > 0) return std::atoi(v);
  }
  return 1;
}

SweepSummary sweep_summary(const SweepContext& ctx, const SweepRecorder& rec,
                           const SweepRunOptions& opt, double wall_s, const std::string& where,
                           bool was_interrupted) {
  SweepSummary s;
  s.sweep = ctx.sweep.name;
  s.points = static_cast<int>(ctx.sweep.points.size());
  s.done = static_cast<int>(rec.rows().size());
  s.failed = count_failed(rec.rows());
  s.computed = rec.computed();
  s.interrupted = was_interrupted;
  s.wall_time_s = wall_s;
  s.workers = where;
  s.jsonl = opt.out / "results.jsonl";
  s.csv = opt.out / "results.csv";
  return s;
}

Result<SweepContext> load_sweep_context(const std::string& file) {
  auto catalogs = load_shipped_catalogs();
  if (!catalogs) return catalogs.error();
  auto sweep = load_sweep(file, catalogs->gpus, catalogs->models, sweep_vocabulary());
  if (!sweep) return sweep.error();
  auto gpus = read_json_file(data_root() / "topologies/gpus.json");
  if (!gpus) return gpus.error();
  return SweepContext{std::move(*sweep), fnv1a64_hex(dump_json(*gpus))};
}

Result<SweepSummary> run_sweep_local(const SweepContext& ctx, const SweepRunOptions& opt) {
  install_interrupt_handlers();
  auto store = ResultStore::open(opt.out);
  if (!store) return store.error();
  if (!store.value()->dropped().empty()) {
    std::cerr << "hexisim: note: " << store.value()->path().string()
              << " ended in a partial row (an interrupted write: \"" << store.value()->dropped()
              << "...\"); dropped it, its point is computed again\n";
  }
  auto todo = resume(ctx, **store, opt.retry_failed);
  if (!todo) return todo.error();
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
    if (auto st = pool->start(); !st) return st.error();
  }
  std::size_t next = 0;
  while (!interrupted() && (next < points.size() || pool->busy() > 0)) {
    while (pool->idle() > 0 && next < points.size()) {
      if (auto st = pool->submit(points[next++]); !st) return st.error();
    }
    auto done = pool->wait(1000);
    if (!done) return done.error();
    for (const auto& d : *done) {
      if (auto st = rec.add(d); !st) return st.error();
    }
    rec.progress().tick();
  }
  pool->stop();
  rec.progress().finish();
  if (auto st = rec.write_csv(opt.out); !st) return st.error();
  return sweep_summary(ctx, rec, opt, steady_seconds() - start, where, interrupted());
}

Result<SweepSummary> run_sweep_context(const SweepContext& ctx, const SweepRunOptions& opt) {
  if (launcher_world_size() > 1) return run_sweep_mpi(ctx, opt);
  return run_sweep_local(ctx, opt);
}

}  // namespace studies
}  // namespace hexi
