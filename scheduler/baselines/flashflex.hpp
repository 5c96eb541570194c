#pragma once
// Internals of the `flashflex` baseline: the reference implementation's own cost
// model (FlashFlex experimental/cost_modeling.py), used only to *choose* among its
// candidates. Units: FLOP/s from the catalog, bytes/s from the cluster's pairwise
// bandwidth (the reference mixes 1024-based unit factors; the ratios are the same).
//
//   compute per layer and micro-batch  96 b s h^2 (1 + s/6h + V/16Lh) / (TFLOP/s of
//                                      the group's first GPU x tp)   (recompute on)
//   TP per layer                       12 x max_i sum_{j != i} b s h e / (tp bw_ij)
//   PP per boundary                    2 x min over (pre, post) of b s h e / bw + the
//                                      leader's broadcast to its group
//   pipeline                           GPipe grid: sum over columns of the slowest
//                                      busy stage (stage + send cost)
//   DP                                 per layer and matching rank group:
//                                      2 x max_i sum_{j != i} 12 h^2 e / (min_tp n bw_ij)
//   total                              1.8 x slowest pipeline + 1.1 x DP (fudge factors)
//   memory (GB)                        (12 h^2 l / tp + embeddings/head) e x 4
//                                      + (l b s h / tp + 2 b s h) e, checked against the
//                                      stage's average GPU memory

#include <vector>

#include "scenarios/model.hpp"
#include "scenarios/training.hpp"
#include "topologies/cluster.hpp"

namespace hexi::flashflex {

// A candidate pipeline: TP groups in order and layers per group (0 allowed).
struct FfPipeline {
  std::vector<std::vector<int>> stages;
  std::vector<int> layers;
};

struct FfConfig {
  double h = 0, L = 0, V = 0, S = 0;  // hidden, layers, vocab, sequence
  double mb = 1;                      // sequences per micro-batch
  int n_mb = 1;                       // micro-batches per pipeline
  double e = 2;                       // bytes per element (B_type)
};

FfConfig make_config(const Model& model, const TrainingConfig& training, int pipelines);

class FfCost {
 public:
  FfCost(const Cluster& cluster, const FfConfig& config);

  double pipeline_cost(const FfPipeline& p) const;
  double dp_cost(const std::vector<FfPipeline>& pipes) const;
  double overall_cost(const std::vector<FfPipeline>& pipes) const;  // 1.8 x PP + 1.1 x DP
  // MemoryCost.if_oom for a stage with `layers` layers at a position.
  bool out_of_memory(const std::vector<int>& stage, int layers, bool first, bool last) const;
  double stage_memory_gb(const std::vector<int>& stage) const;  // summed GPU memory (GB)

 private:
  double bw(int a, int b) const { return cluster_.bandwidth(a, b); }
  double comp(const std::vector<int>& tp) const;
  double tp_comm(const std::vector<int>& tp) const;
  double pp_comm(const std::vector<int>& pre, const std::vector<int>* post) const;

  const Cluster& cluster_;
  FfConfig c_;
};

}  // namespace hexi::flashflex
