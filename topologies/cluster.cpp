#include "topologies/cluster.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <unordered_set>

#include "topologies/enum_names.hpp"

namespace hexi {

constexpr double kGB = 1e9;   // bytes per GB (bandwidths are decimal GB/s)
constexpr double kUs = 1e-6;  // seconds per microsecond

namespace {

// What any link can be: 1 KB/s .. 1 PB/s, 1 ps .. 10 s. Outside (a 1e-320 GB/s link),
// every time becomes infinite or zero and an estimate would still say "fits".
constexpr double kMinGBps = 1e-6, kMaxGBps = 1e6;
constexpr double kMinLatencyUs = 1e-6, kMaxLatencyUs = 1e7;

double gbps(const JsonNode& node) {
  return node.number_in(kMinGBps, kMaxGBps);
}
double gbps_or(const JsonNode& parent, std::string_view key, double fallback) {
  auto v = parent.find(key);
  return v ? gbps(*v) : fallback;
}
double latency_us(const JsonNode& node) {
  return node.number_in(kMinLatencyUs, kMaxLatencyUs);
}
double latency_us_or(const JsonNode& parent, std::string_view key, double fallback) {
  auto v = parent.find(key);
  return v ? latency_us(*v) : fallback;
}

}  // namespace

namespace {

constexpr auto kLinkClasses = enum_names<LinkClass>({{LinkClass::kSelf, "self"},
                                                     {LinkClass::kNvSwitch, "nvswitch"},
                                                     {LinkClass::kPcie, "pcie"},
                                                     {LinkClass::kHost, "host"},
                                                     {LinkClass::kNetworkLeaf, "network-leaf"},
                                                     {LinkClass::kNetworkSpine, "network-spine"},
                                                     {LinkClass::kOverride, "override"}});

}  // namespace

std::string_view to_string(LinkClass c) {
  return kLinkClasses.name(c);
}

std::uint64_t Cluster::pair_key(int a, int b) {
  auto lo = static_cast<std::uint64_t>(std::min(a, b));
  auto hi = static_cast<std::uint64_t>(std::max(a, b));
  return (lo << 32) | hi;
}

// Reads the cluster JSON into a Cluster (throws InputError on bad input).
class ClusterReader {
 public:
  ClusterReader(const GpuCatalog& catalog, Cluster& out) : catalog_(catalog), c_(out) {}

  void read(const JsonNode& root) {
    root.allow_only({"version", "name", "description", "network", "machines", "overrides"});
    root.require_version(1);
    c_.name_ = root.str("name");
    c_.description_ = root.str_or("description", "");
    read_network(root.at("network"));
    auto machines = root.at("machines");
    if (machines.size() == 0) machines.fail("a non-empty array of machines");
    for (std::size_t i = 0; i < machines.size(); ++i) read_machine(machines.at(i));
    assign_leaves();
    if (auto overrides = root.find("overrides")) {
      for (std::size_t i = 0; i < overrides->size(); ++i) read_override(overrides->at(i));
    }
  }

