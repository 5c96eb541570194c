#pragma once
// One rank of the engine: executes its device's op stream of a program (scheduler/
// scheduler/program/program.hpp) for real, op for op and in list order, on a Backend and a
// Communicator, and times every op (the trace keeps the program's op ids).
//
// Executing the program's semantics with the kernels/ TP-shard blocks:
// - compute ops run the block on the device's shard; a block's partial output (or
//   input gradient) is reduced by the TP all-reduce op that follows it in the
//   program, which then adds the residual (forward) or accumulates into the residual
//   stream's gradient (backward). With TP 1 there is no all-reduce op: the compute
//   op adds directly.
// - Norm gains are replicated, and the kernels' block backward leaves each TP rank
//   with its shard's share of their gradient (kernels/blocks.hpp). The engine sums
//   those shares exactly by carrying them in the same TP all-reduce as the block's
//   input gradient (h extra floats on R*h), so every TP rank holds the complete norm
//   gradient when DP sync starts, as Megatron does, without an op the program lacks.
// - loss statistics: the vocab-parallel head's (local max, sum of exp, target logit)
//   per token are all-gathered and combined in rank order (identical on every rank).
// - stage boundaries: send/recv move the program's row pieces; the gather-group
//   all-gather assembles the (R, h) tensor (pieces padded to equal size when R is not
//   a multiple of the TP degree).
// - DP buckets: gradients packed in the program's segment order (engine/shards.hpp),
//   all-reduced (ZeRO-0) or reduce-scattered, updated, all-gathered (ZeRO-1, member i
//   owning elements [i*E/n, (i+1)*E/n)); replicated parameters are updated by TP rank 0
//   and broadcast to the TP group. AdamW moments exist only for owned elements.
// - Sends are non-blocking; a micro-batch's buffers are reused only after its sends
//   completed. Activation buffers are pooled: as many as the schedule keeps in flight.
//
// Training data: pipeline p's micro-batch j is sequences [offset_p + j*b, +b) of the
// step's global batch (engine/data.hpp); the head's loss gradient is scaled by
// 1/(global batch tokens), so DP sums give the gradient of the global mean loss.

#include <filesystem>
#include <memory>
#include <string_view>
#include <vector>

#include "engine/backend.hpp"
#include "engine/checkpoint_files.hpp"
#include "engine/communicator.hpp"
#include "engine/data.hpp"
#include "engine/watchdog.hpp"
#include "kernels/params.hpp"
#include "scenarios/model.hpp"
#include "scheduler/program/program.hpp"

namespace hexi::engine {

struct RuntimeOptions {
  AdamW adamw;
  kernels::InitConfig init;  // parameter initialisation (seed, norm jitter)
  Fault fault;               // injected failure (tests), none by default
};

// One executed op: program op id, start and end in seconds on the host steady clock.
struct OpTime {
  int op = 0;
  double start_s = 0;
  double end_s = 0;
  double cpu_s = -1;  // cpu backend, compute ops: this thread's CPU time in the op; < 0: absent
};

struct StepStats {
  int step = 0;            // iteration number (0-based) just run
  double loss_sum = 0;     // sum of the token losses this rank accounts for (TP rank 0 of a
  double loss_tokens = 0;  //   last stage; 0 elsewhere) and their number
  double seconds = 0;      // wall time of the step on this rank
  std::vector<OpTime> ops;
};

class RankRuntime {
 public:
  // World rank r executes device program.devices[r]; world.size() must equal the
  // number of devices of the program. Collective over the world (creates the groups).
  static Result<std::unique_ptr<RankRuntime>> create(const Program& program, const Model& model,
                                                     Communicator& world, Backend& backend,
                                                     const DataSource& data,
                                                     const RuntimeOptions& options,
                                                     Progress& progress);
  ~RankRuntime();

  // Runs one training iteration: forward, backward, DP sync, optimizer.
  Result<StepStats> step();

  int device() const;
  int steps_done() const;
  const kernels::ParamLayout& layout() const;
  // Host copies of this device's parameters and of the gradients of the last step (after
  // DP sync: complete on the elements this device updates, see owned()).
  Result<std::vector<float>> params() const;
  Result<std::vector<float>> grads() const;
  // Per element of layout(): 1 when this device's optimizer updates it.
  const std::vector<char>& owned() const;

  // Checkpoint (engine/checkpoint_files.hpp): save makes this device's file (parameters,
  // AdamW moments, step) durable under a new name in `dir` and returns its manifest entry;
  // the checkpoint is complete once rank 0 publishes the manifest naming every device's.
  // load reads `dir`'s manifest and this device's file, checks both against each other and
  // the program, and refuses anything else with a message.
  Result<ManifestFile> save(const std::filesystem::path& dir, SavePoints& points) const;
  Status load(const std::filesystem::path& dir);

  struct Impl;

 private:
  explicit RankRuntime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Short description of op `id`, e.g. "op 57 (recv activation rows [0, 16) of micro-batch 3
// from device 4)".
std::string describe_op(const Program& program, int id);

// Llama dimensions of a catalog model; bad input when the engine cannot run it.
Result<kernels::LlamaDims> llama_dims(const Model& model);
// Bad input when the engine cannot train `model` at this precision (bytes per element, 4
// or 2) on this backend ("cpu", "cuda"): mixtures of experts train in float32 on the cpu,
// dropless (no capacity factor).
Status check_trainable(const Model& model, int bytes_per_element, std::string_view backend);

}  // namespace hexi::engine
