#include "scheduler/baselines/sequence.hpp"

#include <algorithm>
#include <numeric>

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

Status check_even(const SequenceLayout& l, const std::string& who) {
  for (const auto& g : l.groups) {
    if (g.tokens <= 0) {
      return bad_input(who + ": the sequence has too few tokens for " +
                       std::to_string(l.num_devices()) + " devices (a group gets none)");
    }
  }
  return {};
}

HexiSeqResult scored(const SequenceCost& cost, SequenceLayout layout, std::string what) {
  IterationTime it = cost.iteration(layout);
  return {std::move(layout), std::move(it), std::move(what), 1};
}

// The better of two results: fitting first, then the shorter iteration.
bool better(const HexiSeqResult& a, const std::optional<HexiSeqResult>& b) {
  if (!b) return true;
  if (a.time.fits != b->time.fits) return a.time.fits;
  return a.time.iteration_s < b->time.iteration_s;
}

// The best even layout over the Ulysses degrees `u` that `legal` allows, groups made by
// `place`.
template <class Legal, class Place>
Result<HexiSeqResult> best_factorisation(const SequenceCost& cost, const std::vector<int>& devices,
                                         const std::string& who, Legal legal, Place place) {
  const int p = static_cast<int>(devices.size());
  std::optional<HexiSeqResult> best;
  long tried = 0;
  for (int u : divisors(p)) {
    if (!legal(u)) continue;
    SequenceLayout l = even_layout(place(devices, u), cost.training().seq_len, cost.model().heads);
    if (auto st = check_even(l, who); !st) return st.error();
    HexiSeqResult r = scored(cost, std::move(l),
                             "ulysses " + std::to_string(u) + " x ring " + std::to_string(p / u));
    ++tried;
    if (better(r, best)) best = std::move(r);
  }
  if (!best) {
    return bad_input(who + ": no Ulysses degree divides both " + std::to_string(p) +
                     " devices and the model's " + std::to_string(cost.model().heads) + " heads");
  }
  best->candidates = tried;
  return *best;
}

Status check_sequence(const SequenceCost& cost, int devices, const std::string& who) {
  const std::int64_t s = cost.training().seq_len;
  if (s % 2 != 0) {
    return bad_input(who + ": the sequence length S = " + std::to_string(s) +
                     " must be even (mirrored layout)");
  }
  if (devices < 1) return bad_input(who + ": no devices");
  return {};
}

}  // namespace

Result<HexiSeqResult> run_ring(const SequenceCost& cost, std::vector<int> devices,
                               const HexiSeqOptions&) {
  devices = all_devices(cost, std::move(devices));
  if (auto st = check_sequence(cost, static_cast<int>(devices.size()), "ring"); !st) {
    return st.error();
  }
  SequenceLayout l =
      even_layout(contiguous(devices, 1), cost.training().seq_len, cost.model().heads);
  if (auto st = check_even(l, "ring"); !st) return st.error();
  return scored(cost, std::move(l), "ring " + std::to_string(devices.size()));
}

Result<HexiSeqResult> run_ulysses(const SequenceCost& cost, std::vector<int> devices,
                                  const HexiSeqOptions&) {
  devices = all_devices(cost, std::move(devices));
  if (auto st = check_sequence(cost, static_cast<int>(devices.size()), "ulysses"); !st) {
    return st.error();
  }
  int u = static_cast<int>(devices.size());
  while (cost.model().heads % u != 0) --u;  // DeepSpeed-Ulysses: heads divisible by the degree
  devices.resize(u);
  SequenceLayout l = even_layout({devices}, cost.training().seq_len, cost.model().heads);
  return scored(cost, std::move(l), "ulysses " + std::to_string(u));
}

Result<HexiSeqResult> run_usp(const SequenceCost& cost, std::vector<int> devices,
                              const HexiSeqOptions&) {
  devices = all_devices(cost, std::move(devices));
  if (auto st = check_sequence(cost, static_cast<int>(devices.size()), "usp"); !st) {
    return st.error();
  }
  const int heads = cost.model().heads;
  return best_factorisation(
      cost, devices, "usp", [&](int u) { return heads % u == 0; }, contiguous);
}

Result<HexiSeqResult> run_megatron_cp(const SequenceCost& cost, std::vector<int> devices,
                                      const HexiSeqOptions&) {
  devices = all_devices(cost, std::move(devices));
  if (auto st = check_sequence(cost, static_cast<int>(devices.size()), "megatron-cp"); !st) {
    return st.error();
  }
  // hierarchical_context_parallel_sizes[0]: the a2a degree, inside every machine, dividing
  // the query and the kv heads (TransformerEngine's rule).
  int u = cost.model().heads;
  for (const auto& d : domains(cost.cluster(), devices))
    u = std::gcd(u, static_cast<int>(d.size()));
  u = std::gcd(u, cost.model().kv_heads);
  SequenceLayout l =
      even_layout(contiguous(devices, u), cost.training().seq_len, cost.model().heads);
  if (auto st = check_even(l, "megatron-cp"); !st) return st.error();
  return scored(cost, std::move(l),
                "a2a " + std::to_string(u) + " x p2p " + std::to_string(devices.size() / u));
}

Result<HexiSeqResult> run_hexiseq_homogeneous(const SequenceCost& cost, std::vector<int> devices,
                                              const HexiSeqOptions& options) {
  HexiSeqOptions homogeneous = options;
  homogeneous.identical_devices = true;
  return run_hexiseq(cost, std::move(devices), homogeneous);
}

Result<HexiSeqResult> run_round_robin(const SequenceCost& cost, std::vector<int> devices,
                                      const HexiSeqOptions&) {
  devices = all_devices(cost, std::move(devices));
  if (auto st = check_sequence(cost, static_cast<int>(devices.size()), "round-robin"); !st) {
    return st.error();
  }
  const int heads = cost.model().heads;
  return best_factorisation(
      cost, devices, "round-robin", [&](int u) { return heads % u == 0; }, dealt);
}

}  // namespace baselines
}  // namespace hexi
