#pragma once
// sim/ internal (uses SimGrid types; included only by sim/*.cpp): the SimGrid
// platform of a cluster.
//
// One host per GPU at its peak FLOP/s. Links (split-duplex, bytes/s):
//   gpuN/pcie    the GPU's PCIe link
//   gpuN/nvlink  NVSwitch machines: the GPU's NVLink port
//   gpuN/p2p     PCIe / host-staged machines: the GPU's peer-to-peer (or host
//                staging) rate
//   socket       inter-socket link of a multi-socket PCIe machine
//   nicK         a NIC
//   leafL/uplink a leaf's uplink to the spine
//   override     dedicated link of an explicit device- or machine-pair override
// Routes follow Cluster::link's paths: same machine nvlink a -> nvlink b, or
// pcie a -> p2p a [-> socket] -> p2p b -> pcie b; other machines pcie -> NIC ->
// [uplink -> uplink ->] NIC -> pcie. So a single flow gets exactly
// Cluster::link(a, b) and flows sharing a PCIe link, NIC or uplink contend.
// Latency: SimGrid's CM02 weights each flow's share of a link by the inverse of
// its route latency (RTT-unfair, like TCP; a 0-latency comm is even starved), so
// every route here has the same tiny SimGrid latency kRouteLatency and the
// executor charges each flow its real latency (Cluster::link, times the
// collective's steps) through CM02's latency-factor hook: shares are plain
// max-min and latencies exact.
// Zones: a full zone per machine (its GPUs and a gateway), a star zone per leaf
// (gateway: its first machine's), a star root; overrides and mirror hops live in their own
// zones between proxy hosts.

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <simgrid/s4u.hpp>

#include "topologies/cluster.hpp"

namespace hexi::sim {

enum class LinkKind { kPcie, kNvlink, kP2p, kSocket, kNic, kUplink, kOverride };
std::string_view to_string(LinkKind k);

// One direction of a split-duplex link.
struct LinkInfo {
  std::string name;  // "<machine>/gpu3/pcie:up"
  LinkKind kind = LinkKind::kPcie;
  double bandwidth_Bps = 0;
  simgrid::s4u::Link* link = nullptr;
  // The share of the bandwidth the simulated flows get (a folded program's uplinks; SimGrid
  // runs the link at bandwidth x share, and its bytes are those of the simulated flows).
  double share = 1;
  double simulated_Bps() const { return bandwidth_Bps * share; }
};

constexpr double kRouteLatency = 2e-9;  // s, SimGrid latency of every route (see above)

struct Route {
  std::vector<int> links;  // indexes into Platform::links()
  double latency_s = 0;    // SimGrid's latency of the route (kRouteLatency)
};

// A flow of a replica-folded program (ReplicaFold) from a simulated device `src` to `dst`
// outside the simulated pipelines: it runs on the links of its real route on src's side and
// on those of dst's `image` on the other side (two proxy hosts with that route).
struct MirrorHop {
  int src = 0, dst = 0, image = 0;
};

class Platform {
 public:
  // Builds inside the current SimGrid engine (configured before this call).
  // Only machines holding a device of `needed` (per device; empty: every machine) are built,
  // and leaves holding such machines: SimGrid 3.32 checks each new link's name against every
  // link so far, so a platform costs the square of its size. A replica-folded program's
  // platform has its mirror hops and per leaf the share of its uplink its flows get
  // (ReplicaFold::uplink_share; empty: all of it).
  Platform(const Cluster& cluster, const std::vector<char>& needed,
           const std::vector<MirrorHop>& mirrors = {},
           const std::vector<double>& uplink_share = {});
  explicit Platform(const Cluster& cluster) : Platform(cluster, {}) {}

  simgrid::s4u::Host* host(int device) const { return hosts_[device]; }  // null: not built
  // The hosts a flow from device a to device b runs between (override proxies or the GPUs).
  std::pair<simgrid::s4u::Host*, simgrid::s4u::Host*> endpoints(int a, int b) const;
  // The route of a flow from a to b (cached).
  const Route& route(int a, int b);
  const std::vector<LinkInfo>& links() const { return links_; }

 private:
  simgrid::kernel::routing::NetPoint* build_machine(int m,
                                                    simgrid::s4u::NetZone* leaf);  // its gateway
  void build_overrides(simgrid::s4u::NetZone* root);
  void build_mirrors(simgrid::s4u::NetZone* root, const std::vector<MirrorHop>& mirrors);
  simgrid::s4u::Link* duplex(simgrid::s4u::NetZone* zone, const std::string& name, LinkKind kind,
                             double bw, double share = 1);

  const Cluster& cluster_;
  std::vector<simgrid::s4u::Host*> hosts_;
  std::vector<LinkInfo> links_;
  std::unordered_map<const simgrid::s4u::Link*, int> link_index_;
  // Override proxies by Cluster::pair_key (device pairs, then machine pairs): (host of the
  // lower id, host of the higher id).
  std::unordered_map<std::uint64_t, std::pair<simgrid::s4u::Host*, simgrid::s4u::Host*>>
      device_proxy_, machine_proxy_;
  // Mirror hops by (src, dst): their proxy hosts.
  std::unordered_map<std::uint64_t, std::pair<simgrid::s4u::Host*, simgrid::s4u::Host*>> mirror_;
  // The links a mirror hop's route is made of: per device its PCIe link, per machine its
  // NICs, per leaf its uplink (null without a spine).
  std::vector<simgrid::s4u::Link*> pcie_of_;
  std::vector<std::vector<simgrid::s4u::Link*>> nics_of_;
  std::vector<simgrid::s4u::Link*> uplink_of_;
  std::unordered_map<std::uint64_t, Route> routes_;
};

}  // namespace hexi::sim
