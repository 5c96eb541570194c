#pragma once
// Generates cluster files from a mix spec such as "A100:4x8,RTX4090:8x8"
// (GPU type : machines x GPUs per machine, comma-separated), 32 to 10 000+ GPUs.

#include <string>
#include <string_view>

#include "topologies/gpu_catalog.hpp"
#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi {

struct FabricOptions {
  std::string name;               // cluster name; derived from the mix when empty
  double nic_GBps = 25.0;         // per machine, all NICs together (200 Gbit/s)
  int nics_per_machine = 1;       // NICs per machine (rail-optimised when = GPUs)
  int machines_per_leaf = 16;     // 0: every machine on one leaf switch
  double oversubscription = 1.0;  // leaf downlink : uplink
  // The network's: rdma (InfiniBand/RoCE), efa or tcp; empty: not written (rdma, the
  // default, and a note where the cluster is loaded: unnamed_transport_note).
  std::string transport;
};

// One entry of a mix: `machines` machines of `gpus_per_machine` GPUs of type `gpu`.
struct MixEntry {
  std::string gpu;
  int machines = 0;
  int gpus_per_machine = 0;
};

// Parses "TYPE:MxG[,TYPE:MxG...]"; GPU types checked against the catalog, at most
// kMaxClusterGpus (cluster.hpp) GPUs in all.
Result<std::vector<MixEntry>> parse_mix(std::string_view spec, const GpuCatalog& catalog);

// The cluster JSON (format version 1) for a mix and fabric.
Json generate_cluster_json(const std::vector<MixEntry>& mix, const FabricOptions& fabric);

}  // namespace hexi
