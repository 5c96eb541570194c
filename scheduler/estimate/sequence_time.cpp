#include "scheduler/estimate/sequence_time.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include "scheduler/cost/all_to_all.hpp"
#include "scheduler/cost/collectives.hpp"
#include "scheduler/cost/fluid.hpp"

namespace hexi {
inline namespace estimate {
namespace {

// The NIC a device's off-machine traffic leaves and enters by: GPU g of a machine with k
// NICs uses NIC g k / gpus (Machine::nic_of, as the simulator's platform routes it), as
// machine * kNicStride + that index; each NIC carries nic_each_Bps.
constexpr int kNicStride = 1 << 16;
int nic_of(const Cluster& c, int device) {
  const Device& d = c.devices()[device];
  return d.machine * kNicStride + c.machines()[d.machine].nic_of(d.local);
}
double nic_Bps(const Cluster& c, int nic) {
  return c.machines()[nic / kNicStride].nic_each_Bps();
}

// A device's identity and place in the layout (flat index = position in layout order).
struct Rank {
  int device = 0;
  int group = 0;
  int rank = 0;
};

// One hop of the sub-rings: `dst` receives from `src` (flat indices) the K/V of `kv` kv
// heads of every block that passes (the intervals they share).
struct Link {
  int dst = 0, src = 0;
  int kv = 0;
  double bandwidth_Bps = 0, latency_s = 0;
  bool off_machine = false;
  int src_nic = 0, dst_nic = 0;  // off machine: the NICs' slots (RingModel::nic_Bps_)
};

// Bytes another transfer (ZeRO-3's collectives on the DP stream) still has to move through
// each of the ring's NICs (RingModel's slots), one direction each.
struct NicBacklog {
  std::vector<double> out, in;
  bool empty() const {
    return std::all_of(out.begin(), out.end(), [](double b) { return b <= 0; }) &&
           std::all_of(in.begin(), in.end(), [](double b) { return b <= 0; });
  }
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
        flops_s_.push_back(cost.attention_flops_s(layout.groups[g].devices[r], backward));
      }
    }
    if (p_ > 1) make_links();
  }

  // When each device ends its last step (and, backward, has its block's dK, dV home).
  // `backlog` (may be null): bytes of ZeRO-3's collectives on the ring's NICs, moving beside
  // the ring's hops from its start; it is left with what remains at the ring's end.
  std::vector<double> run(NicBacklog* backlog = nullptr) const {
    const int n = static_cast<int>(ranks_.size());
    std::vector<double> start(n, 0.0), end(n, 0.0);
    backlog_ = backlog != nullptr && !backlog->empty() ? backlog : nullptr;
    if (backlog_ != nullptr) {
      free_out_.assign(nic_Bps_.size(), 0.0);
      free_in_.assign(nic_Bps_.size(), 0.0);
    }
    for (int i = 0; i < n; ++i) end[i] = compute_s(i, 0);
    for (int k = 0; k + 1 < p_; ++k) {
      // Backward, step k's K, V leave beside the dK, dV of step k - 1 (sent when that step
      // ended, as step k started); step 0's alone.
      const int bytes = a_.bytes_per_element + (backward_ && k > 0 ? a_.grad_bytes_per_element : 0);
      const std::vector<double>& arrive = next_blocks(k, bytes, start);
      for (int i = 0; i < n; ++i) {
        start[i] = std::max(end[i], arrive[i]);
        end[i] = start[i] + compute_s(i, k + 1);
      }
    }
    if (backward_ && p_ > 1) {
      // The dK, dV of step P - 2 leave as the last step starts; each group's own block ends
      // the loop at the previous group, and its dK, dV come home after both.
      const std::vector<double>& last = last_grads(start);
      for (int i = 0; i < n; ++i) start[i] = std::max(end[i], last[i]);
      const std::vector<double>& home = own_blocks(start);
      for (int i = 0; i < n; ++i) end[i] = std::max(end[i], home[i]);
    }
    if (backlog_ != nullptr) drain_until(*std::max_element(end.begin(), end.end()));
    backlog_ = nullptr;
    return end;
  }

  // A backlog of `bytes` on every NIC slot a ring hop and a hop of the mesh's ring order
  // (`mesh`, the ZeRO collectives' ring) both use, one direction each; the collective moves
  // at most `collective_Bps` (its ring's slowest edge at its transport's efficiency), so a
  // NIC sees its bytes as that much more of its own time.
  NicBacklog backlog(const std::vector<int>& mesh, double bytes, double collective_Bps) const {
    NicBacklog b{std::vector<double>(nic_Bps_.size(), 0.0),
                 std::vector<double>(nic_Bps_.size(), 0.0)};
    const Cluster& c = cost_.cluster();
    const int n = static_cast<int>(mesh.size());
    for (int i = 0; i < n && n > 1; ++i) {
      const int from = mesh[i], to = mesh[(i + 1) % n];
      if (c.devices()[from].machine == c.devices()[to].machine) continue;
      auto as_nic = [&](int slot) {
        return bytes * nic_Bps_[slot] / std::min(nic_Bps_[slot], collective_Bps);
      };
      if (const auto it = slot_.find(nic_of(c, from)); it != slot_.end())
        b.out[it->second] += as_nic(it->second);
      if (const auto it = slot_.find(nic_of(c, to)); it != slot_.end())
        b.in[it->second] += as_nic(it->second);
    }
    return b;
  }

