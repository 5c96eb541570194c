#pragma once
// Number formatting for messages and tables: one implementation for every module.

#include <string>

namespace hexi {

// Fixed-point text: fixed(3.14159, 2) == "3.14".
std::string fixed(double value, int decimals);

}  // namespace hexi
