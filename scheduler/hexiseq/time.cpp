#include "scheduler/hexiseq/time.hpp"

#include <algorithm>
#include <map>

#include "scheduler/cost/collectives.hpp"

namespace hexi {
inline namespace hexiseq {
namespace {

// The rings of a layout: one sub-ring per interval of the common refinement of every
// group's head ranges, and which rank of each group holds each interval.
struct SubRings {
  std::vector<int> bounds;              // interval m = [bounds[m], bounds[m + 1])
  std::vector<int> kv;                  // kv heads interval m carries
  std::vector<std::vector<int>> owner;  // [group][m]: the rank holding interval m
};

SubRings sub_rings(const AttentionShape& a, const SequenceLayout& layout) {
  SubRings s;
  for (const auto& g : layout.groups) {
    for (int first : head_offsets(g)) s.bounds.push_back(first);
  }
  s.bounds.push_back(a.q_heads);
  std::sort(s.bounds.begin(), s.bounds.end());
  s.bounds.erase(std::unique(s.bounds.begin(), s.bounds.end()), s.bounds.end());
  const int intervals = static_cast<int>(s.bounds.size()) - 1;
  for (int m = 0; m < intervals; ++m) {
    s.kv.push_back(kv_heads_needed(a, s.bounds[m], s.bounds[m + 1] - s.bounds[m]));
  }
  for (const auto& g : layout.groups) {
    const std::vector<int> first = head_offsets(g);
    std::vector<int> owner(intervals, 0);
    for (int m = 0; m < intervals; ++m) {
      for (int r = 0; r < g.size(); ++r) {
        if (first[r] <= s.bounds[m] && s.bounds[m] < first[r] + g.heads[r]) owner[m] = r;
      }
    }
    s.owner.push_back(owner);
  }
  return s;
}

// One transfer of the ring: for every receiving device (flat index) the bytes it gets from
// each source device (flat index).
using Transfers = std::vector<std::map<int, double>>;

// A device's identity and place in the layout (flat index = position in layout order).
struct Rank {
  int device = 0;
  int group = 0;
  int rank = 0;
};

class RingModel {
 public:
  RingModel(const SequenceCost& cost, const SequenceLayout& layout, bool backward)
      : cost_(cost),
        layout_(layout),
        a_(cost.attention()),
        rings_(sub_rings(a_, layout)),
        backward_(backward),
        p_(static_cast<int>(layout.groups.size())) {
    for (int g = 0; g < p_; ++g) {
      first_.push_back(static_cast<int>(ranks_.size()));
      tokens_.push_back(layout.groups[g].tokens);
      for (int r = 0; r < layout.groups[g].size(); ++r) {
        ranks_.push_back({layout.groups[g].devices[r], g, r});
        flops_s_.push_back(cost.attention_flops_s(layout.groups[g].devices[r]));
      }
    }
  }

  // When each device ends its last step (and, backward, has its block's dK, dV home).
  std::vector<double> run() const {
    const int n = static_cast<int>(ranks_.size());
    std::vector<double> start(n, 0.0), end(n, 0.0);
    for (int i = 0; i < n; ++i) end[i] = compute_s(i, 0);
    const int step_bytes = a_.bytes_per_element + (backward_ ? a_.grad_bytes_per_element : 0);
    for (int k = 0; k + 1 < p_; ++k) {
      const std::vector<double> arrive = arrivals(next_blocks(k, step_bytes), start);
      for (int i = 0; i < n; ++i) {
        start[i] = std::max(end[i], arrive[i]);
        end[i] = start[i] + compute_s(i, k + 1);
      }
    }
    if (!backward_ || p_ == 1) return end;
    // Each group's own block ends the loop at the previous group: its dK, dV come home.
    const std::vector<double> home = arrivals(own_blocks(), end);
    for (int i = 0; i < n; ++i) end[i] = std::max(end[i], home[i]);
    return end;
  }

 private:
  int visiting(int g, int k) const { return ((g - k) % p_ + p_) % p_; }

  // Attention compute of device i at step k (s).
  double compute_s(int i, int k) const {
    const Rank& r = ranks_[i];
    const int heads = layout_.groups[r.group].heads[r.rank];
    const std::int64_t pairs = mirrored_block_pairs(tokens_, r.group, visiting(r.group, k));
    const double flops = backward_ ? attention_backward_flops(pairs, heads, a_.head_dim)
                                   : attention_forward_flops(pairs, heads, a_.head_dim);
    return flops / flops_s_[i];
  }

  // Bytes each device receives, per source, of the block of group `block_of(g)` for its
  // intervals, `bytes` per element, from the previous group's holders.
  template <class BlockOf>
  Transfers transfers(BlockOf block_of, int bytes) const {
    Transfers t(ranks_.size());
    for (int g = 0; g < p_; ++g) {
      const int prev = visiting(g, 1);
      const double tokens = static_cast<double>(tokens_[block_of(g)]);
      for (std::size_t m = 0; m < rings_.kv.size(); ++m) {
        const int dst = first_[g] + rings_.owner[g][m];
        const int src = first_[prev] + rings_.owner[prev][m];
        t[dst][src] += 2.0 * tokens * rings_.kv[m] * a_.head_dim * bytes;
      }
    }
    return t;
  }

  // Step k -> k+1: group g receives the block of group g-k-1 (K, V; backward + dK, dV).
  Transfers next_blocks(int k, int bytes) const {
    return transfers([&](int g) { return visiting(g, k + 1); }, bytes);
  }
  // After the last step: group g's own dK, dV.
  Transfers own_blocks() const {
    return transfers([](int g) { return g; }, a_.grad_bytes_per_element);
  }

  // When each device has its transfers, both ends posting at `posted`: the later of the
  // sender's send port and the receiver's receive port (bytes / bandwidth over its peers,
  // plus the largest latency).
  std::vector<double> arrivals(const Transfers& t, const std::vector<double>& posted) const {
    const Cluster& c = cost_.cluster();
    const int n = static_cast<int>(ranks_.size());
    const std::size_t machines = c.machines().size();
    std::vector<double> send(n, 0.0), send_lat(n, 0.0), recv(n, 0.0), recv_lat(n, 0.0);
    std::vector<double> nic_out(machines, 0.0), nic_in(machines, 0.0);  // s of NIC time
    for (int dst = 0; dst < n; ++dst) {
      for (const auto& [src, bytes] : t[dst]) {
        const PairLink l = c.link(ranks_[src].device, ranks_[dst].device);
        send[src] += bytes / l.bandwidth_Bps;
        recv[dst] += bytes / l.bandwidth_Bps;
        send_lat[src] = std::max(send_lat[src], l.latency_s);
        recv_lat[dst] = std::max(recv_lat[dst], l.latency_s);
        const int ms = machine(src), md = machine(dst);
        if (ms == md) continue;
        nic_out[ms] += bytes / c.machines()[ms].nic_Bps;
        nic_in[md] += bytes / c.machines()[md].nic_Bps;
      }
    }
    std::vector<double> arrive(n, 0.0);
    for (int dst = 0; dst < n; ++dst) {
      for (const auto& [src, bytes] : t[dst]) {
        double port = std::max(send[src] + send_lat[src], recv[dst] + recv_lat[dst]);
        if (machine(src) != machine(dst)) {
          port = std::max(
              {port, nic_out[machine(src)] + send_lat[src], nic_in[machine(dst)] + recv_lat[dst]});
        }
        arrive[dst] = std::max(arrive[dst], std::max(posted[src], posted[dst]) + port);
      }
    }
    return arrive;
  }

  int machine(int flat) const { return cost_.cluster().devices()[ranks_[flat].device].machine; }

  const SequenceCost& cost_;
  const SequenceLayout& layout_;
  const AttentionShape a_;
  const SubRings rings_;
  const bool backward_;
  const int p_;
  std::vector<std::int64_t> tokens_;  // T_g
  std::vector<int> first_;            // flat index of each group's rank 0
  std::vector<Rank> ranks_;           // flat index -> device
  std::vector<double> flops_s_;       // achieved attention FLOP/s, flat index
};

// Everything but the attention core of `ks`.
std::vector<Kernel> without_core(std::vector<Kernel> ks) {
  std::erase_if(ks, [](const Kernel& k) { return k.cls == KernelClass::kAttention; });
  return ks;
}

void append(std::vector<Kernel>& to, const std::vector<Kernel>& ks) {
  to.insert(to.end(), ks.begin(), ks.end());
}

Eigen::MatrixXd transposed(const Eigen::MatrixXd& m) {
  return m.transpose();
}

// The all-to-all's off-machine bytes through each machine's NICs (all of them together,
// both directions apart): the slowest machine's time plus the largest latency; 0 when the
// group sits in one machine.
double nic_time(const Cluster& c, const std::vector<int>& devices, const Eigen::MatrixXd& bytes,
                const Eigen::MatrixXd& latency_s) {
  std::map<int, double> out, in;  // machine -> bytes
  double latency = 0;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    for (std::size_t j = 0; j < devices.size(); ++j) {
      const int mi = c.devices()[devices[i]].machine, mj = c.devices()[devices[j]].machine;
      if (mi == mj || bytes(i, j) <= 0) continue;
      out[mi] += bytes(i, j);
      in[mj] += bytes(i, j);
      latency = std::max(latency, latency_s(i, j));
    }
  }
  double slowest = 0;
  for (const auto& [m, b] : out) slowest = std::max(slowest, b / c.machines()[m].nic_Bps);
  for (const auto& [m, b] : in) slowest = std::max(slowest, b / c.machines()[m].nic_Bps);
  return slowest > 0 ? slowest + latency : 0.0;
}

}  // namespace

SequenceCost::SequenceCost(const Cluster& cluster, const Model& model,
                           const TrainingConfig& training, const Profile& profile, int grad_bytes)
    : cluster_(cluster),
      model_(model),
      training_(training),
      profile_(profile),
      attention_(attention_shape(model, training, grad_bytes)) {}

const GpuSpec& SequenceCost::gpu(int device) const {
  return cluster_.gpu(identical_ >= 0 ? identical_ : device);
}

// The flash kernels' rate over forward + backward (backward 2.5x the forward's FLOPs) at the
// whole sequence's length: ring blocks of long contexts are far past the kernels'
// saturation lengths.
double SequenceCost::attention_flops_s(int device) const {
  const GpuSpec& g = gpu(device);
  const DeviceProfile p = profile_.device(g);
  const double s = training_.seq_len, d = model_.head_dim();
  const double fwd = attention_efficiency(p, false, s, d),
               bwd = attention_efficiency(p, true, s, d);
  return g.flops() * 3.5 / (1 / fwd + 2.5 / bwd);
}

double SequenceCost::token_wise_s(int device, std::int64_t tokens) const {
  if (tokens <= 0) return 0.0;
  TrainingConfig t = training_;
  t.seq_len = static_cast<int>(tokens);
  std::vector<Kernel> ks;
  for (Block b : {Block::kAttention, Block::kMlp}) {
    append(ks, without_core(block_forward(model_, t, b, 1, 1.0)));
    append(ks, without_core(block_backward(model_, t, b, 1, 1.0)));
  }
  const GpuSpec& g = gpu(device);
  return kernels_time(ks, g, profile_.device(g));
}

double SequenceCost::head_s(int device, std::int64_t tokens) const {
  if (tokens <= 0) return 0.0;
  TrainingConfig t = training_;
  t.seq_len = static_cast<int>(tokens);
  std::vector<Kernel> ks = embedding_forward(model_, t, 1);
  append(ks, embedding_backward(model_, t, 1));
  append(ks, head_forward(model_, t, 1, 1.0));
  append(ks, head_backward(model_, t, 1, 1.0));
  const GpuSpec& g = gpu(device);
  return kernels_time(ks, g, profile_.device(g));
}

double SequenceCost::ulysses_s(const SequenceGroup& g) const {
  if (g.size() <= 1) return 0.0;
  const UlyssesGroup u{g.shards, g.heads};
  const Eigen::MatrixXd bw = group_bandwidths(cluster_, g.devices);
  const Eigen::MatrixXd lat = group_latencies(cluster_, g.devices);
  const Eigen::MatrixXd qkv = ulysses_qkv_bytes(attention_, u);
  const Eigen::MatrixXd out = ulysses_output_bytes(attention_, u);
  auto time = [&](const Eigen::MatrixXd& bytes) {
    return std::max(all_to_all_time(bytes, bw, lat), nic_time(cluster_, g.devices, bytes, lat));
  };
  const double forward = time(qkv) + time(out);
  const double backward = time(transposed(out)) + time(transposed(qkv));
  return forward + backward + (training_.recompute == Recompute::kFull ? forward : 0.0);
}

std::vector<double> SequenceCost::ring_end_s(const SequenceLayout& layout, bool backward) const {
  return RingModel(*this, layout, backward).run();
}

LayerTime SequenceCost::layer(const SequenceLayout& layout) const {
  const std::vector<double> forward = ring_end_s(layout, false);
  const std::vector<double> backward = ring_end_s(layout, true);
  const double replay = training_.recompute == Recompute::kFull ? 1.0 : 0.0;
  LayerTime out;
  std::size_t flat = 0;
  for (int g = 0; g < static_cast<int>(layout.groups.size()); ++g) {
    const SequenceGroup& group = layout.groups[g];
    const std::size_t first = flat;
    double fwd = 0, bwd = 0;
    for (int r = 0; r < group.size(); ++r, ++flat) {
      fwd = std::max(fwd, forward[flat]);
      bwd = std::max(bwd, backward[flat]);
    }
    const double a2a = ulysses_s(group);
    for (int r = 0; r < group.size(); ++r) {
      const int d = group.devices[r];
      const std::int64_t pairs = mirrored_rank_pairs(training_.seq_len, group.tokens);
      const double flops =
          (1 + replay) * attention_forward_flops(pairs, group.heads[r], attention_.head_dim) +
          attention_backward_flops(pairs, group.heads[r], attention_.head_dim);
      DeviceTime dt{d,
                    g,
                    r,
                    token_wise_s(d, group.shards[r]),
                    a2a,
                    (1 + replay) * fwd + bwd,
                    flops / attention_flops_s(d)};
      if (out.devices.empty() || dt.total_s() > out.time_s) {
        out.time_s = dt.total_s();
        out.slowest = static_cast<int>(first) + r;
      }
      out.devices.push_back(dt);
    }
  }
  return out;
}

IterationTime SequenceCost::iteration(const SequenceLayout& layout) const {
  IterationTime it;
  it.layer = layer(layout);
  const std::vector<int> devices = layout.devices();
  const int n = static_cast<int>(devices.size());
  const double e = training_.bytes_per_element();
  double head = 0;
  for (const auto& g : layout.groups) {
    for (int r = 0; r < g.size(); ++r) head = std::max(head, head_s(g.devices[r], g.shards[r]));
  }
  double zero3 = 0;  // per sequence: weights gathered forward and backward, grads scattered
  if (training_.zero_stage >= 3) {
    const double layer_bytes = e * model_.layer_params();
    const auto [ring_bw, ring_lat] = ring_link(cluster_, devices, layer_bytes);
    zero3 = model_.layers *
            (2 * collective_time(Collective::kAllGather, layer_bytes, n, ring_bw, ring_lat) +
             collective_time(Collective::kReduceScatter, layer_bytes, n, ring_bw, ring_lat));
  } else {
    const auto [ring_bw, ring_lat] = ring_link(cluster_, devices, e * model_.params());
    it.sync_s = collective_time(Collective::kAllReduce, e * model_.params(), n, ring_bw, ring_lat);
  }
  it.sequence_s = model_.layers * it.layer.time_s + head + zero3;
  // Adam touches fp32 master weights and both moments and the e-byte weights and grads:
  // ~28 bytes per owned parameter (estimate.hpp's figure).
  const double owned = model_.params() / (training_.zero_stage >= 1 ? n : 1);
  for (int d : devices) {
    const GpuSpec& g = gpu(d);
    it.optimizer_s = std::max(
        it.optimizer_s, owned * 28 / (g.memory_GBps * 1e9 * profile_.device(g).memory_efficiency));
  }
  it.iteration_s = training_.global_batch * it.sequence_s + it.sync_s + it.optimizer_s;
  it.tokens_per_s = training_.tokens_per_iteration() / it.iteration_s;
  it.memory = layout_memory(layout, model_, training_, cluster_);
  for (auto& m : it.memory) {
    m.capacity = memory_capacity(m.device);
    it.fits = it.fits && m.total() <= m.limit();
  }
  return it;
}

}  // namespace hexiseq
}  // namespace hexi
