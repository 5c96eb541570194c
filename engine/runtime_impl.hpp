#pragma once
// Internals of RankRuntime (runtime.hpp), shared by runtime_setup.cpp (buffers,
// groups, buckets), runtime_ops.cpp (the op interpreter), runtime_dp.cpp (gradient
// buckets and AdamW) and runtime.cpp (steps and checkpoints).

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/check.hpp"
#include "engine/runtime.hpp"
#include "engine/shards.hpp"

namespace hexi::engine {

// The buffers of one micro-batch in flight on this device.
struct Slot {
  DeviceArray<float> resid;       // (2*layers + 1, R, h): every block's input, then the output
  DeviceArray<float> attn_saved;  // (layers, attention_saved_size)
  DeviceArray<float> mlp_saved;   // (layers, mlp_saved_size)
  DeviceArray<float> head_saved;  // (head_saved_size), last stage only
  DeviceArray<float> grad;        // (R, h): gradient of the residual stream
  DeviceArray<int> tokens;        // (R)
  DeviceArray<int> targets;       // (R)
  DeviceArray<std::uint16_t> send_wire;         // bf16 runs: (2, R, h) packed activation
                                                // and gradient rows of outstanding sends
  std::vector<std::unique_ptr<Request>> sends;  // outstanding isends from these buffers
  int micro_batch = -1;                         // -1 when free
};

// What the next TP all-reduce op of the compute stream applies to.
struct Pending {
  bool active = false;
  float* buf = nullptr;  // reduced in place, `count` floats
  std::size_t count = 0;
  const float* add_from = nullptr;  // forward: buf += add_from (the residual), R*h floats
  float* add_into = nullptr;        // backward: add_into += buf, R*h floats
  float* norm_grad = nullptr;       // backward: norm_grad += buf[R*h, R*h + h)
};

// One DP bucket this device joins.
struct BucketState {
  Communicator* comm = nullptr;
  int member = 0;                  // this device's index in the bucket group
  std::size_t elements = 0;        // E
  DeviceArray<std::int64_t> idx;   // (E): flat bucket -> parameter buffer index
  std::vector<std::size_t> piece;  // (n + 1): member i owns [piece[i], piece[i+1])
  std::size_t chunk = 0;           // max piece size (padded reduce-scatter chunk)
};

struct RankRuntime::Impl {
  Impl(const Program& p, const Model& m, Communicator& w, Backend& b, const DataSource& d,
       const RuntimeOptions& o, Progress& pr)
      : prog(p), model(m), world(w), be(b), data(d), opt(o), progress(pr) {}

  // ---- fixed inputs --------------------------------------------------------------------
  const Program& prog;
  const Model& model;
  Communicator& world;
  Backend& be;
  const DataSource& data;
  RuntimeOptions opt;
  Progress& progress;
  const DeviceLayout* lay = nullptr;
  kernels::LlamaDims dims;
  bool bf16 = false;                // mixed precision (program bytes_per_element 2)
  BlockShape shape;                 // one micro-batch on this shard
  int rows = 0;                     // R = micro_batch * seq
  int hidden = 0;                   // h
  int layers = 0;                   // layers of the stage
  int first_sequence = 0;           // offset of this pipeline in the global batch
  std::vector<int> rank_of_device;  // device id -> world rank (-1 if unused)

  // ---- parameters and optimizer ------------------------------------------------------
  kernels::ParamLayout layout;
  DeviceArray<float> params, grads;   // float32 master weights; float32 gradients
  DeviceArray<float> compute_params;  // bf16 runs: params rounded to bf16 at each step's start
  std::vector<char> owned;
  std::vector<Run> runs;                // owned elements, per tensor
  std::vector<std::size_t> run_moment;  // offset of each run's moments
  DeviceArray<float> moment1, moment2;
  std::map<std::string, std::size_t> offset_of;  // tensor name -> flat offset
  int steps = 0;

  // ---- communication ---------------------------------------------------------------------
  std::vector<std::unique_ptr<Communicator>> groups;  // by program group id (null: not a member)
  std::map<int, BucketState> buckets;                 // by program bucket id
  DeviceArray<std::int64_t> replicated_idx;           // replicated parameter elements
  std::size_t replicated_count = 0;
  DeviceArray<float> flat;                       // bucket / replica staging, padded
  DeviceArray<std::uint16_t> wire_in, wire_out;  // bf16 runs: packed blocking traffic

