#include "studies/random_scenarios.hpp"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "scheduler/search/random.hpp"
#include "topologies/cluster_gen.hpp"
#include "topologies/text.hpp"

namespace hexi {
inline namespace studies {
namespace {

constexpr int kBatches[] = {32, 64, 128, 256, 512};
constexpr int kSeqLens[] = {2048, 4096};

// Uniform integer in [lo, hi] (hi - lo far below 2^32: the modulo bias is under 1e-9).
int draw(std::uint64_t& state, int lo, int hi) {
  const auto span = static_cast<std::uint64_t>(hi - lo) + 1;
  return lo + static_cast<int>(next_random(state) % span);
}

// An index drawn with probability weights[i] / sum(weights).
int draw_weighted(std::uint64_t& state, const std::vector<int>& weights) {
  int total = 0;
  for (int w : weights) total += w;
  int x = draw(state, 0, total - 1);
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (x < weights[i]) return static_cast<int>(i);
    x -= weights[i];
  }
  return static_cast<int>(weights.size()) - 1;
}

// k distinct entries of `from`, in drawn order (a partial Fisher-Yates shuffle).
std::vector<std::string> draw_distinct(std::uint64_t& state, std::vector<std::string> from, int k) {
  for (int i = 0; i < k; ++i) {
    const int j = draw(state, i, static_cast<int>(from.size()) - 1);
    std::swap(from[i], from[j]);
  }
  from.resize(k);
  return from;
}

Status check_limits(const RandomScenarioLimits& l) {
  if (l.min_gpus < 2 || l.max_gpus < l.min_gpus || l.max_gpus > kMaxClusterGpus) {
    return bad_input("random scenario limits: GPUs [" + std::to_string(l.min_gpus) + ", " +
                     std::to_string(l.max_gpus) +
                     "]: expected 2 <= min_gpus <= max_gpus <= " + std::to_string(kMaxClusterGpus));
  }
  if (l.max_global_batch < kBatches[0]) {
    return bad_input("random scenario limits: max_global_batch " +
                     std::to_string(l.max_global_batch) + ": expected at least " +
                     std::to_string(kBatches[0]));
  }
  return {};
}

// The machines of `types.size()` types, `total` GPUs in all: each type gets one machine size
// (1, 2, 4 or 8, larger ones likelier; halved until one machine of each type fits in the
// total) and a weight (1 to 4); machines are added to types drawn by weight until the total is
// reached, the last ones smaller where a whole machine would pass it.
std::vector<MixEntry> draw_machines(std::uint64_t& state, const std::vector<std::string>& types,
                                    int total) {
  const int k = static_cast<int>(types.size());
  std::vector<int> size(k);
  std::vector<int> weight(k);
  for (int i = 0; i < k; ++i) {
    size[i] = 1 << draw_weighted(state, {1, 2, 3, 4});
    weight[i] = draw(state, 1, 4);
  }
  auto sum = [&] {
    int s = 0;
    for (int x : size) s += x;
    return s;
  };
  while (sum() > total) {
    auto largest = std::max_element(size.begin(), size.end());
    *largest /= 2;
  }
  std::vector<std::map<int, int, std::greater<>>> machines(k);  // per type: size -> count
  int gpus = 0;
  for (int i = 0; i < k; ++i) {
    machines[i][size[i]] = 1;
    gpus += size[i];
  }
  while (gpus < total) {
    const int i = draw_weighted(state, weight);
    int s = size[i];
    while (s > total - gpus) s /= 2;
    ++machines[i][s];
    gpus += s;
  }
  std::vector<MixEntry> mix;
  for (int i = 0; i < k; ++i) {
    for (const auto& [s, n] : machines[i]) mix.push_back({types[i], n, s});
  }
  return mix;
}

// The catalog's GPUs (every entry but the engine's CPU ranks), in catalog order.
std::vector<std::string> gpu_names(const GpuCatalog& gpus) {
  std::vector<std::string> names;
  for (const GpuSpec& g : gpus.gpus()) {
    if (g.architecture != Architecture::kCpu) names.push_back(g.name);
  }
  return names;
}

}  // namespace

Result<Json> random_user_scenario_json(std::uint64_t seed, const RandomScenarioLimits& limits,
                                       const GpuCatalog& gpus, const ModelCatalog& models) {
  if (auto st = check_limits(limits); !st) return st.error();
  std::vector<const Model*> eligible;
  for (const char* name : kRandomScenarioModels) {
    const Model* m = models.find(name);
    if (m == nullptr)
      return bad_input("random scenarios: model \"" + std::string(name) +
                       "\" is not in the model catalog");
    if (m->params() <= limits.max_model_params) eligible.push_back(m);
  }
  if (eligible.empty()) {
    return bad_input("random scenario limits: max_model_params " +
                     fixed(limits.max_model_params / 1e9, 1) + "e9 is below the smallest model, " +
                     std::string(kRandomScenarioModels[0]));
  }
  const std::vector<std::string> catalog = gpu_names(gpus);
  const int max_types = std::min({4, limits.max_gpus, static_cast<int>(catalog.size())});
  if (max_types < 2) return bad_input("random scenarios: the GPU catalog has fewer than 2 GPUs");

  std::uint64_t state = seed;
  const int k = draw(state, 2, max_types);
  const std::vector<std::string> types = draw_distinct(state, catalog, k);
  const int total = draw(state, std::max(limits.min_gpus, k), limits.max_gpus);
  const std::vector<MixEntry> mix = draw_machines(state, types, total);

  const bool tcp = draw(state, 0, 1) == 0;
  FabricOptions fabric;
  fabric.name = "random-" + std::to_string(seed);
  fabric.nic_GBps = (tcp ? draw(state, 5, 30) : draw(state, 125, 250)) / 10.0;  // GB/s
  Json cluster = generate_cluster_json(mix, fabric);
  cluster["network"]["transport"] = tcp ? "tcp" : "rdma";

  const Model& model = *eligible[draw(state, 0, static_cast<int>(eligible.size()) - 1)];
  std::vector<int> batches;
  for (int b : kBatches) {
    if (b <= limits.max_global_batch) batches.push_back(b);
  }
  const int batch = batches[draw(state, 0, static_cast<int>(batches.size()) - 1)];
  std::vector<int> seqs;
  for (int s : kSeqLens) {
    if (s <= model.max_seq) seqs.push_back(s);
  }
  const int seq = seqs[draw(state, 0, static_cast<int>(seqs.size()) - 1)];

  const std::string description = "random user cluster of seed " + std::to_string(seed) + ": " +
                                  cluster["description"].get<std::string>() + ", " +
                                  (tcp ? "tcp" : "rdma") + " at " + fixed(fabric.nic_GBps, 1) +
                                  " GB/s; " + model.name + ", batch " + std::to_string(batch) +
                                  " x " + std::to_string(seq) + " tokens";
  return Json{{"version", 1},
              {"name", fabric.name},
              {"description", description},
              {"cluster", cluster},
              {"model", model.name},
              {"training",
               {{"global_batch", batch},
                {"micro_batch", 1},
                {"seq_len", seq},
                {"zero_stage", 1},
                {"recompute", "selective"}}},
              {"scheduler", "hexiscale"},
              {"seed", 1}};
}

Result<Scenario> random_user_scenario(std::uint64_t seed, const RandomScenarioLimits& limits,
                                      const GpuCatalog& gpus, const ModelCatalog& models) {
  auto json = random_user_scenario_json(seed, limits, gpus, models);
  if (!json) return json.error();
  return scenario_from_json(*json, "random-" + std::to_string(seed) + ".json", gpus, models);
}

std::string cluster_mix(const Cluster& cluster) {
  std::string out;
  const auto& machines = cluster.machines();
  for (std::size_t i = 0; i < machines.size();) {
    std::size_t j = i;
    while (j < machines.size() && machines[j].gpu_type == machines[i].gpu_type &&
           machines[j].num_gpus == machines[i].num_gpus) {
      ++j;
    }
    out += (out.empty() ? "" : ",") + cluster.gpu_types()[machines[i].gpu_type].name + ":" +
           std::to_string(j - i) + "x" + std::to_string(machines[i].num_gpus);
    i = j;
  }
  return out;
}

}  // namespace studies
}  // namespace hexi
