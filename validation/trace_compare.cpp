#include "validation/trace_compare.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace hexi::validation {
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

namespace {

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

std::string bytes_text(double bytes) {
  std::ostringstream out;
  out << std::setprecision(15) << bytes;
  return out.str();
}

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
  auto m = measured_ops(program, measured, measured_origin);
  if (!m) return m.error();
  TraceComparison c;
  c.measured_steps = m->steps;
  c.steps_used = m->steps - m->first;
  std::map<std::string, OpClassTimes> classes;
  for (int id = 0; id < num_ops; ++id) {
    if (sim_s[id] < 0 || program.ops[id].kind == OpKind::kRecv) continue;
    const std::string name = op_class(program, id);
    OpClassTimes& t = classes[name];
    t.op_class = name;
    ++t.ops;
    t.simulated_s += sim_s[id];
    std::vector<double> seconds;
    for (const TraceOp& e : m->by_op[id]) seconds.push_back((e.end_us - e.start_us) * 1e-6);
    t.measured_s += median(seconds);
    ++c.ops;
  }
  for (auto& [name, t] : classes) c.classes.push_back(t);
  c.simulated_iteration_s = sim_span.seconds();
  c.measured_iteration_s = median(m->step_seconds);
  return c;
}

Result<MeasuredOps> measured_ops(const Program& program, const Trace& measured,
                                 const std::string& origin) {
  const int num_ops = program.num_ops();
  const Json& other = measured.other_data;
  if (other.contains("scenario") && other["scenario"].is_string() && !program.scenario.empty() &&
      other["scenario"].get<std::string>() != program.scenario) {
    return bad_input(origin + ": measured under scenario " + other["scenario"].get<std::string>() +
                     ", not " + program.scenario +
                     " (a scenario's precision, batch and model make its program): compare it "
                     "with the scenario it was measured under");
  }
  MeasuredOps m;
  std::set<int> steps;  // the steps the trace holds (a resumed run's need not start at 0)
  for (const TraceOp& e : measured.ops) {
    if (e.op < 0 || e.op >= num_ops) {
      return bad_input(origin + ": op " + std::to_string(e.op) +
                       " is not an op of the simulated program (" + std::to_string(num_ops) +
                       " ops): was the trace measured on another plan or scenario?");
    }
    const Op& op = program.ops[e.op];
    if (op.kind != OpKind::kCompute && e.bytes > 0 && std::abs(e.bytes - op.bytes) > 0.5) {
      return bad_input(origin + ": op " + std::to_string(e.op) + " (" + op_label(program, e.op) +
                       ") moved " + bytes_text(e.bytes) + " bytes, the simulated program's " +
                       bytes_text(op.bytes) +
                       ": the trace was measured under another scenario (precision, batch or "
                       "model)");
    }
    if (e.step >= 0) steps.insert(e.step);
  }
  if (steps.empty()) return bad_input(origin + ": no op of a training step in the trace");
  m.steps = static_cast<int>(steps.size());
  m.first = m.steps >= 3 ? 1 : 0;  // the first step warms up
  const int first_step = *std::next(steps.begin(), m.first);
  m.by_op.resize(num_ops);
  std::map<int, Span> step_span;  // by step, ascending
  for (const TraceOp& e : measured.ops) {
    if (e.step < first_step) continue;
    m.by_op[e.op].push_back(e);
    step_span[e.step].add(e);
  }
  for (int id = 0; id < num_ops; ++id) {
    if (m.by_op[id].empty()) {
      return bad_input(origin + ": op " + std::to_string(id) + " (" + op_label(program, id) +
                       ") was not measured: the trace is not of the simulated program");
    }
  }
  for (const auto& [step, span] : step_span) m.step_seconds.push_back(span.seconds());
  return m;
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
