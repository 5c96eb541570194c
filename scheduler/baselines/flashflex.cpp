// The `flashflex` baseline: the reference implementation of HexiScale (GitHub
// Relaxed-System-Lab/FlashFlex, experimental/main.py and partitioner.py), step by
// step, choosing by its own cost model (flashflex.hpp); the chosen plan is
// then evaluated by hexisim's cost model like every other plan.
//
// Kept from the reference, including its quirks (each marked "as the reference"):
//   * phase 1: METIS (contiguous parts) over the complete graph with vertex weight
//     TFLOP/s and edge weight round(1e10 / bandwidth) (fast links collapse to the
//     smallest weight); D moves by a random +-1 step in [n/L + 1, n/5]; 40 iterations;
//   * phase 2: each pipeline is METIS-partitioned (edge weight = bandwidth) into
//     K = 1 + Binomial(2, 0.2) groups; groups are ordered by its top-3 path search
//     over summed inter-group bandwidth (the path with the lexicographically largest
//     node list per start, then the start whose path has the *smallest* weight, and
//     groups sorted by path[group index]); per group and machine a TP/PP menu
//     (8 GPUs: [8], [4,4], [4,2,2]) picked by its pipeline cost;
//   * layers in proportion to stage memory (its quota loop), rejected if its memory
//     model says out of memory; the batch split evenly.
// {"random_partition": true} is the reference's --apply_random_strategy (the
// paper's "random graph partition" baseline with the reference's phase 2).
// Deviations, all needed to run it here: weights scaled into Debian METIS's 32-bit
// integers (bandwidth in MB/s, TFLOP/s rounded); our seeded generator instead of
// NumPy's; machines of a group taken in ascending id order (Python set order for
// small ids); stages it leaves with 0 layers are dropped (their GPUs idle); its
// micro-batch count follows D (the reference fixes it at start-up).
#include <metis.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "scheduler/baselines/baselines.hpp"
#include "scheduler/baselines/flashflex.hpp"
#include "scheduler/baselines/util.hpp"
#include "scheduler/hexiscale/hexiscale.hpp"
#include "scheduler/search/batch_split.hpp"
#include "scheduler/search/plan_space.hpp"

