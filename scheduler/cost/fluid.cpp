#include "scheduler/cost/fluid.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace hexi {
inline namespace cost {

MaxMinFair::MaxMinFair(std::vector<double> capacity)
    : capacity_(std::move(capacity)), left_(capacity_.size()), rising_(capacity_.size(), 0) {}

void MaxMinFair::solve(std::vector<FairFlow*>& flows) {
  used_.clear();
  open_.clear();
  for (FairFlow* f : flows) {
    f->rate = -1;  // rising
    open_.push_back(f);
    for (auto [nic, n] : *f->nics) {
      if (rising_[nic] == 0) {
        used_.push_back(nic);
        left_[nic] = capacity_[nic];
      }
      rising_[nic] += n;
    }
  }
  // The links and flows still rising, in their first order: a link no flow rises on any more
  // keeps what it has left, and a flow with its rate keeps it, so neither is looked at again.
  active_ = used_;
  double level = 0;  // the rate every rising flow has reached
  while (!open_.empty()) {
    // The next constraint to bind: a link full, or a flow at its cap.
    double next = std::numeric_limits<double>::infinity();
    for (int n : active_) {
      if (rising_[n] > 1e-12) next = std::min(next, level + left_[n] / rising_[n]);
    }
    for (const FairFlow* f : open_) next = std::min(next, f->cap);
    if (std::isinf(next)) {  // flows with neither a cap nor a link
      for (FairFlow* f : open_) f->rate = next;
      break;
    }
    for (int n : active_) left_[n] -= (next - level) * rising_[n];
    level = next;
    std::size_t kept = 0;
    for (FairFlow* f : open_) {
      bool bound = f->cap <= level;
      for (auto [nic, n] : *f->nics) bound = bound || left_[nic] <= 1e-9 * capacity_[nic];
      if (!bound) {
        open_[kept++] = f;
        continue;
      }
      f->rate = level;
      for (auto [nic, n] : *f->nics) rising_[nic] -= n;
    }
    open_.resize(kept);
    active_.erase(
        std::remove_if(active_.begin(), active_.end(), [&](int n) { return rising_[n] == 0; }),
        active_.end());
  }
  for (int n : used_) rising_[n] = 0;
}

std::vector<double> nic_directions(const Cluster& cluster) {
  std::vector<double> out;
  for (const Machine& m : cluster.machines()) out.insert(out.end(), 2, m.nic_Bps);
  return out;
}

SharedNic shared_nic(double ring_bytes, int flows, double backlog, double Bps) {
  if (flows <= 0 || ring_bytes <= 0) return {0.0, 0.0};
  const double moved = std::clamp(ring_bytes / flows, 0.0, std::max(backlog, 0.0));
  return {(ring_bytes + moved) / Bps, moved};
}

}  // namespace cost
}  // namespace hexi
