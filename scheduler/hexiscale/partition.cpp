#include "scheduler/hexiscale/partition.hpp"

#include <fcntl.h>
#include <metis.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>

namespace hexi {
inline namespace hexiscale {
namespace {

constexpr idx_t kSparseAbove = 64;         // vertices; complete graphs up to this size
constexpr std::size_t kSparseDegree = 16;  // heaviest edges kept per vertex above it

// x in (0, max] -> integer in [1, kWeightScale].
idx_t scaled(double x, double max) {
  if (max <= 0) return 1;
  return static_cast<idx_t>(
      std::clamp(std::lround(kWeightScale * x / max), 1L, static_cast<long>(kWeightScale)));
}

// metis_partition's steps. A representative device of each unit (units of one machine take
// successive devices).
std::vector<int> representatives(const Cluster& c, const std::vector<Unit>& units) {
  const idx_t n = static_cast<idx_t>(units.size());
  std::vector<int> first(n);
  std::vector<int> used(c.machines().size(), 0);
  for (idx_t i = 0; i < n; ++i) {
    const Unit& u = units[i];
    first[i] = c.machines()[u.machine].first_device + used[u.machine];
    used[u.machine] += u.count;
  }
  return first;
}

// Two constraints per vertex: TFLOP/s and memory.
std::vector<idx_t> vertex_weights(const Cluster& c, const std::vector<Unit>& units,
                                  const std::vector<int>& first) {
  const idx_t n = static_cast<idx_t>(units.size());
  double max_flops = 0, max_mem = 0;
  for (idx_t i = 0; i < n; ++i) {
    max_flops = std::max(max_flops, units[i].count * c.device_flops(first[i]));
    max_mem = std::max(max_mem, units[i].count * c.device_memory_bytes(first[i]));
  }
  std::vector<idx_t> vwgt;
  for (idx_t i = 0; i < n; ++i) {
    vwgt.push_back(scaled(units[i].count * c.device_flops(first[i]), max_flops));
    vwgt.push_back(scaled(units[i].count * c.device_memory_bytes(first[i]), max_mem));
  }
  return vwgt;
}

// A seeded hash of the pair (i, j), symmetric: an edge weight's factor in (1 - jitter, 1].
double pair_noise(std::uint64_t seed, double jitter, idx_t i, idx_t j) {
  if (jitter <= 0) return 1.0;
  std::uint64_t z = seed * 0x9e3779b97f4a7c15ULL +
                    static_cast<std::uint64_t>(std::min(i, j)) * 1000003ULL +
                    static_cast<std::uint64_t>(std::max(i, j));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return 1.0 - jitter * static_cast<double>(z >> 11) / 9007199254740992.0;  // (1 - jitter, 1]
}

using Edges = std::vector<std::vector<std::pair<idx_t, idx_t>>>;  // per vertex (neighbour, weight)

// Complete graph; edge weight from bandwidth (disconnected pairs get no edge), symmetric,
// optionally jittered by a seeded hash of the pair.
Edges bandwidth_edges(const Cluster& c, const std::vector<int>& first, CutMode mode,
                      std::uint64_t seed, double jitter) {
  const idx_t n = static_cast<idx_t>(first.size());
  double max_bw = 0, min_bw = 0;
  for (idx_t i = 0; i < n; ++i) {
    for (idx_t j = 0; j < n; ++j) {
      if (i == j) continue;
      const double bw = c.bandwidth(first[i], first[j]);
      if (bw <= 0) continue;
      max_bw = std::max(max_bw, bw);
      min_bw = min_bw == 0 ? bw : std::min(min_bw, bw);
    }
  }
  Edges edges(n);
  for (idx_t i = 0; i < n; ++i) {
    for (idx_t j = 0; j < n; ++j) {
      if (i == j) continue;
      const double bw = c.bandwidth(first[i], first[j]);
      if (bw <= 0) continue;
      const double w = mode == CutMode::kDpOnSlowLinks ? bw / max_bw : min_bw / bw;
      edges[i].emplace_back(j, scaled(w * pair_noise(seed, jitter, i, j), 1.0));
    }
  }
  return edges;
}

// Large graphs keep each vertex's kSparseDegree heaviest edges (ties: nearest ids, i.e.
// nearby machines), made symmetric: multilevel k-way on a complete graph of hundreds of
// vertices spends seconds refining cuts that carry no information on a flat network.
void sparsify(Edges& edges) {
  const idx_t n = static_cast<idx_t>(edges.size());
  std::vector<std::vector<bool>> keep(n, std::vector<bool>(n, false));
  for (idx_t i = 0; i < n; ++i) {
    auto& e = edges[i];
    std::stable_sort(e.begin(), e.end(), [&](const auto& a, const auto& b) {
      return std::make_pair(-a.second, std::abs(a.first - i)) <
             std::make_pair(-b.second, std::abs(b.first - i));
    });
    for (std::size_t k = 0; k < e.size() && k < kSparseDegree; ++k)
      keep[i][e[k].first] = keep[e[k].first][i] = true;
  }
  for (idx_t i = 0; i < n; ++i) {
    auto& e = edges[i];
    e.erase(std::remove_if(e.begin(), e.end(), [&](const auto& x) { return !keep[i][x.first]; }),
            e.end());
    std::sort(e.begin(), e.end());
  }
}

// METIS prints to standard output where its initial bisections meet an empty side ("Cannot
// bisect a graph with 0 vertices!"; it still returns a partition), which would land inside a
// command's --json answer. While any thread partitions, standard output goes to /dev/null: the
// first one in redirects it, the last one out restores it (nothing else prints during a search).
class QuietStdout {
 public:
  QuietStdout() {
    std::lock_guard<std::mutex> lock(mutex());
    if (count()++ > 0) return;
    std::fflush(stdout);
    saved() = dup(STDOUT_FILENO);
    const int null = open("/dev/null", O_WRONLY);
    if (saved() >= 0 && null >= 0) dup2(null, STDOUT_FILENO);
    if (null >= 0) close(null);
  }
  ~QuietStdout() {
    std::lock_guard<std::mutex> lock(mutex());
    if (--count() > 0) return;
    std::fflush(stdout);
    if (saved() >= 0) {
      dup2(saved(), STDOUT_FILENO);
      close(saved());
    }
  }
  QuietStdout(const QuietStdout&) = delete;
  QuietStdout& operator=(const QuietStdout&) = delete;

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static int& count() {
    static int n = 0;
    return n;
  }
  static int& saved() {
    static int fd = -1;
    return fd;
  }
};

// METIS's k-way partition of the graph into `parts` under both constraints (5 % imbalance):
// each vertex's part, or nothing where METIS fails.
std::optional<std::vector<idx_t>> metis_kway(std::vector<idx_t> vwgt, const Edges& edges, int parts,
                                             std::uint64_t seed) {
  idx_t n = static_cast<idx_t>(edges.size());
  std::vector<idx_t> xadj{0}, adjncy, adjwgt;
  for (idx_t i = 0; i < n; ++i) {
    for (auto [j, w] : edges[i]) {
      adjncy.push_back(j);
      adjwgt.push_back(w);
    }
    xadj.push_back(static_cast<idx_t>(adjncy.size()));
  }
  idx_t ncon = 2, nparts = parts, objval = 0;
  std::vector<real_t> ubvec(2, 1.05f);
  idx_t options[METIS_NOPTIONS];
  METIS_SetDefaultOptions(options);
  options[METIS_OPTION_SEED] = static_cast<idx_t>(seed % 1000000007ULL);
  options[METIS_OPTION_NUMBERING] = 0;
  std::vector<idx_t> part(n, 0);
  QuietStdout quiet;
  const int rc = METIS_PartGraphKway(&n, &ncon, xadj.data(), adjncy.data(), vwgt.data(), nullptr,
                                     adjwgt.data(), &nparts, nullptr, ubvec.data(), options,
                                     &objval, part.data());
  if (rc != METIS_OK) return std::nullopt;
  return part;
}

}  // namespace

std::vector<Unit> make_units(const Cluster& cluster, bool per_machine) {
  std::vector<Unit> units;
  for (std::size_t m = 0; m < cluster.machines().size(); ++m) {
    const int n = cluster.machines()[m].num_gpus;
    if (per_machine) {
      units.push_back({static_cast<int>(m), n});
    } else {
      for (int g = 0; g < n; ++g) units.push_back({static_cast<int>(m), 1});
    }
  }
  return units;
}

std::vector<int> metis_partition(const Cluster& c, const std::vector<Unit>& units, int parts,
                                 CutMode mode, std::uint64_t seed, double jitter) {
  const idx_t n = static_cast<idx_t>(units.size());
  std::vector<int> out(units.size(), 0);
  if (parts <= 1 || n <= 1) return out;
  if (parts >= n) {
    for (idx_t i = 0; i < n; ++i) out[i] = static_cast<int>(i % parts);
    return out;
  }
  const std::vector<int> first = representatives(c, units);
  Edges edges = bandwidth_edges(c, first, mode, seed, jitter);
  if (n > kSparseAbove) sparsify(edges);
  const auto part = metis_kway(vertex_weights(c, units, first), edges, parts, seed);
  if (!part) return out;
  for (idx_t i = 0; i < n; ++i) out[i] = static_cast<int>((*part)[i]);
  return out;
}

std::vector<int> spread_partition(const std::vector<Unit>& units, int parts) {
  // Units are dealt round-robin in id order, across machine boundaries, so every
  // machine's devices spread evenly and remainders land on different parts.
  std::vector<int> out(units.size(), 0);
  if (parts <= 1) return out;
  for (std::size_t i = 0; i < units.size(); ++i) out[i] = static_cast<int>(i % parts);
  return out;
}

std::vector<int> packed_partition(const Cluster& c, const std::vector<Unit>& units, int parts) {
  std::vector<int> out(units.size(), 0);
  if (parts <= 1) return out;
  // Machines by TFLOP/s, largest first, each to the part with the least so far.
  std::map<int, std::vector<int>> by_machine;
  for (std::size_t i = 0; i < units.size(); ++i)
    by_machine[units[i].machine].push_back(static_cast<int>(i));
  std::vector<std::pair<double, int>> order;
  for (const auto& [m, _] : by_machine) {
    const Machine& mm = c.machines()[m];
    order.emplace_back(mm.num_gpus * c.gpu_types()[mm.gpu_type].flops(), m);
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<double> load(parts, 0);
  for (const auto& [flops, m] : order) {
    const int p = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    load[p] += flops;
    for (int i : by_machine[m]) out[i] = p;
  }
  return out;
}

std::vector<int> mixed_partition(const Cluster& c, const std::vector<Unit>& units, int parts,
                                 int block) {
  std::vector<int> out(units.size(), 0);
  if (parts <= 1) return out;
  std::map<int, int> machines_of_type;
  for (const Machine& m : c.machines()) ++machines_of_type[m.gpu_type];
  std::map<int, int> seen_of_type;  // whole machines handed out so far, per type
  std::map<int, int> part_of;       // machine -> part, for whole machines
  int next = 0;                     // round-robin counter for the other devices
  for (std::size_t i = 0; i < units.size(); ++i) {
    const int m = units[i].machine;
    const int type = c.machines()[m].gpu_type;
    if (machines_of_type[type] >= parts) {
      auto it = part_of.find(m);
      if (it == part_of.end()) it = part_of.emplace(m, seen_of_type[type]++ % parts).first;
      out[i] = it->second;
    } else {
      out[i] = (next++ / std::max(1, block)) % parts;
    }
  }
  return out;
}

}  // namespace hexiscale
}  // namespace hexi
