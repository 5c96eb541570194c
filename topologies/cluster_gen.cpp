#include "topologies/cluster_gen.hpp"

#include <charconv>
#include <cstdint>
#include <map>

#include "topologies/cluster.hpp"

namespace hexi {
namespace {

bool parse_int(std::string_view text, int& out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

}  // namespace

Result<std::vector<MixEntry>> parse_mix(std::string_view spec, const GpuCatalog& catalog) {
  std::vector<MixEntry> mix;
  std::int64_t total = 0;  // GPUs so far (int64: 2^31 machines x 1 024 GPUs must not overflow)
  const std::string expected = "expected TYPE:MACHINESxGPUS[,...], e.g. A100:4x8,RTX4090:8x8";
  std::size_t start = 0;
  while (start <= spec.size()) {
    std::size_t end = spec.find(',', start);
    if (end == std::string_view::npos) end = spec.size();
    std::string_view item = spec.substr(start, end - start);
    std::size_t colon = item.rfind(':');
    std::size_t x = item.find_first_of("xX", colon == std::string_view::npos ? 0 : colon);
    MixEntry e;
    if (colon == std::string_view::npos || x == std::string_view::npos ||
        !parse_int(item.substr(colon + 1, x - colon - 1), e.machines) ||
        !parse_int(item.substr(x + 1), e.gpus_per_machine)) {
      return bad_input("--mix \"" + std::string(spec) + "\": item \"" + std::string(item) +
                       "\": " + expected);
    }
    e.gpu = std::string(item.substr(0, colon));
    const GpuSpec* gpu = catalog.find(e.gpu);
    if (gpu == nullptr) {
      return bad_input("--mix: unknown GPU type \"" + e.gpu + "\" (known: " + catalog.names() +
                       ")");
    }
    e.gpu = gpu->name;
    if (e.machines < 1 || e.gpus_per_machine < 1 || e.gpus_per_machine > 1024) {
      return bad_input("--mix: item \"" + std::string(item) +
                       "\": machines must be >= 1 and GPUs per machine in [1, 1024]");
    }
    total += std::int64_t{e.machines} * e.gpus_per_machine;
    if (total > kMaxClusterGpus) {
      return bad_input("--mix \"" + std::string(spec) + "\": " + std::to_string(total) +
                       " GPUs or more; a cluster has at most " + std::to_string(kMaxClusterGpus));
    }
    mix.push_back(e);
    start = end + 1;
  }
  return mix;
}

Json generate_cluster_json(const std::vector<MixEntry>& mix, const FabricOptions& fabric) {
  std::string name = fabric.name;
  std::int64_t total = 0;
  for (const auto& e : mix) total += std::int64_t{e.machines} * e.gpus_per_machine;
  if (name.empty()) {
    name = "mix-" + std::to_string(total);
    for (const auto& e : mix) {
      name += "-" + e.gpu + "x" + std::to_string(std::int64_t{e.machines} * e.gpus_per_machine);
    }
  }
  // A GPU in one entry names its machines after itself ("A100" alone, "A100-0".. when
  // repeated); a GPU in several entries ("A100:2x8,A100:4x4") leaves the name to the loader,
  // which numbers all of them in turn (two bare "A100" would clash; found by fuzz_mix).
  std::map<std::string, int> entries_of_gpu;
  for (const auto& e : mix) ++entries_of_gpu[e.gpu];
  Json machines = Json::array();
  for (const auto& e : mix) {
    Json machine = {{"gpu", e.gpu}, {"gpus", e.gpus_per_machine}, {"repeat", e.machines}};
    if (entries_of_gpu[e.gpu] == 1) machine["name"] = e.gpu;
    machines.push_back(std::move(machine));
  }
  std::string description = "generated: " + std::to_string(total) + " GPUs (";
  for (std::size_t i = 0; i < mix.size(); ++i) {
    description += (i ? ", " : "") + std::to_string(mix[i].machines) + "x" +
                   std::to_string(mix[i].gpus_per_machine) + " " + mix[i].gpu;
  }
  description += ")";
  Json out = {{"version", 1},
              {"name", name},
              {"description", description},
              {"network",
               {{"nic_GBps", fabric.nic_GBps},
                {"nics_per_machine", fabric.nics_per_machine},
                {"machines_per_leaf", fabric.machines_per_leaf},
                {"oversubscription", fabric.oversubscription}}},
              {"machines", machines}};
  if (!fabric.transport.empty()) out["network"]["transport"] = fabric.transport;
  return out;
}

}  // namespace hexi