  // How long the backlog's busiest NIC still needs alone (s).
  double left_s(const NicBacklog& b) const {
    double left = 0;
    for (std::size_t s = 0; s < nic_Bps_.size(); ++s) {
      left = std::max(left, std::max(b.out[s], b.in[s]) / nic_Bps_[s]);
    }
    return left;
  }

  // `seconds` with the ring's NICs free: the backlog moves at their full rate.
  // A NIC stays free as long as the later end of its ring hops takes (`seconds`, by layout
  // order: each device's NIC-free work before the ring).
  void drain(NicBacklog& b, const std::vector<double>& seconds) const {
    std::vector<double> out(nic_Bps_.size(), 0.0), in(nic_Bps_.size(), 0.0);
    for (const Link& l : links_) {
      if (!l.off_machine) continue;
      const double free = std::max(seconds[l.src], seconds[l.dst]);
      out[l.src_nic] = std::max(out[l.src_nic], free);
      in[l.dst_nic] = std::max(in[l.dst_nic], free);
    }
    for (std::size_t s = 0; s < nic_Bps_.size(); ++s) {
      b.out[s] = std::max(0.0, b.out[s] - out[s] * nic_Bps_[s]);
      b.in[s] = std::max(0.0, b.in[s] - in[s] * nic_Bps_[s]);
    }
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

  // The hops: for every group and interval, the previous group's holder to its holder.
  void make_links() {
    const Cluster& c = cost_.cluster();
    std::map<std::pair<int, int>, int> kv;  // (dst, src) -> kv heads
    for (int g = 0; g < p_; ++g) {
      const int prev = visiting(g, 1);
      for (std::size_t m = 0; m < rings_.kv.size(); ++m) {
        kv[{first_[g] + rings_.owner[g][m], first_[prev] + rings_.owner[prev][m]}] += rings_.kv[m];
      }
    }
    std::map<int, int>& slot = slot_;  // nic_of -> its slot
    auto slot_of = [&](int device) {
      const auto [it, fresh] = slot.emplace(nic_of(c, device), static_cast<int>(slot.size()));
      if (fresh) nic_Bps_.push_back(nic_Bps(c, it->first));
      return it->second;
    };
    const int n = static_cast<int>(ranks_.size());
    send_lat_.assign(n, 0.0);
    recv_lat_.assign(n, 0.0);
    for (const auto& [pair, heads] : kv) {
      const auto [dst, src] = pair;
      const int from = ranks_[src].device, to = ranks_[dst].device;
      const PairLink l = c.link(from, to);
      Link link{dst, src, heads, l.bandwidth_Bps, l.latency_s};
      link.off_machine = c.devices()[from].machine != c.devices()[to].machine;
      if (link.off_machine) link.src_nic = slot_of(from), link.dst_nic = slot_of(to);
      send_lat_[src] = std::max(send_lat_[src], l.latency_s);
      recv_lat_[dst] = std::max(recv_lat_[dst], l.latency_s);
      links_.push_back(link);
    }
  }

  // Bytes over link `l` of the block of group `block`, `bytes` per element.
  double link_bytes(const Link& l, int block, int bytes) const {
    return 2.0 * static_cast<double>(tokens_[block]) * l.kv * a_.head_dim * bytes;
  }

  // When each device has the block of step k + 1 (group g receives the block of group
  // g-k-1: K, V; backward also dK, dV), both ends posting at `posted`.
  const std::vector<double>& next_blocks(int k, int bytes,
                                         const std::vector<double>& posted) const {
    return arrivals(
        [&](const Link& l) { return link_bytes(l, visiting(ranks_[l.dst].group, k + 1), bytes); },
        posted);
  }
  // After the last step: when each group's own dK, dV are home.
  // At the last step's start: when the dK, dV of step P - 2 have reached the next group.
  const std::vector<double>& last_grads(const std::vector<double>& posted) const {
    return arrivals(
        [&](const Link& l) {
          return link_bytes(l, visiting(ranks_[l.dst].group, p_ - 1), a_.grad_bytes_per_element);
        },
        posted);
  }
  const std::vector<double>& own_blocks(const std::vector<double>& posted) const {
    return arrivals(
        [&](const Link& l) {
          return link_bytes(l, ranks_[l.dst].group, a_.grad_bytes_per_element);
        },
        posted);
  }

  // When each device has its transfers, both ends posting at `posted`: the later of the
  // sender's send port and the receiver's receive port (bytes / bandwidth over its peers,
  // plus the largest latency) and, off-machine, of the NICs' time (each device's own NIC,
  // shared with the devices of its rail).
  // (Called P times per layout: the latencies and NIC slots are the links', found once, and
  // the sums reuse the model's buffers; the answer lives in arrive_ until the next call.)
  template <class Bytes>
  const std::vector<double>& arrivals(Bytes bytes_of, const std::vector<double>& posted) const {
    const int n = static_cast<int>(ranks_.size());
    const std::vector<double>& send_lat = send_lat_;
    const std::vector<double>& recv_lat = recv_lat_;
    std::vector<double>& send = send_;
    std::vector<double>& recv = recv_;
    std::vector<double>& nic_out = nic_out_;  // s
    std::vector<double>& nic_in = nic_in_;
    std::vector<double>& bytes = bytes_;
    send.assign(n, 0.0);
    recv.assign(n, 0.0);
    nic_out.assign(nic_Bps_.size(), 0.0);
    nic_in.assign(nic_Bps_.size(), 0.0);
    bytes.resize(links_.size());
    for (std::size_t k = 0; k < links_.size(); ++k) {
      const Link& l = links_[k];
      bytes[k] = bytes_of(l);
      const double port_s = bytes[k] / l.bandwidth_Bps;
      send[l.src] += port_s;
      recv[l.dst] += port_s;
      if (!l.off_machine) continue;
      nic_out[l.src_nic] += bytes[k] / nic_Bps_[l.src_nic];
      nic_in[l.dst_nic] += bytes[k] / nic_Bps_[l.dst_nic];
    }
    if (backlog_ != nullptr) share_with_backlog(posted);
    std::vector<double>& arrive = arrive_;
    arrive.assign(n, 0.0);
    for (std::size_t k = 0; k < links_.size(); ++k) {
      const Link& l = links_[k];
      if (bytes[k] <= 0) continue;
      double port = std::max(send[l.src] + send_lat[l.src], recv[l.dst] + recv_lat[l.dst]);
      if (l.off_machine) {
        port = std::max(
            {port, nic_out[l.src_nic] + send_lat[l.src], nic_in[l.dst_nic] + recv_lat[l.dst]});
      }
      arrive[l.dst] = std::max(arrive[l.dst], std::max(posted[l.src], posted[l.dst]) + port);
    }
    return arrive;
  }

  // The backlog's bytes move at the NIC's full rate while the ring's hops leave it free, and
  // share it max-min fairly with them (fluid.hpp's shared_nic): a NIC whose m ring flows carry R
  // bytes this step beside a backlog b takes (R + min(b, R / m)) / bandwidth for them, the backlog
  // moving min(b, R / m) meanwhile (each of the m + 1 flows gets 1 / (m + 1) of the NIC until one
  // ends). Turns nic_out_ / nic_in_ (the ring's bytes alone, s) into those times.
  void share_with_backlog(const std::vector<double>& posted) const {
    const std::size_t slots = nic_Bps_.size();
    flows_out_.assign(slots, 0);
    flows_in_.assign(slots, 0);
    post_out_.assign(slots, kNever);
    post_in_.assign(slots, kNever);
    for (std::size_t k = 0; k < links_.size(); ++k) {
      const Link& l = links_[k];
      if (!l.off_machine || bytes_[k] <= 0) continue;
      const double at = std::max(posted[l.src], posted[l.dst]);
      ++flows_out_[l.src_nic];
      ++flows_in_[l.dst_nic];
      post_out_[l.src_nic] = std::min(post_out_[l.src_nic], at);
      post_in_[l.dst_nic] = std::min(post_in_[l.dst_nic], at);
    }
    for (std::size_t s = 0; s < slots; ++s) {
      nic_out_[s] =
          share(s, nic_out_[s], flows_out_[s], post_out_[s], backlog_->out[s], free_out_[s]);
      nic_in_[s] = share(s, nic_in_[s], flows_in_[s], post_in_[s], backlog_->in[s], free_in_[s]);
    }
  }
  // One NIC direction: `ring_s` of the ring's bytes at full rate over `flows` flows posted
  // at `at`, beside `backlog` bytes moving alone since `free_from`; returns the ring's time.
  double share(std::size_t slot, double ring_s, int flows, double at, double& backlog,
               double& free_from) const {
    if (flows == 0) return ring_s;
    const double rate = nic_Bps_[slot];
    backlog = std::max(0.0, backlog - std::max(0.0, at - free_from) * rate);
    const SharedNic shared = shared_nic(ring_s * rate, flows, backlog, rate);
    backlog -= shared.moved_bytes;
    free_from = std::max(free_from, at + shared.ring_s);
    return shared.ring_s;
  }
  // The backlog moving alone until `t` on every NIC.
  void drain_until(double t) const {
    for (std::size_t s = 0; s < nic_Bps_.size(); ++s) {
      backlog_->out[s] =
          std::max(0.0, backlog_->out[s] - std::max(0.0, t - free_out_[s]) * nic_Bps_[s]);
      backlog_->in[s] =
          std::max(0.0, backlog_->in[s] - std::max(0.0, t - free_in_[s]) * nic_Bps_[s]);
    }
  }

  static constexpr double kNever = 1e300;

  const SequenceCost& cost_;
  const SequenceLayout& layout_;
  const AttentionShape a_;
  const SubRings rings_;
  const bool backward_;
  const int p_;
  std::vector<std::int64_t> tokens_;         // T_g
  std::vector<int> first_;                   // flat index of each group's rank 0
  std::vector<Rank> ranks_;                  // flat index -> device
  std::vector<double> flops_s_;              // achieved attention FLOP/s, flat index
  std::vector<Link> links_;                  // the sub-rings' hops
  std::vector<double> send_lat_, recv_lat_;  // flat index: the largest latency of its hops
  std::vector<double> nic_Bps_;              // per NIC slot: nic_each_Bps
  std::map<int, int> slot_;                  // nic_of -> its slot
  mutable std::vector<double> send_, recv_, nic_out_, nic_in_, bytes_, arrive_;  // arrivals()
  // run() with a backlog: it, and per NIC slot when the ring's last transfer left it free.
  mutable NicBacklog* backlog_ = nullptr;
  mutable std::vector<double> free_out_, free_in_, post_out_, post_in_;
  mutable std::vector<int> flows_out_, flows_in_;
};

// The NIC-free time before each ZeRO-3 ring pass, per device in layout order (layer()).
struct ZeroWindows {
  std::vector<double> before, qkv, between;  // forward ring; replay ring; backward ring
  bool replay = false;
};

// The ring ends of one layer's forward, replay and backward beside ZeRO-3's collectives of
// `bytes` each (a gather forward; a scatter and a gather from the replay on), over the
// mesh's ring order `mesh` at `rate` bytes/s.
void beside_zero(const RingModel& forward_ring, const RingModel& backward_ring,
                 const std::vector<int>& mesh, double bytes, double rate, const ZeroWindows& w,
                 std::vector<double>& forward, std::vector<double>& replayed,
                 std::vector<double>& backward) {
  const double n = static_cast<double>(mesh.size());
  const double hop = (n - 1) / n * bytes;
  NicBacklog gather = forward_ring.backlog(mesh, hop, rate);
  forward_ring.drain(gather, w.before);
  forward = forward_ring.run(&gather);
  NicBacklog both = forward_ring.backlog(mesh, 2 * hop, rate);
  if (w.replay) {
    forward_ring.drain(both, w.qkv);
    replayed = forward_ring.run(&both);
  }
  forward_ring.drain(both, w.between);
  backward = backward_ring.run(&both);
  // What is still left when a pass's ring ends holds up the next pass that needs it (the
  // next layer waits for its weights): the passes end that much later on every device.
  const double forward_left = forward_ring.left_s(gather),
               backward_left = backward_ring.left_s(both);
  for (double& end : forward) end += forward_left;
  for (double& end : backward) end += backward_left;
}

void append(std::vector<Kernel>& to, const std::vector<Kernel>& ks) {
  to.insert(to.end(), ks.begin(), ks.end());
}

bool one_machine(const Cluster& c, const std::vector<int>& devices) {
  return std::all_of(devices.begin(), devices.end(), [&](int d) {
    return c.devices()[d].machine == c.devices()[devices.front()].machine;
  });
}

Eigen::MatrixXd transposed(const Eigen::MatrixXd& m) {
  return m.transpose();
}

// The time the busiest NIC direction needs for its bytes (NIC -> bytes, each direction).
double busiest_nic_s(const Cluster& c, const std::map<int, double>& out,
                     const std::map<int, double>& in) {
  double slowest = 0;
  for (const auto& [nic, b] : out) slowest = std::max(slowest, b / nic_Bps(c, nic));
  for (const auto& [nic, b] : in) slowest = std::max(slowest, b / nic_Bps(c, nic));
  return slowest;
}

// The all-to-all's off-machine bytes through each device's NIC (nic_of; both directions
// apart): the slowest NIC's time plus the largest latency; 0 when the group sits in one
// machine.
double nic_time(const Cluster& c, const std::vector<int>& devices, const Eigen::MatrixXd& bytes,
                const Eigen::MatrixXd& latency_s) {
  std::map<int, double> out, in;  // NIC -> bytes
  double latency = 0;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    for (std::size_t j = 0; j < devices.size(); ++j) {
      const int mi = c.devices()[devices[i]].machine, mj = c.devices()[devices[j]].machine;
      if (mi == mj || bytes(i, j) <= 0) continue;
      out[nic_of(c, devices[i])] += bytes(i, j);
      in[nic_of(c, devices[j])] += bytes(i, j);
      latency = std::max(latency, latency_s(i, j));
    }
  }
  const double slowest = busiest_nic_s(c, out, in);
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

// The flash kernels' forward or backward rate at the whole sequence's length: ring blocks of
// long contexts are far past the kernels' saturation lengths.
double SequenceCost::attention_flops_s(int device, bool backward) const {
  const GpuSpec& g = gpu(device);
  return g.flops() *
         attention_efficiency(profile_.device(g), backward, training_.seq_len, model_.head_dim());
}

double SequenceCost::token_wise_s(int device, std::int64_t tokens, bool forward_only) const {
  return token_wise_s(device, MemberWork{tokens, 1.0, 1.0, 1}, forward_only);
}

double SequenceCost::token_wise_s(int device, const MemberWork& w, bool forward_only) const {
  if (w.tokens <= 0) return 0.0;
  TrainingConfig t = training_;
  t.seq_len = static_cast<int>(w.tokens);
  const std::vector<Kernel> ks =
      token_wise_kernels(model_, t, w.phi, w.share, t.recompute, true, !forward_only);
  const GpuSpec& g = gpu(device);
  return kernels_time(ks, g, profile_.device(g));
}

double SequenceCost::head_s(int device, std::int64_t tokens) const {
  return head_s(device, MemberWork{tokens, 1.0, 1.0, 1});
}

double SequenceCost::head_s(int device, const MemberWork& w) const {
  if (w.tokens <= 0) return 0.0;
  TrainingConfig t = training_;
  t.seq_len = static_cast<int>(w.tokens);
  std::vector<Kernel> ks = embedding_forward(model_, t, 1, w.share);
  append(ks, embedding_backward(model_, t, 1, w.share));
  append(ks, head_forward(model_, t, 1, w.phi, w.share));
  append(ks, head_backward(model_, t, 1, w.phi, w.share));
  const GpuSpec& g = gpu(device);
  return kernels_time(ks, g, profile_.device(g));
}

double SequenceCost::group_s(const SequenceGroup& g, bool forward_only) const {
  if (g.size() <= 1) return 0.0;
  const double replay = training_.recompute == Recompute::kFull ? 1.0 : 0.0;
  if (g.tensor) {
    // Two all-gathers and two reduce-scatters of the group's hidden states per pass.
    const double bytes = tensor_group_bytes(model_, training_, g);
    const auto [bw, lat] = ring_link(cluster_, g.devices, bytes);
    const double pass = 2 * collective_time(Collective::kAllGather, bytes, g.size(), bw, lat) +
                        2 * collective_time(Collective::kReduceScatter, bytes, g.size(), bw, lat);
    return forward_only ? pass : (2 + replay) * pass;
  }
  const UlyssesGroup u{g.shards, g.heads};
  const Eigen::MatrixXd bw = group_bandwidths(cluster_, g.devices);
  const Eigen::MatrixXd lat = group_latencies(cluster_, g.devices);
  const Eigen::MatrixXd qkv = ulysses_qkv_bytes(attention_, u);
  const Eigen::MatrixXd out = ulysses_output_bytes(attention_, u);
  auto time = [&](const Eigen::MatrixXd& bytes) {
    return std::max(all_to_all_time(bytes, bw, lat), nic_time(cluster_, g.devices, bytes, lat));
  };
  const double forward = time(qkv) + time(out);
  if (forward_only) return forward;
  const double backward = time(transposed(out)) + time(transposed(qkv));
  return forward + backward + replay * forward;
}

std::vector<double> SequenceCost::ring_end_s(const SequenceLayout& layout, bool backward) const {
  return RingModel(*this, layout, backward).run();
}

namespace {

// SequenceCost::layer in named steps: each group's all-to-alls; the rings' ends (beside
// ZeRO-3's collectives where they share the NICs); each device's time from its group's.
class LayerModel {
 public:
  LayerModel(const SequenceCost& cost, const SequenceLayout& layout)
      : cost_(cost),
        layout_(layout),
        replay_(cost.training().recompute == Recompute::kFull ? 1.0 : 0.0) {}

