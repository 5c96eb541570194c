// main() of the engine's GoogleTest binaries that run under mpirun: MPI is initialised
// once for all tests; every rank runs every test; rank 0 prints GoogleTest's report and
// the exit code is non-zero when any rank failed.

#include <mpi.h>

#include <cstdio>

#include <gtest/gtest.h>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    // Other ranks report failures only (their own listener would interleave output).
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (failed) std::fprintf(stderr, "rank %d: some tests FAILED\n", rank);
  MPI_Finalize();
  return any;
}
