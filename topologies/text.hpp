#pragma once
// Number formatting for messages and tables: one implementation for every module.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hexi {

// Fixed-point text: fixed(3.14159, 2) == "3.14".
std::string fixed(double value, int decimals);
// With thousands separators: grouped(1234567.8) == "1,234,568".
std::string grouped(double value, int decimals = 0);

// FNV-1a 64 of the bytes: a stable digest across builds and machines (file checks, not
// security), and the same as 16 lowercase hex digits.
std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t seed = 14695981039346656037ull);
std::string fnv1a64_hex(std::string_view bytes);

// A duration for progress lines: "1h02m", "3m07s", "42s" (rounded to the second).
std::string duration_text(double seconds);

// For "did you mean": the name in `names` nearest to `word` by edit distance (insertions,
// deletions, substitutions and swaps of neighbours, each 1), when that distance is at most a
// third of the word's length (at least 1) and no other name is as near; else "".
std::string closest(std::string_view word, const std::vector<std::string>& names);

// printf-style text of any length (trace events, fixed-width tables).
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace hexi
