// The `metis-like` baseline (Um et al., "Metis: Fast Automatic Distributed
// Training on Heterogeneous GPUs", ATC'24), in the common plan format: every stage
// is a group of dp * tp GPUs of one type (a power of two), the same (dp, tp) for
// the whole plan, stages ordered by GPU type, layers in proportion to each stage's
// compute (then moved off stages that would run out of memory), even batch. Every
// (dp, tp) and type order is scored by the cost model (Metis profiles its own).
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "scheduler/baselines/baselines.hpp"
#include "scheduler/baselines/util.hpp"
#include "scheduler/hexiscale/hexiscale.hpp"
#include "scheduler/search/plan_space.hpp"

namespace hexi {
inline namespace baselines {
namespace {

bool power_of_two(int x) {
  return x > 0 && (x & (x - 1)) == 0;
}

struct TypeDevices {
  int type = 0;
  std::vector<int> devices;  // id order
  bool tp_fits(const Cluster& c, int tp) const {
    for (int d : devices) {
      if (c.machine_of(d).num_gpus % tp != 0) return false;
    }
    return true;
  }
};

std::vector<TypeDevices> devices_by_type(const Cluster& c) {
  std::map<int, TypeDevices> by;
  for (int d = 0; d < c.num_devices(); ++d) {
    const int t = c.devices()[d].gpu_type;
    by[t].type = t;
    by[t].devices.push_back(d);
  }
  std::vector<TypeDevices> out;
  for (auto& [_, v] : by) out.push_back(std::move(v));
  return out;
}

// Stages (per pipeline) for a type order: `count[i]` groups of dp * tp GPUs of type order[i].
std::optional<Plan> metis_plan(const Scenario& sc, const CostModel& cm,
                               const std::vector<TypeDevices>& types, const std::vector<int>& order,
                               const std::vector<int>& count, int dp, int tp) {
  const int group = dp * tp;
  std::vector<std::vector<std::vector<int>>> stages(dp);  // [pipeline][stage] -> devices
  std::vector<double> weight;                             // stage compute (FLOP/s)
  for (int i : order) {
    const TypeDevices& td = types[i];
    for (int j = 0; j < count[i]; ++j) {
      for (int d = 0; d < dp; ++d) {
        auto first = td.devices.begin() + j * group + d * tp;
        stages[d].emplace_back(first, first + tp);
      }
      weight.push_back(tp * sc.cluster.gpu_types()[td.type].flops());
    }
  }
  const int m = sc.training.global_batch / sc.training.micro_batch / dp;
  std::vector<int> layers = proportional_split(weight, sc.model.layers);
  if (!fit_layers_in_memory(pipeline_terms(cm, stages[0], dp, sc.training.micro_batch), m,
                            sc.training.schedule, layers)) {
    return std::nullopt;
  }
  return assemble_plan(stages, std::vector<std::vector<int>>(dp, layers), std::vector<int>(dp, m),
                       sc.training.micro_batch, "metis-like");
}

}  // namespace

Result<SearchResult> run_metis_like(const Scenario& sc, const SearchOptions& options) {
  CostModel cm(sc.cluster, sc.model, sc.training, sc.profile);
  SearchClock clock("metis-like", options);
  const std::vector<TypeDevices> types = devices_by_type(sc.cluster);
  const int micro = sc.training.global_batch / sc.training.micro_batch;
  BestPlan best;
  for (int tp : tp_degrees(sc.model, sc.cluster.num_devices())) {
    if (!power_of_two(tp)) continue;
    for (int dp = 1; dp <= micro && dp * tp <= sc.cluster.num_devices(); dp *= 2) {
      if (micro % dp != 0) continue;
      std::vector<int> count(types.size(), 0), present;
      int stages = 0;
      for (std::size_t i = 0; i < types.size(); ++i) {
        if (types[i].tp_fits(sc.cluster, tp))
          count[i] = static_cast<int>(types[i].devices.size()) / (dp * tp);
        if (count[i] > 0) present.push_back(static_cast<int>(i));
        stages += count[i];
      }
      if (stages == 0 || stages > sc.model.layers) continue;
      std::vector<int> order = present;
      do {
        if (clock.out_of_time()) break;
        clock.phase("dp=" + std::to_string(dp) + " tp=" + std::to_string(tp));
        auto plan = metis_plan(sc, cm, types, order, count, dp, tp);
        if (!plan) {
          clock.count();
          continue;
        }
        best.offer(std::move(*plan), cm, clock);
      } while (std::next_permutation(order.begin(), order.end()));
    }
  }
  return best.result(sc, clock);
}

}  // namespace baselines
}  // namespace hexi