 private:
  void read_network(const JsonNode& net) {
    net.allow_only({"nic_GBps", "nics_per_machine", "machines_per_leaf", "oversubscription",
                    "spine", "latency_us", "transport", "rates"});
    nic_GBps_ = gbps(net.at("nic_GBps"));
    nics_ = static_cast<int>(net.integer_or("nics_per_machine", 1, 64, 1));
    machines_per_leaf_ = static_cast<int>(net.integer_or("machines_per_leaf", 0, 1 << 20, 0));
    if (auto o = net.find("oversubscription")) c_.oversubscription_ = o->number_in(1.0, 1024.0);
    c_.spine_ = net.boolean_or("spine", true);
    if (auto t = net.find("transport")) {
      auto parsed = kTransportNames.parse(t->str());
      if (!parsed || (*parsed != Transport::kRdma && *parsed != Transport::kEfa &&
                      *parsed != Transport::kTcp && *parsed != Transport::kTcpxo)) {
        t->fail("a network transport: rdma (InfiniBand/RoCE), efa, tcp or tcpxo");
      }
      c_.network_transport_ = *parsed;
      c_.network_transport_named_ = true;
    }
    if (auto r = net.find("rates")) {
      const std::string rates = r->str();
      if (rates != "achieved" && rates != "nominal") r->fail("\"achieved\" or \"nominal\"");
      c_.nominal_rates_ = rates == "nominal";
    }
    if (auto lat = net.find("latency_us")) {
      lat->allow_only({"nvswitch", "pcie", "host", "socket", "nic", "switch"});
      LatencyTable& t = c_.latency_;
      t.nvswitch_s = latency_us_or(*lat, "nvswitch", t.nvswitch_s / kUs) * kUs;
      t.pcie_s = latency_us_or(*lat, "pcie", t.pcie_s / kUs) * kUs;
      t.host_s = latency_us_or(*lat, "host", t.host_s / kUs) * kUs;
      t.socket_s = latency_us_or(*lat, "socket", t.socket_s / kUs) * kUs;
      t.nic_s = latency_us_or(*lat, "nic", t.nic_s / kUs) * kUs;
      t.switch_s = latency_us_or(*lat, "switch", t.switch_s / kUs) * kUs;
    }
  }

  int gpu_type_index(const JsonNode& gpu_node) {
    std::string name = gpu_node.str();
    const GpuSpec* spec = catalog_.find(name);
    if (spec == nullptr) gpu_node.fail("a GPU type from the catalog (" + catalog_.names() + ")");
    for (std::size_t i = 0; i < c_.gpu_types_.size(); ++i) {
      if (c_.gpu_types_[i].name == spec->name) return static_cast<int>(i);
    }
    c_.gpu_types_.push_back(*spec);
    return static_cast<int>(c_.gpu_types_.size() - 1);
  }

  void read_machine(const JsonNode& node) {
    node.allow_only({"name", "gpu", "gpus", "repeat", "intra", "pcie_GBps", "sockets",
                     "socket_GBps", "nic_GBps", "nics", "leaf"});
    Machine m;
    m.gpu_type = gpu_type_index(node.at("gpu"));
    const GpuSpec& spec = c_.gpu_types_[m.gpu_type];
    m.num_gpus = static_cast<int>(node.integer_in("gpus", 1, 1024));
    int repeat = static_cast<int>(node.integer_or("repeat", 1, 1 << 20, 1));
    total_gpus_ += std::int64_t{m.num_gpus} * repeat;
    if (total_gpus_ > kMaxClusterGpus) {
      node.fail_message("the cluster would have " + std::to_string(total_gpus_) +
                        " GPUs or more; hexisim models at most " + std::to_string(kMaxClusterGpus));
    }
    m.intra_kind = spec.intra_kind;
    double intra_GBps = spec.intra_GBps;
    std::optional<double> intra_latency_us;
    if (auto intra = node.find("intra")) {
      intra->allow_only({"kind", "GBps", "latency_us"});
      if (auto kind = intra->find("kind")) {
        auto parsed = parse_intra_kind(kind->str());
        if (!parsed) kind->fail("one of " + kIntraKindNames.list());
        m.intra_kind = *parsed;
        // A different kind than the catalog's default: derive its bandwidth from PCIe.
        if (*parsed != spec.intra_kind && !intra->has("GBps")) {
          intra_GBps = *parsed == IntraKind::kHost ? spec.pcie_GBps / 2 : spec.pcie_GBps;
          if (*parsed == IntraKind::kNvSwitch)
            intra->fail("\"GBps\" for an NVLink machine of PCIe GPUs");
        }
      }
      intra_GBps = gbps_or(*intra, "GBps", intra_GBps);
      if (auto l = intra->find("latency_us")) intra_latency_us = latency_us(*l);
    }
    m.intra_Bps = intra_GBps * kGB;
    const LatencyTable& t = c_.latency_;
    m.intra_latency_s = intra_latency_us                       ? *intra_latency_us * kUs
                        : m.intra_kind == IntraKind::kNvSwitch ? t.nvswitch_s
                        : m.intra_kind == IntraKind::kPcie     ? t.pcie_s
                                                               : t.host_s;
    m.pcie_Bps = gbps_or(node, "pcie_GBps", spec.pcie_GBps) * kGB;
    m.sockets = static_cast<int>(node.integer_or("sockets", 1, m.num_gpus, 1));
    m.socket_Bps = gbps_or(node, "socket_GBps", 40.0) * kGB;
    m.nic_Bps = gbps_or(node, "nic_GBps", nic_GBps_) * kGB;
    m.nics = static_cast<int>(node.integer_or("nics", 1, m.num_gpus, std::min(nics_, m.num_gpus)));
    int leaf = -1;
    if (auto l = node.find("leaf")) leaf = static_cast<int>(l->integer_in(0, 1 << 20));
    std::string base = node.has("name") ? node.str("name") : spec.name;
    for (int r = 0; r < repeat; ++r) {
      Machine copy = m;
      copy.name =
          repeat > 1 || !node.has("name") ? base + "-" + std::to_string(name_counter(base)) : base;
      // A set, not a scan of the machines so far: 100 000 machines must not take minutes
      // (found by fuzz_mix: "A10:0100108x1" timed out).
      if (!machine_names_.insert(copy.name).second)
        node.fail_message("machine name \"" + copy.name + "\" is used twice");
      copy.first_device = static_cast<int>(c_.devices_.size());
      int index = static_cast<int>(c_.machines_.size());
      for (int g = 0; g < copy.num_gpus; ++g) {
        c_.devices_.push_back({static_cast<int>(c_.devices_.size()), index, g, copy.gpu_type});
      }
      explicit_leaf_.push_back(leaf);
      c_.machines_.push_back(std::move(copy));
    }
  }

