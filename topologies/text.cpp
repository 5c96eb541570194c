#include "topologies/text.hpp"

#include <algorithm>
#include <cmath>
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

std::string grouped(double v, int decimals) {
  std::string s = fixed(std::abs(v), decimals);
  const std::size_t dot = s.find('.');
  for (std::size_t i = dot == std::string::npos ? s.size() : dot; i > 3; i -= 3)
    s.insert(i - 3, ",");
  return (v < 0 ? "-" : "") + s;
}

std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t seed) {
  std::uint64_t h = seed;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string fnv1a64_hex(std::string_view bytes) {
  return format("%016llx", static_cast<unsigned long long>(fnv1a64(bytes)));
}

std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  std::string out(static_cast<std::size_t>(std::max(n, 0)), '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, again);
  va_end(again);
  return out;
}

}  // namespace hexi
