#pragma once
// Simulated against measured, per op class: a trace of the simulator (`hexisim simulate`)
// and one of the engine (`hexisim train --trace`) of the same program meet by program op id
// (scheduler/program/trace_schema.hpp). Per class of op (a compute kind such as attn.fwd or
// ring.bwd, a point-to-point tensor, a collective on a tensor) the summed op time of one
// iteration in each, and the iteration itself: what calibration fits and what validation
// reports.
//
// The measured time of an op is its median over the measured steps, leaving out the first
// (warm-up) when there are at least three. Point-to-point classes count sends only: a send
// ends when its message is delivered, a receive also waits for its sender.

#include <string>
#include <vector>

#include "scheduler/program/program.hpp"
#include "scheduler/program/trace_schema.hpp"
#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi::validation {

struct OpClassTimes {
  std::string op_class;  // e.g. "attn.fwd", "send activation", "all-reduce grad_bucket"
  int ops = 0;           // program ops of the class found in both traces
  double simulated_s = 0;
  double measured_s = 0;
};

struct TraceComparison {
  std::vector<OpClassTimes> classes;  // by op class name
  double simulated_iteration_s = 0;   // first op start to last op end
  double measured_iteration_s = 0;    // the same per measured step, median
  int measured_steps = 0;             // steps in the measured trace
  int steps_used = 0;                 // steps the medians are taken over
  int ops = 0;                        // program ops matched
};

// A measured trace sorted by program op: every op's events over the steps used (the first
// left out when there are at least three), and each used step's span.
struct MeasuredOps {
  int steps = 0;                            // steps in the trace (they may skip numbers)
  int first = 0;                            // how many of them are not used (the warm-up)
  std::vector<std::vector<TraceOp>> by_op;  // per program op id, one event per used step
  std::vector<double> step_seconds;         // per used step: first op start to last op end
};
// Bad input (naming `origin`) when the trace holds an op id the program does not have, has
// no step, or misses an op of the program.
Result<MeasuredOps> measured_ops(const Program& program, const Trace& measured,
                                 const std::string& origin);
double median(std::vector<double> v);

// The class of program op `id` (see above).
std::string op_class(const Program& program, int id);

// Compares the two traces of `program`. Bad input (naming `measured_origin`) when the
// measured trace holds an op id the program does not have, or misses ops of it.
Result<TraceComparison> compare_traces(const Program& program, const Trace& simulated,
                                       const Trace& measured, const std::string& measured_origin);

Json to_json(const TraceComparison& c);

}  // namespace hexi::validation