  LayerTime run() {
    all_to_alls();
    ring_ends();
    LayerTime out;
    std::size_t flat = 0;
    for (int g = 0; g < static_cast<int>(layout_.groups.size()); ++g) add_group(g, flat, out);
    return out;
  }

 private:
  // token_wise_s by (GPU, work, forward only): devices of one type with equal shards
  // repeat across a layout, and the kernel list behind each value is long.
  double token_wise_of(int g, int r, bool forward_only) {
    const SequenceGroup& group = layout_.groups[g];
    const int d = group.devices[r];
    const MemberWork w = member_work(group, r, cost_.model().heads);
    const auto key = std::make_tuple(&cost_.gpu(d), w.tokens, w.phi, w.share, forward_only);
    const auto it = token_wise_.find(key);
    if (it != token_wise_.end()) return it->second;
    return token_wise_[key] = cost_.token_wise_s(d, w, forward_only);
  }

  // Each group's all-to-alls, forward + backward (+ replay) and forward only.
  void all_to_alls() {
    for (const SequenceGroup& g : layout_.groups) {
      a2a_.push_back(cost_.group_s(g));
      a2a_forward_.push_back(cost_.group_s(g, true));
    }
  }

  void ring_ends() {
    const RingModel forward_ring(cost_, layout_, false), backward_ring(cost_, layout_, true);
    if (cost_.training().zero_stage >= 3 && layout_.groups.size() > 1) {
      ring_ends_beside_zero(forward_ring, backward_ring);
    } else {
      forward_ = forward_ring.run();
      replayed_ = forward_;
      backward_ = backward_ring.run();
    }
  }

