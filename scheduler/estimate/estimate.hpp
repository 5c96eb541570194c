#pragma once
// Closed-form estimate of a plan's training iteration:
//   per stage and micro-batch: forward / backward = slowest TP rank's kernels
//     + TP all-reduces (2 per layer forward, 2 backward, 2 more under full recompute),
//     recompute being the stage's own (plan "recompute") or the training config's
//   stage boundary: the b*s*h activation split into min(t_a, t_b) chunks sent in
//     parallel, then all-gathered inside the receiving TP group; flows leaving or
//     entering a machine share its NICs
//   pipeline (1F1B or GPipe, m micro-batches): the schedule's timeline, event by
//     event as the program runs it (schedule.hpp): blocking FIFO boundary channels, so
//     a slow boundary costs F + B + C per micro-batch (steady-state period lambda),
//     not max(F + B, C); ~ sum_i (F_i + B_i) + 2 sum_j C_j + (m - 1) * lambda
//   DP: per layer, gradients all-reduced across pipelines piece by piece (a TP-t
//     rank holds 1/t of the layer; pieces of 1/lcm(t) match across layouts), ring
//     time per device over its slowest peer link, NICs shared by the machine's
//     devices that sync off-machine; not overlapped with backward (conservative)
//   optimizer: memory-bound Adam over the device's (ZeRO-1 sharded) state
//   iteration = max over pipelines + DP sync + optimizer
// A sequence mesh stage (plan.hpp): forward / backward per micro-batch (one sequence) =
//   its layers x the mesh's layer time (estimate/sequence_time.hpp: token-wise, ragged all-to-alls,
//   ring; forward share and the rest), + the slowest device's embedding / head for its
//   tokens where first / last; boundaries next to it carry each mesh device's rows only
//   (plan.hpp's mesh_boundary), a flow's time its bytes through the busier of its source's
//   and its destination's port; its devices' memory: the stage's weights whole on each
//   device, activations of their s_i tokens per micro-batch in flight, the ring's and
//   all-to-all's buffers. A plan with a mesh stage syncs gradients per device over its
//   holders (mesh_dp_sync), not DpSync's pieces.
// MFU = model FLOPs (3x forward, no recompute) / (iteration time x cluster peak);
// HFU and TFLOP/s per GPU in the other conventions (hardware, Megatron-LM): flop_figures.hpp.

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "scenarios/model.hpp"
#include "scenarios/training.hpp"
#include "scheduler/cost/cost_model.hpp"
#include "scheduler/cost/flop_figures.hpp"
#include "scheduler/cost/schedule.hpp"
#include "scheduler/plan/plan.hpp"
#include "topologies/cluster.hpp"
#include "topologies/profile.hpp"

