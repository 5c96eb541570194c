#pragma once
// Test-only: the shipped GPU catalog, loaded once per test binary. A catalog that does
// not load fails the test with the loader's message.

#include <stdexcept>

#include "topologies/gpu_catalog.hpp"

namespace hexi::testing {

inline const GpuCatalog& shipped_gpus() {
  static const GpuCatalog c = [] {
    auto loaded = GpuCatalog::load_shipped();
    if (!loaded) throw std::runtime_error(loaded.error().message);
    return std::move(*loaded);
  }();
  return c;
}

}  // namespace hexi::testing
