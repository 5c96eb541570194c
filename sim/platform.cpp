#include "sim/platform.hpp"

#include <algorithm>
#include <stdexcept>

#include "topologies/enum_names.hpp"

namespace hexi::sim {

namespace sg4 = simgrid::s4u;
using Dir = sg4::LinkInRoute::Direction;

namespace {

constexpr auto kLinkKinds = enum_names<LinkKind>({{LinkKind::kPcie, "pcie"},
                                                  {LinkKind::kNvlink, "nvlink"},
                                                  {LinkKind::kP2p, "p2p"},
                                                  {LinkKind::kSocket, "socket"},
                                                  {LinkKind::kNic, "nic"},
                                                  {LinkKind::kUplink, "uplink"},
                                                  {LinkKind::kOverride, "override"}});

// (a, b) as one key, a first.
std::uint64_t directed_key(int a, int b) {
  return (static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint32_t>(b);
}

}  // namespace

std::string_view to_string(LinkKind k) {
  return kLinkKinds.name(k);
}

Platform::Platform(const Cluster& cluster, const std::vector<char>& needed,
                   const std::vector<MirrorHop>& mirrors, const std::vector<double>& uplink_share)
    : cluster_(cluster) {
  hosts_.resize(cluster.num_devices(), nullptr);
  pcie_of_.resize(cluster.num_devices(), nullptr);
  nics_of_.resize(cluster.machines().size());
  uplink_of_.resize(cluster.leaves().size(), nullptr);
  sg4::NetZone* root = sg4::create_star_zone("cluster");
  const bool uplinks = cluster.leaves().size() > 1 && cluster.has_spine();
  auto built = [&](int m) {
    if (needed.empty()) return true;
    const Machine& machine = cluster.machines()[m];
    for (int g = 0; g < machine.num_gpus; ++g) {
      if (needed[machine.first_device + g]) return true;
    }
    return false;
  };
  for (std::size_t l = 0; l < cluster.leaves().size(); ++l) {
    const Leaf& leaf = cluster.leaves()[l];
    if (std::none_of(leaf.machines.begin(), leaf.machines.end(), built)) continue;
    sg4::NetZone* zone = sg4::create_star_zone(leaf.name);
    zone->set_parent(root);
    // The leaf's gateway is its first machine's gateway: SimGrid 3.32 resolves nested
    // routes only through gateways that sit in the child zones themselves.
    simgrid::kernel::routing::NetPoint* gw = nullptr;
    for (int m : leaf.machines) {
      if (!built(m)) continue;
      auto* machine_gw = build_machine(m, zone);
      if (gw == nullptr) gw = machine_gw;
    }
    zone->seal();
    std::vector<sg4::LinkInRoute> up;
    if (uplinks) {
      uplink_of_[l] = duplex(root, leaf.name + "/uplink", LinkKind::kUplink, leaf.uplink_Bps,
                             uplink_share.empty() ? 1.0 : uplink_share[l]);
      up.emplace_back(uplink_of_[l], Dir::UP);
    }
    root->add_route(zone->get_netpoint(), nullptr, gw, nullptr, up, true);
  }
  build_overrides(root);
  build_mirrors(root, mirrors);
  root->seal();
}

namespace {

// SimGrid 3.32 checks a new link's or host's name against every existing one, one
// string comparison each (quadratic in the platform size). Internal names that
// differ in their first character make those comparisons cheap: the number in
// reversed decimal digits, then a kind letter. Readable names stay in LinkInfo
// (reports, traces).
std::string short_name(int number, char kind) {
  std::string digits = std::to_string(number);
  std::reverse(digits.begin(), digits.end());
  return digits + kind;
}

}  // namespace

sg4::Link* Platform::duplex(sg4::NetZone* zone, const std::string& name, LinkKind kind, double bw,
                            double share) {
  // Every route crosses exactly two of the source's and destination's first links
  // (PCIe or NVLink ports) or one override link: all routes get SimGrid latency 2 eps.
  const double latency = kind == LinkKind::kPcie || kind == LinkKind::kNvlink ? kRouteLatency / 2
                         : kind == LinkKind::kOverride                        ? kRouteLatency
                                                                              : 0.0;
  sg4::SplitDuplexLink* l =
      zone->create_split_duplex_link(short_name(static_cast<int>(links_.size()), 'l'), bw * share);
  l->set_latency(latency)->seal();
  // The directions through the link itself: Link::by_name walks every zone (quadratic).
  for (sg4::Link* half : {l->get_link_up(), l->get_link_down()}) {
    link_index_[half] = static_cast<int>(links_.size());
    links_.push_back({name + (half == l->get_link_up() ? ":up" : ":down"), kind, bw, half, share});
  }
  return l;
}

simgrid::kernel::routing::NetPoint* Platform::build_machine(int mi, sg4::NetZone* leaf) {
  const Machine& m = cluster_.machines()[mi];
  sg4::NetZone* zone = sg4::create_full_zone(m.name);
  zone->set_parent(leaf);
  const std::string base = m.name + "/";
  auto* gw = zone->create_router(short_name(mi, 'r'));
  std::vector<sg4::Link*> nics;
  for (int k = 0; k < m.nics; ++k) {
    nics.push_back(
        duplex(zone, base + "nic" + std::to_string(k), LinkKind::kNic, m.nic_each_Bps()));
  }
  nics_of_[mi] = nics;
  sg4::Link* socket = nullptr;
  if (m.sockets > 1 && m.intra_kind != IntraKind::kNvSwitch) {
    socket = duplex(zone, base + "socket", LinkKind::kSocket, m.socket_Bps);
  }
  std::vector<sg4::Link*> pcie, intra;
  const bool nvswitch = m.intra_kind == IntraKind::kNvSwitch;
  for (int g = 0; g < m.num_gpus; ++g) {
    const int device = m.first_device + g;
    const std::string gpu = base + "gpu" + std::to_string(g) + "/";
    hosts_[device] = zone->create_host(short_name(device, 'g'), cluster_.device_flops(device));
    pcie.push_back(duplex(zone, gpu + "pcie", LinkKind::kPcie, m.pcie_Bps));
    pcie_of_[device] = pcie.back();
    intra.push_back(duplex(zone, gpu + (nvswitch ? "nvlink" : "p2p"),
                           nvswitch ? LinkKind::kNvlink : LinkKind::kP2p, m.intra_Bps));
  }
  for (int a = 0; a < m.num_gpus; ++a) {
    auto* ha = hosts_[m.first_device + a]->get_netpoint();
    zone->add_route(ha, gw, nullptr, nullptr, {{pcie[a], Dir::UP}, {nics[m.nic_of(a)], Dir::UP}},
                    true);
    for (int b = a + 1; b < m.num_gpus; ++b) {
      auto* hb = hosts_[m.first_device + b]->get_netpoint();
      std::vector<sg4::LinkInRoute> path;
      if (nvswitch) {
        path = {{intra[a], Dir::UP}, {intra[b], Dir::DOWN}};
      } else {
        path = {{pcie[a], Dir::UP}, {intra[a], Dir::UP}};
        if (socket != nullptr && m.socket_of(a) != m.socket_of(b)) {
          path.emplace_back(socket, m.socket_of(a) < m.socket_of(b) ? Dir::UP : Dir::DOWN);
        }
        path.emplace_back(intra[b], Dir::DOWN);
        path.emplace_back(pcie[b], Dir::DOWN);
      }
      zone->add_route(ha, hb, nullptr, nullptr, path, true);
    }
  }
  zone->seal();
  leaf->add_route(zone->get_netpoint(), nullptr, gw, nullptr, {}, true);
  return gw;
}

void Platform::build_overrides(sg4::NetZone* root) {
  if (cluster_.device_overrides().empty() && cluster_.machine_overrides().empty()) return;
  sg4::NetZone* zone = sg4::create_full_zone("overrides");
  zone->set_parent(root);
  auto* gw = zone->create_router("overrides/gateway");
  int next = 0;
  auto add = [&](const std::string& what, std::uint64_t key, const PairLink& l, auto& table) {
    const std::string name = "override" + std::to_string(next++) + "-" + what;
    auto* a = zone->create_host(name + "/a", 1.0);
    auto* b = zone->create_host(name + "/b", 1.0);
    sg4::Link* link = duplex(zone, name, LinkKind::kOverride, l.bandwidth_Bps);
    zone->add_route(a->get_netpoint(), b->get_netpoint(), nullptr, nullptr, {{link, Dir::UP}},
                    true);
    table[key] = {a, b};
  };
  // Sorted keys: creation order (and link names) must not depend on hash order.
  for (const auto* source : {&cluster_.device_overrides(), &cluster_.machine_overrides()}) {
    std::vector<std::uint64_t> keys;
    for (const auto& [k, _] : *source) keys.push_back(k);
    std::sort(keys.begin(), keys.end());
    const bool devices = source == &cluster_.device_overrides();
    for (auto k : keys) {
      std::string what = (devices ? "devices-" : "machines-") + std::to_string(k >> 32) + "-" +
                         std::to_string(k & 0xffffffffu);
      add(what, k, source->at(k), devices ? device_proxy_ : machine_proxy_);
    }
  }
  zone->seal();
  root->add_route(zone->get_netpoint(), nullptr, gw, nullptr, {}, true);
}

// Each hop's route as the real route from src to dst leaves src's machine and enters dst's
// (build_machine, and the root's uplinks where the leaves differ), but entering the image's.
// A mirror hop always crosses machines (find_replica_fold: a machine serves one block of
// pipelines), and overrides do not fold.
void Platform::build_mirrors(sg4::NetZone* root, const std::vector<MirrorHop>& mirrors) {
  if (mirrors.empty()) return;
  sg4::NetZone* zone = sg4::create_full_zone("mirrors");
  zone->set_parent(root);
  auto* gw = zone->create_router("mirrors/gateway");
  const bool uplinks = cluster_.leaves().size() > 1 && cluster_.has_spine();
  int next = 0;
  for (const MirrorHop& h : mirrors) {
    const Device& src = cluster_.devices()[h.src];
    const Device& dst = cluster_.devices()[h.dst];
    const Device& img = cluster_.devices()[h.image];
    const Machine& ms = cluster_.machines()[src.machine];
    const Machine& mi = cluster_.machines()[img.machine];
    std::vector<sg4::LinkInRoute> path{{pcie_of_[h.src], Dir::UP},
                                       {nics_of_[src.machine][ms.nic_of(src.local)], Dir::UP}};
    const int ls = ms.leaf, ld = cluster_.machines()[dst.machine].leaf;
    if (uplinks && ls != ld) {
      path.emplace_back(uplink_of_[ls], Dir::UP);
      path.emplace_back(uplink_of_[mi.leaf], Dir::DOWN);
    }
    path.emplace_back(nics_of_[img.machine][mi.nic_of(img.local)], Dir::DOWN);
    path.emplace_back(pcie_of_[h.image], Dir::DOWN);
    const std::string name = short_name(next++, 'm');
    auto* a = zone->create_host(name + "a", 1.0);
    auto* b = zone->create_host(name + "b", 1.0);
    zone->add_route(a->get_netpoint(), b->get_netpoint(), nullptr, nullptr, path, false);
    mirror_[directed_key(h.src, h.dst)] = {a, b};
  }
  zone->seal();
  root->add_route(zone->get_netpoint(), nullptr, gw, nullptr, {}, true);
}

std::pair<sg4::Host*, sg4::Host*> Platform::endpoints(int a, int b) const {
  if (!mirror_.empty()) {
    auto it = mirror_.find(directed_key(a, b));
    if (it != mirror_.end()) return it->second;
  }
  if (!device_proxy_.empty()) {
    auto it = device_proxy_.find(Cluster::pair_key(a, b));
    if (it != device_proxy_.end())
      return a < b ? it->second : std::make_pair(it->second.second, it->second.first);
  }
  if (!machine_proxy_.empty()) {
    const int ma = cluster_.devices()[a].machine, mb = cluster_.devices()[b].machine;
    auto it = machine_proxy_.find(Cluster::pair_key(ma, mb));
    if (it != machine_proxy_.end())
      return ma < mb ? it->second : std::make_pair(it->second.second, it->second.first);
  }
  return {hosts_[a], hosts_[b]};
}

const Route& Platform::route(int a, int b) {
  const std::uint64_t key = directed_key(a, b);
  auto it = routes_.find(key);
  if (it != routes_.end()) return it->second;
  auto [src, dst] = endpoints(a, b);
  std::vector<sg4::Link*> path;
  Route r;
  src->route_to(dst, path, &r.latency_s);
  for (const sg4::Link* l : path) {
    auto found = link_index_.find(l);
    if (found == link_index_.end())
      throw std::logic_error("platform: route uses unknown link " + l->get_name());
    r.links.push_back(found->second);
  }
  return routes_.emplace(key, std::move(r)).first->second;
}

}  // namespace hexi::sim
