#pragma once
// Check macros for library calls (every error records file, line and the library's message; after
// nccl-tests' TESTCHECK and llm.c's cudaCheck): every MPI / CUDA / NCCL call goes through one of
// these. On failure the enclosing function returns a failure Status naming the call, the file, the
// line and the library's own error string, e.g.
//   engine/comm_mpi.cpp:88: MPI_Allreduce(...) failed: MPI_ERR_TRUNCATE: message truncated
// Only main() turns that into an exit code (the rank runtime aborts the MPI job).

#include <string>

#include "topologies/status.hpp"

namespace hexi::engine {

// "file:line: call failed: detail".
inline Error call_error(const char* call, const char* file, int line, const std::string& detail) {
  return failure(std::string(file) + ":" + std::to_string(line) + ": " + call +
                 " failed: " + detail);
}

// MPI's error string for `code` (MPI_Error_string); defined in comm_mpi.cpp.
std::string mpi_error_string(int code);

}  // namespace hexi::engine

// Returns a failure Status from the enclosing function if an MPI call does not return
// MPI_SUCCESS (communicators use MPI_ERRORS_RETURN, so errors come back here).
#define HEXI_MPI_CHECK(call)                                                         \
  do {                                                                               \
    int hexi_rc_ = (call);                                                           \
    if (hexi_rc_ != 0 /* MPI_SUCCESS */) {                                           \
      return ::hexi::engine::call_error(#call, __FILE__, __LINE__,                   \
                                        ::hexi::engine::mpi_error_string(hexi_rc_)); \
    }                                                                                \
  } while (0)

// Propagates a failed Status (or the Error of a failed Result) to the caller.
#define HEXI_TRY(expr)                                   \
  do {                                                   \
    const auto& hexi_status_ = (expr);                   \
    if (!hexi_status_.ok()) return hexi_status_.error(); \
  } while (0)
