#pragma once
// No hangs: each rank runs a watchdog thread that watches the
// rank's progress counter. When it has not moved for `timeout` seconds, the watchdog
// reports what the rank was doing (the op id and what it moves or computes) and calls
// the abort handler (MPI_Abort in the launcher: every rank of the job ends, non-zero).
// A rank blocked in communication waits `comm_grace` seconds longer than one stuck in
// compute, so that when one rank hangs it is that rank's message the user sees.
//
// Fault injection for the robustness tests: HEXISIM_FAULT="rank=R,step=S,op=I,mode=M"
// makes rank R, at step S before its I-th op (index in its own op list, 0-based), fail
// with an error (mode=error), die by a signal (mode=crash) or stop progressing
// (mode=hang). HEXISIM_FAULT="rank=R,mode=kill-in-save,point=K" kills rank R (SIGKILL)
// right after the K-th durable step of its checkpoint save (engine/checkpoint_files.hpp).

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "topologies/status.hpp"

namespace hexi::engine {

struct Fault {
  enum class Mode { kNone, kError, kCrash, kHang, kKillInSave };
  Mode mode = Mode::kNone;
  int rank = -1;
  int step = 0;
  int op = 0;
  int point = 0;  // kKillInSave: the save step after which the rank dies (1-based)

  // Parses the HEXISIM_FAULT syntax; an empty spec is "no fault".
  static Result<Fault> parse(const std::string& spec);
  bool hits(int rank_, int step_, int op_index) const {
    return mode != Mode::kNone && mode != Mode::kKillInSave && rank == rank_ && step == step_ &&
           op == op_index;
  }
  // The save step after which rank `rank_` dies; 0: none.
  int save_kill_point(int rank_) const {
    return mode == Mode::kKillInSave && rank == rank_ ? point : 0;
  }
};

// What a rank is doing; written by the rank's thread, read by its watchdog.
class Progress {
 public:
  // Entering a phase (setup, an op): `what` is read only if the watchdog fires.
  void enter(std::function<std::string()> what, bool communicating);
  std::uint64_t ticks() const { return ticks_.load(std::memory_order_relaxed); }
  bool communicating() const { return communicating_.load(std::memory_order_relaxed); }
  std::string describe() const;

 private:
  std::atomic<std::uint64_t> ticks_{0};
  std::atomic<bool> communicating_{false};
  mutable std::mutex mutex_;
  std::function<std::string()> what_;
};

class Watchdog {
 public:
  using Handler = std::function<void(const std::string& message)>;
  // timeout_s <= 0 disables it.
  Watchdog(const Progress& progress, double timeout_s, double comm_grace_s, Handler on_timeout);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void loop();

  const Progress& progress_;
  double timeout_s_;
  double grace_s_;
  Handler handler_;
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace hexi::engine
