#include "scheduler/hexiseq/groupings.hpp"

#include <algorithm>
#include <set>

namespace hexi {
inline namespace hexiseq {
namespace {

int domain_type(const Cluster& c, const std::vector<int>& domain) {
  return c.devices()[domain.front()].gpu_type;
}

std::string join(const std::vector<int>& v, const char* sep) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + std::to_string(v[i]);
  return out;
}

// Every set partition of `items` (restricted growth strings), each as its blocks.
void set_partitions(const std::vector<int>& items, std::size_t at,
                    std::vector<std::vector<int>>& blocks,
                    std::vector<std::vector<std::vector<int>>>& out, std::size_t limit) {
  if (out.size() > limit) return;
  if (at == items.size()) {
    out.push_back(blocks);
    return;
  }
  for (std::size_t b = 0; b <= blocks.size(); ++b) {
    if (b == blocks.size()) blocks.push_back({});
    blocks[b].push_back(items[at]);
    set_partitions(items, at + 1, blocks, out, limit);
    blocks[b].pop_back();
    if (blocks[b].empty()) blocks.pop_back();
  }
}

// Every size vector (one divisor per domain), odometer order; none when there are more than
// `limit`.
std::vector<std::vector<int>> size_choices(const std::vector<std::vector<int>>& ds,
                                           std::size_t limit) {
  std::vector<std::vector<int>> out{{}};
  for (const auto& d : ds) {
    std::vector<std::vector<int>> next;
    for (const auto& prefix : out) {
      for (int k : divisors(static_cast<int>(d.size()))) {
        next.push_back(prefix);
        next.back().push_back(k);
        if (next.size() > limit) return {};  // too many: the caller gives up on the family
      }
    }
    out = std::move(next);
  }
  return out;
}

}  // namespace

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int k = 1; k <= n; ++k) {
    if (n % k == 0) out.push_back(k);
  }
  return out;
}

bool whole_domains(const Grouping& g, const std::vector<std::vector<int>>& domains) {
  for (const auto& group : g.groups) {
    for (const auto& d : domains) {
      const auto in = std::count_if(d.begin(), d.end(), [&](int x) {
        return std::find(group.begin(), group.end(), x) != group.end();
      });
      if (in != 0 && in != static_cast<long>(d.size())) return false;
    }
  }
  return true;
}

