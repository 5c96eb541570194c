// hexiseq against hexiseq-exact on the 20 seeded random meshes of <= 16 GPUs (issue 13:
// hexiseq >= 0.99 x exact in every case). The exact programs take from under a second to
// tens of minutes per mesh on one core (2026-11-27: 0.02 s to 7.2 min of CPU for seeds
// 7-12; seeds 6 and 20, 16 GPUs each, ran 47 and 65 min and still hit the 1 800 s limit of
// some programs, so they fail on `proven`, with hexiseq as fast as or faster than the best
// exact layout found: ratios 1.0000 and 1.0604): this binary is
// built always but registered with ctest only with -DHEXISEQ_EXACT_TESTS=ON (label slow);
// run one seed per process, e.g. (seed 7)
//   build/scheduler/hexiseq/hexiseq_exact_test --gtest_filter='*RandomMesh*/6'
// or all of them: build/scheduler/hexiseq/hexiseq_exact_test
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
