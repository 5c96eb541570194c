#pragma once
// sim/ internal: the clock of a device under a CPU quota (the testbed's cpu-NN ranks, cgroup
// CFS bandwidth control): it runs at full speed until it has spent its quota of the current
// period, then waits for the next period, where the quota is whole again (unused quota is
// not carried over). Sending, receiving and reducing spend the CPU its transport costs its
// device type (CommCpuLaw::seconds), on the same clock: the rank is one thread, so its ops
// take the core one after another. Waiting for a message spends the polls' share of a core
// (CommCpuLaw::poll_fraction, 0: nothing).
//
// A compute op's duration from the cost model is at the device's average rate (share x one
// core), so it needs duration x share seconds of the core. Each device's periods start at
// its own phase: the testbed's cgroups start their period timers independently, and devices
// whose pauses do not line up wait for each other at every message and collective.

#include <algorithm>
#include <cmath>
#include <vector>

namespace hexi::sim {

class QuotaClock {
 public:
  // share in (0, 1], period > 0 (s); phase in [0, period): where its periods start.
  QuotaClock(double share, double period, double phase)
      : quota_(share * period), period_(period), phase_(phase), share_(share) {}

  // When an op that takes `duration` at the average rate ends, started at `t` (or when the
  // last op run on this clock ended, if later).
  double run(double t, double duration) {
    t = std::max(t, last_end_);
    double need = duration * share_;
    enter_period_of(t);
    // The period index is carried, not recomputed from t: at a boundary, rounding in the
    // division could put t back into the period it just left.
    while (need > kEpsilon) {
      const double end = phase_ + (period_index_ + 1) * period_;
      const double slice = std::min({need, quota_ - used_, end - t});
      if (slice > kEpsilon) {
        t += slice;
        used_ += slice;
        need -= slice;
        continue;
      }
      t = std::max(t, end);  // the quota or the period is spent: the next period
      period_index_ += 1;
      used_ = 0;
    }
    last_end_ = t;
    return t;
  }

  // A wait for a message from `t` (or the last op's end) until it arrives at `until`, polling
  // at `rate` cores: the polls spend the period's quota. When the rank notices the arrival:
  // `until`, or the start of its next period if the polls ran out of quota first.
  double wait(double t, double until, double rate) {
    t = std::max(t, last_end_);
    if (until <= t || rate <= 0) return std::max(t, until);
    enter_period_of(t);
    for (;;) {
      const double end = phase_ + (period_index_ + 1) * period_;
      const double out = t + (quota_ - used_) / rate;  // when the quota runs out
      if (until <= end && out < until) {
        // Throttled while polling: the arrival is noticed when the next period starts.
        period_index_ += 1;
        used_ = 0;
        last_end_ = end;
        return end;
      }
      if (until <= end) {
        used_ += std::max(0.0, until - t) * rate;
        last_end_ = until;
        return until;
      }
      // Polled to the period's end (or throttled before it). Every later period starts with a
      // whole quota, so only the one the message arrives in matters.
      period_index_ = std::max(period_index_ + 1, std::floor((until - phase_) / period_));
      t = std::max(end, phase_ + period_index_ * period_);
      used_ = 0;
    }
  }

  // When `cpu` seconds of the core are spent, from `t` on (or the last op's end).
  double spend(double t, double cpu) { return run(t, cpu / share_); }

 private:
  // Moves to the period holding t if t is past the current one, with its quota whole.
  void enter_period_of(double t) {
    const double k = std::floor((t - phase_) / period_);
    if (k > period_index_) {
      period_index_ = k;
      used_ = 0;
    }
  }

  static constexpr double kEpsilon = 1e-12;  // s: below it, rounding, not work
  double quota_, period_, phase_, share_;
  double period_index_ = -1e300;
  double used_ = 0;
  double last_end_ = -1e300;
};

}  // namespace hexi::sim