namespace hexi {
inline namespace baselines {
namespace {

using flashflex::FfConfig;
using flashflex::FfCost;
using flashflex::FfPipeline;

struct FfOptions {
  int iterations = 40;            // niter
  int initial_pipelines = 2;      // --npipeline of the reference's run_scheduling.sh
  bool random_partition = false;  // --apply_random_strategy: random parts instead of METIS
};

// A weighted graph over some devices (dense; node i is device nodes[i]).
struct Graph {
  std::vector<int> nodes;
  std::vector<idx_t> vweight;
  std::vector<std::vector<idx_t>> eweight;  // [i][j], 0 on the diagonal
};

Graph full_graph(const Cluster& c, bool reverse) {
  Graph g;
  const int n = c.num_devices();
  for (int d = 0; d < n; ++d) {
    g.nodes.push_back(d);
    g.vweight.push_back(std::max<idx_t>(1, static_cast<idx_t>(std::lround(c.gpu(d).tflops))));
  }
  g.eweight.assign(n, std::vector<idx_t>(n, 0));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      const double bw = c.bandwidth(i, j);
      const double w = reverse ? 1e10 / bw : bw / 1e6;  // reverse: as the reference; else MB/s
      g.eweight[i][j] = std::clamp<idx_t>(static_cast<idx_t>(std::lround(w)), 1, 1 << 30);
    }
  }
  return g;
}

Graph subgraph(const Graph& g, const std::vector<int>& members) {  // members: indices into g
  Graph s;
  for (int i : members) {
    s.nodes.push_back(g.nodes[i]);
    s.vweight.push_back(g.vweight[i]);
  }
  s.eweight.assign(members.size(), std::vector<idx_t>(members.size(), 0));
  for (std::size_t a = 0; a < members.size(); ++a) {
    for (std::size_t b = 0; b < members.size(); ++b)
      s.eweight[a][b] = g.eweight[members[a]][members[b]];
  }
  return s;
}

// partitioner(): METIS k-way with contiguous parts; missing part ids relabelled.
std::vector<int> partitioner(const Graph& g, int parts) {
  idx_t n = static_cast<idx_t>(g.nodes.size());
  parts = std::min<int>(parts, static_cast<int>(n));
  std::vector<int> out(n, 0);
  if (parts <= 1) return out;
  std::vector<idx_t> xadj{0}, adjncy, adjwgt, vwgt = g.vweight;
  for (idx_t i = 0; i < n; ++i) {
    for (idx_t j = 0; j < n; ++j) {
      if (i == j) continue;
      adjncy.push_back(j);
      adjwgt.push_back(g.eweight[i][j]);
    }
    xadj.push_back(static_cast<idx_t>(adjncy.size()));
  }
  idx_t ncon = 1, nparts = parts, objval = 0;
  idx_t options[METIS_NOPTIONS];
  METIS_SetDefaultOptions(options);
  options[METIS_OPTION_CONTIG] = 1;
  std::vector<idx_t> part(n, 0);
  if (METIS_PartGraphKway(&n, &ncon, xadj.data(), adjncy.data(), vwgt.data(), nullptr,
                          adjwgt.data(), &nparts, nullptr, nullptr, options, &objval,
                          part.data()) != METIS_OK) {
    return out;
  }
  std::vector<int> ids(part.begin(), part.end()), uniq = ids;
  std::sort(uniq.begin(), uniq.end());
  uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
  for (idx_t i = 0; i < n; ++i) {
    out[i] = static_cast<int>(std::lower_bound(uniq.begin(), uniq.end(), ids[i]) - uniq.begin());
  }
  return out;
}

// get_stage_order() on the merged group graph (summed bandwidth between groups).
std::vector<int> stage_order(const std::vector<std::vector<double>>& w, int kway) {
  const int g = static_cast<int>(w.size());
  if (g <= 1) return {0};
  kway = std::min(kway, g - 1);
  std::vector<int> best_path;
  double best_weight = std::numeric_limits<double>::infinity();
  for (int start = 0; start < g; ++start) {
    // optimal_path_given_start: every selection sequence in kway^(g-1); as the
    // reference, the path kept is the lexicographically largest node list.
    std::vector<int> top_path;
    double top_weight = 0;
    std::vector<int> sel(g - 1, 0);
    for (;;) {
      std::vector<int> path{start};
      double weight = 0;
      int next = start;
      for (int step = 0; step < g - 1; ++step) {
        std::vector<int> adj;  // all other nodes, in index order
        std::vector<double> cw;
        for (int j = 0; j < g; ++j) {
          if (j == next) continue;
          adj.push_back(j);
          cw.push_back(std::find(path.begin(), path.end(), j) == path.end() ? w[next][j] : 0.0);
        }
        // argsort(...)[::-1]: descending, ties with the higher index first.
        std::vector<int> rank(adj.size());
        std::iota(rank.begin(), rank.end(), 0);
        std::stable_sort(rank.begin(), rank.end(), [&](int a, int b) { return cw[a] < cw[b]; });
        std::reverse(rank.begin(), rank.end());
        int pick = rank[sel[step]];
        for (std::size_t off = 1; cw[pick] == 0 && off <= cw.size(); ++off) {
          pick = rank[(sel[step] + off) % rank.size()];
        }
        next = adj[pick];
        weight += cw[pick];
        path.push_back(next);
      }
      if (top_path.empty() || path > top_path) {
        top_path = path;
        top_weight = weight;
      }
      int i = 0;
      while (i < g - 1 && ++sel[i] == kway) sel[i++] = 0;
      if (i == g - 1) break;
    }
    if (top_weight < best_weight) {  // argsort(cumulated)[0]: the smallest, as the reference
      best_weight = top_weight;
      best_path = top_path;
    }
  }
  return best_path;
}

// get_considered_stragegies(): TP/PP menus by GPU count (TP enabled).
const std::vector<std::vector<int>>& menu(int gpus) {
  static const std::map<int, std::vector<std::vector<int>>> menus = {{1, {{1}}},
                                                                     {2, {{2}, {1, 1}}},
                                                                     {3, {{2, 1}, {1, 1, 1}}},
                                                                     {4, {{4}, {2, 2}, {2, 1, 1}}},
                                                                     {5, {{4, 1}, {2, 2, 1}}},
                                                                     {6, {{4, 2}, {2, 2, 2}}},
                                                                     {7, {{4, 2, 1}, {2, 2, 2, 1}}},
                                                                     {8, {{8}, {4, 4}, {4, 2, 2}}}};
  static const std::vector<std::vector<int>> ones;
  auto it = menus.find(gpus);
  return it == menus.end() ? ones : it->second;
}

// create_layer_partition(): its quota loop, in proportion to stage memory.
std::vector<int> memory_quota(const FfCost& cost, const std::vector<std::vector<int>>& stages,
                              int layers) {
  const int n = static_cast<int>(stages.size());
  std::vector<double> mem;
  for (const auto& s : stages) mem.push_back(cost.stage_memory_gb(s));
  const double total = std::accumulate(mem.begin(), mem.end(), 0.0);
  std::vector<int> ranking(n);  // argsort(memories)[::-1]
  std::iota(ranking.begin(), ranking.end(), 0);
  std::stable_sort(ranking.begin(), ranking.end(), [&](int a, int b) { return mem[a] < mem[b]; });
  std::reverse(ranking.begin(), ranking.end());
  std::vector<int> quota(n, 0);
  std::vector<bool> over(n, false);
  int i = 0, left = layers, rank_ptr = 0;
  while (left > 0) {
    const int s = i % n;
    over[s] = static_cast<double>(quota[s] + 1) / layers > mem[s] / total;
    const int count = static_cast<int>(std::count(over.begin(), over.end(), true));
    if (count != n && over[s]) {
      ++i;
    } else if (count == n) {
      ++quota[ranking[rank_ptr++ % n] % n];
      --left;
      ++i;
    } else {
      ++quota[s];
      --left;
      ++i;
    }
  }
  return quota;
}

class FlashFlex {
 public:
  FlashFlex(const Scenario& sc, const FfOptions& o, std::uint64_t seed)
      : sc_(sc),
        c_(sc.cluster),
        opt_(o),
        state_(seed),
        g_(full_graph(c_, false)),
        grev_(full_graph(c_, true)) {}

