#pragma once
// Baselines for HexiSeq in the same layout format and cost model, each with its real
// constraints (those of the open CP/HP systems they stand for). They are registered with
// every other scheduler in scheduler/scheduler.hpp.
//
//   ring                 Ring Attention / zig-zag: every device its own group, one ring in
//                        device order, equal shards (S / P, mirrored), all heads each
//   ulysses              DeepSpeed-Ulysses: one group, equal shards and equal heads; the
//                        degree must divide n_q (the largest such degree <= P, on the first
//                        devices); above n_kv the kv heads are replicated, and paid for
//   usp                  USP (long-context-attention): every factorisation u x r = P with u
//                        dividing n_q, Ulysses over u consecutive devices (inside machines
//                        where u allows), ring over the r groups, equal; the best taken
//   megatron-cp          Megatron-LM / TransformerEngine a2a+p2p: a2a inside each machine
//                        (the largest degree dividing the machine, n_q and n_kv), p2p ring
//                        across, equal shards and heads
//   hexiseq-homogeneous  the HexiSeq search told every device is the mesh's first one (same
//                        compute and memory; real links), then scored on the real cluster
//   round-robin          USP's factorisations with devices dealt to the groups round-robin
//                        (group g: devices g, g + r, ...): topology-blind placement
// Every plan is scored by estimate/sequence_time.hpp; a plan that does not fit in 95 % of some
// device's memory is still returned, with time.fits false. Bad input when no legal layout exists (S
// not a multiple of 2 x the ring size, no degree dividing the heads).

#include <string>
#include <vector>

#include "scheduler/hexiseq/hexiseq.hpp"

namespace hexi {
inline namespace baselines {

Result<HexiSeqResult> run_ring(const SequenceCost& cost, std::vector<int> devices,
                               const HexiSeqOptions& options);
Result<HexiSeqResult> run_ulysses(const SequenceCost& cost, std::vector<int> devices,
                                  const HexiSeqOptions& options);
Result<HexiSeqResult> run_usp(const SequenceCost& cost, std::vector<int> devices,
                              const HexiSeqOptions& options);
Result<HexiSeqResult> run_megatron_cp(const SequenceCost& cost, std::vector<int> devices,
                                      const HexiSeqOptions& options);
Result<HexiSeqResult> run_hexiseq_homogeneous(const SequenceCost& cost, std::vector<int> devices,
                                              const HexiSeqOptions& options);
Result<HexiSeqResult> run_round_robin(const SequenceCost& cost, std::vector<int> devices,
                                      const HexiSeqOptions& options);

}  // namespace baselines
}  // namespace hexi