std::vector<std::vector<int>> domains(const Cluster& cluster, const std::vector<int>& devices) {
  std::map<std::pair<int, int>, std::vector<int>> by_domain;  // (machine, socket) -> devices
  for (int d : devices) {
    const Device& dev = cluster.devices()[d];
    const Machine& m = cluster.machines()[dev.machine];
    const int socket = m.intra_kind == IntraKind::kNvSwitch ? 0 : m.socket_of(dev.local);
    by_domain[{dev.machine, socket}].push_back(d);
  }
  std::vector<std::vector<int>> out;
  for (auto& [key, ds] : by_domain) {
    std::sort(ds.begin(), ds.end());
    out.push_back(ds);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Grouping make_grouping(const std::vector<std::vector<int>>& ds, const std::vector<int>& size,
                       const std::vector<std::vector<int>>& merges) {
  Grouping g;
  std::set<int> merged;
  for (const auto& m : merges) {
    if (m.size() < 2) continue;
    std::vector<int> group;
    for (int d : m) {
      merged.insert(d);
      group.insert(group.end(), ds[d].begin(), ds[d].end());
    }
    std::sort(group.begin(), group.end());
    g.groups.push_back(group);
    g.name += (g.name.empty() ? "merge " : ", ") + join(m, "+");
  }
  std::vector<int> sizes;
  for (std::size_t d = 0; d < ds.size(); ++d) {
    if (merged.count(static_cast<int>(d))) continue;
    const int n = static_cast<int>(ds[d].size());
    const int k = std::clamp(size[d], 1, n);
    sizes.push_back(k);
    for (int first = 0; first < n; first += k) {
      g.groups.emplace_back(ds[d].begin() + first, ds[d].begin() + std::min(n, first + k));
    }
  }
  std::sort(g.groups.begin(), g.groups.end());
  const bool uniform =
      std::adjacent_find(sizes.begin(), sizes.end(), std::not_equal_to<>()) == sizes.end();
  const std::string sized = sizes.empty() ? ""
                            : uniform     ? "size " + std::to_string(sizes[0])
                                          : "sizes " + join(sizes, ",");
  g.name = g.name.empty() ? sized : sized.empty() ? g.name : sized + " | " + g.name;
  return g;
}

std::vector<Grouping> grouping_family(const Cluster& cluster, const std::vector<int>& devices,
                                      std::size_t limit) {
  const std::vector<std::vector<int>> ds = domains(cluster, devices);
  std::vector<Grouping> out;
  const std::vector<std::vector<int>> choices = size_choices(ds, limit);
  if (choices.empty()) return {};  // more than `limit` size choices alone
  for (const auto& size : choices) {
    std::vector<int> whole;
    for (std::size_t d = 0; d < ds.size(); ++d) {
      if (size[d] == static_cast<int>(ds[d].size())) whole.push_back(static_cast<int>(d));
    }
    std::vector<std::vector<int>> blocks;
    std::vector<std::vector<std::vector<int>>> partitions;
    set_partitions(whole, 0, blocks, partitions, limit);
    for (const auto& merges : partitions) {
      out.push_back(make_grouping(ds, size, merges));
      if (out.size() > limit) return {};
    }
  }
  for (Grouping& g : dealt_groupings(devices, devices.size())) {
    const bool seen = std::any_of(out.begin(), out.end(),
                                  [&](const Grouping& o) { return o.groups == g.groups; });
    if (!seen) out.push_back(std::move(g));
    if (out.size() > limit) return {};
  }
  return out;
}

std::vector<Grouping> dealt_groupings(const std::vector<int>& devices, std::size_t largest) {
  const int p = static_cast<int>(devices.size());
  std::vector<Grouping> out;
  for (int u : divisors(p)) {
    if (u == 1 || u == p || u > static_cast<int>(largest)) continue;
    const int r = p / u;
    Grouping g{"dealt " + std::to_string(u), std::vector<std::vector<int>>(r), true};
    for (int i = 0; i < p; ++i) g.groups[i % r].push_back(devices[i]);
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<Grouping> merged_groupings(const Cluster& cluster, const std::vector<int>& devices,
                                       std::size_t largest) {
  const std::vector<std::vector<int>> ds = domains(cluster, devices);
  auto fits = [&](const std::vector<int>& merge) {
    std::size_t n = 0;
    for (int d : merge) n += ds[d].size();
    return n <= largest;
  };
  std::vector<Grouping> out;
  const std::vector<int> whole(ds.size(), static_cast<int>(devices.size()));
  std::vector<std::vector<int>> pairs;
  std::map<int, std::vector<int>> by_type;
  for (std::size_t d = 0; d < ds.size(); ++d) {
    by_type[domain_type(cluster, ds[d])].push_back(static_cast<int>(d));
    const std::vector<int> pair = {static_cast<int>(d) - 1, static_cast<int>(d)};
    if (d % 2 == 1 && domain_type(cluster, ds[d]) == domain_type(cluster, ds[d - 1]) &&
        fits(pair)) {
      pairs.push_back(pair);
    }
  }
  if (!pairs.empty()) out.push_back(make_grouping(ds, whole, pairs));
  std::vector<std::vector<int>> types;
  for (const auto& [type, members] : by_type) {
    if (fits(members)) types.push_back(members);
  }
  if (types.size() < ds.size() && !types.empty()) out.push_back(make_grouping(ds, whole, types));
  if (devices.size() <= largest && ds.size() > 1) {
    std::vector<int> all(ds.size());
    for (std::size_t d = 0; d < ds.size(); ++d) all[d] = static_cast<int>(d);
    out.push_back(make_grouping(ds, whole, {all}));
  }
  return out;
}

Grouping grouping_by_type(const Cluster& cluster, const std::vector<std::vector<int>>& ds,
                          const std::map<int, int>& size_by_type) {
  std::vector<int> size;
  for (const auto& d : ds) {
    const auto it = size_by_type.find(domain_type(cluster, d));
    size.push_back(it == size_by_type.end() ? static_cast<int>(d.size()) : it->second);
  }
  return make_grouping(ds, size);
}

}  // namespace hexiseq
}  // namespace hexi