  // ZeRO-3's collectives share the ring's NICs (the lowering's DP stream, issued ahead).
  // The forward ring runs beside a layer's gather, which moves alone while the NICs are
  // free before it: the token-wise work between two forward rings and, for groups inside
  // one machine, their all-to-alls (`before`). The replay and the backward rings run
  // beside a scatter and a gather, issued at the replay: before the replay ring, the
  // Q, K, V all-to-all leaves the NICs free (about half the forward's all-to-all time);
  // between the two rings the post-attention work of both passes, the output and dO
  // all-to-alls (`between`). Each NIC's window is the longest of its ring hops' ends: a
  // ring's transfers start once both ends have reached it.
  void ring_ends_beside_zero(const RingModel& forward_ring, const RingModel& backward_ring) {
    const Cluster& cluster = cost_.cluster();
    std::vector<double> before, qkv, between;  // layout order
    for (std::size_t g = 0; g < layout_.groups.size(); ++g) {
      const SequenceGroup& group = layout_.groups[g];
      const double free_a2a = one_machine(cluster, group.devices) ? a2a_forward_[g] : 0.0;
      for (int r = 0; r < group.size(); ++r) {
        const double all = token_wise_of(static_cast<int>(g), r, false);
        const double fwd = token_wise_of(static_cast<int>(g), r, true);
        before.push_back(fwd + free_a2a);
        qkv.push_back(replay_ * free_a2a / 2);
        between.push_back(all - fwd + free_a2a * (replay_ > 0 ? 1.0 : 0.5));
      }
    }
    const double bytes = cost_.training().bytes_per_element() * cost_.model().layer_params();
    const ZeroWindows windows{before, qkv, between, replay_ > 0};
    beside_zero(forward_ring, backward_ring, layout_.devices(), bytes,
                ring_link(cluster, layout_.devices(), bytes).first, windows, forward_, replayed_,
                backward_);
  }

