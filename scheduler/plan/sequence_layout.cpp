#include "scheduler/plan/sequence_layout.hpp"

#include <algorithm>
#include <climits>
#include <map>
#include <numeric>

#include "topologies/text.hpp"

namespace hexi {
inline namespace plan {
namespace {

std::string gib(double bytes) {
  return fixed(bytes / kGiB, 2);
}

// "devices 4, 5, 6" for messages.
std::string device_list(const std::vector<int>& devices) {
  std::string out = devices.size() == 1 ? "device " : "devices ";
  for (std::size_t i = 0; i < devices.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(devices[i]);
  }
  return out;
}

// The longest group's tokens: the ring's largest block (0 for one group: no ring).
std::int64_t ring_block_tokens(const SequenceLayout& layout) {
  if (layout.groups.size() <= 1) return 0;
  std::int64_t longest = 0;
  for (const auto& g : layout.groups) longest = std::max(longest, g.tokens);
  return longest;
}

// Checks one layout against its context, stopping at the first problem.
class LayoutChecker {
 public:
  LayoutChecker(const Model& m, const TrainingConfig& t, const Cluster& cluster,
                const std::string& origin, const std::string& root)
      : model_(m), training_(t), cluster_(cluster), origin_(origin), root_(root) {}

  // Structure, then memory where `memory` (a whole-plan mesh; a mesh stage's memory is the
  // estimate's).
  Status check(const SequenceLayout& layout, bool memory) {
    if (layout.groups.empty()) return fail(root_ + "/groups", "expected at least one group");
    std::int64_t tokens = 0;
    for (std::size_t g = 0; g < layout.groups.size(); ++g) {
      const SequenceGroup& group = layout.groups[g];
      const std::string path = group_path(static_cast<int>(g));
      if (auto st = counts(group, path); !st) return st;
      if (auto st = devices_once(group, path); !st) return st;
      if (auto st = shards_sum(group, path); !st) return st;
      if (auto st = heads_sum(group, path); !st) return st;
      if (!layout.split_kv_heads) {
        if (auto st = kv_groups_whole(group, path); !st) return st;
      }
      if (group.tensor) {
        if (auto st = tensor_group(group, path); !st) return st;
      }
      tokens += group.tokens;
    }
    if (tokens != training_.seq_len) {
      return fail(root_ + "/groups", "the groups' tokens sum to " + std::to_string(tokens) +
                                         "; expected the sequence length S = " +
                                         std::to_string(training_.seq_len) + " (training seq_len)");
    }
    return memory ? memory_fits(layout) : Status{};
  }

 private:
  std::string group_path(int g) const { return root_ + "/groups/" + std::to_string(g); }

  Error fail(const std::string& path, const std::string& what) const {
    return bad_input(origin_ + ": " + path + ": " + what);
  }

  Status counts(const SequenceGroup& g, const std::string& path) const {
    if (g.devices.empty()) return fail(path + "/devices", "expected at least one device");
    const std::string n = std::to_string(g.devices.size());
    if (g.shards.size() != g.devices.size()) {
      return fail(path + "/shards", "has " + std::to_string(g.shards.size()) +
                                        " entries; expected one per device (" + n + ")");
    }
    if (g.heads.size() != g.devices.size()) {
      return fail(path + "/heads", "has " + std::to_string(g.heads.size()) +
                                       " entries; expected one per device (" + n + ")");
    }
    return {};
  }

  Status devices_once(const SequenceGroup& g, const std::string& path) {
    for (int r = 0; r < g.size(); ++r) {
      const int d = g.devices[r];
      const std::string dpath = path + "/devices/" + std::to_string(r);
      if (d < 0 || d >= cluster_.num_devices()) {
        return fail(dpath, "device " + std::to_string(d) + " does not exist (cluster \"" +
                               cluster_.name() + "\" has devices 0.." +
                               std::to_string(cluster_.num_devices() - 1) + ")");
      }
      auto [it, fresh] = used_.emplace(d, dpath);
      if (!fresh) {
        return fail(dpath, "device " + std::to_string(d) + " is already in " + it->second +
                               " (a device belongs to one group)");
      }
    }
    return {};
  }

  Status shards_sum(const SequenceGroup& g, const std::string& path) const {
    if (g.tokens <= 0 || g.tokens % 2 != 0) {
      return fail(path + "/tokens",
                  std::to_string(g.tokens) +
                      " tokens; expected an even number > 0 (T/2 in each mirrored half)");
    }
    std::int64_t sum = 0;
    for (int r = 0; r < g.size(); ++r) {
      const std::int64_t s = g.shards[r];
      if (s < 0 || s % 2 != 0) {
        return fail(path + "/shards/" + std::to_string(r),
                    "device " + std::to_string(g.devices[r]) + " has " + std::to_string(s) +
                        " tokens; expected an even number >= 0 (s/2 in each mirrored half)");
      }
      sum += s;
    }
    if (sum == g.tokens) return {};
    return fail(path + "/shards", "the shards of " + device_list(g.devices) + " sum to " +
                                      std::to_string(sum) + " tokens; expected the group's " +
                                      std::to_string(g.tokens) + " (tokens)");
  }

  Status heads_sum(const SequenceGroup& g, const std::string& path) const {
    int sum = 0;
    for (int r = 0; r < g.size(); ++r) {
      if (g.heads[r] < 0 || g.heads[r] > model_.heads) {
        return fail(path + "/heads/" + std::to_string(r), "device " + std::to_string(g.devices[r]) +
                                                              " has " + std::to_string(g.heads[r]) +
                                                              " heads; expected 0.." +
                                                              std::to_string(model_.heads));
      }
      sum += g.heads[r];
    }
    if (sum == model_.heads) return {};
    return fail(path + "/heads", "the heads of " + device_list(g.devices) + " sum to " +
                                     std::to_string(sum) + "; expected the model's " +
                                     std::to_string(model_.heads) + " query heads");
  }

  Status kv_groups_whole(const SequenceGroup& g, const std::string& path) const {
    const int per_kv = model_.heads / model_.kv_heads;
    const std::vector<int> first = head_offsets(g);
    for (int r = 0; r < g.size(); ++r) {
      if (g.heads[r] == 0 || (first[r] % per_kv == 0 && g.heads[r] % per_kv == 0)) continue;
      return fail(path + "/heads/" + std::to_string(r),
                  "device " + std::to_string(g.devices[r]) + " holds query heads [" +
                      std::to_string(first[r]) + ", " + std::to_string(first[r] + g.heads[r]) +
                      "), which split a GQA group of " + std::to_string(per_kv) +
                      " query heads per kv head; split_kv_heads is false");
    }
    return {};
  }

  // A tensor-parallel group: every device holds at least one query head (its share of the
  // weights), and the layout runs ZeRO 0-2.
  Status tensor_group(const SequenceGroup& g, const std::string& path) const {
    for (int r = 0; r < g.size(); ++r) {
      if (g.heads[r] >= 1) continue;
      return fail(path + "/heads/" + std::to_string(r),
                  "device " + std::to_string(g.devices[r]) +
                      " holds no query head; every device of a tensor-parallel group holds at "
                      "least one (its share of the weights)");
    }
    if (training_.zero_stage >= 3) {
      return fail(path + "/parallel",
                  "a tensor-parallel group runs ZeRO 0-2; the training config asks for ZeRO-3 "
                  "(zero_stage 3): use Ulysses groups or a lower zero_stage");
    }
    return {};
  }

  Status memory_fits(const SequenceLayout& layout) const {
    for (const DeviceMemory& dm : layout_memory(layout, model_, training_, cluster_)) {
      if (dm.total() <= dm.limit()) continue;
      const SequenceMemory& m = dm.mesh;
      return fail(group_path(dm.group) + "/devices/" + std::to_string(dm.rank),
                  "device " + std::to_string(dm.device) + " (" + cluster_.gpu(dm.device).name +
                      " in machine " + cluster_.machine_of(dm.device).name + ") needs " +
                      gib(dm.total()) + " GiB; " + fixed(100 * kMemoryCap, 0) + " % of its " +
                      gib(dm.capacity) + " GiB is " + gib(dm.limit()) + " GiB: over by " +
                      gib(dm.total() - dm.limit()) + " GiB (model states " + gib(m.states.total()) +
                      ", activations " + gib(m.activations) + ", ring buffers " +
                      gib(m.ring_buffers) + ", all-to-all buffers " + gib(m.ulysses_buffers) +
                      ", logits " + gib(dm.logits) + ", reserve " + gib(m.reserve) + ")");
    }
    return {};
  }

  const Model& model_;
  const TrainingConfig& training_;
  const Cluster& cluster_;
  const std::string& origin_;
  const std::string& root_;          // the layout's JSON path (/sequence)
  std::map<int, std::string> used_;  // device -> the JSON path that placed it
};

SequenceGroup read_group(const JsonNode& node) {
  node.require_object();
  node.allow_only({"devices", "tokens", "shards", "heads", "parallel"});
  SequenceGroup g;
  if (auto parallel = node.find("parallel")) {
    const std::string kind = parallel->str();
    if (kind != "ulysses" && kind != "tensor") parallel->fail("\"ulysses\" or \"tensor\"");
    g.tensor = kind == "tensor";
  }
  const JsonNode devices = node.at("devices");
  devices.require_array();
  if (devices.size() == 0) devices.fail("a non-empty array of device ids");
  for (std::size_t i = 0; i < devices.size(); ++i) {
    g.devices.push_back(static_cast<int>(devices.at(i).integer_in(0, INT_MAX)));
  }
  g.tokens = node.at("tokens").integer_in(0, INT_MAX);
  const std::string per_device = "one entry per device (" + std::to_string(g.size()) + ")";
  const JsonNode shards = node.at("shards");
  shards.require_array();
  if (shards.size() != devices.size()) shards.fail(per_device);
  for (std::size_t i = 0; i < shards.size(); ++i) {
    g.shards.push_back(shards.at(i).integer_in(0, INT_MAX));
  }
  const JsonNode heads = node.at("heads");
  heads.require_array();
  if (heads.size() != devices.size()) heads.fail(per_device);
  for (std::size_t i = 0; i < heads.size(); ++i) {
    g.heads.push_back(static_cast<int>(heads.at(i).integer_in(0, INT_MAX)));
  }
  return g;
}

}  // namespace

int SequenceLayout::num_devices() const {
  int n = 0;
  for (const auto& g : groups) n += g.size();
  return n;
}

std::vector<int> SequenceLayout::devices() const {
  std::vector<int> out;
  for (const auto& g : groups) out.insert(out.end(), g.devices.begin(), g.devices.end());
  return out;
}

bool SequenceLayout::has_tensor_groups() const {
  return std::any_of(groups.begin(), groups.end(), [](const SequenceGroup& g) { return g.tensor; });
}

int SequenceLayout::holders() const {
  int n = 0;
  for (const auto& g : groups) n += g.tensor ? 1 : g.size();
  return n;
}

MemberWork member_work(const SequenceGroup& g, int rank, int heads) {
  if (!g.tensor) return {g.shards[rank], 1.0, 1.0, 1};
  return {g.tokens, static_cast<double>(g.heads[rank]) / heads,
          static_cast<double>(g.shards[rank]) / static_cast<double>(g.tokens), g.size()};
}

double member_params(const Model& m, const SequenceGroup& g, int rank) {
  if (!g.tensor) return m.params();
  StageShape whole = whole_model_shape(m, 1, std::nullopt);
  whole.phi = member_work(g, rank, m.heads).phi;
  return stage_params(m, whole);
}

double tensor_group_bytes(const Model& m, const TrainingConfig& t, const SequenceGroup& g) {
  const std::int64_t largest = *std::max_element(g.shards.begin(), g.shards.end());
  return static_cast<double>(g.size()) * static_cast<double>(largest) * m.hidden *
         t.bytes_per_element();
}

std::vector<int> head_holders(const SequenceLayout& layout, int head) {
  std::vector<int> out;
  for (const SequenceGroup& g : layout.groups) {
    if (!g.tensor) {
      out.insert(out.end(), g.devices.begin(), g.devices.end());
      continue;
    }
    const std::vector<int> first = head_offsets(g);
    for (int r = 0; r < g.size(); ++r) {
      if (first[r] <= head && head < first[r] + g.heads[r]) out.push_back(g.devices[r]);
    }
  }
  return out;
}

TrainingConfig member_training(const TrainingConfig& t, const SequenceGroup& g, int rank) {
  TrainingConfig mine = t;
  mine.seq_len = static_cast<int>(g.tensor ? g.tokens : g.shards[rank]);
  mine.micro_batch = 1;
  if (g.tensor) mine.sequence_parallel = true;
  return mine;
}

AttentionShape attention_shape(const Model& m, const TrainingConfig& t, int grad_bytes) {
  const int e = t.bytes_per_element();
  return {m.head_dim(), m.heads, m.kv_heads, e, grad_bytes > 0 ? grad_bytes : e};
}

std::vector<int> head_offsets(const SequenceGroup& g) {
  std::vector<int> first;
  int next = 0;
  for (int h : g.heads) {
    first.push_back(next);
    next += h;
  }
  return first;
}

MirroredShard device_tokens(const SequenceLayout& layout, int g, int rank) {
  std::vector<std::int64_t> group_tokens;
  std::int64_t total = 0;
  for (const auto& grp : layout.groups) {
    group_tokens.push_back(grp.tokens);
    total += grp.tokens;
  }
  const SequenceGroup& grp = layout.groups[g];
  const MirroredShard outer = mirrored_layout(total, group_tokens).value()[g];
  const MirroredShard inner = mirrored_layout(grp.tokens, grp.shards).value()[rank];
  const std::int64_t half = grp.tokens / 2;
  return {{outer.front.begin + inner.front.begin, outer.front.begin + inner.front.end},
          {outer.back.begin + inner.back.begin - half, outer.back.begin + inner.back.end - half}};
}

std::vector<std::int64_t> even_split(std::int64_t tokens, int parts) {
  const std::int64_t pairs = tokens / 2;
  std::vector<std::int64_t> out;
  for (int i = 0; i < parts; ++i) out.push_back(2 * (pairs / parts + (i < pairs % parts ? 1 : 0)));
  return out;
}

std::vector<int> even_heads(int heads, int parts) {
  std::vector<int> out;
  for (int i = 0; i < parts; ++i) out.push_back(heads / parts + (i < heads % parts ? 1 : 0));
  return out;
}

SequenceLayout even_layout(const std::vector<std::vector<int>>& groups, std::int64_t sequence,
                           int heads) {
  int devices = 0;
  for (const auto& g : groups) devices += static_cast<int>(g.size());
  const std::vector<std::int64_t> shards = even_split(sequence, devices);
  SequenceLayout l;
  std::size_t next = 0;
  for (const auto& g : groups) {
    SequenceGroup group{g, 0, {}, even_heads(heads, static_cast<int>(g.size()))};
    for (std::size_t i = 0; i < g.size(); ++i) group.shards.push_back(shards[next++]);
    group.tokens = std::accumulate(group.shards.begin(), group.shards.end(), std::int64_t{0});
    l.groups.push_back(std::move(group));
  }
  return l;
}

namespace {

// The memory shape of device `rank` of group `g`, but its layers and model states (layout_memory
// and mesh_stage_memory's buffers); `ring_block`: ring_block_tokens(layout).
SequenceDeviceShape device_shape(const SequenceLayout& layout, const AttentionShape& a,
                                 const Model& m, int g, int rank, std::int64_t ring_block) {
  const SequenceGroup& group = layout.groups[g];
  const MemberWork w = member_work(group, rank, m.heads);
  SequenceDeviceShape s;
  s.shard_tokens = group.shards[rank];
  s.group_tokens = group.tokens;
  s.q_heads = group.heads[rank];
  s.kv_heads = kv_heads_needed(a, head_offsets(group)[rank], group.heads[rank]);
  s.ring_block_tokens = ring_block;
  s.tensor = group.tensor;
  s.tp = w.tp;
  s.phi = w.phi;
  return s;
}

}  // namespace

std::vector<DeviceMemory> layout_memory(const SequenceLayout& layout, const Model& m,
                                        const TrainingConfig& t, const Cluster& cluster) {
  const AttentionShape a = attention_shape(m, t);
  const std::int64_t block = ring_block_tokens(layout);
  std::vector<DeviceMemory> out;
  for (int g = 0; g < static_cast<int>(layout.groups.size()); ++g) {
    const SequenceGroup& group = layout.groups[g];
    for (int r = 0; r < group.size(); ++r) {
      SequenceDeviceShape s = device_shape(layout, a, m, g, r, block);
      s.layers = m.layers;
      s.params = member_params(m, group, r);
      s.zero_stage = t.zero_stage;
      s.zero_shards = layout.holders();
      DeviceMemory dm;
      dm.device = group.devices[r];
      dm.group = g;
      dm.rank = r;
      dm.mesh = sequence_device_memory(m, t, a, s, t.recompute);
      // The head's logits for its tokens: cost_model's last-stage figure (s_i tokens; a
      // tensor group's device: T_g tokens of its phi of the vocabulary).
      StageShape head;
      head.last = true;
      head.phi = s.phi;
      dm.logits = device_memory(m, member_training(t, group, r), head).logits;
      dm.capacity = cluster.device_memory_bytes(dm.device);
      out.push_back(dm);
    }
  }
  return out;
}

MemoryBreakdown mesh_stage_memory(const SequenceLayout& layout, int device, const Model& m,
                                  const TrainingConfig& t, StageShape stage) {
  const AttentionShape a = attention_shape(m, t);
  for (int g = 0; g < static_cast<int>(layout.groups.size()); ++g) {
    const SequenceGroup& group = layout.groups[g];
    for (int r = 0; r < group.size(); ++r) {
      if (group.devices[r] != device) continue;
      const TrainingConfig mine = member_training(t, group, r);
      const MemberWork w = member_work(group, r, m.heads);
      stage.tp = w.tp;
      stage.phi = w.phi;
      stage.micro_batch = 1;
      stage.dp += layout.holders() - 1;
      MemoryBreakdown mem = device_memory(m, mine, stage);
      const SequenceMemory extra = sequence_device_memory(
          m, mine, a, device_shape(layout, a, m, g, r, ring_block_tokens(layout)), t.recompute);
      mem.activations += extra.ring_buffers + extra.ulysses_buffers;
      return mem;
    }
  }
  return {};
}

Status validate(const SequenceLayout& layout, const Model& m, const TrainingConfig& t,
                const Cluster& cluster, const std::string& origin) {
  return LayoutChecker(m, t, cluster, origin, "/sequence").check(layout, true);
}

Status validate_structure(const SequenceLayout& layout, const Model& m, const TrainingConfig& t,
                          const Cluster& cluster, const std::string& origin,
                          const std::string& path) {
  return LayoutChecker(m, t, cluster, origin, path).check(layout, false);
}

Json to_json(const SequenceLayout& layout) {
  Json groups = Json::array();
  for (const auto& g : layout.groups) {
    Json group = {
        {"devices", g.devices}, {"tokens", g.tokens}, {"shards", g.shards}, {"heads", g.heads}};
    if (g.tensor) group["parallel"] = "tensor";  // the default, "ulysses", is left out
    groups.push_back(std::move(group));
  }
  return {{"groups", groups}, {"split_kv_heads", layout.split_kv_heads}};
}

SequenceLayout read_layout(const JsonNode& node) {
  node.require_object();
  node.allow_only({"groups", "split_kv_heads"});
  SequenceLayout layout;
  const JsonNode groups = node.at("groups");
  groups.require_array();
  if (groups.size() == 0) groups.fail("a non-empty array of groups");
  for (std::size_t g = 0; g < groups.size(); ++g) layout.groups.push_back(read_group(groups.at(g)));
  layout.split_kv_heads = node.boolean_or("split_kv_heads", true);
  return layout;
}

Result<SequenceLayout> layout_from_json(const Json& sequence, const std::string& origin,
                                        const std::string& path) {
  return load_with([&] { return read_layout(JsonNode(sequence, origin, path)); });
}

SubRings sub_rings(const AttentionShape& a, const SequenceLayout& layout) {
  SubRings s;
  for (const auto& g : layout.groups) {
    for (int first : head_offsets(g)) s.bounds.push_back(first);
  }
  s.bounds.push_back(a.q_heads);
  std::sort(s.bounds.begin(), s.bounds.end());
  s.bounds.erase(std::unique(s.bounds.begin(), s.bounds.end()), s.bounds.end());
  const int intervals = static_cast<int>(s.bounds.size()) - 1;
  for (int m = 0; m < intervals; ++m) {
    s.kv.push_back(kv_heads_needed(a, s.bounds[m], s.bounds[m + 1] - s.bounds[m]));
  }
  for (const auto& g : layout.groups) {
    const std::vector<int> first = head_offsets(g);
    std::vector<int> owner(intervals, 0);
    for (int m = 0; m < intervals; ++m) {
      for (int r = 0; r < g.size(); ++r) {
        if (first[r] <= s.bounds[m] && s.bounds[m] < first[r] + g.heads[r]) owner[m] = r;
      }
    }
    s.owner.push_back(owner);
  }
  return s;
}

}  // namespace plan
}  // namespace hexi
