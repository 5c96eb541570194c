#pragma once
// Internals of the HexiScale search (hexiscale.hpp): the partition sweep and the
// refinement, over assignments of devices to pipelines.

#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "scheduler/hexiscale/hexiscale.hpp"
#include "scheduler/hexiscale/partition.hpp"
#include "scheduler/hexiscale/pipeline.hpp"

namespace hexi {
inline namespace hexiscale {

// Devices of each pipeline: machine -> how many of its GPUs.
using Assignment = std::vector<std::map<int, int>>;

// A refinement move (refine.cpp): devices of machine m1 (n1 of them) from
// pipeline p to q (q == size: a new pipeline); merge q into p; or n1 of m1 in p
// against n2 of m2 in q.
struct Move {
  enum Kind { kTransfer, kMerge, kSwap } kind = kTransfer;
  int p = 0, q = 0, m1 = 0, n1 = 0, m2 = 0, n2 = 0;
};
Assignment apply_move(const Assignment& a, const Move& move);

class HexiScaleSearch {
 public:
  HexiScaleSearch(SpecEvaluator& ev, const HexiScaleOptions& options, SearchClock& clock,
                  std::uint64_t seed);

  std::optional<SpecResult> run();

  // Phase 2 for every pipeline of an assignment.
  PlanSpec build(const Assignment& a);
  // Builds and scores; the iteration time when it was fully evaluated and feasible
  // (kInfeasible otherwise); the best is kept.
  // Skips the full estimate when the slowest pipeline alone reaches `threshold`
  // (default: the best plan so far).
  double consider(const Assignment& a, std::optional<double> threshold = std::nullopt);

 private:
  void sweep();                          // phase 1 over D, cut modes and seeds
  void try_pipelines(int d, int d_max);  // the partitions of one D
  void refine(Assignment start);
  std::vector<Move> neighbours(const Assignment& a) const;
  int expected_micro_batches(const std::map<int, int>& pipeline) const;
  // The spec with every pipeline's segments in one common order of machine classes.
  PlanSpec aligned(const PlanSpec& spec) const;
  // Pipelines as sorted (machine class, count) lists, sorted: assignments with the
  // same signature have the same cost (machines of a class are interchangeable).
  std::string signature(const Assignment& a) const;
  double best_objective() const { return best_ ? best_->scored.objective() : kInfeasible; }

  SpecEvaluator& ev_;
  HexiScaleOptions options_;
  SearchClock& clock_;
  std::uint64_t seed_;
  PipelineBuilder builder_;
  bool per_machine_ = false;
  std::vector<Unit> units_;
  double total_flops_ = 0;
  std::optional<SpecResult> best_;
  Assignment best_assignment_;
  std::vector<std::pair<double, Assignment>> elite_;  // best per D, for refinement starts
  struct Seen {
    double slowest = kInfeasible;    // slowest pipeline: a lower bound of the objective
    double objective = kInfeasible;  // when estimated in full (else kInfeasible)
    bool estimated = false;
  };
  std::unordered_map<std::string, Seen> seen_;
};

// Assignment from a unit partition (empty parts dropped).
Assignment assignment_from_parts(const std::vector<Unit>& units, const std::vector<int>& parts);

}  // namespace hexiscale
}  // namespace hexi
