#pragma once
// `hexisim train`: one MPI rank per plan device (launched with mpirun). Each rank loads
// the scenario and plan, lowers them to the program (scheduler/program/lower), builds its
// backend and communicators, and runs its op stream for the requested steps
// (engine/runtime.hpp). Rank 0 prints per-step loss and time, writes the trace and the
// JSON summary.
//
// Failures never hang the job:
// - input errors (a missing file, a plan whose device count differs from the number of
//   ranks, bad flags) are found by every rank before any collective work; the ranks
//   agree on the outcome, the lowest failing rank prints one message, and all exit with
//   code 2 (1 for other failures);
// - a rank that fails later prints its message and aborts the job (MPI_Abort), so every
//   rank exits non-zero; a rank that dies is noticed by mpirun, which ends the others;
// - a rank that stops making progress is ended by its watchdog (engine/watchdog.hpp)
//   after --watchdog seconds, naming the op it was blocked in.

#include <cstdint>
#include <optional>
#include <string>

#include "engine/backend.hpp"

namespace hexi::engine {

struct TrainOptions {
  std::string scenario;         // shipped name or path
  std::string plan;             // plan file; empty: the scenario's "plan"
  std::string backend = "cpu";  // cpu | cuda
  int steps = 10;
  std::string trace;                       // Chrome trace output file; empty: none
  bool json = false;                       // one JSON object on stdout instead of the table
  std::string corpus;                      // byte-level text; empty: engine/corpus/gpl-3.0.txt
  std::optional<std::uint64_t> data_seed;  // corpus sampling; default: the scenario's seed
  std::uint64_t init_seed = 1234;
  AdamW adamw;
  std::string save;    // checkpoint folder written after the last step; empty: none
  std::string resume;  // checkpoint folder read before the first step; empty: fresh start
  double watchdog_s = 20;
};

// Runs this rank's part of the job; returns the process exit code (0, 1 or 2).
int run_train(const TrainOptions& options);

}  // namespace hexi::engine
