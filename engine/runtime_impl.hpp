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
  int micro_batch = -1;                         // its slot_key (-1 when free)
};

// What the next TP all-reduce op of the compute stream applies to.
struct Pending {
  bool active = false;
  float* buf = nullptr;  // reduced in place, `count` floats
  std::size_t count = 0;
  const float* add_from = nullptr;  // forward: buf += add_from (the residual), R*h floats
  float* add_into = nullptr;        // backward: add_into += buf, R*h floats
  float* norm_grad = nullptr;       // backward: norm_grad += buf[R*h, R*h + norm_count)
  std::size_t norm_count = 0;       //   h, or an MoE block's h + E*h (gain and router)
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

// A device of a sequence mesh (Program::sequence), by its flat index (group by group, rank
// order, as the lowering numbers them).
struct SeqMember {
  int device = 0;
  int group = 0;
  int rank = 0;
  int head_begin = 0, heads = 0;  // query heads [head_begin, head_begin + heads)
  int kv_begin = 0, kv = 0;       // the kv heads they read (kv_heads_needed)
  int shard = 0;                  // s_i tokens
  int row = 0;                    // first row of its tokens in its group's token order
};

// One copy between a message and a buffer: `rows` rows of `cols` floats at `at`, rows
// `stride` floats apart; the message holds them contiguously, piece after piece.
struct Piece {
  float* at = nullptr;
  std::size_t stride = 0, rows = 0, cols = 0;
  bool accumulate = false;  // receiving: add into the buffer instead of overwriting it
};

// What this device keeps to run a sequence mesh (engine/runtime_seq.cpp). Its group g has T
// tokens in group order (its devices' shards in rank order, each front half then back half)
// at positions group_pos[g]; after the Ulysses all-to-all it holds its hq query heads and hk
// kv heads of those T tokens ("grp" buffers). d = head dim, s = its shard, n_q / n_kv the
// model's heads, Tm the longest group.
struct SeqState {
  std::vector<SeqMember> members;
  std::vector<int> first;                   // flat index of each group's rank 0
  std::vector<int> tokens;                  // T_g
  int me = 0;                               // this device's flat index
  int max_tokens = 0;                       // Tm
  int ratio = 1;                            // query heads per kv head
  std::vector<DeviceArray<int>> group_pos;  // per group (T_g)
  DeviceArray<int> pos;                     // (s) this device's token positions
  std::vector<int> host_pos;
  std::vector<int> sequence_tokens, sequence_targets;  // host, one whole sequence
  // Sub-rings (scheduler/plan/sequence_layout.hpp): intervals of heads, and which intervals each
  // ring message (flat from, flat to) carries, in increasing order.
  std::vector<int> bounds, interval_kv;
  std::map<std::pair<int, int>, std::vector<int>> hop_intervals;
  std::map<int, int> slot_of_interval;  // interval -> index into grad_blocks
  // Saved per layer of each activation slot (L = slots x layers, seq_saved): rstd (L, s), xn
  // (L, s, h), att (L, s, n_q d); q_grp, out_grp (L, T, hq d), lse_grp (L, T, hq), k_grp, v_grp
  // (L, T, hk d).
  DeviceArray<float> rstd, xn, att, q_grp, k_grp, v_grp, out_grp, lse_grp;
  // Per layer, reused: q, k, v of the shard (s, n_q d | n_kv d) and their gradients; datt
  // (s, n_q d); dout_grp, dq_grp (T, hq d); dk_own, dv_own (T, hk d): its own block's.
  DeviceArray<float> q_loc, k_loc, v_loc, dq_loc, dk_loc, dv_loc, datt;
  DeviceArray<float> dout_grp, dq_grp, dk_own, dv_own;
  // Ring: the visiting block's K, V expanded to one kv head per query head (Tm, hq, d), their
  // gradients, a partial output (T, hq d) and lse (T, hq); blocks received (K then V, (Tm,
  // hk d) each) and per-interval dK, dV in flight (dK then dV, (Tm, kv_m d) each), by step
  // parity.
  DeviceArray<float> k_exp, v_exp, dk_exp, dv_exp, part_out, part_lse;
  DeviceArray<float> kv_blocks[2];
  std::vector<DeviceArray<float>> grad_blocks[2];
  DeviceArray<float> message;  // a received message
  struct Outgoing {
    DeviceArray<float> data;
    std::unique_ptr<Request> request;
  };
  std::vector<Outgoing> sends;  // completed at the end of the step
  // ZeRO-3: the owned gradients reduce-scattered so far this step (layout.total), the bucket
  // of each position (layer, -1 embedding, -2 head) and a scratch bucket buffer.
  DeviceArray<float> zero3_grads, scratch;
  std::map<int, int> bucket_of_position;
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
  const SequenceLayout* mesh = nullptr;  // the sequence mesh this device runs (if any)
  kernels::LlamaDims dims;
  bool bf16 = false;  // mixed precision (program bytes_per_element 2)
  BlockShape shape;   // one micro-batch on this shard
  int rows = 0;       // R = micro_batch * seq
  int hidden = 0;     // h
  // The replicated gradients a TP rank's MLP block backward leaves partial: the mlp_norm
  // gain (h), and a mixture of experts' router (E*h) right after it in the layout. They
  // travel with the block's input gradient in its all-reduce.
  std::size_t mlp_share = 0;
  int layers = 0;                   // layers of the stage (interleaved: of its largest chunk)
  std::vector<ChunkLayout> chunks;  // its chunks (one: its stage)
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
  std::vector<int> slot_of;                  // slot_key -> slot (-1 when not in flight)
  std::vector<int> release_after;            // local op index -> slot_key to release after it (-1)
  DeviceArray<float> partial;                // (R*h + h): a block's partial output / input gradient
  DeviceArray<float> gather_in, gather_out;  // boundary all-gather, padded pieces
  DeviceArray<float> stats, stats_all;       // (R, 3) and (tp, R, 3) loss statistics
  DeviceArray<float> token_loss;             // (R)
  Pending pending;
  std::unique_ptr<SeqState> seq;  // sequence meshes only
  int pending_loss = -1;          // micro-batch whose loss statistics await their all-gather
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
  Status finish_grad(Slot& slot, float* norm_grad_target, std::size_t norm_count);
  // Slots hold one chunk of one micro-batch: key chunk * micro_batches + micro_batch.
  int slot_key(const Op& op) const { return op.chunk * lay->micro_batches + op.micro_batch; }
  Result<Slot*> acquire(int key);
  Result<Slot*> slot(int key);
  Status release(int key);
  // The first layer of an op's chunk, and its layer count.
  int chunk_begin(const Op& op) const { return chunks[op.chunk].layer_begin; }
  int chunk_layers(const Op& op) const {
    return chunks[op.chunk].layer_end - chunks[op.chunk].layer_begin;
  }
  Status inject_fault(int op_index);

