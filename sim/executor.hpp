#pragma once
// sim/ internal: runs a program on a SimGrid platform (scheduler/program/program.hpp semantics).
//
// No actors and no eager DAG (in SimGrid 3.32, activities created outside actors sit
// in a list scanned on every completion: 40k activities took 11 s, 100k 224 s):
// the executor keeps each op's count of unfinished predecessors (deps + the
// previous op of its stream) and reacts to completions, lazily creating
//   compute ops   -> a kernel timer at start + duration (a GPU runs one compute op
//                    at a time, so its time is exact without a SimGrid exec);
//                    consecutive compute ops whose only successor is the next one
//                    share one timer, and timers due at the same instant (TP ranks
//                    in lockstep) share one kernel timer; a device under a CPU
//                    quota (sim/quota_clock.hpp) runs its compute at full speed and
//                    pauses where its quota of the period is spent
//   send/recv     -> a batch of one flow once both ends have started (rendezvous)
//   collectives   -> batches of the flows of their algorithm (collective_algos.hpp),
//                    phase after phase, once every member has started
// Every flow is charged `latency_steps x largest hop latency` of its phase (of each part,
// summed, for a pipelined hierarchical phase) and
// shares links by max-min (CM02).
//
// Uncontended batches are exact without SimGrid: when no link of a batch carries
// any other flow and no two of its flows share a link, each flow takes exactly
// latency + bytes / (its route's bottleneck), so the batch becomes one timer and
// holds its links. A flow that later needs a held link first "materialises" the
// holder: its flows' progress so far is computed and their remainders start as
// SimGrid comms, which then share links with the newcomer as usual. Results are
// the same as with SimGrid comms throughout (up to byte rounding), with far fewer
// SimGrid activities.

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "scheduler/program/program.hpp"
#include "sim/collective_algos.hpp"
#include "sim/platform.hpp"
#include "sim/quota_clock.hpp"

namespace hexi::sim {

struct FlowRecord {
  int src = 0;
  int dst = 0;
  double bytes = 0;
  double start = 0;  // s, when the flow was started (its latency included in [start, end])
  double end = -1;
  int op = -1;  // a program op it belongs to (the send, or the collective's first member)
};

struct ExecutionResult {
  std::vector<double> ready;  // per op: when its deps and stream allowed it to start (s)
  std::vector<double>
      start;  // per op: when its work began (transfer / collective start for comm ops)
  std::vector<double> end;  // per op: completion (s)
  std::vector<FlowRecord> flows;
  std::vector<double> link_bytes;     // per Platform::links() entry
  std::int64_t timers = 0;            // kernel timers scheduled (compute and uncontended batches)
  std::int64_t comms = 0;             // SimGrid comms started
  std::int64_t analytic_batches = 0;  // batches that ran uncontended, without SimGrid comms
  std::int64_t materialised = 0;      // of those, batches that met contention and became comms
  std::vector<int> unfinished;        // ops that never completed (empty on success)
};

// Per device of the cluster: whether the program runs it (every device but, in a replica-folded
// program, those of the pipelines it stands in for).
std::vector<char> simulated_devices(const Program& program, int num_devices);

class Executor {
 public:
  // duration: per op, seconds of a compute op (0 for others).
  Executor(const Program& program, Platform& platform, const Cluster& cluster,
           std::vector<double> duration, Algorithm algorithm, bool analytic_uncontended = true);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs the SimGrid engine until no event is left.
  ExecutionResult run();

 private:
  struct Instance;  // a collective's members and progress
  struct Batch;     // flows that complete together (a transfer, or a collective's phase)
  struct Flow;      // per flow: its batch, route and SimGrid comm

  void build_graph();
  void make_ready(int op, double t);
  void complete(int op, double t);
  void drain();
  void start_compute_chain(int op, double t);
  void at(double time, int first, int last);  // coalesced compute timer
  void fire(int slot);
  const CommCpuLaw& comm_cpu(int device, int peer) const;
  double notice(int device, int peer, double from, double until);
  void complete_at(int op, double when, double now);
  double spend_comm_cpu(int device, int peer, double bytes, bool collective, double t);
  void start_transfer(int send, int recv, double t);
  void start_collective(int instance, double t);
  void start_phase(int instance, double t);
  int new_batch(int owner, bool collective, double latency);
  // A flow of `bytes` whose transport sends `message` bytes per step (its efficiency).
  void add_flow(int batch, int src, int dst, double bytes, double message, int trace_op);
  void launch(int batch, double t);
  void launch_analytic(int batch, double t);
  void launch_comm(int flow, double bytes, double latency);
  void materialise(int batch, double t);
  void on_flow_done(int flow, double t);
  void on_batch_done(int batch, double t);

  const Program& p_;
  Platform& platform_;
  const Cluster& cluster_;
  std::vector<double> duration_;
  Algorithm algorithm_;
  bool analytic_;

  std::vector<int> pending_;
  std::vector<int> succ_begin_, succ_;  // CSR successors (deps reversed + stream order)
  std::vector<int> stream_next_;        // the next op of the same stream (-1)
  std::vector<int> partner_;            // send <-> recv
  std::vector<int> instance_of_;        // collective op -> instance
  std::vector<Instance> instances_;
  std::vector<Batch> batches_;
  std::vector<Flow> flows_;
  std::vector<int> active_;  // per link: SimGrid comms crossing it
  std::vector<int> holder_;  // per link: the uncontended batch holding it (-1)
  std::vector<int> mark_;    // per link: the last batch (stamp) that looked at it
  int stamp_ = 0;
  std::vector<char> started_;
  std::vector<char> simulated_;  // per device: runs in this program (all but a folded one's rest)
  std::vector<std::optional<QuotaClock>> quota_;  // per device, where it has a CPU quota
  std::vector<int> queue_;
  // Coalesced compute timers: due time -> slot; slot -> chains (first, last op).
  std::unordered_map<double, int> slot_at_;
  std::vector<std::vector<std::pair<int, int>>> slots_;
  std::vector<double> slot_time_;
  std::vector<int> free_slots_;
  ExecutionResult r_;
};

}  // namespace hexi::sim