  int name_counter(const std::string& base) { return name_counts_[base]++; }

  void assign_leaves() {
    int per_leaf =
        machines_per_leaf_ == 0 ? static_cast<int>(c_.machines_.size()) : machines_per_leaf_;
    int next_auto = 0;
    for (std::size_t i = 0; i < c_.machines_.size(); ++i) {
      int leaf = explicit_leaf_[i] >= 0 ? explicit_leaf_[i] : next_auto++ / per_leaf;
      c_.machines_[i].leaf = leaf;
      if (leaf >= static_cast<int>(c_.leaves_.size())) c_.leaves_.resize(leaf + 1);
      c_.leaves_[leaf].machines.push_back(static_cast<int>(i));
    }
    for (std::size_t l = 0; l < c_.leaves_.size(); ++l) {
      Leaf& leaf = c_.leaves_[l];
      leaf.name = "leaf" + std::to_string(l);
      double nics = 0;
      for (int m : leaf.machines) nics += c_.machines_[m].nic_Bps;
      leaf.uplink_Bps = nics / c_.oversubscription_;
    }
    // Explicit leaf numbers may leave gaps; drop empty leaves, keeping the order.
    std::vector<int> remap(c_.leaves_.size(), -1);
    std::vector<Leaf> kept;
    for (std::size_t l = 0; l < c_.leaves_.size(); ++l) {
      if (c_.leaves_[l].machines.empty()) continue;
      remap[l] = static_cast<int>(kept.size());
      kept.push_back(std::move(c_.leaves_[l]));
      kept.back().name = "leaf" + std::to_string(remap[l]);
    }
    c_.leaves_ = std::move(kept);
    for (auto& m : c_.machines_) m.leaf = remap[m.leaf];
  }

  int machine_index(const JsonNode& node) {
    std::string name = node.str();
    for (std::size_t i = 0; i < c_.machines_.size(); ++i) {
      if (c_.machines_[i].name == name) return static_cast<int>(i);
    }
    node.fail("the name of a machine of this cluster");
  }

