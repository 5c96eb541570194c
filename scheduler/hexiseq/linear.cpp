#include "scheduler/hexiseq/linear.hpp"

#include <algorithm>
#include <limits>

namespace hexi {
inline namespace hexiseq {
namespace {

// Where a device's machine sits in a group's machine list.
int machine_entry(const GroupTerms& t, int machine) {
  const auto it = std::find(t.machines.begin(), t.machines.end(), machine);
  return static_cast<int>(it - t.machines.begin());
}

// One group's variables as the model reads them.
struct GroupValues {
  std::vector<double> s, h, kv;  // per rank
  double tokens = 0;             // T_g
  double q(int i) const { return h[i] + 2 * kv[i]; }
};

// The larger of the two all-to-alls' port and NIC times (A1 for Q, K, V; A2 for O).
std::pair<double, double> all_to_all(const GroupTerms& t, const GroupValues& v) {
  const int n = static_cast<int>(t.devices.size());
  double a1 = 0, a2 = 0;
  for (int i = 0; i < n; ++i) {
    double recv_qkv = 0, send_qkv = 0, send_o = 0, recv_o = 0;
    for (int j = 0; j < n; ++j) {
      if (j == i) continue;
      recv_qkv += v.s[j] * v.q(i) * t.pair_s[j][i];
      send_qkv += v.s[i] * v.q(j) * t.pair_s[i][j];
      send_o += v.s[j] * v.h[i] * t.pair_s[i][j];
      recv_o += v.s[i] * v.h[j] * t.pair_s[j][i];
    }
    a1 = std::max({a1, recv_qkv, send_qkv});
    a2 = std::max({a2, send_o, recv_o});
  }
  if (t.machines.size() <= 1) return {a1, a2};
  for (std::size_t m = 0; m < t.machines.size(); ++m) {
    double out_qkv = 0, in_qkv = 0, out_o = 0, in_o = 0;
    for (int i = 0; i < n; ++i) {
      if (t.devices[i].machine != t.machines[m]) continue;
      for (int j = 0; j < n; ++j) {
        if (t.devices[j].machine == t.machines[m]) continue;
        out_qkv += v.s[i] * v.q(j);
        in_qkv += v.s[j] * v.q(i);
        out_o += v.s[j] * v.h[i];
        in_o += v.s[i] * v.h[j];
      }
    }
    a1 = std::max(a1, std::max(out_qkv, in_qkv) * t.nic_s[m]);
    a2 = std::max(a2, std::max(out_o, in_o) * t.nic_s[m]);
  }
  return {a1, a2};
}

bool same_terms(const DeviceTerms& a, const DeviceTerms& b) {
  return a.machine == b.machine && a.token_fixed_s == b.token_fixed_s && a.token_s == b.token_s &&
         a.attention_s == b.attention_s && a.attention_backward_s == b.attention_backward_s &&
         a.memory_fixed == b.memory_fixed && a.memory_token == b.memory_token &&
         a.memory_limit == b.memory_limit;
}

bool swappable(const GroupTerms& t, int i, int j) {
  if (!same_terms(t.devices[i], t.devices[j]) || t.ring_s[i] != t.ring_s[j]) return false;
  if (t.pair_s[i][j] != t.pair_s[j][i]) return false;
  for (std::size_t k = 0; k < t.devices.size(); ++k) {
    if (static_cast<int>(k) == i || static_cast<int>(k) == j) continue;
    if (t.pair_s[i][k] != t.pair_s[j][k] || t.pair_s[k][i] != t.pair_s[k][j]) return false;
  }
  return true;
}

}  // namespace

std::vector<int> interchangeable(const GroupTerms& terms) {
  const int n = static_cast<int>(terms.devices.size());
  std::vector<int> id(n);
  for (int i = 0; i < n; ++i) {
    id[i] = i;
    for (int j = 0; j < i; ++j) {
      if (id[j] == j && swappable(terms, i, j)) {
        id[i] = j;
        break;
      }
    }
  }
  return id;
}

LinearModel::LinearModel(const SequenceCost& cost, int mesh) : cost_(cost), mesh_(mesh) {
  const AttentionShape& a = cost.attention();
  SequenceDeviceShape unit;
  unit.group_tokens = 1;
  unit.q_heads = 1;  // 2 h + 2 kv = 2
  unit.ring_block_tokens = 1;
  unit.kv_heads = 0;
  const Recompute r = cost.training().recompute;
  memory_ulysses_ =
      sequence_device_memory(cost.model(), cost.training(), a, unit, r).ulysses_buffers / 2;
  unit.q_heads = 0;
  unit.kv_heads = 1;
  const SequenceMemory ring = sequence_device_memory(cost.model(), cost.training(), a, unit, r);
  memory_ring_ = ring.ring_buffers;
}

int LinearModel::replay() const {
  return cost_.training().recompute == Recompute::kFull ? 1 : 0;
}

double LinearModel::grad_ratio() const {
  const AttentionShape& a = cost_.attention();
  return static_cast<double>(a.grad_bytes_per_element) / a.bytes_per_element;
}

int LinearModel::heads_per_kv() const {
  return cost_.attention().q_heads / cost_.attention().kv_heads;
}

DeviceTerms LinearModel::device(int d) const {
  // Every term but the ids depends on the GPU only: computed once per GPU type.
  const std::string& gpu = cost_.gpu(d).name;
  auto it = by_gpu_.find(gpu);
  if (it == by_gpu_.end()) it = by_gpu_.emplace(gpu, compute_device(d)).first;
  DeviceTerms out = it->second;
  out.device = d;
  out.machine = cost_.cluster().devices()[d].machine;
  return out;
}

DeviceTerms LinearModel::compute_device(int d) const {
  const Model& m = cost_.model();
  const TrainingConfig& t = cost_.training();
  const AttentionShape& a = cost_.attention();
  DeviceTerms out;
  out.device = d;
  out.machine = cost_.cluster().devices()[d].machine;
  // Token-wise: the secant through two compute-bound lengths.
  const std::int64_t s = sequence();
  const std::int64_t s1 = std::max<std::int64_t>(1024, s / 64 / 2 * 2), s2 = 2 * s1;
  const double t1 = cost_.token_wise_s(d, s1), t2 = cost_.token_wise_s(d, s2);
  out.token_s = (t2 - t1) / static_cast<double>(s2 - s1);
  out.token_fixed_s = std::max(0.0, t1 - out.token_s * static_cast<double>(s1));
  out.attention_s = attention_forward_flops(mirrored_rank_pairs(s, 2), 1, a.head_dim) / 2 /
                    cost_.attention_flops_s(d, false);
  out.attention_backward_s = attention_backward_flops(mirrored_rank_pairs(s, 2), 1, a.head_dim) /
                             2 / cost_.attention_flops_s(d, true);
  // Memory: model states and reserve, then per own token (activations and logits).
  SequenceDeviceShape shape;
  shape.layers = m.layers;
  shape.params = m.params();
  shape.zero_stage = t.zero_stage;
  shape.zero_shards = mesh_;
  const SequenceMemory fixed = sequence_device_memory(m, t, a, shape, t.recompute);
  out.memory_fixed = fixed.total();
  SequenceGroup probe{{d}, s, {s}, {0}};
  SequenceLayout one{{probe}, true};
  const DeviceMemory dm = layout_memory(one, m, t, cost_.cluster()).front();
  out.memory_token = (dm.mesh.activations + dm.logits) / static_cast<double>(s);
  out.memory_limit = kMemoryCap * cost_.memory_capacity(d);
  return out;
}

GroupTerms LinearModel::group(const std::vector<int>& devices,
                              const std::vector<int>& previous) const {
  const Cluster& c = cost_.cluster();
  const AttentionShape& a = cost_.attention();
  const double dB = static_cast<double>(a.head_dim) * a.bytes_per_element;
  const int n = static_cast<int>(devices.size());
  GroupTerms t;
  for (int d : devices) {
    t.devices.push_back(device(d));
    if (machine_entry(t, t.devices.back().machine) == static_cast<int>(t.machines.size())) {
      t.machines.push_back(t.devices.back().machine);
    }
  }
  t.pair_s.assign(n, std::vector<double>(n, 0.0));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      t.pair_s[i][j] = dB / c.bandwidth(devices[i], devices[j]);
      t.a2a_latency_s = std::max(t.a2a_latency_s, c.latency(devices[i], devices[j]));
    }
    double slowest = std::numeric_limits<double>::infinity();
    for (int p : previous) slowest = std::min(slowest, c.bandwidth(p, devices[i]));
    t.ring_s.push_back(previous.empty() ? 0.0 : 2 * dB / slowest);
  }
  for (int m : t.machines) {
    t.nic_s.push_back(dB / c.machines()[m].nic_Bps);
    bool over_nic = false;
    for (int p : previous) over_nic = over_nic || c.devices()[p].machine != m;
    t.ring_nic.push_back(over_nic ? 1 : 0);
  }
  return t;
}

