#include "scheduler/cost/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace hexi {
inline namespace cost {

std::vector<std::pair<bool, int>> pipeline_order(PipelineSchedule schedule, int stage, int stages,
                                                 int micro_batches) {
  std::vector<std::pair<bool, int>> order;
  const int m = micro_batches;
  if (schedule == PipelineSchedule::kGPipe) {
    for (int j = 0; j < m; ++j) order.emplace_back(true, j);
    for (int j = 0; j < m; ++j) order.emplace_back(false, j);
    return order;
  }
  const int warmup = std::min(stages - 1 - stage, m);
  int f = 0, b = 0;
  for (; f < warmup; ++f) order.emplace_back(true, f);
  for (; f < m; ++f, ++b) {
    order.emplace_back(true, f);
    order.emplace_back(false, b);
  }
  for (; b < m; ++b) order.emplace_back(false, b);
  return order;
}

std::pair<bool, int> pipeline_step(PipelineSchedule schedule, int stage, int stages,
                                   int micro_batches, int n) {
  const int m = micro_batches;
  if (schedule == PipelineSchedule::kGPipe)
    return n < m ? std::pair{true, n} : std::pair{false, n - m};
  const int warmup = std::min(stages - 1 - stage, m);
  if (n < warmup) return {true, n};
  const int steady = n - warmup;  // into the alternation of m - warmup pairs, then the tail
  if (steady < 2 * (m - warmup)) {
    return steady % 2 == 0 ? std::pair{true, warmup + steady / 2} : std::pair{false, steady / 2};
  }
  return {false, n - m};
}

std::vector<ChunkStep> interleaved_order(int rank, int groups, int chunks, int micro_batches) {
  std::vector<ChunkStep> order;
  const int m = micro_batches;
  if (chunks == 1) {
    for (auto [fwd, j] : pipeline_order(PipelineSchedule::k1F1B, rank, groups, m))
      order.push_back({fwd, j, 0});
    return order;
  }
  // The forwards every group runs, in order: micro-batches in groups of `groups`, each
  // group through chunk 0, 1, ...; the backwards the same with the chunks reversed.
  std::vector<ChunkStep> fwd, bwd;
  for (int g = 0; g < m; g += groups) {
    for (int c = 0; c < chunks; ++c) {
      for (int j = g; j < std::min(g + groups, m); ++j) {
        fwd.push_back({true, j, c});
        bwd.push_back({false, j, chunks - 1 - c});
      }
    }
  }
  const int total = m * chunks;
  const int warmup = std::min((groups - rank - 1) * 2 + (chunks - 1) * groups, total);
  int f = 0, b = 0;
  for (; f < warmup; ++f) order.push_back(fwd[f]);
  for (; f < total; ++f, ++b) {
    order.push_back(fwd[f]);
    order.push_back(bwd[b]);
  }
  for (; b < total; ++b) order.push_back(bwd[b]);
  return order;
}

std::vector<int> interleaved_in_flight(int rank, int groups, int chunks, int micro_batches,
                                       const std::vector<double>& bytes) {
  // After the warm-up the order alternates one forward and one backward, and what each chunk
  // holds repeats with the blocks of `groups` micro-batches (every chunk gains and loses
  // `groups` a block) until the forwards run out; then it only loses. So the peak lies in the
  // warm-up or the first block after it: in the order's first blocks, which are the same for
  // every count of micro-batches that fills them and the next block. A last block of fewer
  // than `groups` micro-batches (not a plan's: the plan check refuses it) breaks the repeat:
  // then the whole order is read.
  const int warmup = (groups - rank - 1) * 2 + (chunks - 1) * groups;
  const int blocks = (warmup + 1 + groups * chunks - 1) / (groups * chunks) + 1;
  const int m =
      micro_batches % groups == 0 ? std::min(micro_batches, blocks * groups) : micro_batches;
  std::vector<int> now(static_cast<std::size_t>(chunks), 0), peak = now;
  double most = 0;
  for (const ChunkStep& s : interleaved_order(rank, groups, chunks, m)) {
    now[static_cast<std::size_t>(s.chunk)] += s.forward ? 1 : -1;
    double alive = 0;  // summed afresh: equal holdings compare equal
    for (std::size_t c = 0; c < now.size(); ++c)
      alive += now[c] * (bytes.empty() ? 1.0 : bytes.at(c));
    if (alive > most) {
      most = alive;
      peak = now;
    }
  }
  return peak;
}

namespace {

// A timeline's events, each (stage, micro-batch) row-major, -1 where there is none: when
// each forward and backward ends, when each activation and gradient arrives.
struct Events {
  int micro_batches = 0;
  std::vector<double> fwd, bwd, act, grad;

  explicit Events(int stages = 0, int m = 0)
      : micro_batches(m),
        fwd(static_cast<std::size_t>(stages) * m, -1.0),
        bwd(fwd),
        act(fwd),
        grad(fwd) {}
  std::size_t at(int stage, int j) const {
    return static_cast<std::size_t>(stage) * micro_batches + j;
  }
};

// The event-by-event timeline. A stage advances through its order while the message
// its next compute needs has arrived; finishing a forward (backward) can unblock the
// next (previous) stage, which is then looked at again.
class Timeline {
 public:
  Timeline(const std::vector<StageTimes>& st, int m, PipelineSchedule schedule)
      : st_(st), p_(static_cast<int>(st.size())), m_(m), schedule_(schedule), ev_(p_, m) {
    next_.assign(p_, 0);
    free_.assign(p_, 0.0);
  }
  Events& events() { return ev_; }

  PipelineTimeline run() {
    std::vector<int> todo;
    std::vector<char> queued(p_, 1);
    for (int s = p_ - 1; s >= 0; --s) todo.push_back(s);
    while (!todo.empty()) {
      const int s = todo.back();
      todo.pop_back();
      queued[s] = 0;
      const auto [moved_fwd, moved_bwd] = advance(s);
      auto wake = [&](int t) {
        if (t >= 0 && t < p_ && !queued[t]) {
          queued[t] = 1;
          todo.push_back(t);
        }
      };
      if (moved_fwd) wake(s + 1);
      if (moved_bwd) wake(s - 1);
    }
    PipelineTimeline out;
    out.finish_s = free_;
    for (double f : free_) out.time_s = std::max(out.time_s, f);
    out.period_s = pipeline_period(st_);
    return out;
  }

 private:
  // Runs stage s as far as its inputs allow; reports whether it produced activations
  // (forwards) or gradients (backwards).
  std::pair<bool, bool> advance(int s) {
    bool fwd_done = false, bwd_done = false;
    const StageTimes& t = st_[s];
    while (next_[s] < 2 * m_) {
      const auto [forward, j] = pipeline_step(schedule_, s, p_, m_, next_[s]);
      double ready = free_[s];
      if (forward && s > 0) {
        if (act(s - 1, j) < 0) break;
        ready = std::max(ready, act(s - 1, j));
      }
      if (!forward && s + 1 < p_) {
        if (grad(s, j) < 0) break;
        ready = std::max(ready, grad(s, j));
      }
      const double end = ready + (forward ? t.forward_s : t.backward_s);
      free_[s] = end;
      (forward ? ev_.fwd : ev_.bwd)[ev_.at(s, j)] = end;
      if (forward && s + 1 < p_) {
        // FIFO channel s -> s + 1: starts when the previous message has arrived.
        const double prev = j > 0 ? act(s, j - 1) : 0.0;
        act(s, j) = std::max(end, prev) + t.send_s;
        fwd_done = true;
      }
      if (!forward && s > 0) {
        const double prev = j > 0 ? grad(s - 1, j - 1) : 0.0;
        grad(s - 1, j) = std::max(end, prev) + st_[s - 1].grad_s;
        bwd_done = true;
      }
      ++next_[s];
    }
    return {fwd_done, bwd_done};
  }

  // Arrival at stage s + 1 of the activation of micro-batch j; at stage s of its gradient
  // from s + 1 (-1: not yet).
  double& act(int s, int j) { return ev_.act[ev_.at(s, j)]; }
  double& grad(int s, int j) { return ev_.grad[ev_.at(s, j)]; }

  const std::vector<StageTimes>& st_;
  const int p_;
  const int m_;
  const PipelineSchedule schedule_;
  std::vector<int> next_;  // per stage: its next step of pipeline_order
  std::vector<double> free_;
  Events ev_;  // (stages, micro-batches)
};

// The interleaved timeline: as Timeline, over device groups that run their chunks' steps in
// interleaved_order; virtual stage k = c * p + r. Messages between two groups in one
// direction (activations, or gradients) share a FIFO channel in the order they are sent.
class InterleavedTimeline {
 public:
  InterleavedTimeline(const std::vector<StageTimes>& st, int m, int chunks)
      : st_(st),
        stages_(static_cast<int>(st.size())),
        v_(chunks),
        p_(stages_ / chunks),
        m_(m),
        next_(p_, 0),
        free_(p_, 0.0),
        channel_(static_cast<std::size_t>(2 * p_ * p_), 0.0),
        ev_(stages_, m) {
    for (int r = 0; r < p_; ++r) order_.push_back(interleaved_order(r, p_, v_, m_));
  }
  Events& events() { return ev_; }

  PipelineTimeline run() {
    std::vector<int> todo;
    std::vector<char> queued(p_, 1);
    for (int r = p_ - 1; r >= 0; --r) todo.push_back(r);
    while (!todo.empty()) {
      const int r = todo.back();
      todo.pop_back();
      queued[r] = 0;
      for (int t : advance(r)) {
        if (!queued[t]) {
          queued[t] = 1;
          todo.push_back(t);
        }
      }
    }
    PipelineTimeline out;
    bool complete = true;
    for (int r = 0; r < p_; ++r) {
      out.time_s = std::max(out.time_s, free_[r]);
      complete = complete && next_[r] == 2 * m_ * v_;
    }
    if (!complete) out.time_s = std::numeric_limits<double>::infinity();  // a deadlock
    for (int k = 0; k < stages_; ++k) out.finish_s.push_back(free_[k % p_]);
    for (int r = 0; r < p_; ++r) {
      double work = 0;
      for (int c = 0; c < v_; ++c) work += st_[c * p_ + r].forward_s + st_[c * p_ + r].backward_s;
      out.period_s = std::max(out.period_s, work);
    }
    for (const StageTimes& t : st_) out.period_s = std::max({out.period_s, t.send_s, t.grad_s});
    return out;
  }

 private:
  // Runs group r as far as its inputs allow; returns the groups it sent messages to.
  std::vector<int> advance(int r) {
    std::vector<int> woken;
    while (next_[r] < 2 * m_ * v_) {
      const ChunkStep step = order_[r][next_[r]];
      const int k = step.chunk * p_ + r, j = step.micro_batch;
      double ready = free_[r];
      if (step.forward && k > 0) {
        if (act(k - 1, j) < 0) break;
        ready = std::max(ready, act(k - 1, j));
      }
      if (!step.forward && k + 1 < stages_) {
        if (grad(k, j) < 0) break;
        ready = std::max(ready, grad(k, j));
      }
      const double end = ready + (step.forward ? st_[k].forward_s : st_[k].backward_s);
      free_[r] = end;
      (step.forward ? ev_.fwd : ev_.bwd)[ev_.at(k, j)] = end;
      if (step.forward && k + 1 < stages_) {
        const int to = (k + 1) % p_;
        double& last = channel(r, to, false);
        act(k, j) = last = std::max(end, last) + st_[k].send_s;
        woken.push_back(to);
      }
      if (!step.forward && k > 0) {
        const int to = (k - 1) % p_;
        double& last = channel(r, to, true);
        grad(k - 1, j) = last = std::max(end, last) + st_[k - 1].grad_s;
        woken.push_back(to);
      }
      ++next_[r];
    }
    return woken;
  }

  // The last arrival on the channel from group a to group b (activations or gradients).
  double& channel(int a, int b, bool gradients) {
    return channel_[static_cast<std::size_t>(2 * (a * p_ + b) + (gradients ? 1 : 0))];
  }
  double& act(int k, int j) { return ev_.act[ev_.at(k, j)]; }
  double& grad(int k, int j) { return ev_.grad[ev_.at(k, j)]; }

  const std::vector<StageTimes>& st_;
  const int stages_, v_, p_, m_;
  std::vector<std::vector<ChunkStep>> order_;  // per group
  std::vector<int> next_;
  std::vector<double> free_;
  std::vector<double> channel_;
  Events ev_;  // (virtual stages, micro-batches)
};

// A run of the event-by-event timeline: its result and its events.
struct Run {
  PipelineTimeline timeline;
  Events events;
};

// The steady state's cycle in a run: c micro-batches after which every event repeats
// shifted by the same time.
struct Cycle {
  int micro_batches = 0;
  double shift_s = 0;
};

// Whether every event of micro-batch j in [lo, hi] is that of j - c plus shift_s (within
// tol; an event that does not exist must not exist c micro-batches earlier either).
bool repeats(const Events& e, int stages, int lo, int hi, const Cycle& c, double tol) {
  for (const std::vector<double>* x : {&e.fwd, &e.bwd, &e.act, &e.grad}) {
    for (int s = 0; s < stages; ++s) {
      for (int j = lo; j <= hi; ++j) {
        const double now = (*x)[e.at(s, j)], before = (*x)[e.at(s, j - c.micro_batches)];
        if (now < 0 && before < 0) continue;
        if (now < 0 || before < 0 || std::abs(now - before - c.shift_s) > tol) return false;
      }
    }
  }
  return true;
}

// The shortest cycle, a multiple of `block` up to max_cycle micro-batches, that every event
// of micro-batches [lo, hi] repeats; none when no such cycle (the steady state not reached).
std::optional<Cycle> steady_cycle(const Run& run, int stages, int block, int max_cycle, int lo,
                                  int hi) {
  const Events& e = run.events;
  // Rounding: an event time is a sum of at most 4 * stages * m durations, each rounded.
  const double tol = 1e-9 * run.timeline.time_s;
  for (int c = block; c <= max_cycle; c += block) {
    const Cycle cycle{c, e.bwd[e.at(0, hi)] - e.bwd[e.at(0, hi - c)]};
    if (cycle.shift_s > 0 && repeats(e, stages, lo, hi, cycle, tol)) return cycle;
  }
  return std::nullopt;
}

// The timeline of m micro-batches over `stages` (virtual) stages, micro-batches ordered in
// blocks of `block`, from runs of a bounded number of micro-batches (`run(n)`, the
// event-by-event timeline of n).
//
// Up to M (kTimelineExactMicroBatches or more, for deep pipelines) micro-batches: one run.
// Beyond: the events of micro-batch j do not depend on m while j is more than `margin`
// micro-batches before the end (the orders' prefixes are the same), and a timeline is a
// max-plus system: once every event of a window of micro-batches (longer than any
// dependency) repeats c micro-batches later shifted by the same time, every later event
// does, the drain included (it is the same max-plus function of a shifted state). So the run
// of M finds that cycle (c, shift), a run of m' ≡ m (mod c) micro-batches in (M - c, M] gives
// the drain, and the timeline of m is that of m' shifted by (m - m') / c shifts: exact in
// real arithmetic, whatever m. Where no cycle shows (a transient longer than M / 2, in no
// case tested), the run of M is extended at its window's mean rate.
template <class RunFn>
PipelineTimeline steady_timeline(int stages, int block, int m, const RunFn& run) {
  const int margin = 2 * stages + 2 * block + 2;
  const int max_cycle = std::max(block, 2 * std::max(stages, block) / block * block);
  const int window = 2 * (margin + max_cycle);
  const int least = 2 * (margin + window + max_cycle + 1);
  const int big = (std::max(kTimelineExactMicroBatches, least) + block - 1) / block * block;
  if (m <= big) return run(m).timeline;
  Run r = run(big);
  if (std::isinf(r.timeline.time_s)) return r.timeline;  // a deadlock stays one
  const int hi = big - margin - 1, lo = hi - window + 1;
  std::optional<Cycle> cycle = steady_cycle(r, stages, block, max_cycle, lo, hi);
  int from = big;
  if (!cycle) {
    const double rate =
        (r.events.bwd[r.events.at(0, hi)] - r.events.bwd[r.events.at(0, lo)]) / (hi - lo);
    cycle = Cycle{block, rate * block};
  } else if (const int rest = (m - big) % cycle->micro_batches; rest != 0) {
    from = big - (cycle->micro_batches - rest);
    r = run(from);
  }
  const double shift = static_cast<double>((m - from) / cycle->micro_batches) * cycle->shift_s;
  PipelineTimeline out = std::move(r.timeline);
  out.time_s += shift;
  for (double& f : out.finish_s) f += shift;
  return out;
}

// GPipe beyond kTimelineExactMicroBatches: its two phases (every forward, then every
// backward) are each a line of stages through which one kind of compute flows, whose steady
// state repeats every micro-batch; its timeline of m is that of M extended by the difference
// between those of M and M - 1, per stage.
template <class RunFn>
PipelineTimeline gpipe_timeline(int m, const RunFn& run) {
  const int big = kTimelineExactMicroBatches;
  if (m <= big) return run(m).timeline;
  PipelineTimeline out = run(big).timeline;
  const PipelineTimeline before = run(big - 1).timeline;
  const double more = m - big;
  out.time_s += more * (out.time_s - before.time_s);
  for (std::size_t s = 0; s < out.finish_s.size(); ++s)
    out.finish_s[s] += more * (out.finish_s[s] - before.finish_s[s]);
  return out;
}

}  // namespace

double pipeline_period(const std::vector<StageTimes>& stages) {
  const int p = static_cast<int>(stages.size());
  double worst = 0;
  for (int k = 0; k < p; ++k) {
    worst = std::max({worst, stages[k].send_s, stages[k].grad_s});
    double sum = 0;
    for (int r = 0; k + r < p; ++r) {
      sum += stages[k + r].forward_s + stages[k + r].backward_s;
      if (r > 0) sum += stages[k + r - 1].send_s + stages[k + r - 1].grad_s;
      worst = std::max(worst, sum / (r + 1));
    }
  }
  return worst;
}

PipelineTimeline pipeline_timeline(const std::vector<StageTimes>& stages, int micro_batches,
                                   PipelineSchedule schedule) {
  if (stages.empty() || micro_batches < 1) return {};
  const auto run = [&](int m) {
    Timeline t(stages, m, schedule);
    PipelineTimeline out = t.run();
    return Run{std::move(out), std::move(t.events())};
  };
  if (schedule == PipelineSchedule::kGPipe) return gpipe_timeline(micro_batches, run);
  return steady_timeline(static_cast<int>(stages.size()), 1, micro_batches, run);
}

PipelineTimeline interleaved_timeline(const std::vector<StageTimes>& stages, int micro_batches,
                                      int chunks) {
  if (chunks <= 1) return pipeline_timeline(stages, micro_batches, PipelineSchedule::k1F1B);
  if (stages.empty() || micro_batches < 1) return {};
  const int groups = static_cast<int>(stages.size()) / chunks;
  const auto run = [&](int m) {
    InterleavedTimeline t(stages, m, chunks);
    PipelineTimeline out = t.run();
    return Run{std::move(out), std::move(t.events())};
  };
  // Megatron's order runs micro-batches in blocks of `groups`: its cycles are whole blocks.
  return steady_timeline(static_cast<int>(stages.size()), groups, micro_batches, run);
}

PipelineTimeline pipeline_timeline_events(const std::vector<StageTimes>& stages, int micro_batches,
                                          PipelineSchedule schedule) {
  if (stages.empty() || micro_batches < 1) return {};
  return Timeline(stages, micro_batches, schedule).run();
}

PipelineTimeline interleaved_timeline_events(const std::vector<StageTimes>& stages,
                                             int micro_batches, int chunks) {
  if (chunks <= 1) return pipeline_timeline_events(stages, micro_batches, PipelineSchedule::k1F1B);
  if (stages.empty() || micro_batches < 1) return {};
  return InterleavedTimeline(stages, micro_batches, chunks).run();
}

}  // namespace cost
}  // namespace hexi