  // Group g's devices (from flat index `flat` on, advanced past them) into `out`: each its
  // token-wise work, its group's all-to-alls and the group's slowest ring ends.
  void add_group(int g, std::size_t& flat, LayerTime& out) {
    const AttentionShape& attention = cost_.attention();
    const SequenceGroup& group = layout_.groups[g];
    const std::size_t first = flat;
    double fwd = 0, again = 0, bwd = 0;
    for (int r = 0; r < group.size(); ++r, ++flat) {
      fwd = std::max(fwd, forward_[flat]);
      if (replay_ > 0) again = std::max(again, replayed_[flat]);
      bwd = std::max(bwd, backward_[flat]);
    }
    for (int r = 0; r < group.size(); ++r) {
      const int d = group.devices[r];
      const std::int64_t pairs = mirrored_rank_pairs(cost_.training().seq_len, group.tokens);
      const double busy = (1 + replay_) *
                              attention_forward_flops(pairs, group.heads[r], attention.head_dim) /
                              cost_.attention_flops_s(d, false) +
                          attention_backward_flops(pairs, group.heads[r], attention.head_dim) /
                              cost_.attention_flops_s(d, true);
      DeviceTime dt{d, g, r, token_wise_of(g, r, false), a2a_[g], fwd + again + bwd, busy};
      dt.forward_s = token_wise_of(g, r, true) + a2a_forward_[g] + fwd;
      out.forward_s = std::max(out.forward_s, dt.forward_s);
      if (out.devices.empty() || dt.total_s() > out.time_s) {
        out.time_s = dt.total_s();
        out.slowest = static_cast<int>(first) + r;
      }
      out.devices.push_back(dt);
    }
  }

