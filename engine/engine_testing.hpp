#pragma once
// Test and report helpers: run a program in one process on the fake communicator
// (one thread per rank), run the single-process reference (kernels::LlamaModel, the
// whole global batch at once), assemble full-model tensors from the ranks' shards,
// and compare them tensor by tensor.

#include <string>
#include <vector>

#include "engine/data.hpp"
#include "engine/runtime.hpp"
#include "kernels/params.hpp"
#include "scenarios/scenario.hpp"
#include "scheduler/program.hpp"

namespace hexi::engine {

// Loss per step and full-model tensors: the gradients of the first and the last step
// (after DP sync, before the update) and the parameters after the last step.
struct Trajectory {
  std::vector<double> losses;
  kernels::Params<float> grads_first, grads_last, params_last;
};

// Loads a shipped scenario and a plan file (relative to scenarios/plans/) and lowers it.
Result<Program> lower_shipped(const std::string& scenario, const std::string& plan_file,
                              Scenario* scenario_out = nullptr);

// The program on program.devices.size() threads with the fake communicator. Besides
// running it, checks that every element of the model is updated by some rank and that
// all ranks holding an element agree on its parameter value bit for bit (replicas in
// sync) and, where they update it, on its gradient.
Result<Trajectory> run_fake(const Program& program, const Model& model, const DataSource& data,
                            const RuntimeOptions& options, int steps);

// The single-process reference: LlamaModel<float> over the whole global batch of each
// step, kernels::adamw_step.
Trajectory run_reference(const Model& model, int global_batch, const DataSource& data,
                         const RuntimeOptions& options, int steps);

// Per-tensor comparison: max |got - ref|, max |got - ref| / max(|ref|, floor), and
// whether every element satisfies |got - ref| <= atol + rtol * |ref|.
struct TensorError {
  std::string name;
  double max_abs = 0;
  double max_rel = 0;
  bool ok = true;
};
std::vector<TensorError> compare(const kernels::Params<float>& ref,
                                 const kernels::Params<float>& got, double atol, double rtol);
// Human-readable table of the comparison (for test output and reports).
std::string format_errors(const std::vector<TensorError>& errors);

}  // namespace hexi::engine