namespace hexi {
inline namespace estimate {

struct StageEstimate {
  double forward_s = 0;   // per micro-batch, compute + TP collectives
  double backward_s = 0;  // per micro-batch, compute + TP collectives (incl. recompute)
  double tp_comm_s = 0;   // per micro-batch, forward + backward TP collectives
  double send_s = 0;      // per micro-batch, activation to the next stage (0 for the last)
  double grad_s = 0;      // per micro-batch, its gradient back from the next stage
  Recompute recompute = Recompute::kSelective;  // what the stage runs
};

struct PipelineEstimate {
  int micro_batches = 0;
  int chunks = 1;                // interleaved: chunks per device group (stages are virtual)
  double time_s = 0;             // one iteration of this pipeline, without DP sync
  double bottleneck_s = 0;       // steady-state time per micro-batch (schedule.hpp's lambda)
  std::vector<double> finish_s;  // per stage: when its last backward ends
  std::vector<StageEstimate> stages;
};

struct DeviceEstimate {
  int device = 0;
  int pipeline = 0;
  int stage = 0;
  int tp_rank = 0;
  MemoryBreakdown memory;
  double capacity_bytes = 0;
  double busy_s = 0;       // compute per iteration
  double dp_sync_s = 0;    // its DP all-reduce time
  double optimizer_s = 0;  // its optimizer step
};

struct Estimate {
  double iteration_time_s = 0;
  // With every kernel moved across the profile's uncertainties (smallest, largest;
  // CostModel::iteration_time_range; {0, 0}: not computed, not in to_json).
  std::pair<double, double> iteration_time_range_s{0, 0};
  double tokens_per_s = 0;
  double mfu = 0;              // against the whole cluster's summed peak
  double achieved_pflops = 0;  // model FLOPs / iteration time
  FlopFigures figures;         // HFU, TFLOP/s per GPU used (hardware, model, Megatron-LM)
  double pipeline_s = 0;       // slowest pipeline
  double dp_sync_s = 0;        // DP sync still running after the slowest pipeline
  double optimizer_s = 0;
  bool feasible = true;               // every device fits in memory
  std::vector<std::string> problems;  // which device is over by how many GiB
  // CostModel::estimate_below stopped before the shared timeline: the times are the
  // busy-fraction fixed point's, far enough above the bound that the plan is not wanted.
  bool screened = false;
  std::vector<PipelineEstimate> pipelines;
  std::vector<DeviceEstimate> devices;  // in plan order

  Json to_json() const;
};

// Flows per machine (ids of Cluster::machines()). A boundary crosses few machines: a flat
// list, searched in order, is cheaper than a hash map to fill and to read.
class NicCounts {
 public:
  using Items = std::vector<std::pair<int, double>>;
  double& operator[](int machine) {
    for (auto& [m, n] : items_) {
      if (m == machine) return n;
    }
    return items_.emplace_back(machine, 0.0).second;
  }
  Items::const_iterator find(int machine) const {
    return std::find_if(items_.begin(), items_.end(),
                        [machine](const auto& item) { return item.first == machine; });
  }
  double at(int machine) const { return find(machine)->second; }
  Items::const_iterator begin() const { return items_.begin(); }
  Items::const_iterator end() const { return items_.end(); }

 private:
  Items items_;
};
// Off-machine flows per machine, leaving and entering it (a flow busy part of the time
// counts as that fraction).
struct NicFlows {
  NicCounts out, in;
};

// Hardware FLOPs of one iteration of a plan: every pipeline's batch through its stages'
// layers forward + backward + recompute, each stage under its own recompute, and the head
// (cost_model.hpp's kernels, whole layers: TP shards sum to the layer). Equal to
// iteration_flops(m, t) when no stage overrides the training config's recompute.
double hardware_flops(const Plan& plan, const Model& m, const TrainingConfig& t);

// What TP rank `rank` of a stage holds: its layers, whether it holds the embedding
// (first) and the head (last), its share of the heads, micro-batch and recompute; the
// caller sets in_flight and dp. The one builder of a plan rank's StageShape (the
// program rebuilds the same fields from its own DeviceLayout, program.hpp).
StageShape rank_shape(const Stage& s, bool first, bool last, int rank, int heads, int micro_batch);
// The same for stage `si` of pipeline `p`.
StageShape rank_shape(const Pipeline& p, int si, int rank, int heads);

// The cost model over one cluster/model/config, with per-(GPU type, shard, micro-batch)
// caches so that the search can evaluate thousands of candidate stages cheaply.
class CostModel {
 public:
  CostModel(const Cluster& cluster, const Model& model, const TrainingConfig& training,
            const Profile& profile);

  const Cluster& cluster() const { return cluster_; }
  const Model& model() const { return model_; }
  const TrainingConfig& training() const { return training_; }
  const Profile& profile() const { return profile_; }

  // Compute time of one layer (both blocks) forward / backward on one device (s), its
  // token-wise kernels on `share` of the tokens (token_share).
  double layer_forward_s(int device, double phi, int micro_batch, double share = 1.0,
                         double experts = -1) const;
  double layer_backward_s(int device, double phi, int micro_batch) const;
  double layer_backward_s(int device, double phi, int micro_batch, Recompute r, double share = 1.0,
                          double experts = -1) const;

  // One stage of a pipeline under its recompute (send_s left 0; see transfer_s).
  StageEstimate stage(const Stage& s, bool first, bool last, int micro_batch) const;
  // Moving `bytes` from TP group `src` to TP group `dst` (chunks + all-gather).
  // `busy`, when given, counts the boundary flows of every pipeline through each
  // machine's NICs (nic_flows): pipelines that run in step send at the same time.
  double transfer_s(const std::vector<int>& src, const std::vector<int>& dst, double bytes,
                    const NicFlows* busy = nullptr) const;
  // Point-to-point flows of one stage boundary, as the lowering sends them
  // (boundary_pieces): without sequence parallelism piece j of td goes from src rank
  // j*ts/td to dst rank j (a source rank sends td/ts pieces when ts < td); with it, a flow
  // per overlap of the ranks' token shards. `message`: the bytes of the largest of those
  // flows, of a tensor of `bytes` (bytes / flows where the pieces are equal; the largest
  // overlap under sequence parallelism where the TP degrees do not divide each other).
  struct BoundaryFlows {
    std::vector<std::pair<int, int>> flows;
    double message = 0;
  };
  BoundaryFlows boundary_flows(const std::vector<int>& src, const std::vector<int>& dst,
                               double bytes) const;
  // Adds the off-machine flows of moving `bytes` from TP group `src` to `dst` to `f`, per NIC
  // direction (what transfer_s's `busy` counts).
  void add_nic_flows(const std::vector<int>& src, const std::vector<int>& dst, double bytes,
                     NicFlows& f) const;
  // Whether the receiving group all-gathers its pieces (several ranks, no sequence
  // parallelism: under it the ranks keep their token shards).
  bool boundary_gathers(const std::vector<int>& dst) const;
  // Flow k's own rate: its pair's link, shared with the boundary's other flows from the
  // same source device (they leave through the same GPU link).
  double flow_link_Bps(const std::vector<std::pair<int, int>>& flows, std::size_t k) const;
  // The timeline of a pipeline from its stages (send_s filled in), under the training
  // config's schedule (schedule.hpp), and its end.
  // chunks > 1: an interleaved pipeline, `stages` its virtual stages (schedule.hpp).
  PipelineTimeline pipeline_timeline(const std::vector<StageEstimate>& stages, int micro_batches,
                                     int chunks = 1) const;
  double pipeline_s(const std::vector<StageEstimate>& stages, int micro_batches,
                    double* bottleneck = nullptr) const;
  // Memory of TP rank `rank` of stage `si` of pipeline `p` in a plan with `dp` pipelines.
  // (Interleaved pipelines: `si` is the device group, its chunks summed.)
  MemoryBreakdown memory(const Pipeline& p, int si, int rank, int dp) const;
  MemoryBreakdown interleaved_memory(const Pipeline& p, int group, int rank, int dp) const;

  // A sequence mesh stage (header comment); memory of its device at flat index `rank`.
  StageEstimate mesh_stage(const Stage& s, bool first, bool last) const;
  MemoryBreakdown mesh_memory(const Pipeline& p, int si, int rank, int dp) const;

  Estimate estimate(const Plan& plan) const;
  // estimate(plan) for a search that only wants plans faster than `bound` (an iteration
  // time): where the shared timeline would run (the costliest part of an estimate), the
  // busy-fraction fixed point's estimate is returned instead, marked `screened`, when it is
  // at least kScreenMargin x bound. A heuristic cut: the timeline's iteration time can come
  // out below the fixed point's, by 12 % at most (2 % at the 5th percentile) over 10 000
  // estimates of two TCP searches, where no screened plan was faster than `bound`
  // (bench/SEARCH.md).
  // A fixed point whose floor (finish_sync) reaches that limit is screened before its DP
  // sync's rings run. With OverBound::kDiscarded (the caller keeps only plans faster than
  // `bound`) an exact screen follows: an estimate whose floor reaches `bound` itself comes
  // back `screened`, its DP sync's rings not run.
  enum class OverBound { kUsed, kDiscarded };
  Estimate estimate_below(const Plan& plan, double bound, OverBound over = OverBound::kUsed) const;
  static constexpr double kScreenMargin = 1.1;
  // The smallest and largest iteration time of `plan` with every compute kernel and every
  // transfer moved across its uncertainty (Profile::at_bound and moved_curve at -1, -1/2,
  // +1/2, +1, and `stated`, this model's estimate of it): four more estimates. Not the two
  // ends alone: where pipelines share NICs the time is not monotonic in the kernel times
  // (transfers collide differently).
  std::pair<double, double> iteration_time_range(const Plan& plan, const Estimate& stated) const;
  // estimate(plan) with its iteration_time_range_s filled.
  Estimate estimate_with_range(const Plan& plan) const;

 private:
  void count_off_machine(const std::vector<std::pair<int, int>>& flows, NicFlows& f) const;
  double layer_s(int device, double phi, int micro_batch, bool forward, Recompute r, double share,
                 double experts) const;
  // False where the iteration's floor reaches `limit` first (finish_sync).
  bool dp_sync(const Plan& plan, Estimate& est, double limit) const;
  void mesh_dp_sync(const Plan& plan, Estimate& est) const;
  // send_s / grad_s of every boundary and the pipelines' timelines, NICs shared over time.
  // Returns whether the shared timeline should replace the fixed point (not run here).
  bool boundary_times(const Plan& plan, std::vector<PipelineEstimate>& pes) const;
  // Every device's memory, each stage's times and the pipelines' (boundary_times aside).
  Estimate stage_estimates(const Plan& plan) const;
  // The slowest pipeline, each device's optimizer step and fit (the DP sync reads none).
  void settle(const Plan& plan, Estimate& est) const;
  // After settle(): the DP sync, then the iteration time and throughput figures. Where a
  // floor of the iteration time (without the DP sync, or with its floor: DpSync::run) reaches
  // `limit` first, the floor instead, `screened`: false.
  bool finish_sync(const Plan& plan, Estimate& est, double limit) const;
  // Where boundary flows of different classes share NICs: the pipelines run together
  // with transfers sharing NICs as they overlap (time_s and finish_s replaced).
  void shared_timeline(const Plan& plan, std::vector<PipelineEstimate>& pes) const;
  // Largest (events x (stages + channels)) the shared timeline runs for.
  static constexpr double kSharedTimelineWork = 1e7;
  // Least busy share of other classes' flows at some channel's NIC for it to run.
  static constexpr double kSharedTimelineMinOverlap = 0.05;

  const Cluster& cluster_;
  const Model& model_;
  const TrainingConfig& training_;
  const Profile& profile_;
  std::vector<DeviceProfile> type_profiles_;  // by Cluster::gpu_types() index, resolved once
  mutable std::map<std::tuple<int, double, int, bool, Recompute, double, double>, double>
      layer_cache_;
};

}  // namespace estimate
}  // namespace hexi
