#pragma once
// A heterogeneous cluster: machines of GPUs, their intra-machine interconnect, NICs
// and a leaf/spine switch fabric (cluster JSON, format version 1; README "Cluster
// file"). Devices are numbered 0..N-1 machine by machine; plans name these ids.
//
// Pairwise bandwidth and latency follow the real path between two GPUs; the
// bandwidth of a pair is the bottleneck link along it for a single flow:
//   same machine   nvswitch: intra link | pcie/host: intra link, and the inter-socket
//                  link when the GPUs sit under different CPU sockets
//   other machine  GPU PCIe -> NIC -> leaf [-> spine -> leaf] -> NIC -> GPU PCIe;
//                  leaf uplinks carry (sum of the leaf's NICs) / oversubscription
// Latency adds the hops. Explicit overrides (device or machine pairs) replace both.
// Queries are O(1) from machine-level data; dense device x device Eigen matrices are
// built on demand (cluster_matrices.hpp), for clusters up to a few thousand GPUs.

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "topologies/gpu_catalog.hpp"
#include "topologies/json_input.hpp"
#include "topologies/status.hpp"
#include "topologies/transport.hpp"

namespace hexi {

// The most GPUs one cluster may have (131 072): the simulator is built for up to ~10 000;
// the cap stops a file of 2^20 machines x 1 024 GPUs from growing without bound.
inline constexpr std::int64_t kMaxClusterGpus = std::int64_t{1} << 17;

// Latency per link class, seconds.
struct LatencyTable {
  double nvswitch_s = 3e-6;  // NVLink/NVSwitch hop, as seen by a collective library
  double pcie_s = 5e-6;      // PCIe peer-to-peer
  double host_s = 5e-6;      // host-staged copy: <= 5.9 us per step in a 2-rank nccl-tests
                             // all-reduce over host memory (topologies/measurements, 2080 Ti)
  double socket_s = 1e-6;    // crossing the inter-socket link
  double nic_s = 5e-6;       // one NIC (send or receive side, including the GPU's PCIe hop)
  double switch_s = 1e-6;    // one switch traversal
};

struct Machine {
  std::string name;
  int gpu_type = 0;  // index into Cluster::gpu_types()
  int num_gpus = 0;
  int first_device = 0;  // global id of this machine's GPU 0
  IntraKind intra_kind = IntraKind::kPcie;
  double intra_Bps = 0;        // bytes/s per direction, per GPU
  double intra_latency_s = 0;  // s
  double pcie_Bps = 0;         // bytes/s, GPU <-> NIC / host
  int sockets = 1;             // GPUs split evenly (in order) over CPU sockets
  double socket_Bps = 0;       // bytes/s, inter-socket link (pcie/host traffic only)
  double nic_Bps = 0;          // bytes/s per direction, summed over the machine's NICs
  int nics = 1;                // GPU g uses NIC g * nics / num_gpus
  int leaf = 0;                // index into Cluster::leaves()

  double nic_each_Bps() const { return nic_Bps / nics; }
  int socket_of(int local_gpu) const { return local_gpu * sockets / num_gpus; }
  int nic_of(int local_gpu) const { return local_gpu * nics / num_gpus; }
};

struct Leaf {
  std::string name;
  std::vector<int> machines;
  double uplink_Bps = 0;  // bytes/s per direction to the spine
};

struct Device {
  int id = 0;
  int machine = 0;
  int local = 0;  // index inside its machine
  int gpu_type = 0;
};

// Which part of the fabric a device pair crosses (the bottleneck class for reports).
enum class LinkClass { kSelf, kNvSwitch, kPcie, kHost, kNetworkLeaf, kNetworkSpine, kOverride };
std::string_view to_string(LinkClass c);

struct PairLink {
  double bandwidth_Bps = 0;
  double latency_s = 0;
};

class Cluster {
 public:
  static Result<Cluster> load(const std::filesystem::path& path, const GpuCatalog& catalog);
  static Result<Cluster> from_json(const Json& json, const std::string& origin,
                                   const GpuCatalog& catalog);

  const std::string& name() const { return name_; }
  const std::string& description() const { return description_; }
  const std::vector<GpuSpec>& gpu_types() const { return gpu_types_; }
  const std::vector<Machine>& machines() const { return machines_; }
  const std::vector<Leaf>& leaves() const { return leaves_; }
  const std::vector<Device>& devices() const { return devices_; }
  const LatencyTable& latencies() const { return latency_; }
  bool has_spine() const { return spine_; }
  int num_devices() const { return static_cast<int>(devices_.size()); }

