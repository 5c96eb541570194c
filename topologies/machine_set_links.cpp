#include "topologies/machine_set_links.hpp"

#include <algorithm>

namespace hexi {

void MachineSetLinks::TwoLeast::add(double v, int who) {
  if (who == owner) {
    first = std::min(first, v);
  } else if (v < first) {
    second = first;
    first = v;
    owner = who;
  } else {
    second = std::min(second, v);
  }
}

namespace {

// A machine's own terms of path_link across machines: its PCIe and its NIC.
double end_terms(const Machine& m) {
  return std::min(m.pcie_Bps, m.nic_each_Bps());
}

}  // namespace

MachineSetLinks::MachineSetLinks(const Cluster& cluster, const std::vector<int>& machines)
    : cluster_(cluster),
      in_set_(cluster.machines().size(), 0),
      count_(cluster.leaves().size(), 0),
      on_leaf_(cluster.leaves().size()) {
  for (int m : machines) {
    if (in_set_[m]) continue;
    in_set_[m] = 1;
    const Machine& mm = cluster.machines()[m];
    if (count_[mm.leaf]++ == 0) ++leaves_used_;
    on_leaf_[mm.leaf].add(end_terms(mm), m);
  }
  for (std::size_t l = 0; l < count_.size(); ++l) {
    if (count_[l] == 0) continue;
    const int leaf = static_cast<int>(l);
    across_.add(std::min(on_leaf_[l].first, cluster.leaves()[l].uplink_Bps), leaf);
  }
}

PairLink MachineSetLinks::from(int m) const {
  const Machine& mm = cluster_.machines()[m];
  const LatencyTable& lat = cluster_.latencies();
  PairLink out{std::numeric_limits<double>::infinity(), 0.0};
  const int mine = in_set_[m] ? 1 : 0;
  if (count_[mm.leaf] - mine > 0) {  // others on m's leaf
    out.bandwidth_Bps = std::min(end_terms(mm), on_leaf_[mm.leaf].without(m));
    out.latency_s = 2 * lat.nic_s + lat.switch_s;
  }
  if (leaves_used_ - (count_[mm.leaf] > 0 ? 1 : 0) > 0) {  // others on other leaves
    if (!cluster_.has_spine()) {
      out.bandwidth_Bps = 0;  // path_link: no path, {0, 0}
    } else {
      const double far = std::min(
          {end_terms(mm), cluster_.leaves()[mm.leaf].uplink_Bps, across_.without(mm.leaf)});
      out.bandwidth_Bps = std::min(out.bandwidth_Bps, far);
      double latency = 2 * lat.nic_s + lat.switch_s;
      latency += 2 * lat.switch_s;
      out.latency_s = std::max(out.latency_s, latency);
    }
  }
  return out;
}

}  // namespace hexi
