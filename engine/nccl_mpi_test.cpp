// The exact-sum collective suite on an NCCL world over MPI ranks, one GPU each (device
// buffers). Registered under mpirun with 2 ranks; skipped with the reason on a machine
// with fewer GPUs than ranks (NCCL refuses two ranks on one GPU). One rank's NCCL world
// is checked without MPI in backend_cuda_test.

#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/comm_mpi.hpp"
#include "engine/comm_nccl.hpp"
#include "engine/cuda_testing.hpp"

namespace hexi::engine {
namespace {

TEST(NcclMpi, CollectivesExact) {
  auto session = MpiSession::init(nullptr, nullptr);
  ASSERT_TRUE(session.ok()) << session.error().message;
  auto world = (*session)->world();
  ASSERT_TRUE(world.ok()) << world.error().message;
  if (auto why = cuda_skip_reason((*world)->size()); !why.empty()) GTEST_SKIP() << why;
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  auto backend = make_backend("cuda", local != nullptr ? std::atoi(local) : 0);
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  auto nccl = make_nccl_world(**world, **backend);
  ASSERT_TRUE(nccl.ok()) << nccl.error().message;
  Status s = check_collectives(**nccl, cuda_device_buffers());
  EXPECT_TRUE(s.ok()) << s.error().message;
}

}  // namespace
}  // namespace hexi::engine
