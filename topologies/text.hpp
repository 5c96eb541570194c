#pragma once
// Number formatting for messages and tables: one implementation for every module.

#include <string>

namespace hexi {

// Fixed-point text: fixed(3.14159, 2) == "3.14".
std::string fixed(double value, int decimals);

// printf-style text, at most 511 characters (trace events, fixed-width tables).
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace hexi
