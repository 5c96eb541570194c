// The fake communicator against the shared collective suite (exact sums, zero
// mismatches), for the group sizes the engine's plans use.

#include <gtest/gtest.h>

#include "engine/comm_fake.hpp"
#include "engine/comm_suite.hpp"

namespace hexi::engine {
namespace {

void expect_all_ok(const std::vector<Status>& results) {
  for (std::size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].error().message;
  }
}

class FakeCommTest : public ::testing::TestWithParam<int> {};

TEST_P(FakeCommTest, CollectivesExact) {
  expect_all_ok(run_fake_world(GetParam(), [](Communicator& c) { return check_collectives(c); }));
}

TEST_P(FakeCommTest, PointToPointRing) {
  expect_all_ok(
      run_fake_world(GetParam(), [](Communicator& c) { return check_point_to_point(c); }));
}

TEST_P(FakeCommTest, Subgroups) {
  expect_all_ok(run_fake_world(GetParam(), [](Communicator& c) { return check_subgroups(c); }));
}

INSTANTIATE_TEST_SUITE_P(Ranks, FakeCommTest, ::testing::Values(1, 2, 3, 5));

// A failing rank must not leave its peers blocked in recv (the fake's MPI_Abort).
TEST(FakeComm, FailingRankReleasesBlockedPeers) {
  auto results = run_fake_world(3, [](Communicator& c) -> Status {
    if (c.rank() == 1) return failure("rank 1 gave up");
    float x = 0;
    return c.recv(&x, 1, DType::kF32, 1, 0);
  });
  EXPECT_FALSE(results[0].ok());
  EXPECT_EQ(results[1].error().message, "rank 1 gave up");
  EXPECT_NE(results[2].error().message.find("peer rank failed"), std::string::npos);
}

TEST(FakeComm, RejectsBadPeerAndSizeMismatch) {
  auto results = run_fake_world(2, [](Communicator& c) -> Status {
    float x[2] = {1, 2};
    if (c.isend(x, 1, DType::kF32, 5, 0).ok()) return failure("peer 5 accepted");
    if (c.rank() == 0) {
      auto req = c.isend(x, 2, DType::kF32, 1, 0);
      if (!req.ok()) return req.error();
      return {};
    }
    Status s = c.recv(x, 1, DType::kF32, 0, 0);  // 8 bytes sent, 4 expected
    if (s.ok()) return failure("size mismatch not detected");
    return {};
  });
  expect_all_ok(results);
}

}  // namespace
}  // namespace hexi::engine
