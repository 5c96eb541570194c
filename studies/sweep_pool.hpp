#pragma once
// Local worker processes of a sweep: fork()ed children of this process, one point at a
// time each. The parent writes a point's index to a worker's task pipe ("12\n"); the
// worker computes it and writes the point's row back on its own result pipe (one line);
// the parent is the only process that touches the results file.
//
// A worker dies with its parent (PR_SET_PDEATHSIG: a `kill -9` of the sweep leaves no
// orphan computing), ignores SIGINT (Ctrl-C stops the parent, which then ends its
// workers without recording their unfinished points), and leaves with _exit (no atexit
// handlers or destructors of the parent's objects run twice). A worker that dies while
// computing a point (a crash, the OOM killer) is reported as such and replaced.

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "topologies/status.hpp"

namespace hexi {
inline namespace studies {

class WorkerPool {
 public:
  // Computes one point in a worker: its index in, its row (one line, no newline) out.
  using Compute = std::function<std::string(int index)>;

  // A finished point: its row, or why its worker died before writing one.
  struct Done {
    int index = 0;
    std::string row;
    std::optional<std::string> died;  // e.g. "killed by signal 9"
    double wall_s = 0;                // since it was submitted
  };

  // `in_child` runs in every new worker first (closing the parent's files, redirecting
  // stderr).
  WorkerPool(int workers, Compute compute, std::function<void()> in_child = {});
  ~WorkerPool();  // ends (SIGKILL) and reaps every worker
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  Status start();  // forks the workers
  int size() const { return static_cast<int>(workers_.size()); }
  int idle() const;
  int busy() const;  // workers computing a point

  // Hands a point to an idle worker (idle() > 0).
  Status submit(int index);
  // Waits at most `timeout_ms` (-1: until a point finishes or a signal arrives) and
  // returns the points finished meanwhile. A signal ends the wait early with none.
  Result<std::vector<Done>> wait(int timeout_ms);
  // Ends every worker now (SIGKILL) and reaps them; their points are dropped.
  void stop();

 private:
  struct Worker {
    pid_t pid = -1;
    int task_fd = -1;    // parent writes indices
    int result_fd = -1;  // parent reads rows
    int index = -1;      // the point it computes, -1 when idle
    double since = 0;    // when that point was submitted (steady clock, s)
    std::string buffer;  // a row read in part
  };

  Status spawn(Worker& w);
  [[noreturn]] void worker_main(int task_fd, int result_fd);
  // Reads what `w` sent; appends finished points to `done`; handles its death.
  Status drain(Worker& w, std::vector<Done>& done);
  void reap(Worker& w, std::string* why);

  int count_;
  Compute compute_;
  std::function<void()> in_child_;
  std::vector<Worker> workers_;
};

// Seconds on the steady clock (for wall times and ETAs).
double steady_seconds();

}  // namespace studies
}  // namespace hexi
