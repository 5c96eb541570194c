// bf16 conversions: exact values, ties to even, NaN, infinities, overflow, subnormals.
#include "kernels/bf16.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace hexi::kernels {
namespace {

TEST(Bf16, ValuesWithEightSignificantBitsAreExact) {
  for (float x : {0.0f, -0.0f, 1.0f, -2.5f, 255.0f, 256.0f, 0.15625f, 3.3895314e38f}) {
    EXPECT_EQ(round_bf16(x), x) << x;
  }
  EXPECT_EQ(to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(from_bf16(0xc020), -2.5f);
  EXPECT_EQ(round_bf16(257.0f), 256.0f);  // 257 needs 9 bits: a tie, to the even 256
}

TEST(Bf16, RoundsToNearestTiesToEven) {
  const float ulp = std::ldexp(1.0f, -7);                        // bf16's spacing in [1, 2)
  EXPECT_EQ(round_bf16(1.0f + ulp / 2), 1.0f);                   // tie: 1.0 has the even mantissa
  EXPECT_EQ(round_bf16(1.0f + 3 * ulp / 2), 1.0f + 2 * ulp);     // tie: up to the even one
  EXPECT_EQ(round_bf16(1.0f + ulp / 2 + ulp / 64), 1.0f + ulp);  // above the tie: up
  EXPECT_EQ(round_bf16(-(1.0f + ulp / 2 + ulp / 64)), -(1.0f + ulp));
}

TEST(Bf16, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(round_bf16(inf), inf);
  EXPECT_EQ(round_bf16(-inf), -inf);
  EXPECT_TRUE(std::isnan(round_bf16(std::numeric_limits<float>::quiet_NaN())));
  // A NaN whose payload sits only in the low 16 bits must not become infinity.
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(std::bit_cast<float>(0x7f800001u)))));
  EXPECT_EQ(round_bf16(std::numeric_limits<float>::max()), inf);           // beyond bf16's largest
  const float tiny = std::numeric_limits<float>::denorm_min() * 65536.0f;  // a bf16 subnormal
  EXPECT_EQ(round_bf16(tiny), tiny);
}

TEST(Bf16, ReductionsRoundOncePerStep) {
  const bf16_bits one = to_bf16(1.0f), tiny = to_bf16(std::ldexp(1.0f, -8));
  EXPECT_EQ(from_bf16(bf16_sum(one, tiny)), 1.0f);  // 1 + 2^-8 is a tie: to the even 1
  EXPECT_EQ(from_bf16(bf16_sum(one, one)), 2.0f);
  EXPECT_EQ(from_bf16(bf16_max(to_bf16(-3.0f), to_bf16(-2.5f))), -2.5f);
}

TEST(Bf16, ArraysConvertElementwise) {
  const float in[3] = {1.0f, 1.0f + std::ldexp(1.0f, -9), -3.0f};
  bf16_bits bits[3];
  float back[3];
  to_bf16(bits, in, 3);
  from_bf16(back, bits, 3);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], 1.0f);
  EXPECT_EQ(back[2], -3.0f);
  float x[2] = {1.0f + std::ldexp(1.0f, -9), 2.0f};
  round_bf16(x, 2);
  EXPECT_EQ(x[0], 1.0f);
}

}  // namespace
}  // namespace hexi::kernels
