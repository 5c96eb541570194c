#pragma once
// EnumNames: an enum's names written once, as (value, name) pairs in a constexpr table
// beside the enum (k<Enum>Names in its header); name() is to_string, parse() reads a name back,
// list() spells the accepted names for an error message. A value may appear twice (an alias):
// name() gives its first name, parse() accepts both.

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace hexi {

template <class E, std::size_t N>
struct EnumNames {
  std::array<std::pair<E, std::string_view>, N> entries;

  // The value's first name; "?" for a value the table lacks.
  constexpr std::string_view name(E e) const {
    for (const auto& [value, text] : entries)
      if (value == e) return text;
    return "?";
  }
  constexpr std::optional<E> parse(std::string_view s) const {
    for (const auto& [value, text] : entries)
      if (text == s) return value;
    return std::nullopt;
  }
  // Every name in table order, each between `quote`s, joined by ", " except before the
  // last (by `last`): list() = "a, b, c"; list("\"", " or ") = "\"a\", \"b\" or \"c\"".
  std::string list(std::string_view quote = "", std::string_view last = ", ") const {
    std::string out;
    for (std::size_t i = 0; i < N; ++i) {
      if (i > 0) out += i + 1 == N ? last : ", ";
      out.append(quote).append(entries[i].second).append(quote);
    }
    return out;
  }
};

// The table itself: enum_names<Kind>({{Kind::kA, "a"}, {Kind::kB, "b"}}).
template <class E, std::size_t N>
constexpr EnumNames<E, N> enum_names(const std::pair<E, std::string_view> (&entries)[N]) {
  return {std::to_array(entries)};
}

}  // namespace hexi
