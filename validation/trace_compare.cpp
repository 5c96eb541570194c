#include "validation/trace_compare.hpp"

#include <algorithm>
#include <limits>
#include <map>

namespace hexi::validation {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// An op's time in a trace (s), and the span of the ops (first start to last end).
struct Span {
  double begin = std::numeric_limits<double>::infinity();
  double end = -std::numeric_limits<double>::infinity();
  void add(const TraceOp& e) {
    begin = std::min(begin, e.start_us);
    end = std::max(end, e.end_us);
  }
  double seconds() const { return end > begin ? (end - begin) * 1e-6 : 0.0; }
};

}  // namespace

std::string op_class(const Program& program, int id) {
  const Op& op = program.ops[id];
  switch (op.kind) {
    case OpKind::kCompute:
      return std::string(to_string(op.compute));
    case OpKind::kCollective:
      return std::string(to_string(op.collective)) + " " + std::string(to_string(op.tensor));
    case OpKind::kSend:
    case OpKind::kRecv:
      break;
  }
  return std::string(to_string(op.kind)) + " " + std::string(to_string(op.tensor));
}

Result<TraceComparison> compare_traces(const Program& program, const Trace& simulated,
                                       const Trace& measured, const std::string& measured_origin) {
  const int num_ops = program.num_ops();
  // Simulated: one iteration, one event per op.
  std::vector<double> sim_s(num_ops, -1.0);
  Span sim_span;
  for (const TraceOp& e : simulated.ops) {
    if (e.op < 0 || e.op >= num_ops) continue;
    sim_s[e.op] = (e.end_us - e.start_us) * 1e-6;
    sim_span.add(e);
  }
  // Measured: per step, per op.
  int steps = 0;
  for (const TraceOp& e : measured.ops) {
    if (e.op < 0 || e.op >= num_ops) {
      return bad_input(measured_origin + ": op " + std::to_string(e.op) +
                       " is not an op of the simulated program (" + std::to_string(num_ops) +
                       " ops): was the trace measured on another plan or scenario?");
    }
    steps = std::max(steps, e.step + 1);
  }
  if (steps == 0) return bad_input(measured_origin + ": no op of a training step in the trace");
  const int first = steps >= 3 ? 1 : 0;  // the first step warms up
  std::vector<std::vector<double>> per_op(num_ops);
  std::vector<Span> step_span(steps);
  for (const TraceOp& e : measured.ops) {
    if (e.step < first) continue;
    per_op[e.op].push_back((e.end_us - e.start_us) * 1e-6);
    step_span[e.step].add(e);
  }
  TraceComparison c;
  c.measured_steps = steps;
  c.steps_used = steps - first;
  std::map<std::string, OpClassTimes> classes;
  for (int id = 0; id < num_ops; ++id) {
    if (per_op[id].empty()) {
      return bad_input(measured_origin + ": op " + std::to_string(id) + " (" +
                       op_label(program, id) +
                       ") was not measured: the trace is not of the simulated program");
    }
    if (sim_s[id] < 0 || program.ops[id].kind == OpKind::kRecv) continue;
    const std::string name = op_class(program, id);
    OpClassTimes& t = classes[name];
    t.op_class = name;
    ++t.ops;
    t.simulated_s += sim_s[id];
    t.measured_s += median(per_op[id]);
    ++c.ops;
  }
  for (auto& [name, t] : classes) c.classes.push_back(t);
  c.simulated_iteration_s = sim_span.seconds();
  std::vector<double> iterations;
  for (int s = first; s < steps; ++s) iterations.push_back(step_span[s].seconds());
  c.measured_iteration_s = median(iterations);
  return c;
}

Json to_json(const TraceComparison& c) {
  Json classes = Json::array();
  for (const OpClassTimes& t : c.classes) {
    classes.push_back({{"class", t.op_class},
                       {"ops", t.ops},
                       {"simulated_s", t.simulated_s},
                       {"measured_s", t.measured_s}});
  }
  return {{"classes", classes},
          {"simulated_iteration_s", c.simulated_iteration_s},
          {"measured_iteration_s", c.measured_iteration_s},
          {"measured_steps", c.measured_steps},
          {"steps_used", c.steps_used},
          {"ops", c.ops}};
}

}  // namespace hexi::validation
