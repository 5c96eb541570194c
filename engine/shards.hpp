#pragma once
// Where the program's parameter pieces live in a device's flat parameter buffer.
//
// A device holds its stage's tensors on its TP shard in the kernels/ layout
// (kernels::stage_layout: each tensor a (rows, cols) block of the full tensor). The
// program names DP-synchronised pieces as segments (scheduler/program/program.hpp, "DP
// gradient synchronisation"): parameter `param` of layer `layer`, cut to [begin, end)
// along its sharded axis, flattened row-major; replicated parameters whole. The axes
// of the Llama parameters (units of the axis in rows or columns of the full tensor):
//   wq, wk, wv      rows,    head_dim per (kv) head      wo      columns, head_dim per head
//   w_gate, w_up    rows,    1 per ffn unit               w_down  columns, 1 per ffn unit
//   embedding, head rows,    1 per vocab row              norms   replicated (whole)
//   a mixture of experts: router replicated; shared.w_gate, .w_up rows and shared.w_down
//   columns, 1 per ffn unit; experts.* by ffn units (w_gate, w_up: columns, h per unit;
//   w_down: columns, 1) or, held whole, by experts (w_gate, w_up: rows, 1; w_down: rows, h)

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/params.hpp"
#include "scheduler/program/program.hpp"
#include "topologies/status.hpp"

namespace hexi::engine {

// The kernels/ tensor name of a segment: "layers.3.wq", "embedding", "head", "final_norm".
std::string tensor_name(const ParamSegment& seg);

// Flat-buffer indices of a segment's elements in their row-major order within the
// segment; an error names the segment when the device does not hold all of it or the
// parameter is not a Llama parameter. whole_experts: the device holds a mixture of
// experts' routed experts whole (its layout's `experts` share), so their segments count
// experts, not ffn units.
Result<std::vector<std::int64_t>> segment_indices(const kernels::ParamLayout& layout,
                                                  const kernels::LlamaDims& dims,
                                                  const ParamSegment& seg, bool whole_experts);

// The shard of the model's tensors a device holds: its TP shard (heads, ffn units, vocab
// rows of its layout; a mixture of experts' routed experts and shared-expert columns as its
// layout's routed_experts and shared_ffn give them, every column of experts held whole), or
// the whole model on a sequence mesh's device (its head range is its attention heads, not
// what it stores).
kernels::TpShard held_shard(const Program& program, const DeviceLayout& layout,
                            const kernels::LlamaDims& dims);
// Why a mixture of experts' device cannot be given its shard (its layout lacks the expert
// ranges lowering writes), or empty.
std::string moe_ranges_missing(const Program& program, const DeviceLayout& layout,
                               const kernels::LlamaDims& dims);
// The tensors a device holds: kernels::stage_layout of its stage on held_shard; an
// interleaved pipeline's device holds its chunks' layouts one after another (chunk order).
kernels::ParamLayout held_layout(const Program& program, const DeviceLayout& layout,
                                 const kernels::LlamaDims& dims);
// The tokens of each sequence a sequence mesh's device holds (s_i of its group); 0 when it
// is not in the mesh.
int sequence_shard(const SequenceLayout& layout, int device);

// Contiguous runs of a flat buffer, per tensor (runs never cross tensors).
struct Run {
  std::size_t offset = 0;  // into the flat parameter buffer
  std::size_t length = 0;
  bool decay = true;  // AdamW weight decay applies (matrices)
};
// Runs of the elements with mask[i] != 0.
std::vector<Run> masked_runs(const kernels::ParamLayout& layout, const std::vector<char>& mask);

}  // namespace hexi::engine
