#pragma once
// The path from one machine to the others of a set, over the whole set at once: the least
// bandwidth and the largest latency of Cluster::path_link between a GPU of the machine and
// a GPU of each other machine of the set, in O(1) a query after O(set + machines + leaves)
// to build. What a DP ring's member pays towards the holders on other machines when a
// plan has tens of thousands of pipelines (scheduler/estimate: DpSync).
//
// path_link across machines is min(PCIe and NIC of both ends) and, between leaves, both
// leaves' uplinks; its latency is 2 NICs and a switch, plus 2 switches between leaves. So
// the least bandwidth from m is the least of m's own terms, the least far-end term on m's
// leaf (m excepted) and the least over the other leaves of their far-end terms and uplinks
// (with m's uplink), kept per leaf and over leaves as the two best; min and max are exact
// whatever the order, so the figures are those of a loop over the set. Overrides
// (machine or device pairs) are not seen: callers with overrides loop over the pairs.

#include <limits>
#include <vector>

#include "topologies/cluster.hpp"

namespace hexi {

class MachineSetLinks {
 public:
  // `machines` (ids, repeats allowed) of `cluster`, which must outlive this.
  MachineSetLinks(const Cluster& cluster, const std::vector<int>& machines);

  // Over the set's machines other than m: the least path bandwidth (bytes/s; infinite when
  // there are none, 0 when one is on a leaf without a spine) and the largest latency (s).
  PairLink from(int m) const;

 private:
  // The least value and its owner, and the least of the other owners.
  struct TwoLeast {
    double first = std::numeric_limits<double>::infinity();
    int owner = -1;
    double second = std::numeric_limits<double>::infinity();
    void add(double v, int who);
    double without(int who) const { return who == owner ? second : first; }
  };

  const Cluster& cluster_;
  std::vector<char> in_set_;       // per machine
  std::vector<int> count_;         // per leaf: machines of the set on it
  std::vector<TwoLeast> on_leaf_;  // per leaf: min(PCIe, NIC) of its machines in the set
  TwoLeast across_;                // over leaves: min(their machines' terms, their uplink)
  int leaves_used_ = 0;
};

}  // namespace hexi
