#pragma once
// Pipeline schedules: the order in which a stage runs its micro-batches, and the
// timeline that order produces, as the program (scheduler/program) runs it.
//
// Timeline semantics (those of a lowered program in the simulator and the engine):
// each stage runs its forwards and backwards one at a time on its compute stream in
// pipeline_order; a forward of stage s > 0 waits for the activation from stage s - 1,
// a backward of stage s < p - 1 for the gradient from stage s + 1. Each direction of a
// stage boundary is a FIFO channel carrying one message at a time: the receiver posts
// the receive of micro-batch j when that of j - 1 has completed, the sender starts
// sending when the producing compute has ended, and the transfer takes C_s once both
// are there. Computation does not wait for its own sends (they run on the p2p stream).
// With F_s, B_s the stage's forward / backward per micro-batch and C_s the boundary's
// transfer time, the steady state of 1F1B has period
//   lambda = max( max_s C_s,  max_{k, r} [ sum_{i=k}^{k+r} (F_i + B_i)
//                                        + 2 sum_{i=k}^{k+r-1} C_i ] / (r + 1) )
// (C_i the mean of the two directions' times where they differ)
// (the cycle through stages k..k+r advances r + 1 micro-batches: stage k holds p - k
// in flight), i.e. a slow boundary costs F + B + C per micro-batch on its two
// stages, not max(F + B, C): sends are not hidden behind the next micro-batch's
// compute when the receiver is still busy with its own backward. The timeline is
// computed exactly, event by event: O(p * m).

#include <utility>
#include <vector>

#include "scenarios/training.hpp"

namespace hexi {
inline namespace cost {

// Micro-batch order of one stage: (true, j) = forward of micro-batch j, (false, j)
// = its backward. 1F1B: min(p - 1 - stage, m) warm-up forwards, then one forward
// and one backward alternating, then the remaining backwards. GPipe: all
// forwards, then all backwards.
std::vector<std::pair<bool, int>> pipeline_order(PipelineSchedule schedule, int stage, int stages,
                                                 int micro_batches);
// Its n-th entry (0 <= n < 2 * micro_batches), without building it.
std::pair<bool, int> pipeline_step(PipelineSchedule schedule, int stage, int stages,
                                   int micro_batches, int n);

// Per stage and micro-batch: forward, backward, and the transfers over the boundary to
// the next stage (0 for the last stage).
struct StageTimes {
  double forward_s = 0;
  double backward_s = 0;
  double send_s = 0;  // activation to the next stage
  double grad_s = 0;  // its gradient back from the next stage
};

struct PipelineTimeline {
  double time_s = 0;             // when the last compute of any stage ends
  std::vector<double> finish_s;  // per stage: when its last backward ends
  double period_s = 0;           // lambda above (1F1B; GPipe: the same bound)
};

PipelineTimeline pipeline_timeline(const std::vector<StageTimes>& stages, int micro_batches,
                                   PipelineSchedule schedule);

// lambda above: the steady-state time per micro-batch.
double pipeline_period(const std::vector<StageTimes>& stages);

}  // namespace cost
}  // namespace hexi
