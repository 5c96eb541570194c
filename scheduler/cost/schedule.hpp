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
// computed event by event, O(p * m), up to kTimelineExactMicroBatches micro-batches, and
// from its periodic steady state beyond (below).
//
// Interleaved 1F1B (Megatron-LM's virtual pipeline stages; Narayanan et al. 2021, "Efficient
// large-scale language model training on GPU clusters using Megatron-LM", section 2.2.2):
// p device groups each hold v chunks; virtual stage k = c * p + r is chunk c of group r, so a
// micro-batch goes through groups 0..p-1 v times. Every group runs one compute at a time over
// its chunks in interleaved_order; the boundary k -> k + 1 (including the wrap from group
// p - 1 to group 0, chunk c to c + 1) is a transfer as above, and messages between the same
// two groups in the same direction (activations, or gradients) share one FIFO channel, in
// the order they are sent. Equal stages without communication take
//   (m + (p - 1) / v) (F + B) per group,  F, B = a group's whole forward / backward over its v
// chunks, i.e. a bubble of (p - 1) / v / (m + (p - 1) / v) (m a multiple of p).

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

// One step of a device group's order in an interleaved pipeline: the forward or backward of
// a micro-batch through one of its chunks.
struct ChunkStep {
  bool forward = true;
  int micro_batch = 0;
  int chunk = 0;
  bool operator==(const ChunkStep&) const = default;
};

// Megatron-LM's interleaved 1F1B order of group `rank` of `groups` with `chunks` chunks each:
// the micro-batches in groups of `groups` (the last one may be smaller); forwards run group
// by group, each group through chunk 0, then chunk 1, ..., backwards the same with the chunks
// reversed. Warm-up: min((groups - rank - 1) * 2 + (chunks - 1) * groups, m * chunks)
// forwards, then one forward and one backward alternating, then the remaining backwards.
// With chunks == 1 it is the 1F1B order of pipeline_order (chunk 0).
std::vector<ChunkStep> interleaved_order(int rank, int groups, int chunks, int micro_batches);

// Per chunk, the micro-batches whose activations group `rank` keeps (forward run, backward
// not yet) at the first point of its order where their bytes peak: `bytes[c]` is what one
// micro-batch of chunk c keeps (empty: 1 each, the most (chunk, micro-batch) pairs). Chunks of
// unequal size peak where the large ones hold the most, not always where the most are alive.
std::vector<int> interleaved_in_flight(int rank, int groups, int chunks, int micro_batches,
                                       const std::vector<double>& bytes = {});

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

// Up to kTimelineExactMicroBatches micro-batches (more for pipelines of hundreds of stages) a
// timeline is run event by event. Beyond, its cost does not grow with the micro-batches: 1F1B
// and interleaved 1F1B reach a steady state that repeats every c micro-batches shifted by the
// same time; a run of about that many finds c and the shift, checking that every event
// repeats over a window, and the timeline of m is that of a run of m' ≡ m (mod c) shifted by
// (m - m') / c shifts, exact in real arithmetic. GPipe repeats every micro-batch in each of
// its two phases: the run of M extended by the difference between the runs of M and M - 1.
inline constexpr int kTimelineExactMicroBatches = 8192;

PipelineTimeline pipeline_timeline(const std::vector<StageTimes>& stages, int micro_batches,
                                   PipelineSchedule schedule);
// An interleaved pipeline: `stages` are its virtual stages (k = c * p + r, p = size / chunks
// device groups); finish_s is per virtual stage (a group's entries are equal: when its last
// backward ends); period_s the slowest group's F + B over its chunks, or the slowest
// boundary. chunks == 1: the plain timeline above under 1F1B.
PipelineTimeline interleaved_timeline(const std::vector<StageTimes>& stages, int micro_batches,
                                      int chunks);

// The reference the two above are tested against: every micro-batch event by event, whatever
// their count (O(p * m) time and memory).
PipelineTimeline pipeline_timeline_events(const std::vector<StageTimes>& stages, int micro_batches,
                                          PipelineSchedule schedule);
PipelineTimeline interleaved_timeline_events(const std::vector<StageTimes>& stages,
                                             int micro_batches, int chunks);

// lambda above: the steady-state time per micro-batch.
double pipeline_period(const std::vector<StageTimes>& stages);

}  // namespace cost
}  // namespace hexi