  const GpuSpec& gpu(int device) const { return gpu_types_[devices_[device].gpu_type]; }
  const Machine& machine_of(int device) const { return machines_[devices_[device].machine]; }
  double device_flops(int device) const { return gpu(device).flops(); }
  double device_memory_bytes(int device) const { return gpu(device).memory_bytes(); }

  double peak_flops() const;    // FLOP/s summed over all devices
  double memory_bytes() const;  // bytes summed over all devices

  // Single-flow bottleneck bandwidth (bytes/s) and path latency (s) between two
  // distinct devices; 0 bandwidth when no route exists (disconnected parts).
  double bandwidth(int a, int b) const { return link(a, b).bandwidth_Bps; }
  double latency(int a, int b) const { return link(a, b).latency_s; }
  PairLink link(int a, int b) const;
  LinkClass link_class(int a, int b) const;
  // The transport a transfer between a and b uses (topologies/transport.hpp): by link
  // class, the network's from the file; kNominal for overrides and "rates": "nominal".
  Transport transport(int a, int b) const;
  // Achieved / nominal rate of a transfer between a and b sending `message_bytes` per
  // step: a flow of B bytes moves B / efficiency wire bytes at the nominal rates.
  double efficiency(int a, int b, double message_bytes) const {
    return curve(transport(a, b)).efficiency(message_bytes);
  }
  // The latency of one step of a transfer between a and b: the path's, plus its
  // transport's extra latency per step.
  double step_latency(int a, int b) const { return curve(transport(a, b)).step_s(latency(a, b)); }
  // A transport's curve: the shipped table unless a profile replaced it (a calibrated
  // profile's "transports", topologies/profile.hpp).
  const TransportCurve& curve(Transport t) const;
  // One step of a collective between a and b: step_latency plus the extra a calibrated
  // profile found collectives to pay per step on that transport (waiting for the slowest
  // member's progress; 0 unless calibrated).
  double collective_step_latency(int a, int b) const {
    return step_latency(a, b) + collective_extra_latency(transport(a, b));
  }
  double collective_extra_latency(Transport t) const;
  void set_curves(const std::map<Transport, TransportCurve>& curves,
                  const std::map<Transport, double>& collective_step_latency_s = {});
  Transport network_transport() const { return network_transport_; }
  // Whether the file named the network's transport (else: rdma, the default).
  bool network_transport_named() const { return network_transport_named_; }
  bool nominal_rates() const { return nominal_rates_; }

  // Connected parts (lists of machine indices); one entry when fully connected.
  std::vector<std::vector<int>> connected_parts() const;

  // Override lookups (exposed for the simulator, which routes overrides on a
  // dedicated link).
  const std::unordered_map<std::uint64_t, PairLink>& device_overrides() const {
    return device_overrides_;
  }
  const std::unordered_map<std::uint64_t, PairLink>& machine_overrides() const {
    return machine_overrides_;
  }
  static std::uint64_t pair_key(int a, int b);

 private:
  PairLink path_link(int a, int b) const;  // without overrides

  std::string name_;
  std::string description_;
  std::vector<GpuSpec> gpu_types_;
  std::vector<Machine> machines_;
  std::vector<Leaf> leaves_;
  std::vector<Device> devices_;
  LatencyTable latency_;
  bool spine_ = true;
  double oversubscription_ = 1.0;
  Transport network_transport_ = Transport::kRdma;
  bool network_transport_named_ = false;
  bool nominal_rates_ = false;
  std::shared_ptr<const std::map<Transport, TransportCurve>> curves_;    // null: shipped only
  std::shared_ptr<const std::map<Transport, double>> collective_extra_;  // null: none
  std::unordered_map<std::uint64_t, PairLink> device_overrides_;
  std::unordered_map<std::uint64_t, PairLink> machine_overrides_;
  friend class ClusterReader;
};

// A line for a cluster of several machines whose file names no network transport: the
// default (rdma) assumed, and how to say Ethernet. Empty otherwise.
std::string unnamed_transport_note(const Cluster& c);

}  // namespace hexi
