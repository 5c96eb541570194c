#pragma once
// A sweep's results folder: DIR/results.jsonl, one row per point (sweep_point.hpp), and
// DIR/results.csv written from it.
//
// Crash safety: a row is appended with one write() of the whole line on a descriptor
// opened with O_APPEND, then fsync'ed, by one process only (the sweep's parent, or MPI
// rank 0), so the file only ever grows by whole rows, except that a write cut short (power
// loss, a full disk) can leave a torn last line. Opening the store drops such a line (the
// file is rewritten without it, atomically, before anything is appended) and the point is
// computed again. DIR/.lock (flock) keeps a second sweep from writing the same folder.
//
// Fault injection (tests): HEXISIM_SWEEP_FAULT=after-row=N raises SIGKILL right after the
// N-th row this process appends is durable; mid-row=N writes the first half of the N-th row,
// then raises SIGKILL (a torn last line). Rows and kills at exact points, not at moments.

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi {
inline namespace studies {

class ResultStore {
 public:
  // Creates DIR if needed, takes DIR/.lock and reads DIR/results.jsonl. Bad input when
  // another process holds the lock or a line before the last is not a row.
  static Result<std::unique_ptr<ResultStore>> open(const std::filesystem::path& dir);
  ~ResultStore();
  ResultStore(const ResultStore&) = delete;
  ResultStore& operator=(const ResultStore&) = delete;

  const std::filesystem::path& path() const { return path_; }  // DIR/results.jsonl
  // The rows read on open, in file order (each an object with "index" and "key").
  const std::vector<Json>& rows() const { return rows_; }
  // Whether open() dropped a torn last line (its first bytes, for the message).
  const std::string& dropped() const { return dropped_; }

  // Appends one row (a line without '\n'): one write(), then fsync.
  Status append(const std::string& row);
  // Rewrites the file with only the rows `keep` accepts (atomically), e.g. to compute
  // failed points again; rows() is updated.
  Status keep_only(const std::function<bool(const Json&)>& keep);

  // Closes this process's descriptors without releasing anything else (for forked
  // children, which must not hold the lock after their parent dies).
  void close_in_child();

 private:
  ResultStore() = default;
  Status read();
  Status open_for_append();

  std::filesystem::path dir_, path_;
  int lock_fd_ = -1;
  int fd_ = -1;  // results.jsonl, O_APPEND
  std::vector<Json> rows_;
  std::string dropped_;
  int appended_ = 0;  // rows this process appended (HEXISIM_SWEEP_FAULT counts them)
};

// RFC 4180 CSV of rows (any order; written sorted by "index"): the point's axes, "status"
// (ok or error), the metrics in `metrics` order, the plan digest, the error message, then
// the wall and search times (the only columns that differ between runs).
std::string results_csv(const std::vector<Json>& rows, const std::vector<std::string>& metrics);

}  // namespace studies
}  // namespace hexi
