#include "topologies/text.hpp"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <sstream>
#include <utility>

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

std::string duration_text(double seconds) {
  const long t = static_cast<long>(std::max(0.0, seconds) + 0.5);
  if (t >= 3600) return format("%ldh%02ldm", t / 3600, t / 60 % 60);
  if (t >= 60) return format("%ldm%02lds", t / 60, t % 60);
  return format("%lds", t);
}

namespace {

// Optimal string alignment distance (Damerau-Levenshtein without repeated edits of a
// substring): three rows of the dynamic programme.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> two(b.size() + 1), one(b.size() + 1), row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) one[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      row[j] = std::min({one[j] + 1, row[j - 1] + 1, one[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        row[j] = std::min(row[j], two[j - 2] + 1);
      }
    }
    std::swap(two, one);
    std::swap(one, row);
  }
  return one[b.size()];
}

}  // namespace

std::string closest(std::string_view word, const std::vector<std::string>& names) {
  const std::size_t limit = std::max<std::size_t>(1, word.size() / 3);
  std::size_t best = limit + 1;
  std::string found;
  bool tie = false;
  for (const std::string& n : names) {
    const std::size_t d = edit_distance(word, n);
    if (d < best) {
      best = d;
      found = n;
      tie = false;
    } else if (d == best && n != found) {
      tie = true;
    }
  }
  return tie ? std::string() : found;
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