double LinearModel::group_value(const GroupTerms& t, const SequenceGroup& g) const {
  const int n = g.size();
  const std::vector<int> kv = group_kv_heads(cost_.attention(), g.heads);
  GroupValues v;
  v.tokens = static_cast<double>(g.tokens);
  for (int i = 0; i < n; ++i) {
    v.s.push_back(static_cast<double>(g.shards[i]));
    v.h.push_back(g.heads[i]);
    v.kv.push_back(kv[i]);
  }
  const auto [a1, a2] = all_to_all(t, v);
  const double lat = n > 1 ? 2 * t.a2a_latency_s : 0.0;
  const double a2a = (2 + replay()) * (a1 + a2 + lat);
  // Ring: compute and K/V receive per device, and each machine's NIC share.
  const double others = static_cast<double>(sequence()) - v.tokens, g_ratio = grad_ratio();
  const double fwd_tokens = others, bwd_tokens = others * (1 + g_ratio) + v.tokens * g_ratio;
  double rf = 0, rb = 0;
  for (int i = 0; i < n; ++i) {
    const DeviceTerms& d = t.devices[i];
    rf = std::max({rf, d.attention_s * v.tokens * v.h[i], fwd_tokens * v.kv[i] * t.ring_s[i]});
    rb = std::max(
        {rb, d.attention_backward_s * v.tokens * v.h[i], bwd_tokens * v.kv[i] * t.ring_s[i]});
  }
  for (std::size_t m = 0; m < t.machines.size(); ++m) {
    if (!t.ring_nic[m]) continue;
    double kv_sum = 0;
    for (int i = 0; i < n; ++i) kv_sum += t.devices[i].machine == t.machines[m] ? v.kv[i] : 0;
    rf = std::max(rf, fwd_tokens * kv_sum * 2 * t.nic_s[m]);
    rb = std::max(rb, bwd_tokens * kv_sum * 2 * t.nic_s[m]);
  }
  const double ring = (1 + replay()) * rf + rb;
  double slowest = 0;
  for (int i = 0; i < n; ++i) {
    const DeviceTerms& d = t.devices[i];
    slowest = std::max(slowest, d.token_fixed_s + d.token_s * v.s[i] + a2a + ring);
  }
  return slowest;
}

