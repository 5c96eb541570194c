#pragma once
// Shared by the libFuzzer targets (one per loader, fuzz_<format>.cpp): the input as
// text and as JSON, the shipped catalogs loaded once, and checks whose failure aborts
// (libFuzzer records the input as a crash). A loader returning an Error is never a
// finding; a crash, a sanitizer report, a timeout or running out of memory is, and so
// is a broken property checked here (e.g. a round trip that changes bytes).

#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
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

// This process's own folder (under the temporary folder, named `prefix` and a unique suffix),
// for loaders that read only from files: created on the first call (later calls return it,
// whatever their prefix) and removed at exit. Never destroyed before the exit handler that
// removes it runs.
inline const std::filesystem::path& process_dir(std::string_view prefix) {
  static const std::filesystem::path* dir = [&] {
    std::string pattern =
        (std::filesystem::temp_directory_path() / (std::string(prefix) + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) fail("mkdtemp failed", pattern);
    auto* made = new std::filesystem::path(pattern);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(*dir, ec);
    });
    return made;
  }();
  return *dir;
}

// The shipped GPU catalog, loaded on first use.
inline const GpuCatalog& shipped_gpus() {
  static const GpuCatalog catalog = must(GpuCatalog::load_shipped(), "shipped GPU catalog");
  return catalog;
}

}  // namespace hexi::fuzz
