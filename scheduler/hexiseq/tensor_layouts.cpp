#include "scheduler/hexiseq/tensor_layouts.hpp"

#include <chrono>
#include <numeric>
#include <string>

#include "scheduler/hexiseq/groupings.hpp"

namespace hexi {
inline namespace hexiseq {
namespace {

// Groups of `t` consecutive devices of every domain; empty when t does not divide one.
std::vector<std::vector<int>> cut_domains(const std::vector<std::vector<int>>& domains, int t) {
  std::vector<std::vector<int>> out;
  for (const auto& d : domains) {
    if (d.size() % static_cast<std::size_t>(t) != 0) return {};
    for (std::size_t i = 0; i < d.size(); i += static_cast<std::size_t>(t)) {
      out.emplace_back(d.begin() + static_cast<std::ptrdiff_t>(i),
                       d.begin() + static_cast<std::ptrdiff_t>(i) + t);
    }
  }
  return out;
}

// S over `groups` in proportion to their dense FLOP/s, whole blocks, even shards, even heads.
std::optional<SequenceLayout> proportional_layout(const SequenceCost& cost,
                                                  const std::vector<std::vector<int>>& groups,
                                                  std::int64_t block, bool split_kv_heads) {
  std::vector<double> rate;
  for (const auto& g : groups) {
    double r = 0;
    for (int d : g) r += cost.gpu(d).flops();
    rate.push_back(r);
  }
  const double total = std::accumulate(rate.begin(), rate.end(), 0.0);
  const std::int64_t blocks = cost.training().seq_len / block;
  std::vector<double> share;
  for (double r : rate) share.push_back(static_cast<double>(blocks) * r / total);
  const std::vector<std::int64_t> counts = round_blocks(share, blocks);
  if (counts.empty()) return std::nullopt;
  SequenceLayout l;
  l.split_kv_heads = split_kv_heads;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const int t = static_cast<int>(groups[g].size());
    const std::int64_t tokens = counts[g] * block;
    l.groups.push_back(
        {groups[g], tokens, even_split(tokens, t), even_heads(cost.model().heads, t), true});
  }
  return l;
}

// One block from group `from` to `to`, each group's shards even again.
bool move_tokens(SequenceLayout& l, int from, int to, std::int64_t block) {
  SequenceGroup &a = l.groups[from], &b = l.groups[to];
  if (a.tokens <= block) return false;
  a.tokens -= block;
  b.tokens += block;
  a.shards = even_split(a.tokens, a.size());
  b.shards = even_split(b.tokens, b.size());
  return true;
}

// Moves one block at a time from the group of the layer's slowest device to the group where
// the closed form gains most, while it gains (at most 4 moves per group).
void polish(const SequenceCost& cost, SequenceLayout& layout, IterationTime& time,
            std::int64_t block, long& scored) {
  const int n = static_cast<int>(layout.groups.size());
  if (layout.groups.size() > kPolishGroups) return;
  for (int move = 0; move < 4 * n; ++move) {
    const int from = time.layer.devices[static_cast<std::size_t>(time.layer.slowest)].group;
    std::optional<SequenceLayout> next;
    for (int to = 0; to < n; ++to) {
      SequenceLayout moved = layout;
      if (to == from || !move_tokens(moved, from, to, block)) continue;
      IterationTime t = cost.iteration(moved);
      ++scored;
      if (better_time(t, time)) time = std::move(t), next = std::move(moved);
    }
    if (!next) return;
    layout = std::move(*next);
  }
}

}  // namespace

std::optional<HexiSeqResult> best_tensor_layout(const SequenceCost& cost,
                                                const std::vector<int>& devices, std::int64_t block,
                                                const HexiSeqOptions& options) {
  if (cost.training().zero_stage >= 3) return std::nullopt;
  const auto start = std::chrono::steady_clock::now();
  const Model& m = cost.model();
  const std::vector<std::vector<int>> ds = domains(cost.cluster(), devices);
  std::size_t largest = 0;
  for (const auto& d : ds) largest = std::max(largest, d.size());
  const int per_kv = m.heads / m.kv_heads;
  std::optional<HexiSeqResult> best;
  long scored = 0;
  for (int t = 2; t <= static_cast<int>(largest) && t <= m.heads; t *= 2) {
    if (m.heads % t != 0 || (!options.split_kv_heads && (m.heads / t) % per_kv != 0)) continue;
    const std::vector<std::vector<int>> groups = cut_domains(ds, t);
    if (groups.empty()) continue;
    std::optional<SequenceLayout> layout =
        proportional_layout(cost, groups, block, options.split_kv_heads);
    if (!layout) continue;
    IterationTime time = cost.iteration(*layout);
    ++scored;
    polish(cost, *layout, time, block, scored);
    if (!time.fits || (best && !better_time(time, best->time))) continue;
    best = HexiSeqResult{};
    best->layout = *layout;
    best->time = std::move(time);
    best->grouping = "tensor-parallel groups of " + std::to_string(t);
  }
  if (best) {
    best->candidates = scored;
    best->search_time_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return best;
}

}  // namespace hexiseq
}  // namespace hexi
