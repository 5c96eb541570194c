#pragma once
// Number formatting for messages and tables: one implementation for every module.

#include <cstdint>
#include <string>
#include <string_view>

namespace hexi {

// Fixed-point text: fixed(3.14159, 2) == "3.14".
std::string fixed(double value, int decimals);
// With thousands separators: grouped(1234567.8) == "1,234,568".
std::string grouped(double value, int decimals = 0);

// FNV-1a 64 of the bytes: a stable digest across builds and machines (file checks, not
// security), and the same as 16 lowercase hex digits.
std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t seed = 14695981039346656037ull);
std::string fnv1a64_hex(std::string_view bytes);

// printf-style text of any length (trace events, fixed-width tables).
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace hexi