  void read_override(const JsonNode& node) {
    node.allow_only({"devices", "machines", "GBps", "latency_us"});
    PairLink link;
    link.bandwidth_Bps = gbps(node.at("GBps")) * kGB;
    link.latency_s = latency_us(node.at("latency_us")) * kUs;
    if (node.has("devices") == node.has("machines")) {
      node.fail_message("an override names either \"devices\": [a, b] or \"machines\": [a, b]");
    }
    bool by_device = node.has("devices");
    auto pair = node.at(by_device ? "devices" : "machines");
    if (pair.size() != 2) pair.fail("a pair [a, b]");
    int a = 0, b = 0;
    if (by_device) {
      a = static_cast<int>(pair.at(std::size_t{0}).integer_in(0, c_.num_devices() - 1));
      b = static_cast<int>(pair.at(std::size_t{1}).integer_in(0, c_.num_devices() - 1));
    } else {
      a = machine_index(pair.at(std::size_t{0}));
      b = machine_index(pair.at(std::size_t{1}));
    }
    if (a == b) pair.fail("two different " + std::string(by_device ? "devices" : "machines"));
    (by_device ? c_.device_overrides_ : c_.machine_overrides_)[Cluster::pair_key(a, b)] = link;
  }

  const GpuCatalog& catalog_;
  Cluster& c_;
  double nic_GBps_ = 0;
  int nics_ = 1;
  int machines_per_leaf_ = 0;
  std::int64_t total_gpus_ = 0;
  std::vector<int> explicit_leaf_;
  std::unordered_map<std::string, int> name_counts_;
  std::unordered_set<std::string> machine_names_;
};

Result<Cluster> Cluster::from_json(const Json& json, const std::string& origin,
                                   const GpuCatalog& catalog) {
  return load_with([&] {
    Cluster c;
    ClusterReader(catalog, c).read(JsonNode(json, origin));
    return c;
  });
}

Result<Cluster> Cluster::load(const std::filesystem::path& path, const GpuCatalog& catalog) {
  auto json = read_json_file(path);
  if (!json) return json.error();
  return from_json(*json, path.string(), catalog);
}

double Cluster::peak_flops() const {
  double sum = 0;
  for (const auto& m : machines_) sum += m.num_gpus * gpu_types_[m.gpu_type].flops();
  return sum;
}

double Cluster::memory_bytes() const {
  double sum = 0;
  for (const auto& m : machines_) sum += m.num_gpus * gpu_types_[m.gpu_type].memory_bytes();
  return sum;
}

PairLink Cluster::path_link(int a, int b) const {
  const Device& da = devices_[a];
  const Device& db = devices_[b];
  const Machine& ma = machines_[da.machine];
  if (da.machine == db.machine) {
    PairLink l{ma.intra_Bps, ma.intra_latency_s};
    if (ma.intra_kind != IntraKind::kNvSwitch && ma.socket_of(da.local) != ma.socket_of(db.local)) {
      l.bandwidth_Bps = std::min(l.bandwidth_Bps, ma.socket_Bps);
      l.latency_s += latency_.socket_s;
    }
    return l;
  }
  const Machine& mb = machines_[db.machine];
  PairLink l;
  l.bandwidth_Bps = std::min({ma.pcie_Bps, ma.nic_each_Bps(), mb.nic_each_Bps(), mb.pcie_Bps});
  l.latency_s = 2 * latency_.nic_s + latency_.switch_s;
  if (ma.leaf != mb.leaf) {
    if (!spine_) return {0.0, 0.0};
    l.bandwidth_Bps =
        std::min({l.bandwidth_Bps, leaves_[ma.leaf].uplink_Bps, leaves_[mb.leaf].uplink_Bps});
    l.latency_s += 2 * latency_.switch_s;  // spine and the far leaf
  }
  return l;
}

PairLink Cluster::link(int a, int b) const {
  if (a == b) return {0.0, 0.0};
  if (!device_overrides_.empty()) {
    auto it = device_overrides_.find(pair_key(a, b));
    if (it != device_overrides_.end()) return it->second;
  }
  if (!machine_overrides_.empty()) {
    auto it = machine_overrides_.find(pair_key(devices_[a].machine, devices_[b].machine));
    if (it != machine_overrides_.end()) return it->second;
  }
  return path_link(a, b);
}

LinkClass Cluster::link_class(int a, int b) const {
  if (a == b) return LinkClass::kSelf;
  if (device_overrides_.count(pair_key(a, b)) != 0 ||
      machine_overrides_.count(pair_key(devices_[a].machine, devices_[b].machine)) != 0) {
    return LinkClass::kOverride;
  }
  const Machine& ma = machines_[devices_[a].machine];
  const Machine& mb = machines_[devices_[b].machine];
  if (&ma == &mb) {
    switch (ma.intra_kind) {
      case IntraKind::kNvSwitch:
        return LinkClass::kNvSwitch;
      case IntraKind::kPcie:
        return LinkClass::kPcie;
      case IntraKind::kHost:
        return LinkClass::kHost;
    }
  }
  return ma.leaf == mb.leaf ? LinkClass::kNetworkLeaf : LinkClass::kNetworkSpine;
}

const TransportCurve& Cluster::curve(Transport t) const {
  if (curves_ != nullptr) {
    auto it = curves_->find(t);
    if (it != curves_->end()) return it->second;
  }
  return transport_curve(t);
}

void Cluster::set_curves(const std::map<Transport, TransportCurve>& curves,
                         const std::map<Transport, double>& collective_step_latency_s) {
  curves_ = curves.empty() ? nullptr
                           : std::make_shared<const std::map<Transport, TransportCurve>>(curves);
  collective_extra_ =
      collective_step_latency_s.empty()
          ? nullptr
          : std::make_shared<const std::map<Transport, double>>(collective_step_latency_s);
}

double Cluster::collective_extra_latency(Transport t) const {
  if (collective_extra_ == nullptr) return 0;
  auto it = collective_extra_->find(t);
  return it != collective_extra_->end() ? it->second : 0;
}

Transport Cluster::transport(int a, int b) const {
  if (nominal_rates_) return Transport::kNominal;
  switch (link_class(a, b)) {
    case LinkClass::kNvSwitch:
      switch (gpu(a).architecture) {
        case Architecture::kHopper:
          return Transport::kNvlink4;
        case Architecture::kBlackwell:
          return Transport::kNvlink5;
        default:
          return Transport::kNvlink;
      }
    case LinkClass::kPcie:
      return Transport::kPcie;
    case LinkClass::kHost:
      return Transport::kHost;
    case LinkClass::kNetworkLeaf:
    case LinkClass::kNetworkSpine:
      return network_transport_;
    case LinkClass::kSelf:
    case LinkClass::kOverride:
      break;
  }
  return Transport::kNominal;
}

std::vector<std::vector<int>> Cluster::connected_parts() const {
  // Machines connect through their leaf; leaves through the spine; overrides add edges.
  const int n = static_cast<int>(machines_.size());
  std::vector<int> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  auto unite = [&](int x, int y) { parent[find(x)] = find(y); };
  for (const auto& leaf : leaves_) {
    for (int m : leaf.machines) unite(m, leaf.machines.front());
  }
  if (spine_) {
    for (const auto& leaf : leaves_) unite(leaf.machines.front(), leaves_.front().machines.front());
  }
  for (const auto& [key, _] : machine_overrides_) {
    unite(static_cast<int>(key >> 32), static_cast<int>(key & 0xffffffffu));
  }
  for (const auto& [key, _] : device_overrides_) {
    unite(devices_[key >> 32].machine, devices_[key & 0xffffffffu].machine);
  }
  std::vector<std::vector<int>> parts;
  std::vector<int> part_of(n, -1);
  for (int m = 0; m < n; ++m) {
    int root = find(m);
    if (part_of[root] < 0) {
      part_of[root] = static_cast<int>(parts.size());
      parts.emplace_back();
    }
    parts[part_of[root]].push_back(m);
  }
  return parts;
}

std::string unnamed_transport_note(const Cluster& c) {
  if (c.network_transport_named() || c.machines().size() < 2) return "";
  return "cluster " + c.name() +
         " names no network transport: rdma (InfiniBand/RoCE) assumed; for Ethernet without "
         "RDMA set network.transport (with --mix: --transport) to tcp (or efa)";
}

}  // namespace hexi