  // One candidate per iteration: its pipelines (nullopt when one is out of memory).
  std::vector<std::optional<std::vector<FfPipeline>>> run(std::vector<double>& throughput,
                                                          std::vector<int>& ds);

 private:
  double uniform() { return static_cast<double>(next_random(state_) >> 11) / 9007199254740992.0; }
  std::optional<FfPipeline> build_pipeline(const std::vector<int>& members, int k,
                                           const FfCost& cost);
  std::vector<std::vector<int>> tp_pp_tradeoff(const std::vector<std::vector<int>>& groups,
                                               const FfCost& cost);

  const Scenario& sc_;
  const Cluster& c_;
  FfOptions opt_;
  std::uint64_t state_;
  Graph g_, grev_;
};

std::vector<std::vector<int>> FlashFlex::tp_pp_tradeoff(const std::vector<std::vector<int>>& groups,
                                                        const FfCost& cost) {
  std::vector<std::vector<int>> stages;
  const int L = sc_.model.layers;
  for (const auto& group : groups) {
    // Per machine of the group (ascending), its devices and its menu.
    std::map<int, std::vector<int>> by_machine;
    for (int d : group) by_machine[c_.devices()[d].machine].push_back(d);
    for (const auto& [_, devs] : by_machine) {
      const auto& options = menu(static_cast<int>(devs.size()));
      std::vector<int> chosen(devs.size(), 1);  // more than 8 GPUs: no menu, all TP 1
      double best = std::numeric_limits<double>::infinity();
      for (const auto& option : options) {
        FfPipeline trial;
        std::size_t at = 0;
        const int sum = std::accumulate(option.begin(), option.end(), 0);
        for (int size : option) {
          trial.stages.emplace_back(devs.begin() + at, devs.begin() + at + size);
          trial.layers.push_back(L * size / sum);  // "fake layer partition"
          at += size;
        }
        trial.layers.back() -= std::accumulate(trial.layers.begin(), trial.layers.end(), 0) - L;
        const double t = cost.pipeline_cost(trial);
        if (best > t) {
          best = t;
          chosen = option;
        }
      }
      std::size_t at = 0;
      for (int size : chosen) {
        stages.emplace_back(devs.begin() + at, devs.begin() + at + size);
        at += size;
      }
    }
  }
  return stages;
}

std::optional<FfPipeline> FlashFlex::build_pipeline(const std::vector<int>& members, int k,
                                                    const FfCost& cost) {
  const Graph sub = subgraph(g_, members);
  const std::vector<int> sub_parts = partitioner(sub, k);
  const int groups = *std::max_element(sub_parts.begin(), sub_parts.end()) + 1;
  std::vector<std::vector<int>> recovered(groups);  // device ids per group
  for (std::size_t i = 0; i < sub_parts.size(); ++i)
    recovered[sub_parts[i]].push_back(sub.nodes[i]);
  std::vector<std::vector<double>> merged(groups, std::vector<double>(groups, 0));
  for (std::size_t a = 0; a < sub_parts.size(); ++a) {
    for (std::size_t b = 0; b < sub_parts.size(); ++b) {
      if (sub_parts[a] != sub_parts[b])
        merged[sub_parts[a]][sub_parts[b]] += static_cast<double>(sub.eweight[a][b]);
    }
  }
  const std::vector<int> path = stage_order(merged, 3);
  // gen_strategy(): groups sorted by path[group index], as the reference.
  std::vector<int> order(groups);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    auto key = [&](int x) { return x < static_cast<int>(path.size()) ? path[x] : x; };
    return key(a) < key(b);
  });
  std::vector<std::vector<int>> sorted_groups;
  for (int o : order) sorted_groups.push_back(recovered[o]);
  FfPipeline p;
  p.stages = tp_pp_tradeoff(sorted_groups, cost);
  p.layers = memory_quota(cost, p.stages, sc_.model.layers);
  const int n = static_cast<int>(p.stages.size());
  for (int s = 0; s < n; ++s) {
    if (cost.out_of_memory(p.stages[s], p.layers[s], s == 0, s == n - 1)) return std::nullopt;
  }
  return p;
}

