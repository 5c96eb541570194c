#pragma once
// The one trace schema of hexisim: Chrome trace-event JSON (opens in Perfetto or
// chrome://tracing), written by the simulator (sim/) and by the engine (engine/) and
// read back by validation, so that a simulated and a measured op meet by program op id.
//
//   process (pid) = device id, named "device <id> <gpu> (pipeline p, stage s, tp rank r)";
//   thread (tid)  = program stream: 0 compute, 1 p2p, 2 gather, 3 dp;
//   name          = op_label(program, op id);
//   compute ops and collectives: complete events ("X", ts and dur);
//   sends and receives: async pairs ("b" ... "e", id = op id), cat "p2p";
//   args: op (program op id), then where present step (engine: training step),
//         bytes (communication ops), posted_us (simulator, p2p: when it was posted),
//         folded_us (simulator, compute: collectives folded into the op), cpu_us (engine
//         on the cpu backend, every op: the rank process's CPU time in it), group.
// Times are microseconds since the run's time zero, with three decimals. Events are
// written with fixed formatting, so the same run gives the same bytes.

#include <optional>
#include <string>
#include <vector>

#include "scheduler/program/program.hpp"
#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi {
inline namespace program {

// One executed op.
struct TraceOp {
  int op = -1;      // program op id
  int device = -1;  // pid
  double start_us = 0;
  double end_us = 0;
  int step = -1;          // training step (engine); -1: absent
  double bytes = 0;       // communication ops: bytes moved
  double posted_us = -1;  // simulator, p2p: when the op was posted; < 0: absent
  double folded_us = -1;  // simulator, compute: folded collectives' time; < 0: absent
  double cpu_us = -1;     // engine on the cpu backend: the rank process's CPU time in the op
                          // (a rank under a CPU quota is paused, not charged, when its quota
                          // is spent; a communication op's copies, reductions and polls
                          // spend it); < 0: absent
};

// Appends events, one JSON object per line (no separators), for one document or for
// one rank's part of it (engine ranks write theirs and rank 0 joins them).
class TraceWriter {
 public:
  // Process name and sort index of `device`, and one thread name per stream.
  void device(const Program& program, int device, const std::string& gpu_name);
  // The op's event(s): "X" for compute and collectives, a "b"/"e" pair for p2p.
  void op(const Program& program, const TraceOp& e);
  // Any other event (one JSON object, no newline), e.g. the simulator's link counters.
  void raw(const std::string& event);
  const std::string& lines() const { return lines_; }

 private:
  std::string lines_;
};

// The document: every part's lines, in order, with `other_data` (run metadata) when given.
std::string trace_document(const std::vector<std::string>& parts,
                           const std::optional<Json>& other_data = std::nullopt);

// A trace read back: every op event (p2p pairs joined), in document order.
struct Trace {
  std::vector<TraceOp> ops;
  Json other_data = Json::object();
};

// Reads a document of this schema; errors name `origin` and the event.
Result<Trace> trace_from_json(const Json& json, const std::string& origin);
Result<Trace> load_trace(const std::string& path);

}  // namespace program
}  // namespace hexi
