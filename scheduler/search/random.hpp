#pragma once
// splitmix64 (Steele, Lea and Flood 2014): the same sequence on every platform for a
// seed, so that seeded searches give the same plan bytes everywhere.

#include <cstdint>

namespace hexi {
inline namespace search {

constexpr std::uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

// The splitmix64 output function of one state value.
constexpr std::uint64_t splitmix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The next number of the sequence that `state` is at (advances it).
constexpr std::uint64_t next_random(std::uint64_t& state) {
  return splitmix64(state += kGoldenGamma);
}

}  // namespace search
}  // namespace hexi