std::vector<std::optional<std::vector<FfPipeline>>> FlashFlex::run(std::vector<double>& throughput,
                                                                   std::vector<int>& ds) {
  const int n = c_.num_devices(), L = sc_.model.layers;
  const int micro = sc_.training.global_batch / sc_.training.micro_batch;
  const int lo = n / L + 1, hi = n / 5;
  auto clamp_d = [&](int d) { return std::clamp(d, 1, std::min(n, micro)); };
  int d = clamp_d(std::min(std::max(opt_.initial_pipelines, lo), std::max(hi, lo)));
  std::vector<std::optional<std::vector<FfPipeline>>> out;
  for (int it = 0; it < opt_.iterations; ++it) {
    // K = Binomial(2, 0.2) + 1 groups per pipeline, drawn before the partition.
    std::vector<int> k(d);
    for (auto& x : k) x = 1 + (uniform() < 0.2) + (uniform() < 0.2);
    std::vector<int> parts = partitioner(grev_, d);
    if (opt_.random_partition) {
      // np.random.randint(0, npipeline, size=n); empty parts dropped (relabelled).
      std::vector<int> raw(n), id(d, -1);
      for (auto& r : raw) r = static_cast<int>(next_random(state_) % d);
      int next = 0;
      for (int i = 0; i < n; ++i) {
        if (id[raw[i]] < 0) id[raw[i]] = next++;
      }
      std::vector<int> rank(d, 0);  // keep the numeric order of the surviving ids
      for (int p = 0, r = 0; p < d; ++p) {
        if (id[p] >= 0) rank[p] = r++;
      }
      for (int i = 0; i < n; ++i) parts[i] = rank[raw[i]];
    }
    const int dp = *std::max_element(parts.begin(), parts.end()) + 1;
    const FfCost cost(c_, flashflex::make_config(sc_.model, sc_.training, dp));
    std::vector<FfPipeline> pipes;
    bool oom = false;
    for (int p = 0; p < dp && !oom; ++p) {
      std::vector<int> members;
      for (int i = 0; i < n; ++i) {
        if (parts[i] == p) members.push_back(i);
      }
      auto pipe = build_pipeline(members, k[std::min(p, d - 1)], cost);
      if (pipe) {
        pipes.push_back(std::move(*pipe));
      } else {
        oom = true;
      }
    }
    ds.push_back(dp);
    throughput.push_back(oom ? 0.0
                             : sc_.training.tokens_per_iteration() / cost.overall_cost(pipes));
    out.push_back(oom ? std::nullopt : std::optional(std::move(pipes)));
    // The random +-1 walk of D within [n/L + 1, n/5], as the reference.
    d = uniform() < 0.5 ? clamp_d(std::min(hi, d + 1)) : clamp_d(std::max(d - 1, lo));
  }
  return out;
}

