#pragma once
// sim/ internal: runs a program on a SimGrid platform (program.hpp semantics).
//
// No actors and no eager DAG (REFERENCE.md: both cost too much in SimGrid 3.32):
// the executor keeps each op's count of unfinished predecessors (deps + the
// previous op of its stream) and reacts to completions, lazily creating
//   compute ops   -> a kernel timer at start + duration (a GPU runs one compute op
//                    at a time, so its time is exact without a SimGrid exec);
//                    consecutive compute ops whose only successor is the next one
//                    share one timer (same times, fewer events)
//   send/recv     -> one SimGrid comm once both ends have started (rendezvous)
//   collectives   -> the flows of their algorithm (collective_algos.hpp), phase
//                    after phase, once every member has started
// Flows are charged `latency_steps x largest hop latency` (through the network
// model's latency-factor hook) and share links by max-min (CM02).

#include <cstdint>
#include <vector>

#include "scheduler/program.hpp"
#include "sim/collective_algos.hpp"
#include "sim/platform.hpp"

namespace hexi::sim {

struct FlowRecord {
  int src = 0;
  int dst = 0;
  double bytes = 0;
  double start = 0;  // s, when the comm was started (latency included in [start, end])
  double end = 0;
  int op = -1;  // a program op it belongs to (the send, or the collective's first member)
};

struct ExecutionResult {
  std::vector<double> ready;  // per op: when its deps and stream allowed it to start (s)
  std::vector<double>
      start;  // per op: when its work began (transfer / collective start for comm ops)
  std::vector<double> end;  // per op: completion (s)
  std::vector<FlowRecord> flows;
  std::vector<double> link_bytes;  // per Platform::links() entry
  std::int64_t timers = 0;         // compute timers scheduled
  std::int64_t comms = 0;          // SimGrid comms started
  std::vector<int> unfinished;     // ops that never completed (empty on success)
};

class Executor {
 public:
  // duration: per op, seconds of a compute op (0 for others).
  Executor(const Program& program, Platform& platform, const Cluster& cluster,
           std::vector<double> duration, Algorithm algorithm);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs the SimGrid engine until no event is left.
  ExecutionResult run();

 private:
  struct Instance;  // a collective's members and progress
  struct Flow;      // a running SimGrid comm

  void build_graph();
  void make_ready(int op, double t);
  void complete(int op, double t);
  void drain();
  void start_compute_chain(int op, double t);
  void start_transfer(int send, int recv, double t);
  void start_collective(int instance, double t);
  void start_phase(int instance, double t);
  void start_flow(int src, int dst, double bytes, double latency, int owner, bool collective,
                  int trace_op);
  void on_flow_done(int flow, double t);

  const Program& p_;
  Platform& platform_;
  const Cluster& cluster_;
  std::vector<double> duration_;
  Algorithm algorithm_;

  std::vector<int> pending_;
  std::vector<int> succ_begin_, succ_;  // CSR successors (deps reversed + stream order)
  std::vector<int> stream_next_;        // the next op of the same stream (-1)
  std::vector<int> partner_;            // send <-> recv
  std::vector<int> instance_of_;        // collective op -> instance
  std::vector<Instance> instances_;
  std::vector<Flow> flows_;
  std::vector<char> started_;
  std::vector<int> queue_;
  ExecutionResult r_;
};

}  // namespace hexi::sim
