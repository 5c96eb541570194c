#include "scheduler/baselines/sequence.hpp"

#include <algorithm>
#include <numeric>
#include <set>

namespace hexi {
inline namespace baselines {
namespace {

std::vector<int> all_devices(const SequenceCost& cost, std::vector<int> devices) {
  if (devices.empty()) {
    for (int d = 0; d < cost.cluster().num_devices(); ++d) devices.push_back(d);
  }
  std::sort(devices.begin(), devices.end());
  return devices;
}

// Groups of `u` consecutive devices (contiguous ranks: inside machines where u allows).
std::vector<std::vector<int>> contiguous(const std::vector<int>& devices, int u) {
  std::vector<std::vector<int>> groups;
  for (std::size_t first = 0; first < devices.size(); first += u) {
    groups.emplace_back(devices.begin() + first, devices.begin() + first + u);
  }
  return groups;
}

// Groups of `u` devices dealt round-robin: group g holds devices g, g + r, g + 2r, ...
std::vector<std::vector<int>> dealt(const std::vector<int>& devices, int u) {
  const int r = static_cast<int>(devices.size()) / u;
  std::vector<std::vector<int>> groups(r);
  for (int i = 0; i < static_cast<int>(devices.size()); ++i) groups[i % r].push_back(devices[i]);
  return groups;
}

bool has_empty_group(const SequenceLayout& l) {
  return std::any_of(l.groups.begin(), l.groups.end(),
                     [](const SequenceGroup& g) { return g.tokens <= 0; });
}

// The configurations one baseline tries on one device set, the best kept.
class Configurations {
 public:
  // `kv`: the degrees must divide the kv heads too (said in the error).
  Configurations(const SequenceCost& cost, std::string who, bool kv = false)
      : cost_(cost), who_(std::move(who)), kv_(kv) {}

  // Scores the even layout of `groups` (ring order); skipped when a group gets no tokens.
  void offer(const std::vector<std::vector<int>>& groups, const std::string& name) {
    SequenceLayout l = even_layout(groups, cost_.training().seq_len, cost_.model().heads);
    if (has_empty_group(l)) {
      too_short_ = true;
      return;
    }
    IterationTime it = cost_.iteration(l);
    HexiSeqResult r{std::move(l), std::move(it), name, 1};
    ++tried_;
    if (better_layout(r, best_)) best_ = std::move(r);
  }

  // The best configuration, or why there is none.
  Result<HexiSeqResult> result(int devices) {
    if (!best_) {
      if (too_short_) {
        return bad_input(who_ + ": the sequence has too few tokens for " + std::to_string(devices) +
                         " devices (a group gets none)");
      }
      return bad_input(
          who_ + ": no degree divides both " + std::to_string(devices) +
          " devices and the model's " + std::to_string(cost_.model().heads) + " query heads" +
          (kv_ ? " and " + std::to_string(cost_.model().kv_heads) + " kv heads" : std::string()));
    }
    best_->candidates = tried_;
    return *best_;
  }

 private:
  const SequenceCost& cost_;
  std::string who_;
  bool kv_ = false;
  std::optional<HexiSeqResult> best_;
  long tried_ = 0;
  bool too_short_ = false;
};

Status check_sequence(const SequenceCost& cost, int devices, const std::string& who) {
  const std::int64_t s = cost.training().seq_len;
  if (s % 2 != 0) {
    return bad_input(who + ": the sequence length S = " + std::to_string(s) +
                     " must be even (mirrored layout)");
  }
  if (devices < 1) return bad_input(who + ": no devices");
  return {};
}

// `devices`' NVLink domains, the fastest GPUs' first (dense TFLOP/s; ties by first device).
std::vector<std::vector<int>> fastest_domains(const Cluster& cluster,
                                              const std::vector<int>& devices) {
  std::vector<std::vector<int>> out = domains(cluster, devices);
  std::stable_sort(out.begin(), out.end(), [&](const auto& a, const auto& b) {
    return cluster.gpu(a.front()).tflops > cluster.gpu(b.front()).tflops;
  });
  return out;
}

// The Ulysses degree's devices: the first `u` of the fastest machines, in id order.
std::vector<int> fastest_devices(const Cluster& cluster, const std::vector<int>& devices, int u) {
  std::vector<int> out;
  for (const auto& d : fastest_domains(cluster, devices)) {
    for (int dev : d) {
      if (static_cast<int>(out.size()) < u) out.push_back(dev);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// One baseline over `devices` (sorted): `on(subset, every_degree)` tries its configurations
// on a device set. With idle_slow_types, every subset of baseline_subsets() too, the best kept
// (its subset named in the grouping); otherwise every device, the largest degrees only where
// a degree decides how many devices take part.
template <class On>
Result<HexiSeqResult> baseline(const SequenceCost& cost, std::vector<int> devices,
                               const HexiSeqOptions& options, const std::string& who, On on) {
  devices = all_devices(cost, std::move(devices));
  const int p = static_cast<int>(devices.size());
  if (auto st = check_sequence(cost, p, who); !st) return st.error();
  if (!options.idle_slow_types) return on(devices, false);
  std::optional<HexiSeqResult> best;
  std::optional<Error> whole;  // why no configuration over every device is legal
  long tried = 0;
  for (const DeviceSubset& s : baseline_subsets(cost.cluster(), devices)) {
    auto r = on(s.devices, true);
    if (!r) {
      if (static_cast<int>(s.devices.size()) == p) whole = r.error();
      continue;
    }
    tried += r->candidates;
    const int used = r->layout.num_devices();
    r->grouping += "; " + (used == static_cast<int>(s.devices.size())
                               ? s.name
                               : "the fastest " + std::to_string(used) + " of " + s.name);
    if (better_layout(*r, best)) best = std::move(*r);
  }
  if (!best) return *whole;  // every subset failed, the whole set (the first) among them
  best->candidates = tried;
  return *best;
}

// Every factorisation u x r of the devices with u dividing the query heads (and the kv heads
// when `kv` is set), Ulysses groups placed by `contiguous` and / or `dealt`.
Result<HexiSeqResult> factorisations(const SequenceCost& cost, const std::vector<int>& devices,
                                     const std::string& who, bool kv, bool consecutive,
                                     bool round_robin) {
  Configurations c(cost, who, kv);
  const int p = static_cast<int>(devices.size());
  for (int u : divisors(p)) {
    if (cost.model().heads % u != 0 || (kv && cost.model().kv_heads % u != 0)) continue;
    const std::string name = (kv ? "a2a " : "ulysses ") + std::to_string(u) +
                             (kv ? " x p2p " : " x ring ") + std::to_string(p / u);
    if (consecutive) c.offer(contiguous(devices, u), name);
    // Dealt differs from consecutive only with several groups of several devices.
    if (round_robin && (!consecutive || (u > 1 && u < p)))
      c.offer(dealt(devices, u), name + ", round-robin");
  }
  return c.result(p);
}

}  // namespace

std::vector<DeviceSubset> baseline_subsets(const Cluster& cluster,
                                           const std::vector<int>& devices) {
  std::vector<DeviceSubset> out;
  std::set<std::vector<int>> seen;
  const auto add = [&](std::string name, std::vector<int> d) {
    std::sort(d.begin(), d.end());
    if (!d.empty() && seen.insert(d).second) out.push_back({std::move(name), std::move(d)});
  };
  add("all " + std::to_string(devices.size()) + " GPUs", devices);
  std::vector<std::string> types;
  for (int d : devices) {
    if (std::find(types.begin(), types.end(), cluster.gpu(d).name) == types.end()) {
      types.push_back(cluster.gpu(d).name);
    }
  }
  if (types.size() > 1) {
    for (const auto& t : types) {
      std::vector<int> of_type;
      for (int d : devices) {
        if (cluster.gpu(d).name == t) of_type.push_back(d);
      }
      add(t + " only (" + std::to_string(of_type.size()) + " GPUs)", of_type);
    }
  }
  const auto machines = fastest_domains(cluster, devices);
  std::vector<int> prefix;
  for (std::size_t k = 0; k + 1 < machines.size(); ++k) {
    prefix.insert(prefix.end(), machines[k].begin(), machines[k].end());
    add("the fastest " + std::to_string(k + 1) + " machine" + (k == 0 ? "" : "s") + " (" +
            std::to_string(prefix.size()) + " GPUs)",
        prefix);
  }
  return out;
}

Result<HexiSeqResult> run_ring(const SequenceCost& cost, std::vector<int> devices,
                               const HexiSeqOptions& options) {
  return baseline(cost, std::move(devices), options, "ring", [&](const std::vector<int>& d, bool) {
    Configurations c(cost, "ring");
    c.offer(contiguous(d, 1), "ring " + std::to_string(d.size()));
    return c.result(static_cast<int>(d.size()));
  });
}

Result<HexiSeqResult> run_ulysses(const SequenceCost& cost, std::vector<int> devices,
                                  const HexiSeqOptions& options) {
  // DeepSpeed-Ulysses: the degree divides the query heads; the rest of the devices idle.
  return baseline(cost, std::move(devices), options, "ulysses",
                  [&](const std::vector<int>& d, bool every_degree) {
                    Configurations c(cost, "ulysses");
                    for (int u = static_cast<int>(d.size()); u >= 1; --u) {
                      if (cost.model().heads % u != 0) continue;
                      c.offer({fastest_devices(cost.cluster(), d, u)},
                              "ulysses " + std::to_string(u));
                      if (!every_degree) break;
                    }
                    return c.result(static_cast<int>(d.size()));
                  });
}

Result<HexiSeqResult> run_usp(const SequenceCost& cost, std::vector<int> devices,
                              const HexiSeqOptions& options) {
  return baseline(cost, std::move(devices), options, "usp", [&](const std::vector<int>& d, bool) {
    return factorisations(cost, d, "usp", false, true, true);
  });
}

Result<HexiSeqResult> run_megatron_cp(const SequenceCost& cost, std::vector<int> devices,
                                      const HexiSeqOptions& options) {
  // hierarchical_context_parallel_sizes[0], the a2a degree, divides the query and the kv
  // heads (TransformerEngine's rule); a2a groups on consecutive ranks.
  return baseline(cost, std::move(devices), options, "megatron-cp",
                  [&](const std::vector<int>& d, bool) {
                    return factorisations(cost, d, "megatron-cp", true, true, false);
                  });
}

Result<HexiSeqResult> run_hexiseq_homogeneous(const SequenceCost& cost, std::vector<int> devices,
                                              const HexiSeqOptions& options) {
  HexiSeqOptions homogeneous = options;
  homogeneous.identical_devices = true;
  return run_hexiseq(cost, std::move(devices), homogeneous);
}

Result<HexiSeqResult> run_round_robin(const SequenceCost& cost, std::vector<int> devices,
                                      const HexiSeqOptions& options) {
  return baseline(cost, std::move(devices), options, "round-robin",
                  [&](const std::vector<int>& d, bool) {
                    return factorisations(cost, d, "round-robin", false, false, true);
                  });
}

}  // namespace baselines
}  // namespace hexi
