#pragma once
// Closed-form time of a sequence layout (layout.hpp) on a cluster: one layer forward +
// backward per device and overall, and one training iteration (HexiSeq, arXiv 2605.07569;
// formulas from cost/sequence.hpp).
//
// One layer, device i of group g (s_i tokens, query heads H_i, |H_i| = h_i):
//   token-wise   the layer's kernels but the attention core, forward and backward (with the
//                training config's recompute), for s_i tokens: cost_model's kernel_time
//                (roofline with the profile's per-class efficiency), as the rest of hexisim
//   all-to-all   its group's ragged Ulysses all-to-alls: forward Q, K, V in and O out,
//                backward dO in and dQ, dK, dV out (the same bytes the other way), each
//                all_to_all_time over the group's bandwidth matrix, or, for a group spanning
//                machines, each NIC's off-machine bytes (the devices of its rail share it)
//                if that is slower; the group waits
//   ring         attention of H_i for the group's T_g queries against every group's block,
//                the blocks circulating over the groups in ring order (below); the group
//                waits for its slowest member before its output all-to-all
//   tensor group (sequence_layout.hpp, "parallel": "tensor") instead: token-wise kernels of a TP
//                rank (phi_i = h_i / n_q of the weights) on the group's T_g tokens, norms on
//                s_i; in place of the all-to-alls two all-gathers and two reduce-scatters of
//                the T_g tokens' hidden states per pass (padded to the largest s_i: NCCL's
//                equal counts), ring collectives over the group (collectives.hpp)
//   total        token-wise + all-to-all + ring; the layer takes the slowest device's total
//                (the mesh runs layer by layer in lockstep)
// Full recompute runs the forward all-to-alls and ring once more in the backward.
//
// Ring (a dataflow model of ring-flash-attention's loop, not a global lockstep): device i
// runs steps k = 0..P-1 (P groups); at step k it computes against the block of group g-k
// (mirrored_block_pairs over the groups' T: T_g T_v / 2 pairs, the diagonal T_g^2/2 + T_g/2)
// at 4 d h_i FLOPs per pair forward (2.5x backward) at its achieved attention FLOP/s (peak x
// the profile's forward or backward attention efficiency), while the block of step k+1 comes from
// the previous group. Both ends post that transfer when they start step k (NCCL send/recv pairs),
// so
//   start_i(k+1) = max(end_i(k), max over sources j of max(start_j(k), start_i(k)) + t_ji)
// with t_ji the larger of j's send and i's receive port time (bytes / path bandwidth summed
// over its peers, plus the path latency) and, off-machine, of the two devices' NIC time
// (the step's off-machine bytes of every device on that NIC / its bandwidth: GPU g of a
// machine with k NICs uses NIC g k / gpus, as the simulator routes it). Backward, each step's dK,
// dV leave when it ends, beside the next step's K, V (as the lowering sends them): step 0's
// transfer carries K, V, steps 1..P-2 K, V, dK, dV, the last step's start the dK, dV of step P-2,
// and one more transfer takes each block's dK, dV home. On equal shards over identical devices
// this is exactly cost/sequence's ring_time (tested); with uneven groups it does not charge every
// step the slowest rank's block (ring_time's lockstep bound, also tested: never below).
//
// ZeRO-3's collectives share the ring's NICs (the simulator's rings cross each machine boundary
// on the GPU's rail, and a sequence mesh's ZeRO ring crosses where the CP ring does): each
// ring run carries a backlog of their bytes per NIC, which moves alone while the NIC is free
// and, beside r ring flows, takes its fair 1 / (r + 1) of it (max-min sharing, as the
// simulator's network model), slowing those flows. The bytes count at the collective's own
// rate (its ring's slowest edge), and what is left when a pass's ring ends holds up the next
// pass (the next layer waits for its weights); layer() says which collectives each pass
// carries and which NIC-free windows drain them before it.
//
// Sub-rings: groups may split the heads differently. The ring then runs one sub-ring per
// interval of the common refinement of all groups' head ranges: device i
// receives, for each interval inside H_i, the K/V of that interval's kv heads
// (kv_heads_needed: an interval splitting a GQA group carries the whole kv head) from the
// previous group's device that holds the interval. A device holding several intervals
// receives them over its one port, one after the other.
//
// Iteration (global_batch sequences, one at a time through the mesh; micro_batch does not
// change the per-token work):
//   sequence   L x the layer time + the slowest device's embedding and head for its tokens;
//              ZeRO-3 gathers each layer's weights forward and backward and scatters its
//              gradients on their own stream one layer ahead (FSDP's prefetch): a layer then
//              takes at least those three collectives; exposed, as the lowering orders them:
//              the embedding's and the first layer's gathers, the last layer's gather after
//              the head's backward, the first layer's and the embedding's scatters at the end; a
//              layer also takes at least its transfers' time through the busiest machine's
//              NICs (ring hops, all-to-alls and ZeRO-3 share them: nic_layer_s)
//   sync       ZeRO 0-2: the gradients all-reduced (reduce-scatter + all-gather for 1-2: the
//              same bytes) once per iteration over the mesh's ring (collectives.hpp), not
//              overlapped with the backward (conservative, as estimate.hpp's DP sync)
//   optimizer  memory-bound Adam over the device's owned parameters (28 bytes each, as
//              estimate.hpp)
//   iteration  sequences x sequence + sync + optimizer

#include <cstdint>
#include <vector>

