#pragma once
// The measured trace and per-op-class statistics of `hexisim train`.
//
// Trace: the one trace schema of the simulator and the engine
// (scheduler/program/trace_schema.hpp), so that the two are read by the same code and
// meet by program op id. Times are microseconds since the run's start (a barrier), every
// step of the run one after the other; args.step numbers the step. args.bytes are the
// bytes the engine moved (float32).

#include <map>
#include <string>
#include <vector>

#include "engine/communicator.hpp"
#include "engine/runtime.hpp"
#include "scheduler/program/program.hpp"
#include "scheduler/program/trace_schema.hpp"
#include "topologies/json_input.hpp"

namespace hexi::engine {

// This device's events, one JSON object per line (no trailing comma), for the steps in
// `steps`; `t0` (steady-clock seconds) is time zero; `device_name` its GPU type.
std::string trace_events(const Program& program, int device, const std::string& device_name,
                         const std::vector<StepStats>& steps, double t0);

// Rank 0 receives every rank's string (in rank order); other ranks get an empty vector.
Result<std::vector<std::string>> gather_strings(Communicator& world, const std::string& mine);

// Time, count, FLOPs and bytes per op class ("attn.fwd", "all-reduce activation",
// "send activation", ...), summed over the given steps of one device. FLOPs are the
// program's (the cost model's count for the op's shard); bytes as in the trace.
struct OpClassStats {
  int count = 0;
  double seconds = 0;
  double flops = 0;
  double bytes = 0;
};
using OpClasses = std::map<std::string, OpClassStats>;
// The class of an op: its compute kind, or "<collective|send|recv> <tensor>".
std::string op_class(const Program& program, const Op& op);
OpClasses op_classes(const Program& program, const std::vector<StepStats>& steps);
void merge(OpClasses& into, const OpClasses& from);
Json to_json(const OpClasses& classes);
OpClasses op_classes_from_json(const Json& json);

}  // namespace hexi::engine
