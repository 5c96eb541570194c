#pragma once
// Running a sweep: which points are still to compute (resuming from results.jsonl), the
// parent's bookkeeping (rows appended as they come, progress, the CSV at the end), on
// local worker processes (sweep_pool.hpp) or across MPI ranks (run_sweep_mpi).

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "studies/sweep_point.hpp"
#include "studies/sweep_pool.hpp"
#include "studies/sweep_store.hpp"

namespace hexi {
inline namespace studies {

struct SweepRunOptions {
  std::filesystem::path out;  // the results folder
  int jobs = 1;               // worker processes (per MPI rank under mpirun)
  bool retry_failed = false;  // compute points whose row holds an error again
  bool json = false;          // summary as one JSON object on stdout
};

// The rows of results.jsonl that belong to the sweep, and the points still to compute.
struct Resume {
  std::vector<Json> rows;  // one per finished point, "index" and "point" as in this sweep
  std::vector<int> todo;   // point indices, ascending
};

// Matches the store's rows to the sweep's points by key. Bad input when a row belongs
// to no point of the sweep, was computed from other inputs (its digests differ) or
// repeats a key: the folder holds another sweep's results. With `retry_failed`, error
// rows are first removed from the file.
Result<Resume> resume(const SweepContext& ctx, ResultStore& store, bool retry_failed);

// Progress on stderr: on a terminal a bar redrawn in place (done/total, failures,
// elapsed, ETA); otherwise a plain line every 10 s and at the end.
class Progress {
 public:
  Progress(int total, int done, int failed, int todo);
  void point(bool failed);  // one more point finished
  void tick();              // redraws when due
  void finish();            // the last line
  int done() const { return done_; }
  int failed() const { return failed_; }

 private:
  void draw(bool final_line);
  bool tty_;
  int total_, done_, failed_, todo_, computed_ = 0;
  double start_, last_draw_ = 0;
};

// The parent's side (the local parent, or MPI rank 0): appends rows to the store as
// points finish, keeps them for the CSV, shows progress.
class SweepRecorder {
 public:
  SweepRecorder(const SweepContext& ctx, ResultStore& store, Resume resume);
  int todo() const { return todo_; }
  Progress& progress() { return progress_; }
  // A finished point: its row, or an error row when its worker died.
  Status add(const WorkerPool::Done& done);
  // Writes DIR/results.csv from every row of the sweep (sorted by point index).
  Status write_csv(const std::filesystem::path& dir) const;
  int computed() const { return computed_; }
  const std::vector<Json>& rows() const { return rows_; }

 private:
  const SweepContext& ctx_;
  ResultStore& store_;
  std::vector<Json> rows_;
  int todo_;
  int computed_ = 0;
  Progress progress_;
};

// Set by SIGINT / SIGTERM in the sweep's parent (install_interrupt_handlers).
bool interrupted();
void install_interrupt_handlers();

// A WorkerPool whose workers compute the sweep's points; `in_child` runs first in each.
std::unique_ptr<WorkerPool> make_pool(const SweepContext& ctx, int jobs,
                                      std::function<void()> in_child);

// A sweep file loaded with the catalogs and the vocabulary of this build.
Result<SweepContext> load_sweep_context(const std::string& file);

// How a run of a sweep ended (the parent's, or MPI rank 0's, view; `parent` false on the
// other ranks).
struct SweepSummary {
  bool parent = true;
  std::string sweep;
  int points = 0, done = 0, failed = 0, computed = 0;
  bool interrupted = false;  // SIGINT / SIGTERM: rerun to compute the rest
  double wall_time_s = 0;
  std::string workers;  // "2 local workers", "4 MPI ranks x 2 workers"
  std::filesystem::path jsonl, csv;
};

// Computes the sweep's missing points into opt.out on local worker processes (the parent
// appends their rows; progress on stderr, the opening line on stdout unless opt.json).
Result<SweepSummary> run_sweep_local(const SweepContext& ctx, const SweepRunOptions& opt);

// run_sweep_mpi under an MPI launcher, else run_sweep_local.
Result<SweepSummary> run_sweep_context(const SweepContext& ctx, const SweepRunOptions& opt);

// The MPI world size the launcher announces (OpenMPI's mpirun, or PMI under srun), 1 when
// not launched by one.
int launcher_world_size();

// The sweep across MPI ranks: rank 0 hands points out (and computes with its own
// workers) and is the only writer. A failure no rank can recover from aborts the MPI job
// (after the message on stderr).
Result<SweepSummary> run_sweep_mpi(const SweepContext& ctx, const SweepRunOptions& opt);

// The end of a run: done/failed counts and the files written.
SweepSummary sweep_summary(const SweepContext& ctx, const SweepRecorder& rec,
                           const SweepRunOptions& opt, double wall_s, const std::string& where,
                           bool interrupted);

}  // namespace studies
}  // namespace hexi
