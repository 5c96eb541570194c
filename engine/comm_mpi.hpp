#pragma once
// Communicator over MPI (OpenMPI from Debian): host buffers, the cpu backend's
// transport. Every MPI call goes through HEXI_MPI_CHECK; communicators are switched to
// MPI_ERRORS_RETURN so that errors come back as a Status instead of killing the job.

#include <memory>

#include "engine/communicator.hpp"

namespace hexi::engine {

// MPI_Init_thread (asking for MPI_THREAD_MULTIPLE so that the watchdog thread may call
// MPI_Abort while the main thread is blocked in a collective) and MPI_Finalize.
class MpiSession {
 public:
  static Result<std::unique_ptr<MpiSession>> init(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  bool thread_multiple() const { return thread_multiple_; }
  // MPI_COMM_WORLD as a Communicator.
  Result<std::unique_ptr<Communicator>> world() const;
  // Ends every rank of the job with `code` (MPI_Abort; without MPI initialised, this
  // process alone); does not return.
  [[noreturn]] static void abort(int code);

 private:
  MpiSession() = default;
  bool thread_multiple_ = false;
  bool owns_ = false;  // false when MPI was already initialised by someone else
};

}  // namespace hexi::engine
