// libFuzzer target: the GPU catalog (GpuCatalog::from_json, topologies/gpus.json). A
// loaded catalog must find each of its GPUs by name and by every alias.

#include <cmath>

#include "tests/fuzz/fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hexi;
  auto json = fuzz::parse(data, size);
  if (!json) return 0;
  auto catalog = GpuCatalog::from_json(*json, fuzz::kOrigin);
  if (!catalog) return 0;
  for (const GpuSpec& gpu : catalog->gpus()) {
    fuzz::check(catalog->find(gpu.name) != nullptr, "a catalog GPU is not found by its name",
                gpu.name);
    for (const auto& alias : gpu.aliases) {
      fuzz::check(catalog->find(alias) != nullptr, "a catalog GPU is not found by its alias",
                  alias);
    }
    fuzz::check(std::isfinite(gpu.flops()) && std::isfinite(gpu.memory_bytes()),
                "a loaded GPU has a non-finite peak", gpu.name);
  }
  (void)catalog->names();
  return 0;
}