double LinearModel::value(const SequenceLayout& layout) const {
  const int p = static_cast<int>(layout.groups.size());
  double slowest = 0;
  for (int g = 0; g < p; ++g) {
    const std::vector<int> previous =
        p > 1 ? layout.groups[(g + p - 1) % p].devices : std::vector<int>{};
    slowest =
        std::max(slowest, group_value(group(layout.groups[g].devices, previous), layout.groups[g]));
  }
  return slowest;
}

double LinearModel::memory_excess(const SequenceLayout& layout) const {
  std::int64_t block = 0;
  for (const auto& g : layout.groups) block = std::max(block, g.tokens);
  if (layout.groups.size() <= 1) block = 0;
  double worst = -std::numeric_limits<double>::infinity();
  for (const auto& g : layout.groups) {
    const std::vector<int> kv = group_kv_heads(cost_.attention(), g.heads);
    for (int i = 0; i < g.size(); ++i) {
      const DeviceTerms d = device(g.devices[i]);
      const double used =
          d.memory_fixed + d.memory_token * static_cast<double>(g.shards[i]) +
          memory_ulysses_ * static_cast<double>(g.tokens) * (2 * g.heads[i] + 2 * kv[i]) +
          memory_ring_ * static_cast<double>(block) * kv[i];
      worst = std::max(worst, used - d.memory_limit);
    }
  }
  return worst;
}

}  // namespace hexiseq
}  // namespace hexi
