#pragma once
// Baselines for HexiSeq in the same layout format and cost model, each with its real
// constraints (those of the open CP/HP systems they stand for) and every configuration of
// them a competent user would try. They are registered with every other scheduler in
// scheduler/scheduler.hpp.
//
//   ring                 Ring Attention / zig-zag: every device its own group, one ring in
//                        device order, equal shards (S / P, mirrored), all heads each
//   ulysses              DeepSpeed-Ulysses: one group, equal shards and equal heads; every
//                        degree dividing n_q (above n_kv the kv heads are replicated, and paid
//                        for) on the first devices of the fastest machines
//   usp                  USP (long-context-attention): every factorisation u x r = P with u
//                        dividing n_q, in both of its placements: Ulysses over u consecutive
//                        devices (inside machines where u allows) and devices dealt to the
//                        ring's groups round-robin; equal shards and heads
//   megatron-cp          Megatron-LM / TransformerEngine a2a+p2p: every a2a degree dividing P,
//                        n_q and n_kv over consecutive devices, p2p ring across, equal
//   hexiseq-homogeneous  the HexiSeq search told every device is the mesh's first one (same
//                        compute and memory; real links), then scored on the real cluster
//   round-robin          USP's factorisations with devices dealt round-robin only: the
//                        topology-blind placement alone
// Each baseline keeps its fastest layout that fits (a layout that fits in no configuration is
// still returned, with time.fits false). With options.idle_slow_types (the default) each
// configuration is also tried on GPU subsets, as HexiSeq may leave slow GPUs idle: each GPU
// type alone and the fastest 1, 2, ... machines (baseline_subsets); without it every
// configuration spreads over every device (ulysses: its largest legal degree), as the HexiSeq
// paper ran its baselines. Every plan is scored by
// estimate/sequence_time.hpp. Bad input when no legal layout exists (S not a multiple of
// 2 x the ring size, no degree dividing the heads).

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

// A GPU subset a baseline is tried on, and its name in the result's grouping.
struct DeviceSubset {
  std::string name;          // "all 16 GPUs", "H100-SXM only", "the fastest 2 machines"
  std::vector<int> devices;  // sorted
};
// `devices` (sorted), each GPU type's devices alone (more than one type), and the fastest
// 1, 2, ... machines (NVLink domains ordered by their GPUs' dense TFLOP/s, then by their first
// device), without repeats: the subsets a competent user runs a homogeneous system on.
std::vector<DeviceSubset> baseline_subsets(const Cluster& cluster, const std::vector<int>& devices);

}  // namespace baselines
}  // namespace hexi
