#pragma once
// Achieved (not nominal) communication rates per transport. NCCL reaches a size-dependent
// fraction of a link's rate: small messages pay protocol overheads (LL, LL128 flags) and
// few bytes in flight, large ones settle near 75-90 % of the line rate. Each transport
// holds a table eta(m) of that fraction against the message a transfer sends per step (a
// ring collective of S bytes over n ranks: S/n; a point-to-point send of B bytes: B),
// derived from one public nccl-tests curve (topologies/measurements/collectives.json) by
// scripts/fit_collectives.py once the cluster model's per-step hop latencies are paid:
//   time(S) = steps x (hop latency + alpha) + bus bytes(S) / (nominal Bps x eta(S / n))
// alpha, the transport's extra latency per step (software, protocol), is what the curve's
// fastest point leaves once its hops and bytes are paid; eta is linear in log2(m) between
// table points and constant outside them. The cost
// model and the simulator both charge a transfer of B bytes as B / eta wire bytes at the
// nominal rates (so link sharing stays max-min over nominal capacities).
//
// A pair of devices uses the transport of its link class: NVLink/NVSwitch `nvlink` (by the
// machine's GPU generation: `nvlink4` Hopper, `nvlink5` Blackwell), PCIe peer-to-peer
// `pcie`, host-staged PCIe `host`, the network the cluster file's `network.transport`
// (`rdma` InfiniBand/RoCE, the default; `efa`; `tcp`; `tcpxo`); explicit
// overrides are taken as achieved rates (eta 1, alpha 0). `nominal` (cluster `"rates":
// "nominal"`) turns every eta into 1 and alpha into 0: the datasheet model, for
// hand-checkable tests.

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "topologies/enum_names.hpp"

namespace hexi {

// kNvlink: NVLink 2/3 machines (A100's curve, every NVSwitch machine without its own);
// kNvlink4: NVLink 4 / NVSwitch 3 (Hopper); kNvlink5: NVLink 5 / NVSwitch 4 (Blackwell).
// kTcp: NCCL's socket transport over Ethernet; kTcpxo: GPUDirect-TCPX/TCPXO (NCCL's
// GPU-direct TCP plugin of Google Cloud's A3 machines).
enum class Transport {
  kNominal,
  kNvlink,
  kNvlink4,
  kNvlink5,
  kPcie,
  kHost,
  kRdma,
  kEfa,
  kTcp,
  kTcpxo
};
inline constexpr auto kTransportNames = enum_names<Transport>({{Transport::kNominal, "nominal"},
                                                               {Transport::kNvlink, "nvlink"},
                                                               {Transport::kNvlink4, "nvlink4"},
                                                               {Transport::kNvlink5, "nvlink5"},
                                                               {Transport::kPcie, "pcie"},
                                                               {Transport::kHost, "host"},
                                                               {Transport::kRdma, "rdma"},
                                                               {Transport::kEfa, "efa"},
                                                               {Transport::kTcp, "tcp"},
                                                               {Transport::kTcpxo, "tcpxo"}});
// Every transport with a shipped table (all but kNominal).
inline constexpr Transport kMeasuredTransports[] = {
    Transport::kNvlink, Transport::kNvlink4, Transport::kNvlink5,
    Transport::kPcie,   Transport::kHost,    Transport::kRdma,
    Transport::kEfa,    Transport::kTcp,     Transport::kTcpxo};
inline constexpr int kNumTransports = static_cast<int>(Transport::kTcpxo) + 1;
std::string_view to_string(Transport t);

struct EfficiencyPoint {
  double bytes = 0;       // message per step
  double efficiency = 1;  // achieved / nominal rate at this size, > 0 (above 1: a burst)
};

// Host CPU a device under a CPU quota (the testbed's cpu-NN ranks) spends per communication
// op: op + bytes x byte for a send or a receive and for a collective member (its copies,
// reductions, progress; calibrated from the engine's per-op CPU times), and the share of a
// core it spends polling while it waits for a message or a collective (the engine's sleeping
// waits back off, engine/comm_mpi.cpp): the polls spend its quota too, and a rank whose quota
// runs out while it polls notices the message only in its next period. All 0 (GPUs, the
// shipped tables): nothing charged.
struct CommCpuLaw {
  double op_s = 0;
  double byte_s = 0;
  double collective_op_s = 0;
  double collective_byte_s = 0;
  double poll_fraction = 0;

  double seconds(double bytes, bool collective) const {
    return collective ? collective_op_s + bytes * collective_byte_s : op_s + bytes * byte_s;
  }
  bool costs() const {
    return op_s > 0 || byte_s > 0 || collective_op_s > 0 || collective_byte_s > 0 ||
           poll_fraction > 0;
  }
};

struct TransportCurve {
  Transport transport = Transport::kNominal;
  std::string source;  // where the table comes from
  // alpha: added to every step's hop latency; negative where the transport's steps are
  // faster than the cluster's hop latency (step_s never goes below 0)
  double step_latency_s = 0;
  std::vector<EfficiencyPoint> points;  // by increasing bytes; empty: eta 1
  // How far a transfer's modelled time may be off (relative, 0: not stated): the shipped
  // tables' median leave-one-out error (scripts/fit_collectives.py); moved_curve uses it.
  double uncertainty = 0;
  // The communication CPU over this transport of every device type that has no law of its
  // own in cpu_by_device (calibrated per device type where the traces have the ops of
  // several).
  CommCpuLaw cpu{};
  std::map<std::string, CommCpuLaw, std::less<>> cpu_by_device{};

  const CommCpuLaw& cpu_of(std::string_view device_type) const {
    auto it = cpu_by_device.find(device_type);
    return it == cpu_by_device.end() ? cpu : it->second;
  }
  bool costs_cpu() const {
    if (cpu.costs()) return true;
    for (const auto& [type, law] : cpu_by_device)
      if (law.costs()) return true;
    return false;
  }

  // One step over a path of `hop_s` latency: the hop plus alpha, never below 0.
  double step_s(double hop_s) const { return std::max(0.0, hop_s + step_latency_s); }

  // eta at `bytes`: linear in log2(bytes) between points, constant below the first and
  // above the last, except where the last is above 1: a token bucket's burst, which a larger
  // message outgrows (eta -> the payload's share of the shaped rate, 1448/1514 for tcp, 1
  // for the others; transport.cpp).
  double efficiency(double bytes) const;
};

// `c` with its transfers moved across its uncertainty, from the fast (side -1) to the slow
// (+1) end: every efficiency divided by 1 + side x uncertainty, the step latency times it
// (divided by it when negative: a slower end never has faster steps)
// (an empty table, eta 1 at every size, states no uncertainty and stays as it is).
TransportCurve moved_curve(const TransportCurve& c, double side);

// The shipped table of a transport (kNominal: no points).
const TransportCurve& transport_curve(Transport t);

}  // namespace hexi
