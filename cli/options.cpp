#include "cli/options.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "topologies/text.hpp"

namespace hexi::cli {

void add_profile_option(CLI::App* cmd, std::string& profile) {
  cmd->add_option("--profile", profile,
                  "Device profile file (e.g. from hexisim calibrate): replaces the scenario's "
                  "\"profile\" and the shipped defaults")
      ->check(CLI::ExistingFile);
}

namespace {

// The value of `text` as a double, if all of it is one (std::strtod: "1e-3", "inf", "nan").
std::optional<double> number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return v;
}

bool is_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80           ? 1
                          : (c >> 5) == 0x6  ? 2
                          : (c >> 4) == 0xe  ? 3
                          : (c >> 3) == 0x1e ? 4
                                             : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    }
    i += n;
  }
  return true;
}

}  // namespace

CLI::Validator finite_in(double min, double max) {
  const std::string range = "[" + format("%g", min) + ", " + format("%g", max) + "]";
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        const auto v = number(text);
        if (!v || !std::isfinite(*v) || *v < min || *v > max) {
          return "expected a finite number in " + range + ", got " + text;
        }
        return "";
      },
      "NUMBER in " + range);
}

CLI::Validator finite_positive() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const auto v = number(text);
        if (!v || !std::isfinite(*v) || !(*v > 0))
          return "expected a finite number > 0, got " + text;
        return "";
      },
      "NUMBER > 0");
}

CLI::Validator unsigned_64() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::uint64_t v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
          return "expected an integer in [0, 2^64-1], got " + text;
        }
        return "";
      },
      "UINT64");
}

CLI::Validator utf8_text() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return is_utf8(text) ? "" : "expected UTF-8 text (it is written into JSON)";
      },
      "TEXT");
}

}  // namespace hexi::cli
