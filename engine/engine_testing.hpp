#pragma once
// Test and report helpers: run a program in one process on the fake communicator
// (one thread per rank), run the single-process reference (kernels::LlamaModel, the
// whole global batch at once), assemble full-model tensors from the ranks' shards,
// and compare them tensor by tensor.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/data.hpp"
#include "engine/runtime.hpp"
#include "kernels/params.hpp"
#include "scenarios/scenario.hpp"
#include "scheduler/program/program.hpp"

namespace hexi::engine {

// Loss per step and full-model tensors: the gradients of the first and the last step
// (after DP sync, before the update) and the parameters after the last step.
struct Trajectory {
  std::vector<double> losses;
  kernels::Params<float> grads_first, grads_last, params_last;
};

// A shipped tiny scenario and one of its plan files (scenarios/plans/), and every such pair
// the engine's plan tests run (runtime_test.cpp, precision_test.cpp); the name is a test
// parameter name ("tiny_llama_cpu_tiny_single_json").
struct PlanCase {
  const char* scenario;
  const char* plan;
};
const std::vector<PlanCase>& shipped_tiny_plans();
// The shipped sequence-mesh plans (scenarios/plans/tiny-seq-*.json, lowered by
// lower_sequence) and their scenarios (model tiny-llama-seq, the tiny_llama_seq oracle's).
const std::vector<PlanCase>& shipped_sequence_plans();
std::string plan_case_name(const PlanCase& c);

// Loads a shipped scenario and a plan file (relative to scenarios/plans/) and lowers it (a
// file with a "sequence" layout, as `hexisim seq --out` writes, by lower_sequence);
// a non-empty `precision` replaces the scenario's training.precision ("bf16", "fp32").
Result<Program> lower_shipped(const std::string& scenario, const std::string& plan_file,
                              Scenario* scenario_out = nullptr, const std::string& precision = "");

// What one rank hands back after its last step (host copies; layout from the program).
struct RankResult {
  std::vector<float> params, grads_first, grads_last;
  std::vector<char> owned;
};

// Runs `steps` steps of this rank's part and collects its RankResult; losses (global
// mean per step) are reduced over `world`.
Status run_rank(const Program& program, const Model& model, const DataSource& data,
                const RuntimeOptions& options, int steps, Communicator& world, Backend& backend,
                RankResult& result, std::vector<double>& losses);

// Full-model tensors from every rank's result (in program.devices order). Checks that
// every element of the model is updated by some rank and that all ranks holding an
// element agree on its parameter value bit for bit (replicas in sync) and, where they
// update it, on its gradient.
Result<Trajectory> assemble_trajectory(const Program& program, const Model& model,
                                       const std::vector<RankResult>& ranks,
                                       std::vector<double> losses);

// The program under MPI (one process per device): every rank runs its part, rank 0
// receives the others' results and returns the trajectory (other ranks: empty).
Result<Trajectory> run_mpi(const Program& program, const Model& model, const DataSource& data,
                           const RuntimeOptions& options, int steps, Communicator& world);

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

// Per-tensor comparison: max |got - ref|, that divided by the tensor's max |ref|, and
// whether every element satisfies |got - ref| <= atol_fraction * max|ref| + rtol * |ref|
// (the kernels/ oracle test's convention: an absolute floor relative to the tensor's
// scale, so that elements that are zero up to rounding do not need relative accuracy).
struct TensorError {
  std::string name;
  double max_abs = 0;
  double max_rel = 0;
  bool ok = true;
};
std::vector<TensorError> compare(const kernels::Params<float>& ref,
                                 const kernels::Params<float>& got, double atol_fraction,
                                 double rtol);
// The largest errors over all tensors (name "all").
TensorError worst(const std::vector<TensorError>& errors);

// The PyTorch oracle (kernels/testdata) as engine inputs: its batch as a data source
// (cycled: a global batch that is a multiple of the oracle's repeats its sequences, so
// loss and gradients stay the oracle's), its initialisation and AdamW settings, and its
// gradients as full-model tensors.
struct OracleInputs {
  std::unique_ptr<DataSource> data;
  RuntimeOptions options;
  kernels::Params<float> grads;
  double loss = 0, loss_after_1 = 0, loss_after_2 = 0;
  int batch = 0;
  kernels::LlamaDims dims;
};
// `model`: the oracle of scripts/make_oracle.py --model (tiny-llama-seq: sequence meshes).
Result<OracleInputs> load_oracle_inputs(const std::string& precision = "fp32",
                                        const std::string& model = "tiny-llama");

// How close a run must come to the oracle of its precision: |loss - torch| <= loss for the
// losses (initial, after one and two AdamW steps), compare(torch, got, atol_fraction, rtol)
// for the first-step gradients.
// - fp32: both sides float32, differing in summation order only (runtime_test.cpp).
// - bf16: unit roundoff u = 2^-9 ~ 2.0e-3. Both sides round the same tensors to bf16, at a
//   few different points (torch rounds weight and norm-gain gradients to bf16 before the
//   float32 masters, and dK/dV per query head before summing them; the engine keeps those
//   in float32), and sum in another order before each rounding, so an element may land one
//   bf16 ulp (2u) apart and the difference propagates: gradients atol_fraction 2e-2 and
//   rtol 5e-2 (10u and 25u); losses 2e-3 on ~5.5 (4e-4 relative: the mean over all token
//   losses averages the rounding out).
struct OracleTolerance {
  double loss = 0, atol_fraction = 0, rtol = 0;
};
OracleTolerance oracle_tolerance(const std::string& precision);

// sqrt(sum (got - ref)^2 / sum ref^2) over every element of every tensor.
double rms_difference(const kernels::Params<float>& ref, const kernels::Params<float>& got);

// Evidence that first-step gradients come from a bf16 run. The float32 oracle lies within
// oracle_tolerance("bf16") of the bf16 one too (bf16 rounding moves torch's own gradients by
// up to 1.3e-2 of a tensor's scale, 6.7e-3 rms), so the bounds alone cannot tell. A bf16
// run is as far from torch's float32 gradients as torch's bf16 run is (to_fp32 >
// torch_gap / 2; a float32 run is ~1e-7 from them) and clearly closer to torch's bf16 ones,
// whose roundings it shares in part (the same weights, mostly the same activations):
// to_bf16 < 0.9 to_fp32 (a float32 run: 6.7e-3 from them, farther than from float32).
// Measured on every tiny plan: to_fp32 6.4-6.6e-3, to_bf16 4.1-5.0e-3 (0.63-0.77 of it).
struct Bf16Evidence {
  double to_bf16 = 0, to_fp32 = 0, torch_gap = 0;  // rms differences
  std::string problem;                             // empty: the run is bf16
};
Result<Bf16Evidence> bf16_evidence(const kernels::Params<float>& grads_first);

// The oracle comparison every engine test makes (threads, MPI, cuda): the losses (initial,
// after one and two AdamW steps) and the first-step gradients within
// oracle_tolerance(precision), and for bf16 the bf16_evidence. `failures` lists what does
// not hold, one message each (empty: the run matches).
struct OracleComparison {
  std::vector<TensorError> grads;        // first-step gradients, per tensor
  std::optional<Bf16Evidence> evidence;  // bf16 runs
  std::vector<std::string> failures;
};
Result<OracleComparison> compare_with_oracle(const OracleInputs& oracle,
                                             const std::vector<double>& losses,
                                             const kernels::Params<float>& grads_first,
                                             const std::string& precision);
// Human-readable table of the comparison (for test output and reports).
std::string format_errors(const std::vector<TensorError>& errors);

}  // namespace hexi::engine
