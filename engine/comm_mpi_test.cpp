// MpiCommunicator against the shared collective suite (exact sums, zero mismatches);
// run by ctest under mpirun with 2, 3 and 4 ranks (engine/CMakeLists.txt).

#include <gtest/gtest.h>

#include "engine/comm_mpi.hpp"
#include "engine/comm_suite.hpp"

namespace hexi::engine {
namespace {

std::unique_ptr<Communicator> world() {
  auto session = MpiSession::init(nullptr, nullptr);  // already initialised by main
  EXPECT_TRUE(session.ok());
  auto w = (*session)->world();
  EXPECT_TRUE(w.ok());
  return std::move(*w);
}

TEST(MpiComm, CollectivesExact) {
  auto comm = world();
  Status s = check_collectives(*comm);
  EXPECT_TRUE(s.ok()) << s.error().message;
}

TEST(MpiComm, PointToPointRing) {
  auto comm = world();
  Status s = check_point_to_point(*comm);
  EXPECT_TRUE(s.ok()) << s.error().message;
}

TEST(MpiComm, Subgroups) {
  auto comm = world();
  Status s = check_subgroups(*comm);
  EXPECT_TRUE(s.ok()) << s.error().message;
}

// Errors come back as a Status naming the call and MPI's error string, not an abort.
TEST(MpiComm, ErrorsAreReturnedWithMpiErrorString) {
  auto comm = world();
  float x = 0;
  Status s = comm->recv(&x, 1, DType::kF32, comm->size() + 3, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("MPI_Recv"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("comm_mpi.cpp"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("MPI_ERR_RANK"), std::string::npos) << s.error().message;
}

}  // namespace
}  // namespace hexi::engine