  // ---- sequence meshes (runtime_seq.cpp) ------------------------------------------------
  Status setup_sequence();
  void seq_setup_rings(const AttentionShape& heads_shape);
  Status seq_setup_buffers();
  Status seq_load_tokens(Slot& slot, int sequence);
  // A boundary message's first row in this device's buffers: the sequence row itself, or on a
  // mesh device its row among its own tokens (front then back).
  Result<int> local_row(int sequence_row) const;
  Status seq_compute(const Op& op);
  Status seq_pre(const Op& op);
  Status seq_ring_forward(const Op& op);
  Status seq_post(const Op& op, bool replay);
  Status seq_post_backward(const Op& op);
  Status seq_ring_backward(const Op& op);
  Status seq_pre_backward(const Op& op);
  Status seq_send(const Op& op);
  Status seq_recv(const Op& op);
  Result<std::vector<Piece>> seq_pieces(const Op& op, bool sending);
  // seq_pieces' steps with the peer at flat index `peer_flat`: the Ulysses all-to-all's
  // tensors, and the sub-ring hops' K, V (or dK, dV).
  Result<std::vector<Piece>> seq_all_to_all_pieces(const Op& op, bool sending, int peer_flat);
  Result<std::vector<Piece>> seq_ring_pieces(const Op& op, bool sending, int peer_flat);
  Status seq_expand(const float* kv, int block_tokens, float* expanded);
  const float* seq_block(int layer, int step, bool values);
  int seq_visiting(int group, int step) const;
  // An op's index into the saved per-layer buffers: its slot's layers, then its layer's.
  int seq_saved(const Op& op) const {
    return slot_of[slot_key(op)] * layers + op.layer - chunk_begin(op);
  }
  // ZeRO-3 over the mesh: poison the weights this device does not own of a position's
  // bucket once they are used (the next use must gather them), and the owners' gradients.
  Status zero3_release(int position);
  Status zero3_scatter(const Op& op, BucketState& b);

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
