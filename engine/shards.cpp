#include "engine/shards.hpp"

#include <cstdint>
#include <tuple>

namespace hexi::engine {
namespace {

enum class Axis { kRows, kCols, kWhole };

struct AxisOf {
  Axis axis = Axis::kWhole;
  int unit = 1;  // rows or columns per unit of the program's axis
};

// whole_experts: a mixture of experts' routed experts are held whole (DP segments count
// experts) rather than by columns (ffn units of every expert); kernels/params.hpp lays
// them out as (E, f*h) and (E*h, f).
Result<AxisOf> axis_of(const std::string& param, const kernels::LlamaDims& d, bool whole_experts) {
  const int hd = d.head_dim(), h = d.hidden;
  if (param == "experts.w_gate" || param == "experts.w_up") {
    return whole_experts ? AxisOf{Axis::kRows, 1} : AxisOf{Axis::kCols, h};
  }
  if (param == "experts.w_down") {
    return whole_experts ? AxisOf{Axis::kRows, h} : AxisOf{Axis::kCols, 1};
  }
  if (param == "shared.w_gate" || param == "shared.w_up") return AxisOf{Axis::kRows, 1};
  if (param == "shared.w_down") return AxisOf{Axis::kCols, 1};
  if (param == "router") return AxisOf{};
  if (param == "wq" || param == "wk" || param == "wv") return AxisOf{Axis::kRows, hd};
  if (param == "wo") return AxisOf{Axis::kCols, hd};
  if (param == "w_gate" || param == "w_up" || param == "embedding" || param == "head") {
    return AxisOf{Axis::kRows, 1};
  }
  if (param == "w_down") return AxisOf{Axis::kCols, 1};
  if (param == "attn_norm" || param == "mlp_norm" || param == "final_norm") return AxisOf{};
  return failure(
      "the engine runs Llama models (SwiGLU, RMSNorm, no biases, untied head); "
      "the program synchronises parameter \"" +
      param + "\", which it does not have");
}

}  // namespace

std::string tensor_name(const ParamSegment& seg) {
  if (seg.layer >= 0) return "layers." + std::to_string(seg.layer) + "." + seg.param;
  return seg.param;
}

Result<std::vector<std::int64_t>> segment_indices(const kernels::ParamLayout& layout,
                                                  const kernels::LlamaDims& dims,
                                                  const ParamSegment& seg, bool whole_experts) {
  const std::string name = tensor_name(seg);
  auto axis = axis_of(seg.param, dims, whole_experts);
  if (!axis.ok()) return axis.error();
  const kernels::TensorInfo* t = layout.find(name);
  if (t == nullptr) return failure("DP segment " + name + ": this device does not hold the tensor");
  // The segment as a block [r0, r1) x [c0, c1) of the full tensor.
  int r0 = 0, r1 = t->full_rows, c0 = 0, c1 = t->full_cols;
  if (axis->axis == Axis::kRows) {
    r0 = seg.begin * axis->unit;
    r1 = seg.end * axis->unit;
  } else if (axis->axis == Axis::kCols) {
    c0 = seg.begin * axis->unit;
    c1 = seg.end * axis->unit;
  }
  if (r0 < t->row_begin || r1 > t->row_begin + t->rows || c0 < t->col_begin ||
      c1 > t->col_begin + t->cols || r0 >= r1 || c0 >= c1) {
    return failure("DP segment " + name + " [" + std::to_string(seg.begin) + ", " +
                   std::to_string(seg.end) + ") is not inside this device's shard of it");
  }
  std::vector<std::int64_t> idx;
  idx.reserve(static_cast<std::size_t>(r1 - r0) * (c1 - c0));
  for (int r = r0; r < r1; ++r) {
    for (int c = c0; c < c1; ++c) {
      idx.push_back(static_cast<std::int64_t>(t->offset) +
                    static_cast<std::int64_t>(r - t->row_begin) * t->cols + (c - t->col_begin));
    }
  }
  if (static_cast<double>(idx.size()) != seg.elements) {
    return failure("DP segment " + name + ": the program counts " + std::to_string(seg.elements) +
                   " elements, the layout " + std::to_string(idx.size()));
  }
  return idx;
}

kernels::TpShard held_shard(const Program& program, const DeviceLayout& l,
                            const kernels::LlamaDims& dims) {
  if (program.mesh_of(l)) return kernels::full_shard(dims);
  kernels::TpShard s{l.head_begin, l.head_end, l.ffn_begin, l.ffn_end, l.vocab_begin, l.vocab_end};
  if (!dims.is_moe() || !l.routed_experts || !l.shared_ffn) return s;
  std::tie(s.expert_begin, s.expert_end) = *l.routed_experts;
  std::tie(s.shared_begin, s.shared_end) = *l.shared_ffn;
  if (l.experts >= 0) {  // whole experts: every column of the ones it holds
    s.ffn_begin = 0;
    s.ffn_end = dims.ffn;
  }
  return s;
}

std::string moe_ranges_missing(const Program& program, const DeviceLayout& l,
                               const kernels::LlamaDims& dims) {
  if (!dims.is_moe() || program.mesh_of(l) || (l.routed_experts && l.shared_ffn)) return {};
  return "device " + std::to_string(l.device) +
         ": the model is a mixture of experts but the program gives no routed_experts and "
         "shared_ffn ranges for it (a program written before lowering recorded them): lower "
         "the plan again (hexisim lower)";
}

int sequence_shard(const SequenceLayout& layout, int device) {
  for (const SequenceGroup& g : layout.groups) {
    for (int r = 0; r < g.size(); ++r) {
      if (g.devices[r] == device) return static_cast<int>(g.shards[r]);
    }
  }
  return 0;
}

std::vector<Run> masked_runs(const kernels::ParamLayout& layout, const std::vector<char>& mask) {
  std::vector<Run> runs;
  for (const auto& t : layout.tensors) {
    const std::size_t end = t.offset + t.size();
    for (std::size_t i = t.offset; i < end;) {
      if (!mask[i]) {
        ++i;
        continue;
      }
      std::size_t j = i;
      while (j < end && mask[j]) ++j;
      runs.push_back({i, j - i, t.decay});
      i = j;
    }
  }
  return runs;
}

kernels::ParamLayout held_layout(const Program& program, const DeviceLayout& layout,
                                 const kernels::LlamaDims& dims) {
  const kernels::TpShard shard = held_shard(program, layout, dims);
  kernels::ParamLayout out;
  for (int c = 0; c < num_chunks(layout); ++c) {
    const ChunkLayout ch = chunk_layout(layout, c);
    kernels::ParamLayout part =
        kernels::stage_layout(dims, {ch.layer_begin, ch.layer_end, ch.first, ch.last, shard});
    for (kernels::TensorInfo& t : part.tensors) {
      t.offset += out.total;
      out.tensors.push_back(std::move(t));
    }
    out.total += part.total;
  }
  return out;
}

}  // namespace hexi::engine
