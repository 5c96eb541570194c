#pragma once
// Shared by the libFuzzer targets (one per loader, fuzz_<format>.cpp): the input as
// text and as JSON, the shipped catalogs loaded once, and checks whose failure aborts
// (libFuzzer records the input as a crash). A loader returning an Error is never a
// finding; a crash, a sanitizer report, a timeout or running out of memory is, and so
// is a broken property checked here (e.g. a round trip that changes bytes).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "topologies/gpu_catalog.hpp"
#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi::fuzz {

// The name loaders put in their error messages.
inline const std::string kOrigin = "fuzz-input.json";

inline std::string_view text_of(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The input as JSON; nullopt when it is not (a bad-input Error, which is fine).
inline std::optional<Json> parse(const std::uint8_t* data, std::size_t size) {
  auto json = parse_json_text(text_of(data, size), kOrigin);
  if (!json) return std::nullopt;
  return std::move(*json);
}

// Aborts with `what` and `detail`: a finding.
[[noreturn]] inline void fail(std::string_view what, std::string_view detail) {
  std::fprintf(stderr, "fuzz check failed: %.*s\n%.*s\n", static_cast<int>(what.size()),
               what.data(), static_cast<int>(detail.size()), detail.data());
  std::abort();
}

inline void check(bool ok, std::string_view what, std::string_view detail = {}) {
  if (!ok) fail(what, detail);
}

// The value of a Result that must succeed (shipped data, a re-read of our own output).
template <class T>
const T& must(const Result<T>& result, std::string_view what) {
  if (!result) fail(what, result.error().message);
  return *result;
}

// Text that was written by hexisim must read back: its JSON.
inline Json reparse(const std::string& text, std::string_view what) {
  return must(parse_json_text(text, kOrigin + " (re-read)"), what);
}

// Round trip: `first` written, read back and written again must be the same bytes.
inline void check_same_bytes(const std::string& first, const std::string& second,
                             std::string_view what) {
  if (first != second) fail(what, "first:\n" + first + "\nsecond:\n" + second);
}

// The shipped GPU catalog, loaded on first use.
inline const GpuCatalog& shipped_gpus() {
  static const GpuCatalog catalog = must(GpuCatalog::load_shipped(), "shipped GPU catalog");
  return catalog;
}

}  // namespace hexi::fuzz
