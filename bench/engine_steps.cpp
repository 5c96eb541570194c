#include "bench/engine_steps.hpp"

#include <algorithm>

#include "scheduler/program/lower.hpp"

namespace hexi::engine {

Result<Program> whole_model_program(const Scenario& sc, const std::string& name) {
  Plan plan;
  plan.pipelines.push_back(
      Pipeline{sc.training.global_batch, 1, {Stage{{0}, 0, sc.model.layers, {}, {}, {}}}});
  return lower_plan(plan, sc.cluster, sc.model, sc.training, LowerOptions{}, name);
}

Status time_steps(benchmark::State& state, const Program& program, const Model& model,
                  Communicator& world, Backend& backend, const DataSource& data,
                  std::vector<StepStats>& steps) {
  Progress progress;
  auto rt = RankRuntime::create(program, model, world, backend, data, RuntimeOptions{}, progress);
  if (!rt.ok()) return rt.error();
  if (auto warm = (*rt)->step(); !warm.ok()) return warm.error();
  for (auto _ : state) {
    auto s = (*rt)->step();
    if (!s.ok()) return s.error();
    state.SetIterationTime(s->seconds);
    steps.push_back(std::move(*s));
  }
  return {};
}

OpClasses best_classes(const Program& program, const std::vector<StepStats>& steps) {
  OpClasses classes = op_classes(program, {steps.front()});
  for (const StepStats& step : steps) {
    for (const auto& [name, c] : op_classes(program, {step}))
      classes[name].seconds = std::min(classes[name].seconds, c.seconds);
  }
  return classes;
}

}  // namespace hexi::engine
