#include "scheduler/program/dp_buckets.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

namespace hexi {
inline namespace program {

std::pair<int, int> head_range(const Stage& stage, int rank, int heads) {
  if (stage.head_split.empty()) {
    const int t = stage.tp();
    return {rank * heads / t, (rank + 1) * heads / t};
  }
  int begin = 0;
  for (int r = 0; r < rank; ++r) begin += stage.head_split[r];
  return {begin, begin + stage.head_split[rank]};
}

ShardRanges shard_ranges(const Model& m, int a0, int a1) {
  const std::int64_t a = m.heads, k = m.kv_heads, f = m.ffn, v = m.vocab;
  ShardRanges r;
  r.head_begin = a0;
  r.head_end = a1;
  r.kv_begin = static_cast<int>(a0 * k / a);
  r.kv_end = static_cast<int>((a1 * k + a - 1) / a);
  r.ffn_begin = static_cast<int>(f * a0 / a);
  r.ffn_end = static_cast<int>(f * a1 / a);
  const std::int64_t fs = m.moe.shared_ffn;
  r.shared_begin = static_cast<int>(fs * a0 / a);
  r.shared_end = static_cast<int>(fs * a1 / a);
  r.vocab_begin = static_cast<int>(v * a0 / a);
  r.vocab_end = static_cast<int>(v * a1 / a);
  return r;
}

ShardRanges stage_ranges(const Stage& stage, int rank, const Model& model) {
  auto [a0, a1] = head_range(stage, rank, model.heads);
  ShardRanges r = shard_ranges(model, a0, a1);
  if (!stage.expert_split.empty()) {
    const auto split = stage.expert_split.begin();
    r.expert_begin = std::accumulate(split, split + rank, 0);
    r.expert_end = r.expert_begin + stage.expert_split[static_cast<std::size_t>(rank)];
  }
  return r;
}

namespace {

enum class Axis { kHeads, kKv, kFfn, kSharedFfn, kExperts, kVocab, kReplicated };

struct Param {
  const char* name;
  Axis axis;
  double per_unit;  // elements per unit of the axis (whole tensor when replicated)
};

// Parameters of one layer in the canonical order (totals match Model::layer_params); a
// mixture of experts' routed experts whole (`whole_experts`: the plan's stages give an
// expert_split) or by columns.
std::vector<Param> layer_params(const Model& m, bool whole_experts) {
  const double h = m.hidden, d = m.head_dim();
  const double bias = m.bias ? 1 : 0;
  std::vector<Param> ps = {{"wq", Axis::kHeads, d * h + bias * d},
                           {"wk", Axis::kKv, d * h + bias * d},
                           {"wv", Axis::kKv, d * h + bias * d},
                           {"wo", Axis::kHeads, h * d}};
  if (m.bias) ps.push_back({"o_bias", Axis::kReplicated, h});
  if (m.is_moe()) {
    // The replicated router; the routed experts by columns (expert TP = TP) or whole
    // (expert_split); the shared experts' columns.
    const double experts = m.moe.experts, f = m.ffn;
    ps.push_back({"router", Axis::kReplicated, h * experts});
    if (whole_experts) {
      ps.push_back({"experts.w_gate", Axis::kExperts, h * f});
      ps.push_back({"experts.w_up", Axis::kExperts, h * f});
      ps.push_back({"experts.w_down", Axis::kExperts, h * f});
    } else {
      ps.push_back({"experts.w_gate", Axis::kFfn, h * experts});
      ps.push_back({"experts.w_up", Axis::kFfn, h * experts});
      ps.push_back({"experts.w_down", Axis::kFfn, h * experts});
    }
    if (m.moe.shared_ffn > 0) {
      ps.push_back({"shared.w_gate", Axis::kSharedFfn, h});
      ps.push_back({"shared.w_up", Axis::kSharedFfn, h});
      ps.push_back({"shared.w_down", Axis::kSharedFfn, h});
    }
  } else if (m.mlp == MlpKind::kSwiGlu) {
    ps.push_back({"w_gate", Axis::kFfn, h + bias});
    ps.push_back({"w_up", Axis::kFfn, h + bias});
    ps.push_back({"w_down", Axis::kFfn, h});
    if (m.bias) ps.push_back({"down_bias", Axis::kReplicated, h});
  } else {
    ps.push_back({"fc1", Axis::kFfn, h + bias});
    ps.push_back({"fc2", Axis::kFfn, h});
    if (m.bias) ps.push_back({"fc2_bias", Axis::kReplicated, h});
  }
  const double norm = h * (m.layer_norm ? 2 : 1);
  ps.push_back({"attn_norm", Axis::kReplicated, norm});
  ps.push_back({"mlp_norm", Axis::kReplicated, norm});
  return ps;
}

// One holder of a layer (or of the embedding / head): a device and its shard.
struct Holder {
  int device;
  int tp_rank;
  ShardRanges r;
};

std::pair<int, int> axis_range(const ShardRanges& r, Axis axis) {
  switch (axis) {
    case Axis::kHeads:
      return {r.head_begin, r.head_end};
    case Axis::kKv:
      return {r.kv_begin, r.kv_end};
    case Axis::kFfn:
      return {r.ffn_begin, r.ffn_end};
    case Axis::kSharedFfn:
      return {r.shared_begin, r.shared_end};
    case Axis::kExperts:
      return {r.expert_begin, r.expert_end};
    case Axis::kVocab:
      return {r.vocab_begin, r.vocab_end};
    case Axis::kReplicated:
      break;
  }
  return {0, 0};
}

class BucketBuilder {
 public:
  BucketBuilder(int zero_stage, int num_devices) : zero_(zero_stage) {
    out_.owned_params.assign(num_devices, 0.0);
    out_.device_buckets.assign(num_devices, {});
    out_.replicated_params.assign(num_devices, 0.0);
  }

  // Adds the pieces of one position in the issue order (a layer, the head or the
  // embedding): each parameter with the ranks that hold it.
  using Item = std::pair<Param, const std::vector<Holder>*>;
  void add_position(int layer, const std::vector<Item>& items) {
    std::map<std::vector<int>, std::vector<ParamSegment>>
        by_set;                           // holder set -> segments, canonical order
    std::vector<std::vector<int>> order;  // holder sets in first-seen order
    auto add = [&](std::vector<int> set, ParamSegment seg) {
      std::sort(set.begin(), set.end());
      auto [it, fresh] = by_set.emplace(set, std::vector<ParamSegment>{});
      if (fresh) order.push_back(set);
      it->second.push_back(std::move(seg));
    };
    for (const auto& [p, holders] : items) {
      if (p.axis == Axis::kReplicated) {
        std::vector<int> set;
        for (const auto& h : *holders) {
          if (h.tp_rank == 0) set.push_back(h.device);
          out_.replicated_params[h.device] += p.per_unit;
        }
        add(set, {p.name, layer, 0, 0, p.per_unit});
        continue;
      }
      std::vector<int> cuts;
      for (const auto& h : *holders) {
        auto [b, e] = axis_range(h.r, p.axis);
        cuts.push_back(b);
        cuts.push_back(e);
      }
      std::sort(cuts.begin(), cuts.end());
      cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
      for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
        std::vector<int> set;
        for (const auto& h : *holders) {
          auto [b, e] = axis_range(h.r, p.axis);
          if (b <= cuts[i] && cuts[i + 1] <= e) set.push_back(h.device);
        }
        if (!set.empty())
          add(set, {p.name, layer, cuts[i], cuts[i + 1], (cuts[i + 1] - cuts[i]) * p.per_unit});
      }
    }
    std::map<std::vector<int>, int> still_open;
    for (const auto& set : order) {
      auto& segs = by_set[set];
      if (set.size() < 2) {  // one holder owns these elements outright: nothing to synchronise
        for (const auto& seg : segs) out_.owned_params[set.front()] += seg.elements;
        continue;
      }
      auto it = open_.find(set);
      const int b = it != open_.end() ? it->second : new_bucket(set);
      for (auto& seg : segs) {
        out_.buckets[b].elements += seg.elements;
        out_.buckets[b].segments.push_back(std::move(seg));
      }
      still_open[set] = b;
    }
    open_ = std::move(still_open);  // a holder set absent from this position closes its bucket
  }

  DpBuckets finish() {
    // Owned elements: ZeRO-1 member i of n owns [i*E/n, (i+1)*E/n); ZeRO-0 all of it.
    for (const auto& b : out_.buckets) {
      const auto& members = out_.groups[b.group];
      const double n = static_cast<double>(members.size());
      for (std::size_t i = 0; i < members.size(); ++i) {
        double part = zero_ >= 1
                          ? std::floor((i + 1) * b.elements / n) - std::floor(i * b.elements / n)
                          : b.elements;
        out_.owned_params[members[i]] += part;
      }
    }
    return std::move(out_);
  }

 private:
  int new_bucket(const std::vector<int>& set) {
    auto [it, fresh] = group_ids_.emplace(set, static_cast<int>(out_.groups.size()));
    if (fresh) out_.groups.push_back(set);
    Bucket b;
    b.group = it->second;
    out_.buckets.push_back(b);
    const int id = static_cast<int>(out_.buckets.size()) - 1;
    for (int d : set) out_.device_buckets[d].push_back(id);
    return id;
  }

  int zero_;
  DpBuckets out_;
  std::map<std::vector<int>, int> open_;
  std::map<std::vector<int>, int> group_ids_;
};

std::vector<Holder> stage_holders(const Stage& s, const Model& m) {
  std::vector<Holder> hs;
  if (s.mesh()) {  // a Ulysses group's devices hold the weights whole, a tensor group's shares
    for (const SequenceGroup& g : s.sequence->groups) {
      const std::vector<int> first = head_offsets(g);
      for (int r = 0; r < g.size(); ++r) {
        hs.push_back({g.devices[r], g.tensor ? r : 0,
                      g.tensor ? shard_ranges(m, first[r], first[r] + g.heads[r])
                               : shard_ranges(m, 0, m.heads)});
      }
    }
    return hs;
  }
  for (int r = 0; r < s.tp(); ++r) hs.push_back({s.devices[r], r, stage_ranges(s, r, m)});
  return hs;
}

}  // namespace

DpBuckets plan_dp_buckets(const Plan& plan, const Model& m, int zero_stage, int num_devices) {
  BucketBuilder builder(zero_stage, num_devices);
  // Which stage holds each layer, per pipeline.
  std::vector<std::vector<int>> stage_of(plan.pipelines.size(), std::vector<int>(m.layers, -1));
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    const auto& stages = plan.pipelines[p].stages;
    for (std::size_t s = 0; s < stages.size(); ++s) {
      for (int l = stages[s].layer_begin; l < stages[s].layer_end; ++l)
        stage_of[p][l] = static_cast<int>(s);
    }
  }
  const double h = m.hidden;
  const double norm = h * (m.layer_norm ? 2 : 1);
  using Item = BucketBuilder::Item;
  std::vector<Holder> first, last;
  for (const auto& p : plan.pipelines) {
    for (auto& hd : stage_holders(p.stages.front(), m)) first.push_back(hd);
    for (auto& hd : stage_holders(p.stages.back(), m)) last.push_back(hd);
  }
  // The head position first: the output head and the final norm; a tied table is
  // one parameter held by the first and the last stages (their gradients add up).
  std::vector<Holder> table = first;
  for (const auto& hd : last) {
    if (std::none_of(table.begin(), table.end(),
                     [&](const Holder& x) { return x.device == hd.device; })) {
      table.push_back(hd);
    }
  }
  std::vector<Item> head;
  head.push_back(m.tied_embeddings ? Item{{"embedding", Axis::kVocab, h}, &table}
                                   : Item{{"head", Axis::kVocab, h}, &last});
  head.push_back({{"final_norm", Axis::kReplicated, norm}, &last});
  builder.add_position(-2, head);
  const auto params = layer_params(m, plan.whole_experts());
  for (int l = m.layers - 1; l >= 0; --l) {
    std::vector<Holder> holders;
    for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
      for (auto& hd : stage_holders(plan.pipelines[p].stages[stage_of[p][l]], m))
        holders.push_back(hd);
    }
    std::vector<Item> items;
    for (const auto& p : params) items.push_back({p, &holders});
    builder.add_position(l, items);
  }
  std::vector<Item> embedding;
  if (!m.tied_embeddings) embedding.push_back({{"embedding", Axis::kVocab, h}, &first});
  if (m.learned_positions) {
    embedding.push_back(
        {{"positions", Axis::kReplicated, static_cast<double>(m.max_seq) * h}, &first});
  }
  builder.add_position(-1, embedding);
  return builder.finish();
}

}  // namespace program
}  // namespace hexi