  const SequenceCost& cost_;
  const SequenceLayout& layout_;
  const double replay_;  // 1 under full recompute: the forward ring runs again
  std::map<std::tuple<const GpuSpec*, std::int64_t, double, double, bool>, double> token_wise_;
  std::vector<double> a2a_, a2a_forward_;              // per group: all_to_alls()
  std::vector<double> forward_, replayed_, backward_;  // ring ends, layout order
};

}  // namespace

LayerTime SequenceCost::layer(const SequenceLayout& layout) const {
  return LayerModel(*this, layout).run();
}

double SequenceCost::nic_layer_s(const SequenceLayout& layout) const {
  std::map<int, double> out, in;  // NIC -> bytes per layer
  auto add = [&](int src, int dst, double bytes) {
    if (cluster_.devices()[src].machine == cluster_.devices()[dst].machine || bytes <= 0) return;
    out[nic_of(cluster_, src)] += bytes;
    in[nic_of(cluster_, dst)] += bytes;
  };
  const int replay = training_.recompute == Recompute::kFull ? 1 : 0;
  const double d = attention_.head_dim, e = attention_.bytes_per_element,
               ge = attention_.grad_bytes_per_element, S = training_.seq_len;
  const int p = static_cast<int>(layout.groups.size());
  if (p > 1) {
    // Hop g -> g+1 of interval m: forward every block but the receiver's (P - 1 steps),
    // backward those again with every block's dK, dV (P steps).
    const SubRings rings = sub_rings(attention_, layout);
    for (int g = 0; g < p; ++g) {
      const SequenceGroup &from = layout.groups[g], &to = layout.groups[(g + 1) % p];
      for (std::size_t m = 0; m < rings.kv.size(); ++m) {
        const double kv = 2.0 * rings.kv[m] * d;
        const double forward = (S - static_cast<double>(to.tokens)) * kv * e;
        add(from.devices[rings.owner[g][m]], to.devices[rings.owner[(g + 1) % p][m]],
            (2 + replay) * forward + S * kv * ge);
      }
    }
  }
  for (const SequenceGroup& g : layout.groups) {
    if (g.size() <= 1) continue;
    if (g.tensor) {
      // Four ring collectives per pass (two all-gathers, two reduce-scatters): each hop
      // carries (n - 1) / n of the bytes per collective.
      const int n = g.size();
      const double hop =
          4.0 * (2 + replay) * (n - 1) / n * tensor_group_bytes(model_, training_, g);
      for (int i = 0; i < n; ++i) add(g.devices[i], g.devices[(i + 1) % n], hop);
      continue;
    }
    const UlyssesGroup u{g.shards, g.heads};
    const Eigen::MatrixXd bytes =
        ulysses_qkv_bytes(attention_, u) + ulysses_output_bytes(attention_, u);
    for (int i = 0; i < g.size(); ++i) {
      for (int j = 0; j < g.size(); ++j) {
        // Forward and the replay one way, backward the other.
        add(g.devices[i], g.devices[j], (1 + replay) * bytes(i, j) + bytes(j, i));
      }
    }
  }
  if (training_.zero_stage >= 3) {
    // Two all-gathers and a reduce-scatter of the layer's weights over the mesh's ring.
    const std::vector<int> ring = layout.devices();
    const int n = static_cast<int>(ring.size());
    const double hop = 3.0 * (n - 1) / n * training_.bytes_per_element() * model_.layer_params();
    for (int i = 0; i < n && n > 1; ++i) add(ring[i], ring[(i + 1) % n], hop);
  }
  return busiest_nic_s(cluster_, out, in);
}

SplitFree SequenceCost::split_free(const std::vector<int>& devices) const {
  SplitFree f;
  const int n = static_cast<int>(devices.size());
  const double e = training_.bytes_per_element();
  auto time = [&](Collective c, double params) {
    const auto [ring_bw, ring_lat] = ring_link(cluster_, devices, e * params);
    return collective_time(c, e * params, n, ring_bw, ring_lat);
  };
  if (training_.zero_stage >= 3) {
    f.gather_s = time(Collective::kAllGather, model_.layer_params());
    f.scatter_s = time(Collective::kReduceScatter, model_.layer_params());
    f.exposed_s = time(Collective::kAllGather, model_.embedding_params()) + 2 * f.gather_s +
                  f.scatter_s + time(Collective::kReduceScatter, model_.embedding_params());
  } else {
    f.sync_s = time(Collective::kAllReduce, model_.params());
  }
  const double owned = model_.params() / (training_.zero_stage >= 1 ? n : 1);
  for (int d : devices) f.optimizer_s = std::max(f.optimizer_s, adam_s(d, owned));
  return f;
}

// Adam touches fp32 master weights and both moments and the e-byte weights and grads: ~28
// bytes per owned parameter (estimate.hpp's figure), memory-bound.
double SequenceCost::adam_s(int device, double owned) const {
  const GpuSpec& g = gpu(device);
  return owned * 28 / (g.memory_GBps * 1e9 * profile_.device(g).memory_efficiency);
}

SplitFree SequenceCost::layout_free(const SequenceLayout& layout) const {
  if (!layout.has_tensor_groups()) return split_free(layout.devices());
  // ZeRO 0-2 (tensor groups refuse ZeRO-3). The gradients are all-reduced piece by piece, as
  // the lowering's buckets: the weights of each interval of the common refinement of the
  // groups' head ranges over that interval's holders (head_holders), the replicated ones
  // (norms, positions) over every device. A device runs its pieces one after the other; pieces
  // of different holders run at once and share the NICs their rings cross. The sync takes the
  // longer of the busiest device's pieces and the busiest NIC's bytes.
  SplitFree f;
  const double e = training_.bytes_per_element();
  StageShape whole = whole_model_shape(model_, 1, training_.recompute);
  whole.phi = 0;
  const double replicated = stage_params(model_, whole);
  struct Piece {
    std::vector<int> ring;
    double params = 0;
  };
  std::vector<Piece> pieces{{layout.devices(), replicated}};
  const SubRings rings = sub_rings(attention_, layout);
  for (std::size_t m = 0; m + 1 < rings.bounds.size(); ++m) {
    whole.phi = static_cast<double>(rings.bounds[m + 1] - rings.bounds[m]) / model_.heads;
    pieces.push_back(
        {head_holders(layout, rings.bounds[m]), stage_params(model_, whole) - replicated});
  }
  std::map<int, double> busy;     // device -> its pieces' time
  std::map<int, double> out, in;  // NIC -> bytes
  for (const Piece& p : pieces) {
    const int n = static_cast<int>(p.ring.size());
    if (n <= 1) continue;
    const double bytes = e * p.params;
    const auto [bw, lat] = ring_link(cluster_, p.ring, bytes);
    const double t = collective_time(Collective::kAllReduce, bytes, n, bw, lat);
    for (int d : p.ring) busy[d] += t;
    for (int i = 0; i < n; ++i) {
      const int from = p.ring[i], to = p.ring[(i + 1) % n];
      if (cluster_.devices()[from].machine == cluster_.devices()[to].machine) continue;
      out[nic_of(cluster_, from)] += 2.0 * (n - 1) / n * bytes;
      in[nic_of(cluster_, to)] += 2.0 * (n - 1) / n * bytes;
    }
  }
  f.sync_s = busiest_nic_s(cluster_, out, in);
  for (const auto& [d, t] : busy) f.sync_s = std::max(f.sync_s, t);
  const int holders = layout.holders();
  for (const SequenceGroup& g : layout.groups) {
    for (int r = 0; r < g.size(); ++r) {
      const double owned = member_params(model_, g, r) / (training_.zero_stage >= 1 ? holders : 1);
      f.optimizer_s = std::max(f.optimizer_s, adam_s(g.devices[r], owned));
    }
  }
  return f;
}

IterationTime SequenceCost::iteration(const SequenceLayout& layout) const {
  IterationTime it;
  it.layer = layer(layout);
  double head = 0;
  // head_s by (GPU, work), as token_wise.
  std::map<std::tuple<const GpuSpec*, std::int64_t, double, double>, double> heads;
  for (const auto& g : layout.groups) {
    for (int r = 0; r < g.size(); ++r) {
      const MemberWork w = member_work(g, r, model_.heads);
      const auto key = std::make_tuple(&gpu(g.devices[r]), w.tokens, w.phi, w.share);
      auto known = heads.find(key);
      if (known == heads.end()) known = heads.emplace(key, head_s(g.devices[r], w)).first;
      head = std::max(head, known->second);
    }
  }
  // ZeRO-3, per layer: its weights gathered forward and backward and its gradients
  // scattered, on their own stream one layer ahead (FSDP's prefetch): a layer's forward
  // takes at least the gather, its backward the gather and the scatter. Exposed, as the
  // lowering orders them: the embedding's and the first layer's gathers before the forward,
  // the last layer's gather after the head's backward (its weights were freed after the
  // forward), the first layer's and the embedding's scatters after the last backward op.
  const SplitFree f = layout_free(layout);
  double layer_s = it.layer.time_s;
  if (training_.zero_stage >= 3) {
    const double forward = std::min(it.layer.forward_s, layer_s);
    layer_s = std::max(forward, f.gather_s) + std::max(layer_s - forward, f.gather_s + f.scatter_s);
  }
  it.sync_s = f.sync_s;
  it.optimizer_s = f.optimizer_s;
  // Every transfer of a layer crossing machines shares their NICs.
  layer_s = std::max(layer_s, nic_layer_s(layout));
  it.sequence_s = model_.layers * layer_s + head + f.exposed_s;
  it.iteration_s = training_.global_batch * it.sequence_s + it.sync_s + it.optimizer_s;
  it.tokens_per_s = training_.tokens_per_iteration() / it.iteration_s;
  it.memory = layout_memory(layout, model_, training_, cluster_);
  for (auto& m : it.memory) {
    m.capacity = memory_capacity(m.device);
    it.fits = it.fits && m.total() <= m.limit();
  }
  return it;
}

}  // namespace estimate
}  // namespace hexi
