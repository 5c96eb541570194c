#include "topologies/text.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <sstream>

namespace hexi {

std::string fixed(double value, int decimals) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(decimals);
  out << value;
  return out.str();
}

std::string format(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  const int n = std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return std::string(buf, std::clamp<int>(n, 0, sizeof buf - 1));
}

}  // namespace hexi
