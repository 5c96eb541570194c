// libFuzzer target: the GPU mix spec of `cluster gen --mix` (parse_mix), plain text such
// as "A100:4x8,RTX4090:8x8". Every parsed mix is generated into a cluster file (what
// `cluster gen` does next), which must load with that many GPUs: parse_mix refuses more
// than a cluster may hold, and generate_cluster_json writes only what Cluster::from_json
// reads.

#include "tests/fuzz/fuzz.hpp"
#include "topologies/cluster.hpp"
#include "topologies/cluster_gen.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hexi;
  auto mix = parse_mix(fuzz::text_of(data, size), fuzz::shipped_gpus());
  if (!mix) return 0;
  std::int64_t gpus = 0;
  for (const MixEntry& e : *mix) gpus += std::int64_t{e.machines} * e.gpus_per_machine;
  fuzz::check(gpus <= kMaxClusterGpus, "a parsed mix has more GPUs than a cluster may hold");
  const Json json = generate_cluster_json(*mix, FabricOptions{});
  const Json reread = fuzz::reparse(dump_json(json), "a generated cluster is not JSON");
  auto cluster = Cluster::from_json(reread, fuzz::kOrigin, fuzz::shipped_gpus());
  const Cluster& c = fuzz::must(cluster, "a generated cluster does not load");
  fuzz::check(c.num_devices() == gpus, "a generated cluster has other GPUs");
  return 0;
}
