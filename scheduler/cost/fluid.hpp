#pragma once
// The fluid network model: flows through shared links at max-min fair rates, as the
// simulator's network model shares them (SimGrid's CM02 model solved by its LMM max-min
// solver: Casanova, Legrand and Quinson, "SimGrid: a generic framework for large-scale
// distributed experiments", 2008; max-min fairness: Bertsekas and Gallager, "Data
// Networks", 6.5). The links here are NIC directions (2 m: machine m's out, 2 m + 1: its
// in), each shared by the flows that cross it.
//
// Max-min fairness: every flow's rate rises together until a link it crosses is full or it
// reaches its own cap; those flows keep that rate and the others go on rising with what is
// left (a flow held back at one link leaves its share of the others to the rest). Between
// two events (a flow starting or ending) the rates hold, so each transfer's work left drops
// linearly; at each event the rates are solved again. The closed forms (fair_share,
// shared_nic) are the solver's answer in the cases they cover.
//
//   MaxMinFair(capacity).solve(flows)  every flow's rate over links of `capacity` (bytes/s)
//   FluidWork                          one transfer between events: advance_to(now), end_s(now)
//   fair_share(Bps, flows)             one link split among `flows` flows it binds
//   shared_nic(...)                    one link: equal ring flows beside a backlog

#include <algorithm>
#include <utility>
#include <vector>

#include "topologies/cluster.hpp"

namespace hexi {
inline namespace cost {

// One flow of a max-min fair share: its own cap (bytes/s alone: its path's other
// bottlenecks), the links it crosses with its number of flows on each (a flow standing for
// several equal ones: each of them gets `rate`), and its rate once solved.
struct FairFlow {
  double cap = 0;                                             // bytes/s alone
  const std::vector<std::pair<int, double>>* nics = nullptr;  // (link, its flows there)
  double rate = 0;                                            // bytes/s per flow: solve()
};

// Max-min fair rates of flows over links of fixed capacities (bytes/s, by link id). Keeps
// its work buffers between solves (event loops solve at every event).
class MaxMinFair {
 public:
  explicit MaxMinFair(std::vector<double> capacity);

  // Sets every flow's rate. A flow with neither a cap nor a link gets an infinite rate.
  void solve(std::vector<FairFlow*>& flows);

 private:
  std::vector<double> capacity_, left_, rising_;  // per link: bytes/s; left; rising flows
  std::vector<int> used_;                         // the links of the flows solve() was given
  std::vector<int> active_;                       // solve(): the links flows still rise on
  std::vector<FairFlow*> open_;                   // solve(): the flows still rising
};

// Each machine's NIC directions (2 m: out, 2 m + 1: in) and their rate: every NIC of the
// machine summed (bytes/s), the capacities of MaxMinFair's links.
std::vector<double> nic_directions(const Cluster& cluster);

// One transfer of a fluid model between events: `left` of its work at `updated_s`, going at
// `rate` per second since (work: bytes, or any unit its rate is in).
struct FluidWork {
  double left = 0;
  double rate = 0;  // of `left` per second
  double updated_s = 0;

  // What is left at `now`, having run at `rate` since updated_s.
  void advance_to(double now) {
    left -= rate * (now - updated_s);
    updated_s = now;
  }
  // When it ends at its rate, from `now` (left as of now).
  double end_s(double now) const { return now + std::max(0.0, left) / rate; }
};

// The rate each of `flows` flows gets on one link of `Bps` that binds them all (no flow
// capped below it): Bps / flows.
inline double fair_share(double Bps, double flows) {
  return Bps / flows;
}

// One link (a NIC direction) shared max-min fairly by `flows` ring flows carrying
// `ring_bytes` in all (equal parts) and one more flow with `backlog` bytes left (ZeRO-3's
// collective on its own stream): every flow gets 1 / (flows + 1) of `Bps` until one ends.
// The ring flows take (ring_bytes + moved) / Bps, where the backlog moves min(backlog,
// ring_bytes / flows) meanwhile.
struct SharedNic {
  double ring_s = 0;       // s, the ring flows' time
  double moved_bytes = 0;  // the backlog's bytes moved meanwhile
};
SharedNic shared_nic(double ring_bytes, int flows, double backlog, double Bps);

}  // namespace cost
}  // namespace hexi
