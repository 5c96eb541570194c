#pragma once
// Splitting the global batch across pipelines in whole micro-batches (HexiScale
// phase 3): start in proportion to each pipeline's throughput, then move one
// micro-batch at a time from the slowest pipeline to the one that would finish
// earliest with it, while that lowers the slowest time. The micro-batches of a share the
// slowest pipeline cannot run at all (it fits fewer in memory than the proportional start
// gave it) go at once, where those single moves would put them: the result is the same and
// the cost does not grow with the global batch.
//
// Each pipeline time T_p(m) is nondecreasing in m, so this local search ends at
// the exact minimum of max_p T_p(m_p) over all splits with m_p >= 1: at the end,
// for the slowest pipeline p, every other q has T_q(m_q + 1) >= T_p(m_p); any split
// with a smaller maximum would need m'_p < m_p, hence some m'_q > m_q, whose time
// is at least T_q(m_q + 1) >= T_p(m_p).

#include <vector>

#include "scheduler/search/pipeline_curve.hpp"

namespace hexi {
inline namespace search {

struct BatchSplit {
  std::vector<int> micro_batches;  // per pipeline, >= 1, summing to the total
  double slowest_s = kInfeasible;  // max_p T_p(m_p)
};

// Shares in proportion to `rate`, each >= 1, summing to `total` (largest remainder,
// ties to the first); empty when there are more rates than `total`. Batches across
// pipelines and layers across stages are split by this one rule.
std::vector<int> proportional_split(const std::vector<double>& rate, int total);

// The optimal split of `total` micro-batches; slowest_s is kInfeasible when there
// are more pipelines than micro-batches or some pipeline cannot run one.
BatchSplit split_micro_batches(const std::vector<const PipelineCurve*>& curves, int total);

// The even split of the reference implementation (FlashFlex): total / D each, the
// remainder one by one to the first pipelines.
std::vector<int> even_split(int pipelines, int total);

}  // namespace search
}  // namespace hexi
