#pragma once
// The measured trace and per-op-class statistics of `hexisim train`.
//
// Trace: Chrome trace-event JSON (opens in Perfetto), in the simulator's layout
// (sim/trace.cpp) so the two can be read side by side: one process per device (pid =
// device id), one thread per program stream (tid 0 compute, 1 p2p, 2 gather, 3 dp),
// the program's op labels (op_label, scheduler/program.hpp), and args.op = the program op id.
// Compute and collective ops are complete events ("X"); sends and receives async pairs ("b"/"e", id
// = op id) as in the simulator. Times are microseconds since the run's start (a barrier), every
// step of the run one after the other; args.step numbers the step. args.bytes are the
// bytes the engine moved (float32).

#include <map>
#include <string>
#include <vector>

#include "engine/communicator.hpp"
#include "engine/runtime.hpp"
#include "scheduler/program.hpp"
#include "topologies/json_input.hpp"

namespace hexi::engine {

// This device's events, one JSON object per line (no trailing comma), for the steps in
// `steps`; `t0` (steady-clock seconds) is time zero; `device_name` its GPU type.
std::string trace_events(const Program& program, int device, const std::string& device_name,
                         const std::vector<StepStats>& steps, double t0);

// The whole document from every device's trace_events().
std::string trace_document(const std::vector<std::string>& per_device, const Json& other_data);

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
