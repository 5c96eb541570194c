#pragma once
// bfloat16 on the host: the upper 16 bits of an IEEE float32 (8 exponent bits, 7 mantissa
// bits), as stored and sent by mixed-precision training. Conversions round to nearest, ties
// to even (what CUDA's __float2bfloat16_rn and PyTorch's .to(torch.bfloat16) do); NaNs stay
// NaN (quieted), infinities stay infinite, and finite values beyond bf16's largest
// (3.3895e38) round to infinity as IEEE rounding requires.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace hexi::kernels {

using bf16_bits = std::uint16_t;

constexpr bf16_bits to_bf16(float x) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_bits>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16_bits>(u >> 16);
}

constexpr float from_bf16(bf16_bits h) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

// x rounded to the nearest bf16 value, kept as a float.
constexpr float round_bf16(float x) {
  return from_bf16(to_bf16(x));
}

// The reductions of bf16 data (every communicator's bf16 sum and max): computed in float,
// rounded once, so each step is the correctly rounded bf16 result, as NCCL adds.
constexpr bf16_bits bf16_sum(bf16_bits a, bf16_bits b) {
  return to_bf16(from_bf16(a) + from_bf16(b));
}
constexpr bf16_bits bf16_max(bf16_bits a, bf16_bits b) {
  return to_bf16(std::max(from_bf16(a), from_bf16(b)));
}

inline void to_bf16(bf16_bits* out, const float* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}
inline void from_bf16(float* out, const bf16_bits* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = from_bf16(in[i]);
}
// dst (n) = src rounded to the nearest bf16 values, kept in T (float; double for the
// reference model's blocks); dst == src allowed.
template <class T>
void round_bf16(T* dst, const T* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    dst[i] = static_cast<T>(round_bf16(static_cast<float>(src[i])));
}
template <class T>
void round_bf16(T* x, std::size_t n) {
  round_bf16(x, x, n);
}

}  // namespace hexi::kernels
