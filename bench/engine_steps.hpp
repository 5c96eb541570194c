#pragma once
// What engine_bench (cpu) and engine_cuda_bench (cuda) share: the whole model of a scenario on
// one device as a program, its training steps timed one per benchmark iteration, and the best
// time per op class over those steps.

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "engine/communicator.hpp"
#include "engine/data.hpp"
#include "engine/runtime.hpp"
#include "engine/trace.hpp"
#include "scenarios/scenario.hpp"
#include "scheduler/program/program.hpp"

namespace hexi::engine {

// The scenario's whole model on device 0: one pipeline, one stage, micro-batches of 1.
Result<Program> whole_model_program(const Scenario& sc, const std::string& name);

// RankRuntime of `program` on `world` and `backend`: one warm-up step, then one step per
// benchmark iteration, appended to `steps` (each step's wall time is also the iteration's
// manual time, for benchmarks that time manually).
Status time_steps(benchmark::State& state, const Program& program, const Model& model,
                  Communicator& world, Backend& backend, const DataSource& data,
                  std::vector<StepStats>& steps);

// Per op class the best (shortest) time over `steps` (as a reference's best trial).
OpClasses best_classes(const Program& program, const std::vector<StepStats>& steps);

}  // namespace hexi::engine
