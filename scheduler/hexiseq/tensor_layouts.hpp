#pragma once
// Sequence layouts whose groups are tensor-parallel (plan/sequence_layout.hpp, "parallel":
// "tensor"): what HexiSeq adds to its Ulysses search so that a mesh may hold a model whose
// whole weights do not fit on one device (a TP group holds h_i / n_q of them each).
//
// For each TP size t (2, 4, ... up to the largest NVLink domain; t dividing every domain of
// the mesh and the query heads, and with split_kv_heads off a multiple of whole GQA groups):
// every domain cut into consecutive groups of t devices with even heads; S split over the
// groups in proportion to their dense FLOP/s in whole token blocks (round_blocks), each
// group's shards even; then, on rings of at most 16 groups, one block at a time moved from the
// group of the layer's slowest device to the group where the closed form gains most, while it
// gains (at most 4 moves per group). The best layout that fits is kept. Under ZeRO-3 none (tensor
// groups run ZeRO 0-2: the registry's search over ZeRO stages scores them at stages 1-2).

#include <cstdint>
#include <optional>
#include <vector>

#include "scheduler/estimate/sequence_time.hpp"
#include "scheduler/hexiseq/hexiseq.hpp"

namespace hexi {
inline namespace hexiseq {

// The best tensor-group layout of `devices` (sorted) in token blocks of `block`; none when the
// training config runs ZeRO-3, no TP size applies or no layout fits. Its grouping names the
// TP size; candidates counts the layouts scored.
std::optional<HexiSeqResult> best_tensor_layout(const SequenceCost& cost,
                                                const std::vector<int>& devices, std::int64_t block,
                                                const HexiSeqOptions& options);

}  // namespace hexiseq
}  // namespace hexi