// Our plan from FlashFlex pipelines: stages with 0 layers dropped, even batch.
Plan to_plan(const Scenario& sc, const std::vector<FfPipeline>& pipes) {
  std::vector<std::vector<std::vector<int>>> stages;
  std::vector<std::vector<int>> layers;
  for (const auto& p : pipes) {
    stages.push_back(p.stages);
    layers.push_back(p.layers);
  }
  const int micro = sc.training.global_batch / sc.training.micro_batch;
  return assemble_plan(stages, layers, even_split(static_cast<int>(pipes.size()), micro),
                       sc.training.micro_batch, "flashflex");
}

Result<FfOptions> read_options(const Scenario& sc) {
  return load_with([&] {
    FfOptions o;
    if (sc.scheduler != "flashflex") return o;
    JsonNode node = sc.scheduler_options_node();
    node.allow_only({"iterations", "initial_pipelines", "random_partition"});
    o.random_partition = node.boolean_or("random_partition", o.random_partition);
    o.iterations = static_cast<int>(node.integer_or("iterations", 1, 100000, o.iterations));
    o.initial_pipelines =
        static_cast<int>(node.integer_or("initial_pipelines", 1, 1 << 20, o.initial_pipelines));
    return o;
  });
}

}  // namespace

Result<SearchResult> run_flashflex(const Scenario& sc, const SearchOptions& options) {
  auto opt = read_options(sc);
  if (!opt) return opt.error();
  SearchClock clock("flashflex", options);
  FlashFlex ff(sc, *opt, options.seed);
  std::vector<double> throughput;
  std::vector<int> ds;
  auto candidates = ff.run(throughput, ds);
  CostModel cm(sc.cluster, sc.model, sc.training, sc.profile);
  // Its choice: the first candidate with the highest throughput by its own model.
  int chosen = -1;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    clock.count();
    if (candidates[i] && (chosen < 0 || throughput[i] > throughput[chosen]))
      chosen = static_cast<int>(i);
  }
  if (chosen < 0) {
    return bad_input("flashflex: every candidate of its " + std::to_string(candidates.size()) +
                     " iterations is out of memory in its own memory model; no plan");
  }
  SearchResult out;
  out.plan = to_plan(sc, *candidates[chosen]);
  out.plan.comment = "flashflex: iteration " + std::to_string(chosen + 1) + " of " +
                     std::to_string(candidates.size()) + ", " + std::to_string(ds[chosen]) +
                     " pipelines, its own estimate " +
                     std::to_string(static_cast<long>(throughput[chosen])) + " tokens/s";
  out.estimate = cm.estimate(out.plan);
  // For context: the best of its candidates by our cost model.
  double ours = 0;
  for (const auto& cand : candidates) {
    if (!cand) continue;
    Estimate e = cm.estimate(to_plan(sc, *cand));
    if (e.feasible) ours = std::max(ours, e.tokens_per_s);
  }
  if (!out.estimate.feasible) {
    out.notes.push_back(
        "its choice does not fit in memory under hexisim's model (FlashFlex counts 8 bytes per "
        "parameter and a small activation term)");
  }
  out.notes.push_back("best of its candidates by hexisim's cost model: " +
                      std::to_string(static_cast<long>(ours)) + " tokens/s");
  clock.finish(out);
  return out;
}

}  // namespace baselines
}  // namespace hexi