  // ---- activations ---------------------------------------------------------------------
  std::vector<Slot> slots;
  std::vector<int> slot_of;        // micro-batch -> slot (-1 when not in flight)
  std::vector<int> release_after;  // local op index -> micro-batch to release after it (-1)
  DeviceArray<float> partial;      // (R*h + h): a block's partial output / input gradient
  DeviceArray<float> gather_in, gather_out;  // boundary all-gather, padded pieces
  DeviceArray<float> stats, stats_all;       // (R, 3) and (tp, R, 3) loss statistics
  DeviceArray<float> token_loss;             // (R)
  Pending pending;
  int pending_loss = -1;  // micro-batch whose loss statistics await their all-gather
  std::vector<int> host_tokens, host_targets;
  double loss_sum = 0, loss_tokens = 0;

  // ---- setup (runtime_setup.cpp) -------------------------------------------------------
  Status setup();
  Status setup_groups();
  Status setup_params();
  Status setup_buckets();
  Status setup_ownership();
  Status setup_slots();

  // ---- ops (runtime_ops.cpp) -----------------------------------------------------------
  Result<StepStats> step();
  Status run_op(const Op& op);
  Status run_compute(const Op& op);
  Status block_forward(const Op& op, bool attn);
  Status block_recompute(const Op& op, bool attn);
  Status block_backward(const Op& op, bool attn);
  Status head_fwd(const Op& op);
  Status head_bwd(const Op& op);
  Status run_send(const Op& op);
  Status run_recv(const Op& op);
  Status run_collective(const Op& op);
  Status apply_pending(Communicator& comm);
  Status boundary_gather(const Op& op, Communicator& comm);
  Status loss_stats(const Op& op, Communicator& comm);
  Status finish_loss(Slot& slot);
  Status finish_block(float* out, const float* residual);
  Status finish_grad(Slot& slot, float* norm_grad_target);
  Result<Slot*> acquire(int micro_batch);
  Result<Slot*> slot(int micro_batch);
  Status release(int micro_batch);
  Status inject_fault(int op_index);

  // ---- communication at the run's precision (runtime_wire.cpp) ----------------------------
  // Buffers are float32 on the compute side; a bf16 run packs what it sends to 2-byte
  // bf16 (the bytes the program counts) and unpacks what it receives.
  Status wire_all_reduce(Communicator& c, float* buf, std::size_t n);
  Status wire_all_gather(Communicator& c, const float* in, float* out, std::size_t n);
  Status wire_reduce_scatter(Communicator& c, const float* in, float* out, std::size_t n);
  Status wire_broadcast(Communicator& c, float* buf, std::size_t n, int root);
  // `stage` (n packed elements) must live until the send completes (Slot::send_wire).
  Result<std::unique_ptr<Request>> wire_isend(const float* src, std::uint16_t* stage, std::size_t n,
                                              int peer, int tag);
  Status wire_recv(float* dst, std::size_t n, int peer, int tag);
  // The residual stream is stored at the run's precision (bf16 runs round it after each add).
  Status add_stored(float* y, const float* x, std::size_t n);

  // views
  float* resid(Slot& s, int i) const {
    return s.resid.get() + static_cast<std::size_t>(i) * rows * hidden;
  }
  // The weights the blocks compute with: the bf16 copy in bf16 runs, else the master.
  float* param(const std::string& name) const {
    return (bf16 ? compute_params : params).get() + offset_of.at(name);
  }
  float* grad(const std::string& name) const { return grads.get() + offset_of.at(name); }
  AttentionWeights<float> attn_w(int layer) const;
  AttentionGrads<float> attn_g(int layer, float* norm_grad) const;
  MlpWeights<float> mlp_w(int layer) const;
  MlpGrads<float> mlp_g(int layer, float* norm_grad) const;
  AttentionSaved<float> attn_saved(Slot& s, int local_layer) const;
  MlpSaved<float> mlp_saved(Slot& s, int local_layer) const;
  HeadSaved<float> head_saved(Slot& s) const;

  // ---- DP and optimizer (runtime_dp.cpp) -------------------------------------------------
  Status grad_bucket(const Op& op);
  Status weight_bucket(const Op& op);
  Status replicas(const Op& op, Communicator& comm);
  Status optimizer();
};

}  // namespace hexi::engine
