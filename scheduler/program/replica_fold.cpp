#include "scheduler/program/replica_fold.hpp"

#include <string>

#include "scheduler/cost/collectives.hpp"
#include "scheduler/program/dp_buckets.hpp"

namespace hexi {
inline namespace program {

namespace {

// The same kind of machine: all but its name, its devices' ids and its leaf.
bool same_machine(const Machine& a, const Machine& b) {
  return a.gpu_type == b.gpu_type && a.num_gpus == b.num_gpus && a.intra_kind == b.intra_kind &&
         a.intra_Bps == b.intra_Bps && a.intra_latency_s == b.intra_latency_s &&
         a.pcie_Bps == b.pcie_Bps && a.sockets == b.sockets && a.socket_Bps == b.socket_Bps &&
         a.nic_Bps == b.nic_Bps && a.nics == b.nics;
}

// Two sequence meshes alike but for their devices: groups of the same sizes, kinds, tokens,
// shards and heads in the same ring order.
bool same_mesh(const SequenceLayout& a, const SequenceLayout& b) {
  if (a.split_kv_heads != b.split_kv_heads || a.groups.size() != b.groups.size()) return false;
  for (std::size_t g = 0; g < a.groups.size(); ++g) {
    const SequenceGroup &x = a.groups[g], &y = b.groups[g];
    if (x.size() != y.size() || x.tokens != y.tokens || x.shards != y.shards ||
        x.heads != y.heads || x.tensor != y.tensor) {
      return false;
    }
  }
  return true;
}

bool same_stage(const Stage& a, const Stage& b, const TrainingConfig& t) {
  if (a.mesh() != b.mesh() || (a.mesh() && !same_mesh(*a.sequence, *b.sequence))) return false;
  return a.tp() == b.tp() && a.layer_begin == b.layer_begin && a.layer_end == b.layer_end &&
         a.head_split == b.head_split && a.expert_split == b.expert_split &&
         a.recompute_in(t) == b.recompute_in(t);
}

bool same_pipeline(const Pipeline& a, const Pipeline& b, const TrainingConfig& t) {
  if (a.batch != b.batch || a.micro_batch != b.micro_batch || a.stages.size() != b.stages.size())
    return false;
  for (std::size_t s = 0; s < a.stages.size(); ++s) {
    if (!same_stage(a.stages[s], b.stages[s], t)) return false;
  }
  return true;
}

// Records from -> to in a partial one-to-one map; false if it breaks the map.
bool map_one_to_one(std::vector<int>& forward, std::vector<int>& backward, int from, int to) {
  if (forward[from] < 0 && backward[to] < 0) {
    forward[from] = to;
    backward[to] = from;
    return true;
  }
  return forward[from] == to && backward[to] == from;
}

class Shift {
 public:
  Shift(const Plan& plan, const Cluster& cluster) : plan_(plan), cluster_(cluster) {}

  struct Map {
    std::vector<int> image;  // device -> the device at its place in pipeline p + u (mod P)
    std::vector<int> leaf;   // leaf -> its image (-1: no used machine)
  };

  // The shift by u, or an empty map when it does not map machines and leaves one to one,
  // each machine to one of the same kind.
  Map by(int u) const {
    const int pipelines = static_cast<int>(plan_.pipelines.size());
    const auto& machines = cluster_.machines();
    const auto& leaves = cluster_.leaves();
    std::vector<int> image(cluster_.num_devices(), -1);
    std::vector<int> m_to(machines.size(), -1), m_from(machines.size(), -1);
    std::vector<int> l_to(leaves.size(), -1), l_from(leaves.size(), -1);
    std::vector<int> block(machines.size(), -1);  // the block of u pipelines using a machine
    for (int p = 0; p < pipelines; ++p) {
      const Pipeline& a = plan_.pipelines[p];
      const Pipeline& b = plan_.pipelines[(p + u) % pipelines];
      for (std::size_t s = 0; s < a.stages.size(); ++s) {
        for (int r = 0; r < a.stages[s].tp(); ++r) {
          const Device& da = cluster_.devices()[a.stages[s].devices[r]];
          const Device& db = cluster_.devices()[b.stages[s].devices[r]];
          image[da.id] = db.id;
          if (block[da.machine] < 0) block[da.machine] = p / u;
          const Machine& ma = machines[da.machine];
          const Machine& mb = machines[db.machine];
          if (block[da.machine] != p / u || da.local != db.local || !same_machine(ma, mb) ||
              !map_one_to_one(m_to, m_from, da.machine, db.machine) ||
              !map_one_to_one(l_to, l_from, ma.leaf, mb.leaf) ||
              leaves[ma.leaf].uplink_Bps != leaves[mb.leaf].uplink_Bps) {
            return {};
          }
        }
      }
    }
    return {std::move(image), std::move(l_to)};
  }

 private:
  const Plan& plan_;
  const Cluster& cluster_;
};

// Whether `image` turns every ring (machine_order) of `groups` into itself.
bool turns_rings(const std::vector<std::vector<int>>& groups, const std::vector<int>& image,
                 const Cluster& cluster) {
  std::vector<int> position(image.size(), -1);
  for (const auto& g : groups) {
    const std::vector<int> ring = machine_order(g, cluster);
    const int n = static_cast<int>(ring.size());
    for (int k = 0; k < n; ++k) position[ring[k]] = k;
    const int first = image[ring[0]] < 0 ? -1 : position[image[ring[0]]];
    bool ok = first >= 0;
    for (int k = 0; ok && k < n; ++k) ok = image[ring[k]] == ring[(k + first) % n];
    for (int d : ring) position[d] = -1;
    if (!ok) return false;
  }
  return true;
}

// Each uplink's share of its bandwidth in a simulation of the first u of P pipelines: a leaf
// of theirs whose orbit under the shift has k leaves carries, in the whole simulation, the
// traffic of P / (u k) images of each of their flows on it, all at the same rate, so the
// simulated flows get k u / P of it. Empty when two of their leaves lie in one orbit (their
// flows would meet on either leaf in the whole simulation, on different ones folded).
std::vector<double> uplink_shares(const Plan& plan, const Cluster& cluster,
                                  const std::vector<int>& leaf_to, int u) {
  const int factor = static_cast<int>(plan.pipelines.size()) / u;
  std::vector<double> share(cluster.leaves().size(), 1.0);
  std::vector<int> orbit_of(cluster.leaves().size(), -1);
  for (int p = 0; p < u; ++p) {
    for (const Stage& st : plan.pipelines[p].stages) {
      for (int d : st.devices) {
        const int leaf = cluster.machines()[cluster.devices()[d].machine].leaf;
        if (orbit_of[leaf] == leaf) continue;  // seen
        if (orbit_of[leaf] >= 0) return {};    // another leaf of theirs is in its orbit
        int k = 0;
        for (int l = leaf; k == 0 || l != leaf; l = leaf_to[l], ++k) orbit_of[l] = leaf;
        share[leaf] = static_cast<double>(k) / factor;
      }
    }
  }
  return share;
}

}  // namespace

ReplicaFold find_replica_fold(const Plan& plan, const Cluster& cluster, const Model& model,
                              const TrainingConfig& training) {
  ReplicaFold f;
  const int pipelines = static_cast<int>(plan.pipelines.size());
  f.pipelines = f.simulated = pipelines;
  auto no = [&f](std::string why) {
    f.why_not = std::move(why);
    return f;
  };
  if (pipelines < 2) return no("one pipeline");
  if (!cluster.device_overrides().empty() || !cluster.machine_overrides().empty())
    return no("the cluster overrides device or machine pairs");
  for (int d : plan.devices()) {
    if (cluster.gpu(d).quota_pauses()) return no("devices run under a CPU quota");
  }
  for (int p = 1; p < pipelines; ++p) {
    if (!same_pipeline(plan.pipelines[p], plan.pipelines[0], training))
      return no("pipeline " + std::to_string(p) + " differs from pipeline 0");
  }
  const Shift shift(plan, cluster);
  const auto groups =
      plan_dp_buckets(plan, model, training.zero_stage, cluster.num_devices()).groups;
  for (int u = 1; u < pipelines; ++u) {
    if (pipelines % u != 0) continue;
    const Shift::Map map = shift.by(u);
    if (map.image.empty() || !turns_rings(groups, map.image, cluster)) continue;
    std::vector<double> shares = uplink_shares(plan, cluster, map.leaf, u);
    if (shares.empty()) continue;
    f.simulated = u;
    f.uplink_share = std::move(shares);
    f.image.assign(cluster.num_devices(), -1);
    for (int p = 0; p < pipelines; ++p) {
      const Pipeline& a = plan.pipelines[p];
      const Pipeline& b = plan.pipelines[p % u];
      for (std::size_t s = 0; s < a.stages.size(); ++s) {
        for (int r = 0; r < a.stages[s].tp(); ++r)
          f.image[a.stages[s].devices[r]] = b.stages[s].devices[r];
      }
    }
    return f;
  }
  return no(
      "no shift by fewer pipelines maps the machines, leaves and gradient rings onto "
      "themselves");
}

}  // namespace program
}  // namespace hexi