#include "scenarios/model.hpp"
#include "scenarios/training.hpp"
#include "scheduler/cost/sequence.hpp"
#include "scheduler/plan/sequence_layout.hpp"
#include "topologies/cluster.hpp"
#include "topologies/profile.hpp"

namespace hexi {
inline namespace estimate {

// One layer of one device (s).
struct DeviceTime {
  int device = 0;
  int group = 0;
  int rank = 0;
  double token_wise_s = 0;  // its kernels but the attention core, forward + backward
  double ulysses_s = 0;     // its group's collectives (all-to-alls; a tensor group's TP ones)
  double ring_s = 0;        // its group's ring, forward + backward: the slowest member's end
  double attention_s = 0;   // its own attention compute inside ring_s (busy time)
  double forward_s = 0;     // the forward's share: token-wise, all-to-alls, ring (no replay)
  double total_s() const { return token_wise_s + ulysses_s + ring_s; }
};

struct LayerTime {
  std::vector<DeviceTime> devices;  // group by group, rank order
  double time_s = 0;                // the slowest device's total
  double forward_s = 0;             // the slowest device's forward share
  int slowest = 0;                  // index into devices
};

// What the closed form charges a layout of some devices (in ring order) whatever their
// shards and heads: ZeRO-3's per-layer gathers and scatter (a layer takes at least two
// gathers and a scatter) and its exposed ones (per sequence); the gradient sync and the
// optimizer step (per iteration).
struct SplitFree {
  double gather_s = 0, scatter_s = 0;  // one layer's weights, ZeRO-3 (0 otherwise)
  double exposed_s = 0;                // per sequence: ZeRO-3's collectives outside the layers
  double sync_s = 0;                   // per iteration: ZeRO 0-2's gradient all-reduce
  double optimizer_s = 0;              // per iteration: the slowest device's Adam step
  double layer_floor_s() const { return 2 * gather_s + scatter_s; }
};

struct IterationTime {
  LayerTime layer;
  double sequence_s = 0;   // one sequence through every layer, embedding and head
  double sync_s = 0;       // gradient synchronisation per iteration
  double optimizer_s = 0;  // the slowest device's optimizer step
  double iteration_s = 0;
  double tokens_per_s = 0;
  std::vector<DeviceMemory> memory;
  bool fits = true;  // every device within kMemoryCap of its memory
};

// The cost of layouts on one cluster, model, training config and device profile.
class SequenceCost {
 public:
  // `grad_bytes`: bytes per dK, dV element on the ring (0: the training precision's; 4 for
  // ring-flash-attention's fp32).
  SequenceCost(const Cluster& cluster, const Model& model, const TrainingConfig& training,
               const Profile& profile, int grad_bytes = 0);

  const Cluster& cluster() const { return cluster_; }
  const Model& model() const { return model_; }
  const TrainingConfig& training() const { return training_; }
  const AttentionShape& attention() const { return attention_; }

  // Treat every device as `device`'s GPU (compute, HBM and memory capacity; links stay the
  // cluster's): how hexiseq-homogeneous sees a cluster. -1: each its own (the default).
  void set_identical(int device) { identical_ = device; }
  // The GPU a device counts as, and its memory capacity (bytes).
  const GpuSpec& gpu(int device) const;
  double memory_capacity(int device) const { return gpu(device).memory_bytes(); }

  // Achieved attention FLOP/s of a device, forward or backward: peak x its profile's
  // attention efficiency at the sequence's length (what the simulator's ring kernels get).
  double attention_flops_s(int device, bool backward) const;
  // One layer's token-wise kernels, forward + backward (or the forward only), for `tokens`
  // tokens (0 for none) with the whole weights, or for a group member's work.
  double token_wise_s(int device, std::int64_t tokens, bool forward_only = false) const;
  double token_wise_s(int device, const MemberWork& w, bool forward_only = false) const;
  // Embedding and head, forward + backward, for `tokens` tokens (0 for none), or for a group
  // member's work.
  double head_s(int device, std::int64_t tokens) const;
  double head_s(int device, const MemberWork& w) const;
  // One group's collectives of one layer (forward + backward, + forward under full
  // recompute; or the forward only): a Ulysses group's all-to-alls, or a tensor group's
  // all-gathers and reduce-scatters.
  double group_s(const SequenceGroup& g, bool forward_only = false) const;
  // When each device (layout order) ends the ring of one layer, forward or backward.
  std::vector<double> ring_end_s(const SequenceLayout& layout, bool backward) const;

  LayerTime layer(const SequenceLayout& layout) const;
  // The time one layer's transfers across machines (ring hops, all-to-alls, ZeRO-3's
  // collectives) keep the busiest NIC busy, one direction: a lower bound on the layer
  // wherever NICs are the bottleneck.
  double nic_layer_s(const SequenceLayout& layout) const;
  SplitFree split_free(const std::vector<int>& devices) const;
  // split_free of a layout's devices; with tensor-parallel groups each device synchronises
  // and updates its own share of the weights with the other holders of that share.
  SplitFree layout_free(const SequenceLayout& layout) const;
  IterationTime iteration(const SequenceLayout& layout) const;

 private:
  const Cluster& cluster_;  // the cluster and profile outlive the cost (as CostModel's)
  Model model_;
  TrainingConfig training_;
  const Profile& profile_;
  AttentionShape attention_;
  int identical_ = -1;

  // The Adam step over `owned` parameters on `device` (s).
  double adam_s(int device, double owned) const;
};

}  // namespace estimate
}  // namespace hexi
