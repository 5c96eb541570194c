// hexiseq against hexiseq-exact on the 20 seeded random meshes of <= 16 GPUs (issue 13:
// hexiseq >= 0.99 x exact in every case). The exact programs take seconds to minutes per
// mesh on one core (up to ~10 min for 16 GPUs of three types): this binary is built always
// but registered with ctest only with -DHEXISEQ_EXACT_TESTS=ON (label slow); run it alone:
//   build/scheduler/hexiseq/hexiseq_exact_test
// The unit tests (exact_test.cpp) run the ten meshes of at most 8 GPUs.
#include <gtest/gtest.h>

#include "scheduler/hexiseq/random_mesh.hpp"

namespace hexi {
namespace {

class RandomMesh : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(RandomMesh, SearchIsWithinOnePercentOfExact) {
  testing::compare_on_random_mesh(GetParam(), 1800);  // 16-GPU programs take minutes
}

// Seeds 1-10: the brief's ten meshes; 11-20: the twenty.
INSTANTIATE_TEST_SUITE_P(HexiSeqExact, RandomMesh, ::testing::Range<std::uint64_t>(1, 21));

}  // namespace
}  // namespace hexi
