#include "scheduler/estimate/estimate.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <span>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "scheduler/cost/collectives.hpp"
#include "scheduler/cost/fluid.hpp"
#include "scheduler/estimate/sequence_time.hpp"
#include "topologies/machine_set_links.hpp"
#include "topologies/text.hpp"

namespace hexi {
inline namespace estimate {

CostModel::CostModel(const Cluster& cluster, const Model& model, const TrainingConfig& training,
                     const Profile& profile)
    : cluster_(cluster), model_(model), training_(training), profile_(profile) {
  for (const GpuSpec& gpu : cluster_.gpu_types()) type_profiles_.push_back(profile_.device(gpu));
}

double CostModel::layer_s(int device, double phi, int micro_batch, bool forward, Recompute r,
                          double share, double experts) const {
  const int type = cluster_.devices()[device].gpu_type;
  if (forward) r = Recompute::kNone;  // the forward does not depend on it
  auto key = std::make_tuple(type, phi, micro_batch, forward, r, share, experts);
  auto it = layer_cache_.find(key);
  if (it != layer_cache_.end()) return it->second;
  const GpuSpec& gpu = cluster_.gpu_types()[type];
  const DeviceProfile& prof = type_profiles_[type];
  double t = 0;
  for (Block b : {Block::kAttention, Block::kMlp}) {
    t += kernels_time(
        forward ? block_forward(model_, training_, b, micro_batch, phi, share, experts)
                : block_backward(model_, training_, b, micro_batch, phi, r, share, experts),
        gpu, prof);
  }
  layer_cache_.emplace(key, t);
  return t;
}

double CostModel::layer_forward_s(int device, double phi, int micro_batch, double share,
                                  double experts) const {
  return layer_s(device, phi, micro_batch, true, Recompute::kNone, share, experts);
}

double CostModel::layer_backward_s(int device, double phi, int micro_batch) const {
  return layer_s(device, phi, micro_batch, false, training_.recompute, 1.0, -1);
}

double CostModel::layer_backward_s(int device, double phi, int micro_batch, Recompute r,
                                   double share, double experts) const {
  return layer_s(device, phi, micro_batch, false, r, share, experts);
}

StageEstimate CostModel::mesh_stage(const Stage& s, bool first, bool last) const {
  StageEstimate e;
  e.recompute = training_.recompute;
  const SequenceCost cost(cluster_, model_, training_, profile_);
  const LayerTime layer = cost.layer(*s.sequence);
  double f_ends = 0, b_ends = 0;  // the slowest device's embedding / head, per direction
  for (const SequenceGroup& g : s.sequence->groups) {
    for (int r = 0; r < g.size(); ++r) {
      const TrainingConfig mine = member_training(training_, g, r);
      const MemberWork w = member_work(g, r, model_.heads);
      const int d = g.devices[r];
      const GpuSpec& gpu = cluster_.gpu(d);
      const DeviceProfile& prof = type_profiles_[cluster_.devices()[d].gpu_type];
      double f = 0, b = 0;
      if (first) {
        f += kernels_time(embedding_forward(model_, mine, 1, w.share), gpu, prof);
        b += kernels_time(embedding_backward(model_, mine, 1, w.share), gpu, prof);
      }
      if (last) {
        f += kernels_time(head_forward(model_, mine, 1, w.phi, w.share), gpu, prof);
        b += kernels_time(head_backward(model_, mine, 1, w.phi, w.share), gpu, prof);
      }
      f_ends = std::max(f_ends, f);
      b_ends = std::max(b_ends, b);
    }
  }
  e.forward_s = s.layers() * layer.forward_s + f_ends;
  e.backward_s = s.layers() * (layer.time_s - layer.forward_s) + b_ends;
  return e;
}

MemoryBreakdown CostModel::mesh_memory(const Pipeline& p, int si, int rank, int dp) const {
  const Stage& s = p.stages[si];
  StageShape shape = rank_shape(p, si, 0, model_.heads);
  shape.in_flight = in_flight_micro_batches(training_.schedule, si,
                                            static_cast<int>(p.stages.size()), p.micro_batches());
  shape.dp = dp;
  return mesh_stage_memory(*s.sequence, s.devices[static_cast<std::size_t>(rank)], model_,
                           training_, shape);
}

StageEstimate CostModel::stage(const Stage& s, bool first, bool last, int micro_batch) const {
  if (s.mesh()) return mesh_stage(s, first, last);
  StageEstimate e;
  e.recompute = s.recompute_in(training_);
  const int t = s.tp();
  const double share = token_share(training_, t);
  double fwd = 0, bwd = 0;
  for (int r = 0; r < t; ++r) {
    const int d = s.devices[r];
    const double phi = s.phi(r, model_.heads), experts = s.expert_share(r);
    const GpuSpec& gpu = cluster_.gpu(d);
    const DeviceProfile& prof = type_profiles_[cluster_.devices()[d].gpu_type];
    double f = s.layers() * layer_forward_s(d, phi, micro_batch, share, experts);
    double b = s.layers() * layer_backward_s(d, phi, micro_batch, e.recompute, share, experts);
    if (first) {
      f += kernels_time(embedding_forward(model_, training_, micro_batch, share), gpu, prof);
      b += kernels_time(embedding_backward(model_, training_, micro_batch, share), gpu, prof);
    }
    if (last) {
      f += kernels_time(head_forward(model_, training_, micro_batch, phi, share), gpu, prof);
      b += kernels_time(head_backward(model_, training_, micro_batch, phi, share), gpu, prof);
    }
    fwd = std::max(fwd, f);
    bwd = std::max(bwd, b);
  }
  if (t > 1) {
    const double hidden = hidden_bytes(model_, training_, micro_batch);
    const auto [bw, lat] = ring_link(cluster_, s.devices, hidden);
    auto time = [&, bw = bw, lat = lat](bool forward) {
      const TpCollectives c =
          tp_collectives(training_, s.layers(), first, last, forward, e.recompute);
      return c.count * collective_time(c.kind, hidden, t, bw, lat);
    };
    const double tp_f = time(true), tp_b = time(false);
    fwd += tp_f;
    bwd += tp_b;
    e.tp_comm_s = tp_f + tp_b;
  }
  e.forward_s = fwd;
  e.backward_s = bwd;
  return e;
}

CostModel::BoundaryFlows CostModel::boundary_flows(const std::vector<int>& src,
                                                   const std::vector<int>& dst,
                                                   double bytes) const {
  const int ts = static_cast<int>(src.size()), td = static_cast<int>(dst.size());
  BoundaryFlows out;
  int largest = 0;
  for (const Piece& p : boundary_pieces(ts, td, ts * td, training_.sequence_parallel)) {
    out.flows.emplace_back(src[p.src_rank], dst[p.dst_rank]);
    largest = std::max(largest, p.rows_end - p.rows_begin);
  }
  out.message = bytes * largest / (ts * td);
  return out;
}

bool CostModel::boundary_gathers(const std::vector<int>& dst) const {
  return dst.size() > 1 && !training_.sequence_parallel;
}

double CostModel::flow_link_Bps(const std::vector<std::pair<int, int>>& flows,
                                std::size_t k) const {
  const int a = flows[k].first, b = flows[k].second;
  const auto same_source =
      std::ranges::count_if(flows, [a](const auto& f) { return f.first == a; });
  return cluster_.link(a, b).bandwidth_Bps / static_cast<double>(same_source);
}

void CostModel::count_off_machine(const std::vector<std::pair<int, int>>& flows,
                                  NicFlows& f) const {
  for (auto [a, b] : flows) {
    const int ma = cluster_.devices()[a].machine, mb = cluster_.devices()[b].machine;
    if (ma == mb) continue;
    f.out[ma] += 1;
    f.in[mb] += 1;
  }
}

void CostModel::add_nic_flows(const std::vector<int>& src, const std::vector<int>& dst,
                              double bytes, NicFlows& f) const {
  count_off_machine(boundary_flows(src, dst, bytes).flows, f);
}

double CostModel::transfer_s(const std::vector<int>& src, const std::vector<int>& dst, double bytes,
                             const NicFlows* busy) const {
  const int td = static_cast<int>(dst.size());
  // Flows off a machine share its NICs: those of this boundary, or of every pipeline's
  // boundaries when `busy` counts them.
  const auto [flows, message] = boundary_flows(src, dst, bytes);
  NicFlows mine;
  count_off_machine(flows, mine);
  auto sharing = [&](const NicCounts& own, const NicCounts* all, int machine) {
    double k = own.at(machine);
    if (all != nullptr) {
      auto it = all->find(machine);
      if (it != all->end()) k = std::max(k, it->second);
    }
    return k;
  };
  double worst = 0;
  for (std::size_t k = 0; k < flows.size(); ++k) {
    const auto [a, b] = flows[k];
    double bw = flow_link_Bps(flows, k);
    int ma = cluster_.devices()[a].machine, mb = cluster_.devices()[b].machine;
    if (ma != mb) {
      bw = std::min(bw, fair_share(cluster_.machines()[ma].nic_Bps,
                                   sharing(mine.out, busy != nullptr ? &busy->out : nullptr, ma)));
      bw = std::min(bw, fair_share(cluster_.machines()[mb].nic_Bps,
                                   sharing(mine.in, busy != nullptr ? &busy->in : nullptr, mb)));
    }
    bw *= cluster_.efficiency(a, b, message);  // the sender's (largest) message
    worst = std::max(worst, p2p_time(message, bw, cluster_.step_latency(a, b)));
  }
  if (boundary_gathers(dst)) {
    auto [bw, lat] = ring_link(cluster_, dst, bytes);
    worst += collective_time(Collective::kAllGather, bytes, td, bw, lat);
  }
  return worst;
}

PipelineTimeline CostModel::pipeline_timeline(const std::vector<StageEstimate>& stages,
                                              int micro_batches, int chunks) const {
  std::vector<StageTimes> times;
  times.reserve(stages.size());
  for (const auto& s : stages) times.push_back({s.forward_s, s.backward_s, s.send_s, s.grad_s});
  if (chunks > 1) return cost::interleaved_timeline(times, micro_batches, chunks);
  return cost::pipeline_timeline(times, micro_batches, training_.schedule);
}

double CostModel::pipeline_s(const std::vector<StageEstimate>& stages, int micro_batches,
                             double* bottleneck) const {
  PipelineTimeline t = pipeline_timeline(stages, micro_batches);
  if (bottleneck != nullptr) *bottleneck = t.period_s;
  return t.time_s;
}

StageShape rank_shape(const Stage& s, bool first, bool last, int rank, int heads, int micro_batch) {
  StageShape shape;
  shape.layer_begin = s.layer_begin;
  shape.layer_end = s.layer_end;
  shape.first = first;
  shape.last = last;
  shape.tp = s.tp();
  shape.phi = s.phi(rank, heads);
  shape.experts = s.expert_share(rank);
  shape.micro_batch = micro_batch;
  shape.recompute = s.recompute;
  return shape;
}

StageShape rank_shape(const Pipeline& p, int si, int rank, int heads) {
  return rank_shape(p.stages[si], si == 0, si == static_cast<int>(p.stages.size()) - 1, rank, heads,
                    p.micro_batch);
}

MemoryBreakdown CostModel::memory(const Pipeline& p, int si, int rank, int dp) const {
  if (p.stages[si].mesh()) return mesh_memory(p, si, rank, dp);
  if (p.chunks() > 1) return interleaved_memory(p, si, rank, dp);
  StageShape shape = rank_shape(p, si, rank, model_.heads);
  shape.in_flight = in_flight_micro_batches(training_.schedule, si,
                                            static_cast<int>(p.stages.size()), p.micro_batches());
  shape.dp = dp;
  return device_memory(model_, training_, shape);
}

// A device of group r of an interleaved pipeline holds each of its chunks' weights and, at
// the peak of its order's activation bytes, each chunk's micro-batches in flight then
// (schedule.hpp).
MemoryBreakdown CostModel::interleaved_memory(const Pipeline& p, int r, int rank, int dp) const {
  const int groups = p.groups(), chunks = p.chunks();
  std::vector<StageShape> shapes;
  std::vector<double> bytes;  // one micro-batch's activations per chunk
  for (int c = 0; c < chunks; ++c) {
    shapes.push_back(rank_shape(p, c * groups + r, rank, model_.heads));
    shapes.back().in_flight = 1;
    shapes.back().dp = dp;
    bytes.push_back(device_memory(model_, training_, shapes.back()).activations);
  }
  const std::vector<int> alive = interleaved_in_flight(r, groups, chunks, p.micro_batches(), bytes);
  MemoryBreakdown sum;
  for (int c = 0; c < chunks; ++c) {
    shapes[static_cast<std::size_t>(c)].in_flight = alive[static_cast<std::size_t>(c)];
    sum.add_chunk(device_memory(model_, training_, shapes[static_cast<std::size_t>(c)]));
  }
  return sum;
}

namespace {

std::string gib(double bytes) {
  return fixed(bytes / kGiB, 2);
}

}  // namespace

namespace {

// The DP gradient sync of a plan, in named steps. A device's gradients fall into
// pieces, each reduced with the same stages of the other pipelines (as the lowering's
// DP buckets do): the embedding, runs of layers in which no pipeline changes stage, the
// head, with neighbours that have the same holder stages merged. Each piece is reduced in
// rings (its holders: the ranks whose shares overlap) at the slowest link to its holders.
// The rings run in the lowering's issue order, a device in one at a time, each when its
// last member is free: a device's pieces wait for holders still busy with other rings. A
// machine's NICs carry every off-machine ring through it (a ring's members on one machine
// are adjacent: it crosses the NICs once each way), so its rings end no earlier than their
// bytes at the NICs' summed rate allow, counted from when each starts; what runs past the
// slowest pipeline is exposed.
class DpSync {
 public:
  // Ready for `plan` (dp_sync() keeps one per thread, so that its buffers keep their capacity
  // from one estimate to the next).
  void reset(const CostModel& cm, const Plan& plan) {
    cm_ = &cm;
    plan_ = &plan;
    dp_ = static_cast<int>(plan.pipelines.size());
    layers_ = cm.model().layers;
    holder_.assign(static_cast<std::size_t>(dp_) * layers_, -1);
    boundary_.assign(layers_, 0);
    stages_.clear();
    first_stage_.clear();
    bounds_.clear();
    bounds_begin_.clear();
    stage_machine_.clear();
    // Per piece key (layer + 1: -1 the embedding ... layers the head): its cuts, holders and
    // rings; entries tagged with an earlier generation are another plan's.
    ++generation_;
    const std::size_t keys = static_cast<std::size_t>(layers_) + 2;
    cuts_.resize(std::max(cuts_.size(), keys));
    cuts_tag_.resize(cuts_.size(), 0);
    holders_.resize(std::max(holders_.size(), keys));
    ring_index_.resize(std::max(ring_index_.size(), keys));
    differ_.resize(std::max(differ_.size(), keys * keys));
    differ_tag_.resize(differ_.size(), 0);
    blocks_.clear();
    block_s_.clear();
    row_machine_ = -1;
    for (int p = 0; p < dp_; ++p) {
      first_stage_.push_back(static_cast<int>(stages_.size()));
      for (const auto& s : plan.pipelines[p].stages) {
        const int id = static_cast<int>(stages_.size());
        stages_.push_back(&s);
        // Rank r holds [bounds[r], bounds[r + 1]) of the heads / columns.
        bounds_begin_.push_back(bounds_.size());
        bounds_.push_back(0.0);
        for (int r = 0; r < s.tp(); ++r)
          bounds_.push_back(bounds_.back() + s.phi(r, cm.model().heads));
        int m = machine(s.devices.front());
        for (int d : s.devices) m = machine(d) == m ? m : -1;
        stage_machine_.push_back(m);
        for (int l = s.layer_begin; l < s.layer_end; ++l) holder_[holder_index(p, l)] = id;
        if (s.layer_begin < layers_) boundary_[s.layer_begin] = 1;
      }
    }
    first_stage_.push_back(static_cast<int>(stages_.size()));
  }

  // The DP sync into `est`; false, with dp_sync_s the floor's, where the iteration's floor
  // reaches `limit` before the rings run. The floor: every device's schedule end plus its own
  // pieces' times one after another. A device runs its rings one at a time, none before its
  // schedule ends or faster than its time alone, and each of its pieces' slices is one of them
  // at least as long as its share of the piece's time: no ring schedule ends before it.
  bool run(Estimate& est, double limit) {
    finish_.assign(cm_->cluster().num_devices(), 0);
    for (const auto& de : est.devices) {
      finish_[de.device] = est.pipelines[de.pipeline].finish_s[de.stage];
    }
    piece_begin_.assign(1, 0);
    pieces_.clear();
    for (const auto& de : est.devices) {
      pieces(de, pieces_);
      piece_begin_.push_back(pieces_.size());
    }
    piece_s_.assign(pieces_.size(), 0.0);
    // The ranks of a stage follow each other: links that depend only on the machine are
    // found once per stage, and (with ZeRO, whose rings do not depend on the device's rank)
    // the next rank with the same pieces takes the same time.
    std::vector<PieceLinks>& links = links_;
    int links_of = -1;   // the stage whose ranks share `links`
    bool reuse = false;  // the previous device shares this one's links
    for (std::size_t i = 0; i < est.devices.size(); ++i) {
      DeviceEstimate& de = est.devices[i];
      const int own = first_stage_[de.pipeline] + de.stage;
      if (own != links_of) {
        links_of = piece_links(de, pieces_of(i), links) ? own : -1;
        reuse = false;
      }
      if (reuse && cm_->training().zero_stage != 0 &&
          std::ranges::equal(pieces_of(i), pieces_of(i - 1))) {
        de.dp_sync_s = est.devices[i - 1].dp_sync_s;
        std::copy(piece_s_.begin() + piece_begin_[i - 1], piece_s_.begin() + piece_begin_[i],
                  piece_s_.begin() + piece_begin_[i]);
      } else {
        de.dp_sync_s = device_sync_s(de, pieces_of(i), links, piece_s_.data() + piece_begin_[i]);
      }
      reuse = links_of == own;
    }
    double floor_end = 0;
    for (const DeviceEstimate& de : est.devices)
      floor_end = std::max(floor_end, finish_[de.device] + de.dp_sync_s);
    est.dp_sync_s = std::max(0.0, floor_end - est.pipeline_s);
    if (!(est.pipeline_s + est.dp_sync_s + est.optimizer_s < limit)) return false;
    build_rings(est);
    est.dp_sync_s = std::max(0.0, rings_end_s() - est.pipeline_s);
    return true;
  }

 private:
  // The stage (id into stages_) of pipeline q holding a piece: the embedding (layer -1),
  // a layer run starting at `layer`, or the head (layer == layers).
  int holder_of(int q, int layer) const {
    if (layer < 0) return first_stage_[q];
    if (layer >= layers_) return first_stage_[q + 1] - 1;
    return holder_[holder_index(q, layer)];
  }

  std::size_t holder_index(int q, int layer) const {
    return static_cast<std::size_t>(q) * layers_ + layer;
  }

  int machine(int device) const { return cm_->cluster().devices()[device].machine; }

  // The share [begin, end) of the heads / columns that TP rank r of stage `id` holds.
  std::pair<double, double> share(int id, int r) const {
    const std::size_t b = bounds_begin_[id] + r;
    return {bounds_[b], bounds_[b + 1]};
  }

  // Every share boundary of the holders of a piece, sorted, without repeats.
  const std::vector<double>& cuts_of(int layer) {
    std::vector<double>& cuts = cuts_[layer + 1];
    if (cuts_tag_[layer + 1] != generation_) {
      cuts_tag_[layer + 1] = generation_;
      cuts.clear();
      for (int q = 0; q < dp_; ++q) {
        const int h = holder_of(q, layer);
        cuts.insert(
            cuts.end(), bounds_.begin() + static_cast<std::ptrdiff_t>(bounds_begin_[h]),
            bounds_.begin() + static_cast<std::ptrdiff_t>(bounds_begin_[h] + 1 + stages_[h]->tp()));
      }
      std::sort(cuts.begin(), cuts.end());
      cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    }
    return cuts;
  }

  // The rings of the plan's DP sync. A piece is reduced in slices, one per interval of the
  // common refinement of its holders' TP shares: a slice's ring is the rank of each pipeline
  // holding that interval. Found by (piece key, slice start in 1e-9 of the columns); issued
  // in the lowering's order: by piece key from the head down to the embedding, then by slice.
  struct Ring {
    std::vector<int> members;
    double wire = 0;                           // bytes per NIC crossing (0: inside one machine)
    double seconds = 0;                        // its share of the slowest member's piece time
    std::vector<std::pair<int, double>> nics;  // off-machine: its machines' NIC directions
  };

  // A ring's pass (rings_end_s()): its time alone, its NIC directions (empty: inside one
  // machine) and its flow there; once running, what is left of it (1 at the start, the
  // fraction of its pass) as the fluid model runs it, and when it ends at its rate.
  static constexpr double kNever = std::numeric_limits<double>::infinity();
  struct Job {
    Ring* ring = nullptr;
    double seconds = 0;
    bool crosses = false;  // through NICs (its ring's)
    FairFlow flow;
    FluidWork work{1, 0, 0};  // its pass left, per second
    double end_s = kNever;
    bool offered = false;  // in `ready_` or started
  };
  using Event = std::pair<double, std::size_t>;  // (time, job)
  using Queue = std::priority_queue<Event, std::vector<Event>, std::greater<>>;

  void build_rings(const Estimate& est) {
    const double e = cm_->training().bytes_per_element();
    ring_count_ = 0;
    for (auto& index : ring_index_) index.clear();
    std::vector<double>& cuts = cuts_scratch_;
    for (std::size_t i = 0; i < est.devices.size(); ++i) {
      const DeviceEstimate& de = est.devices[i];
      const int own = first_stage_[de.pipeline] + de.stage;
      const auto [lo, hi] = share(own, de.tp_rank);
      const auto device_pieces = pieces_of(i);
      for (std::size_t k = 0; k < device_pieces.size(); ++k) {
        const auto [layer, params] = device_pieces[k];
        // The holders' boundaries strictly inside this rank's share (repeats would only
        // give empty slices).
        const std::vector<double>& all = cuts_of(layer);
        cuts.assign(1, lo);
        for (auto x = std::upper_bound(all.begin(), all.end(), lo + 1e-12);
             x != all.end() && *x < hi - 1e-12; ++x) {
          cuts.push_back(*x);
        }
        cuts.push_back(hi);
        for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
          const double a = cuts[c], b = cuts[c + 1];
          if (b - a < 1e-12) continue;
          const double fraction = (b - a) / (hi - lo);
          auto [ring, fresh] = find_ring(layer, std::llround(a * 1e9));
          ring.seconds = std::max(ring.seconds, piece_s_[piece_begin_[i] + k] * fraction);
          if (!fresh) continue;
          ring.members.push_back(de.device);
          for (int q = 0; q < dp_; ++q) {
            if (q == de.pipeline) continue;
            const int h = holder_of(q, layer);
            for (int r = 0; r < stages_[h]->tp(); ++r) {
              const auto [ra, rb] = share(h, r);
              if (ra < b - 1e-12 && a < rb - 1e-12) ring.members.push_back(stages_[h]->devices[r]);
            }
          }
          const auto& members = ring.members;
          const auto far = std::find_if(members.begin(), members.end(),
                                        [&](int d) { return machine(d) != machine(de.device); });
          if (far == members.end()) continue;  // inside one machine
          const double n = static_cast<double>(members.size());
          const double bytes = e * params * fraction;
          // A hierarchical all-reduce (machine blocks of g) crosses the NICs with its g
          // columns' all-reduces of bytes / g over the machines; a flat ring once.
          const auto blocks = hierarchical_blocks(members);
          ring.wire =
              blocks.empty()
                  ? 2 * (n - 1) / n * bytes / cm_->cluster().efficiency(de.device, *far, bytes / n)
                  : bus_factor(Collective::kAllReduce, static_cast<int>(blocks.size())) * bytes /
                        cm_->cluster().efficiency(de.device, *far, bytes / n);
        }
      }
    }
    ring_order_.clear();
    for (int key = layers_; key >= -1; --key) {
      auto& index = ring_index_[key + 1];
      std::sort(index.begin(), index.end());
      for (const auto& [start, id] : index) ring_order_.push_back(id);
    }
  }

  // The ring of piece `layer`'s slice from `start` (1e-9 of the columns), and whether it is
  // new (then empty, from the pool of rings_).
  std::pair<Ring&, bool> find_ring(int layer, long long start) {
    auto& index = ring_index_[layer + 1];
    for (const auto& [at, id] : index) {
      if (at == start) return {rings_[id], false};
    }
    if (ring_count_ == rings_.size()) rings_.emplace_back();
    Ring& ring = rings_[ring_count_];
    ring.members.clear();
    ring.nics.clear();
    ring.wire = ring.seconds = 0;
    index.emplace_back(start, ring_count_++);
    return {ring, true};
  }

  // Passes over the rings: 1 all-reduce each, or under ZeRO a reduce-scatter pass and an
  // all-gather pass (rings_end_s()).
  int ring_passes() const { return cm_->training().zero_stage == 0 ? 1 : 2; }

  // The rings as the simulator runs them: in issue order, a device in one at a time (its DP
  // stream), each starting when its last member is free (the end of that member's schedule or
  // of its previous ring), so a ring waits for members still busy with others; with ZeRO the
  // lowering reduce-scatters every bucket, steps the optimizer, then all-gathers every bucket:
  // two passes, each half of the all-reduce. An off-machine ring crosses each of its machines'
  // NICs once each way (its members on one machine are adjacent) and shares them max-min fairly
  // with the other rings running there, at most at its own rate: a fluid model (fluid.hpp), so
  // that rings slowed by their NICs hold up the rings that wait for their members. When the
  // last ends. Named steps: the passes' jobs, each device's queue of them, then events (ends
  // first, then starts) until none is left, the rates of the rings through NICs solved again
  // whenever one of them starts or ends.
  double rings_end_s() {
    make_jobs();
    make_queues();
    avail_ = finish_;
    while (!ready_.empty()) ready_.pop();  // empty after the last run: their buffers kept
    while (!ends_.empty()) ends_.pop();
    for (std::size_t d = 0; d < finish_.size(); ++d) {
      if (head_[d] < queue_begin_[d + 1]) offer(queue_[head_[d]]);
    }
    MaxMinFair share(nic_directions(cm_->cluster()));
    crossing_.clear();
    double end = 0;
    for (;;) {
      while (!ends_.empty() && jobs_[ends_.top().second].end_s != ends_.top().first) ends_.pop();
      const double next_start = ready_.empty() ? kNever : ready_.top().first;
      const double next_end = ends_.empty() ? kNever : ends_.top().first;
      if (next_start == kNever && next_end == kNever) break;
      const double now = std::min(next_start, next_end);
      // Ends first: the members they free may start the next jobs now.
      const bool ended = end_jobs(now, end);
      const bool started = start_jobs(now);
      if (ended || started) rerate(now, share);
    }
    return end;
  }

  // Every ring once per pass, in issue order: its share of the pass's time and, off-machine,
  // its NIC directions (each of its machines', out and in) and its flow's cap there.
  void make_jobs() {
    const int passes = ring_passes();
    jobs_.clear();
    // Per machine: the ring that last listed its NICs (one pass over a ring's members).
    listed_.assign(cm_->cluster().machines().size(), std::numeric_limits<std::size_t>::max());
    for (std::size_t id : ring_order_) {
      Ring& ring = rings_[id];
      if (!(ring.wire > 0 && ring.seconds > 0)) continue;
      for (int d : ring.members) {
        const int m = machine(d);
        if (listed_[m] != id) {
          listed_[m] = id;
          ring.nics.emplace_back(2 * m, 1.0);
          ring.nics.emplace_back(2 * m + 1, 1.0);
        }
      }
    }
    for (int pass = 0; pass < passes; ++pass) {
      for (std::size_t id : ring_order_) {
        Ring& ring = rings_[id];
        Job& job = jobs_.emplace_back();
        job.ring = &ring;
        job.seconds = ring.seconds / passes;
        job.crosses = !ring.nics.empty();
        if (job.crosses) {
          job.flow.cap = ring.wire / passes / job.seconds;
          job.flow.nics = &ring.nics;
        }
      }
    }
  }

  // Per device its jobs in order (queue_[queue_begin_[d] ..]); a job starts once it heads
  // every member's queue, when its last member is free.
  void make_queues() {
    const std::size_t devices = finish_.size();
    queue_begin_.assign(devices + 1, 0);
    for (const Job& job : jobs_) {
      for (int d : job.ring->members) ++queue_begin_[d + 1];
    }
    std::partial_sum(queue_begin_.begin(), queue_begin_.end(), queue_begin_.begin());
    queue_.resize(queue_begin_.back());
    head_.assign(queue_begin_.begin(), queue_begin_.end() - 1);
    for (std::size_t j = 0; j < jobs_.size(); ++j) {
      for (int d : jobs_[j].ring->members) queue_[head_[d]++] = j;
    }
    head_.assign(queue_begin_.begin(), queue_begin_.end() - 1);
  }

  // Job j into ready_ once it heads every member's queue, at its last member's free time.
  void offer(std::size_t j) {
    if (jobs_[j].offered) return;
    double start = 0;
    for (int d : jobs_[j].ring->members) {
      if (head_[d] == queue_begin_[d + 1] || queue_[head_[d]] != j) return;
      start = std::max(start, avail_[d]);
    }
    jobs_[j].offered = true;
    ready_.emplace(start, j);
  }

  // The running jobs that end at `now` (the latest end so far into `end`): their members
  // free, the jobs next in their queues offered. Whether one of them crossed NICs.
  bool end_jobs(double now, double& end) {
    bool changed = false;
    while (!ends_.empty() && ends_.top().first <= now) {
      const std::size_t j = ends_.top().second;
      ends_.pop();
      if (jobs_[j].end_s != now) continue;  // stale
      Job& job = jobs_[j];
      job.end_s = kNever;
      end = std::max(end, now);
      if (job.crosses) {
        changed = true;
        crossing_.erase(std::find(crossing_.begin(), crossing_.end(), j));
      }
      for (int d : job.ring->members) {
        avail_[d] = now;
        ++head_[d];
      }
      for (int d : job.ring->members) {
        if (head_[d] < queue_begin_[d + 1]) offer(queue_[head_[d]]);
      }
    }
    return changed;
  }

  // The ready jobs that start at `now`: inside one machine at their own rate to their end,
  // through NICs among the crossing jobs (their rate is set by rerate()). Whether one of them
  // crosses NICs.
  bool start_jobs(double now) {
    bool changed = false;
    while (!ready_.empty() && ready_.top().first <= now) {
      const std::size_t j = ready_.top().second;
      ready_.pop();
      Job& job = jobs_[j];
      job.work.updated_s = now;
      job.work.rate = job.seconds > 0 ? 1 / job.seconds : kNever;
      if (!job.crosses) {
        job.end_s = now + job.seconds;
        ends_.emplace(job.end_s, j);
      } else {
        crossing_.push_back(j);
        changed = true;
      }
    }
    return changed;
  }

  // New rates for the rings through NICs: what each has left, its new rate and end.
  void rerate(double now, MaxMinFair& share) {
    flows_.clear();
    for (std::size_t j : crossing_) {
      Job& job = jobs_[j];
      job.work.advance_to(now);
      flows_.push_back(&job.flow);
    }
    share.solve(flows_);
    for (std::size_t j : crossing_) {
      Job& job = jobs_[j];
      job.work.rate = job.flow.rate / (job.flow.cap * job.seconds);
      job.end_s = job.work.end_s(now);
      ends_.emplace(job.end_s, j);
    }
  }

  // A device's gradient pieces, appended to `out`: (key layer, parameters). Consecutive
  // parts (the embedding, runs of layers in which no stage starts, the head) that every other
  // pipeline holds in one stage are one piece, as the lowering keeps a bucket open while its
  // holder set stays. A piece's key is its last part's first layer (-1: the embedding alone,
  // `layers`: ends with the head), where the lowering, going from the head down, meets it.
  void pieces(const DeviceEstimate& de, std::vector<std::pair<int, double>>& out) {
    const std::size_t begin = out.size();
    split_pieces(de, out);
    std::size_t kept = begin;
    for (std::size_t k = begin; k < out.size(); ++k) {
      if (k > begin && same_holders(de.pipeline, out[kept - 1].first, out[k].first)) {
        out[kept - 1].first = out[k].first;     // keyed by its last part: the lowering issues it
        out[kept - 1].second += out[k].second;  // when it meets that part
      } else {
        out[kept++] = out[k];
      }
    }
    out.resize(kept);
  }

  // Whether every pipeline but `own` holds the pieces starting at layers a and b in one stage:
  // the pipelines where they differ are found once per (a, b) (-1: none, -2: several).
  bool same_holders(int own, int a, int b) {
    const std::size_t at = static_cast<std::size_t>(a + 1) * (layers_ + 2) + (b + 1);
    int& differ = differ_[at];
    if (differ_tag_[at] != generation_) {
      differ_tag_[at] = generation_;
      differ = -1;
      for (int q = 0; q < dp_ && differ != -2; ++q) {
        if (holder_of(q, a) != holder_of(q, b)) differ = differ == -1 ? q : -2;
      }
    }
    return differ == -1 || differ == own;
  }

  // pieces() before merging: the embedding, runs of layers in which no stage starts, the head.
  // An interleaved pipeline's device: each of its chunks' stages in turn.
  void split_pieces(const DeviceEstimate& de, std::vector<std::pair<int, double>>& out) const {
    const Pipeline& pipe = plan_->pipelines[de.pipeline];
    for (int si = de.stage; si < static_cast<int>(pipe.stages.size()); si += pipe.groups())
      split_stage_pieces(de, si, out);
  }

  void split_stage_pieces(const DeviceEstimate& de, int si,
                          std::vector<std::pair<int, double>>& out) const {
    const Model& model = cm_->model();
    const Stage& s = plan_->pipelines[de.pipeline].stages[si];
    const StageShape shape = rank_shape(plan_->pipelines[de.pipeline], si, de.tp_rank, model.heads);
    StageShape piece = shape;
    piece.first = piece.last = false;
    double rest = stage_params(model, shape);
    if (shape.first) {
      StageShape emb = shape;
      emb.layer_end = emb.layer_begin;
      emb.last = false;
      out.emplace_back(-1, stage_params(model, emb));
      rest -= out.back().second;
    }
    for (int l = s.layer_begin; l < s.layer_end;) {
      int end = l + 1;
      while (end < s.layer_end && !boundary_[end]) ++end;
      piece.layer_begin = l;
      piece.layer_end = end;
      out.emplace_back(l, stage_params(model, piece));
      rest -= out.back().second;
      l = end;
    }
    if (shape.last) out.emplace_back(layers_, rest);
  }

  // The machine blocks of an all-reduce that runs hierarchically (zero_stage 0), or none.
  std::vector<std::vector<int>> hierarchical_blocks(const std::vector<int>& members) const {
    if (cm_->training().zero_stage != 0) return {};
    return machine_blocks(members, cm_->cluster());
  }

  // The members of a device's all-reduce of one piece when every holder stage splits it as
  // the device's stage does (same TP degree and shares: one rank per pipeline, the device's
  // TP rank); empty otherwise (the pieces are sliced: nics_end_s).
  std::vector<int> aligned_members(const DeviceEstimate& de, int layer) const {
    const int own = first_stage_[de.pipeline] + de.stage;
    const auto mine = share(own, de.tp_rank);
    std::vector<int> members;
    for (int q = 0; q < dp_; ++q) {
      if (q == de.pipeline) {
        members.push_back(de.device);
        continue;
      }
      const int h = holder_of(q, layer);
      if (stages_[h]->tp() != stages_[own]->tp()) return {};
      const auto theirs = share(h, de.tp_rank);
      if (std::abs(theirs.first - mine.first) > 1e-12 ||
          std::abs(theirs.second - mine.second) > 1e-12) {
        return {};
      }
      members.push_back(stages_[h]->devices[de.tp_rank]);
    }
    return members;
  }

  static constexpr std::size_t kTransports = kNumTransports;

  // The slowest link (its nominal rate and transport) and the largest latency from a
  // device to the devices of a holder stage.
  struct HolderLink {
    double bandwidth_Bps = std::numeric_limits<double>::infinity();
    double latency_s = 0;
    Transport transport = Transport::kNominal;
  };

  HolderLink holder_link(int device, int h) {
    HolderLink link;
    for (int peer : stages_[h]->devices) {
      const PeerLink& l = peer_link(device, peer);
      if (l.bandwidth_Bps < link.bandwidth_Bps) {
        link.bandwidth_Bps = l.bandwidth_Bps;
        link.transport = l.transport;
      }
      link.latency_s = std::max(link.latency_s, l.step_latency_s);
    }
    return link;
  }

  // A device's link to a peer as a ring sees it: its rate (at most a NIC's each across
  // machines), transport and step latency (Cluster::step_latency). Across machines and
  // without device-level overrides it depends only on the two machines: kept per peer
  // machine for the device machine asked about last (a stage's devices follow each other).
  struct PeerLink {
    double bandwidth_Bps = 0;
    Transport transport = Transport::kNominal;
    double step_latency_s = 0;
  };

  const PeerLink& peer_link(int device, int peer) {
    const Cluster& c = cm_->cluster();
    const int m = machine(device), mp = machine(peer);
    const bool by_machine = m != mp && c.device_overrides().empty();
    if (by_machine) {
      if (row_machine_ != m) {
        row_machine_ = m;
        ++row_tag_;
        row_.resize(c.machines().size());
        row_tags_.resize(c.machines().size(), 0);
      }
      if (row_tags_[mp] == row_tag_) return row_[mp];
    }
    const PairLink l = c.link(device, peer);
    PeerLink& out = by_machine ? row_[mp] : one_;
    out.transport = c.transport(device, peer);
    out.bandwidth_Bps = l.bandwidth_Bps;
    if (m != mp) {
      out.bandwidth_Bps = std::min(
          {out.bandwidth_Bps, c.machines()[m].nic_each_Bps(), c.machines()[mp].nic_each_Bps()});
    }
    out.step_latency_s = c.curve(out.transport).step_s(l.latency_s) +
                         c.collective_extra_latency(out.transport);  // a DP ring's step
    if (by_machine) row_tags_[mp] = row_tag_;
    return out;
  }

  // Per piece of a device: the slowest nominal rate per transport to its holders (infinite
  // where none uses it), and the largest latency.
  struct PieceLinks {
    std::array<double, kTransports> slowest;
    double latency_s = 0;
  };

  // A piece's holders by where they are: the machines of those on one machine (their links
  // from a machine, MachineSetLinks), the pipelines of those on each machine, and those whose
  // stage spans machines.
  struct PieceHolders {
    std::optional<MachineSetLinks> far;
    std::vector<std::pair<int, int>> on_machine;  // (machine, pipeline), sorted
    std::vector<int> spanning;
    unsigned tag = 0;  // the generation it was found in

    // The (machine, pipeline) entries of the holders on machine m.
    std::span<const std::pair<int, int>> on(int m) const {
      const auto [first, last] =
          std::equal_range(on_machine.begin(), on_machine.end(), std::pair<int, int>{m, 0},
                           [](const std::pair<int, int>& a, const std::pair<int, int>& b) {
                             return a.first < b.first;
                           });
      return {first, last};
    }
  };

  const PieceHolders& holders_of(int layer) {
    PieceHolders& ph = holders_[layer + 1];
    if (ph.tag == generation_) return ph;
    ph.tag = generation_;
    std::vector<int>& machines = machines_scratch_;
    machines.clear();
    ph.on_machine.clear();
    ph.spanning.clear();
    for (int q = 0; q < dp_; ++q) {
      const int h = holder_of(q, layer);
      if (stage_machine_[h] >= 0) {
        machines.push_back(stage_machine_[h]);
        ph.on_machine.emplace_back(stage_machine_[h], q);
      } else {
        ph.spanning.push_back(q);
      }
    }
    std::sort(ph.on_machine.begin(), ph.on_machine.end());
    ph.far.emplace(cm_->cluster(), machines);
    return ph;
  }

  // piece_links() without overrides, holder by holder only on the device's machine and across
  // machines, the holders each on another machine at once (MachineSetLinks: the same least
  // and largest as peer_link over them, in time independent of their number).
  bool piece_links_by_machine(const DeviceEstimate& de,
                              std::span<const std::pair<int, double>> pieces,
                              std::vector<PieceLinks>& out) {
    const Cluster& c = cm_->cluster();
    const int m = machine(de.device);
    const Transport network = c.nominal_rates() ? Transport::kNominal : c.network_transport();
    bool machine_only = true;
    out.clear();
    for (const auto& piece : pieces) {
      // A named copy: clang 14 does not let lambdas capture a structured binding.
      const int layer = piece.first;
      PieceLinks pl;
      pl.slowest.fill(std::numeric_limits<double>::infinity());
      auto add = [&](const HolderLink& link) {
        double& s = pl.slowest[static_cast<std::size_t>(link.transport)];
        s = std::min(s, link.bandwidth_Bps);
        pl.latency_s = std::max(pl.latency_s, link.latency_s);
      };
      const PieceHolders& ph = holders_of(layer);
      if (const PairLink far = ph.far->from(m); !std::isinf(far.bandwidth_Bps)) {
        // A ring's step across machines, summed as peer_link sums it.
        const double step_s =
            c.curve(network).step_s(far.latency_s) + c.collective_extra_latency(network);
        add({far.bandwidth_Bps, step_s, network});
      }
      auto near = [&](int q) {
        if (q == de.pipeline) return;
        const int h = holder_of(q, layer);
        add(holder_link(de.device, h));
        for (int d : stages_[h]->devices) machine_only = machine_only && machine(d) != m;
      };
      for (const auto& [on, q] : ph.on(m)) near(q);
      for (int q : ph.spanning) near(q);
      out.push_back(pl);
    }
    return machine_only;
  }

  // The PieceLinks of each of a device's pieces into `out`; true when they depend on the
  // device only through its machine (no device-level overrides, and no holder on its
  // machine: the links are then the same for every rank of its stage).
  bool piece_links(const DeviceEstimate& de, std::span<const std::pair<int, double>> pieces,
                   std::vector<PieceLinks>& out) {
    if (cm_->cluster().device_overrides().empty() && cm_->cluster().machine_overrides().empty())
      return piece_links_by_machine(de, pieces, out);
    const int m = machine(de.device);
    const bool overrides_free = cm_->cluster().device_overrides().empty();
    bool machine_only = overrides_free;
    // A pipeline's holder usually stays the same over a stage's pieces: its link is kept.
    last_holder_.assign(dp_, -1);
    last_link_.resize(dp_);
    out.clear();
    for (auto [layer, params] : pieces) {
      PieceLinks pl;
      pl.slowest.fill(std::numeric_limits<double>::infinity());
      for (int q = 0; q < dp_; ++q) {
        if (q == de.pipeline) continue;
        const int h = holder_of(q, layer);
        if (h != last_holder_[q]) {
          last_holder_[q] = h;
          if (stage_machine_[h] >= 0 && stage_machine_[h] != m && overrides_free) {
            // Every peer on one other machine: the link of any of them.
            const PeerLink& l = peer_link(de.device, stages_[h]->devices.front());
            HolderLink& link = last_link_[q];
            link = HolderLink{};
            if (l.bandwidth_Bps < link.bandwidth_Bps) {
              link.bandwidth_Bps = l.bandwidth_Bps;
              link.transport = l.transport;
            }
            link.latency_s = std::max(link.latency_s, l.step_latency_s);
          } else {
            last_link_[q] = holder_link(de.device, h);
            for (int d : stages_[h]->devices) machine_only = machine_only && machine(d) != m;
          }
        }
        const HolderLink& link = last_link_[q];
        double& s = pl.slowest[static_cast<std::size_t>(link.transport)];
        s = std::min(s, link.bandwidth_Bps);
        pl.latency_s = std::max(pl.latency_s, link.latency_s);
      }
      out.push_back(pl);
    }
    return machine_only;
  }

  // A device's all-reduce of a piece run hierarchically (without ZeRO, holders aligned in
  // machine blocks): its time, or none. Devices whose stages hold the same share of the piece
  // see the same holders (aligned_members): their blocks are found once, and the time once per
  // bytes, so that a ring of thousands of members costs its members once, not once each.
  std::optional<double> hierarchical_s(const DeviceEstimate& de, int layer, double bytes) {
    const int own = first_stage_[de.pipeline] + de.stage;
    const auto [lo, hi] = share(own, de.tp_rank);
    const BlockKey key{layer, de.tp_rank, stages_[own]->tp(), lo, hi};
    auto [blocks, fresh] = blocks_.try_emplace(key);
    if (fresh) blocks->second = hierarchical_blocks(aligned_members(de, layer));
    if (blocks->second.empty()) return std::nullopt;
    auto [time, unknown] = block_s_.try_emplace({key, bytes}, 0.0);
    if (unknown) time->second = hierarchical_all_reduce_time(cm_->cluster(), blocks->second, bytes);
    return time->second;
  }

  // The time of a device's pieces, one after another (s); each piece's into piece_s.
  double device_sync_s(const DeviceEstimate& de, std::span<const std::pair<int, double>> pieces,
                       const std::vector<PieceLinks>& links, double* piece_s) {
    const double e = cm_->training().bytes_per_element();
    double total = 0;
    for (std::size_t k = 0; k < pieces.size(); ++k) {
      const auto [layer, params] = pieces[k];
      // Without ZeRO, holders that form machine blocks all-reduce hierarchically, as the
      // simulator runs it (ZeRO's reduce-scatter and all-gather stay rings).
      if (cm_->training().zero_stage == 0) {
        if (const auto t = hierarchical_s(de, layer, e * params)) {
          piece_s[k] = *t;
          total += piece_s[k];
          continue;
        }
      }
      // The ring runs at the slowest holder link after its transport's efficiency at the
      // ring's per-step message: each transport's slowest nominal rate scaled once (the
      // same minimum: rounding is monotonic).
      const double message = e * params / dp_;
      double bw = std::numeric_limits<double>::infinity();
      for (std::size_t t = 0; t < kTransports; ++t) {
        const double slowest = links[k].slowest[t];
        if (std::isinf(slowest)) continue;
        bw = std::min(
            bw, slowest * cm_->cluster().curve(static_cast<Transport>(t)).efficiency(message));
      }
      piece_s[k] = collective_time(Collective::kAllReduce, e * params, dp_, bw, links[k].latency_s);
      total += piece_s[k];
    }
    return total;
  }

  // A device's pieces (pieces()).
  std::span<const std::pair<int, double>> pieces_of(std::size_t i) const {
    return {pieces_.data() + piece_begin_[i], pieces_.data() + piece_begin_[i + 1]};
  }

  const CostModel* cm_ = nullptr;
  const Plan* plan_ = nullptr;
  int dp_ = 0;
  int layers_ = 0;
  std::vector<const Stage*> stages_;  // every stage of the plan, by id
  std::vector<int> first_stage_;      // per pipeline, its first stage's id; then the count
  // Per stage id from bounds_begin_[id]: its ranks' share boundaries (tp + 1).
  std::vector<double> bounds_;
  std::vector<std::size_t> bounds_begin_;
  std::vector<int> stage_machine_;              // per stage id: its machine (-1: several)
  std::vector<int> holder_;                     // [pipeline * layers + layer] -> stage id
  std::vector<char> boundary_;                  // some stage starts at this layer
  std::vector<double> finish_;                  // per device: its schedule's end
  std::vector<std::pair<int, double>> pieces_;  // every device estimate's pieces, in order
  std::vector<std::size_t> piece_begin_;  // per device estimate: its first piece; then the count
  std::vector<double> piece_s_;           // per piece in pieces_: its all-reduce time
  // build_rings(): rings_[0, ring_count_) are the plan's (the rest kept for their buffers),
  // per piece key (layer + 1) its (slice start, ring), the rings in issue order.
  std::vector<Ring> rings_;
  std::size_t ring_count_ = 0;
  std::vector<std::vector<std::pair<long long, std::size_t>>> ring_index_;
  std::vector<std::size_t> ring_order_;
  std::vector<double> cuts_scratch_;
  std::vector<std::size_t> listed_;  // make_jobs()
  // rings_end_s(): the rings' passes in order, per device its jobs (queue_ from
  // queue_begin_[d]), the next of them and when it is free; the jobs that head their
  // members' queues by start, the running ones by their expected end (stale entries: not
  // the job's end_s), the running ones through NICs and their flows.
  std::vector<Job> jobs_;
  std::vector<std::size_t> queue_, queue_begin_, head_;
  std::vector<double> avail_;
  Queue ready_, ends_;
  std::vector<std::size_t> crossing_;
  std::vector<FairFlow*> flows_;
  // Per piece key (reset()): cuts_of(), and for (a, b) same_holders().
  unsigned generation_ = 0;
  std::vector<std::vector<double>> cuts_;
  std::vector<unsigned> cuts_tag_;
  std::vector<int> differ_;
  std::vector<unsigned> differ_tag_;
  // hierarchical_s(): per (piece, TP rank, TP degree, share) its machine blocks, and per
  // bytes their all-reduce time.
  using BlockKey = std::tuple<int, int, int, double, double>;
  std::map<BlockKey, std::vector<std::vector<int>>> blocks_;
  std::map<std::pair<BlockKey, double>, double> block_s_;
  std::vector<PieceHolders> holders_;  // per piece key: holders_of()
  std::vector<int> machines_scratch_;
  std::vector<PieceLinks> links_;  // run(): the links of the stage it is at
  std::vector<int> last_holder_;   // piece_links(): per pipeline
  std::vector<HolderLink> last_link_;
  // peer_link(): the links from machine row_machine_ to each machine, valid where the
  // machine's tag is row_tag_; one_ holds a link that is not kept.
  int row_machine_ = -1;
  int row_tag_ = 0;
  std::vector<PeerLink> row_;
  std::vector<int> row_tags_;
  PeerLink one_;
};

}  // namespace

bool CostModel::dp_sync(const Plan& plan, Estimate& est, double limit) const {
  if (plan.has_mesh()) {
    mesh_dp_sync(plan, est);
    return true;
  }
  if (plan.pipelines.size() <= 1) return true;
  thread_local DpSync sync;
  sync.reset(*this, plan);
  return sync.run(est, limit);
}

// Per device: its stage's gradients (a mesh device: the whole stage's, or a tensor group's
// device its share; a TP rank: its share) all-reduced in one ring with the other holders of
// its first query head's share: one per other pipeline's TP stage holding the same layers, and
// in a mesh every device of a Ulysses group and the holder in a tensor group (head_holders),
// at the ring's slowest link, from the end of its schedule. The holders are those of the
// stage's first layer (plans with a mesh stage are hand-written and small; DpSync's pieces
// assume TP groups).
void CostModel::mesh_dp_sync(const Plan& plan, Estimate& est) const {
  const double e = training_.bytes_per_element();
  double end = 0;
  for (DeviceEstimate& de : est.devices) {
    const Pipeline& own = plan.pipelines[de.pipeline];
    const Stage& st = own.stages[de.stage];
    StageShape shape = rank_shape(own, de.stage, st.mesh() ? 0 : de.tp_rank, model_.heads);
    int head = st.mesh() ? 0 : de.tp_rank * model_.heads / st.tp();
    if (st.mesh()) {
      shape.phi = 1.0;
      for (const SequenceGroup& g : st.sequence->groups) {
        for (int r = 0; r < g.size(); ++r) {
          if (g.devices[r] != de.device || !g.tensor) continue;
          shape.phi = member_work(g, r, model_.heads).phi;
          head = head_offsets(g)[r];
        }
      }
    }
    std::vector<int> ring =
        st.mesh() ? head_holders(*st.sequence, head) : std::vector<int>{de.device};
    for (int q = 0; q < static_cast<int>(plan.pipelines.size()); ++q) {
      if (q == de.pipeline) continue;
      for (const Stage& h : plan.pipelines[q].stages) {
        if (h.layer_begin > st.layer_begin || st.layer_begin >= h.layer_end) continue;
        if (h.mesh()) {
          const std::vector<int> holders = head_holders(*h.sequence, head);
          ring.insert(ring.end(), holders.begin(), holders.end());
        } else {
          const int rank = st.mesh() ? head * h.tp() / model_.heads : de.tp_rank * h.tp() / st.tp();
          ring.push_back(h.devices[static_cast<std::size_t>(rank)]);
        }
      }
    }
    const double bytes = e * stage_params(model_, shape);
    if (ring.size() > 1) {
      auto [bw, lat] = ring_link(cluster_, ring, bytes);
      de.dp_sync_s =
          collective_time(Collective::kAllReduce, bytes, static_cast<int>(ring.size()), bw, lat);
    }
    end = std::max(end, est.pipelines[de.pipeline].finish_s[de.stage] + de.dp_sync_s);
  }
  est.dp_sync_s = std::max(0.0, end - est.pipeline_s);
}

namespace {

// One direction of one stage boundary of one pipeline: its flows, its off-machine flows
// per NIC direction, and its transfer time under the NIC load it sees.
struct Channel {
  int pipeline = 0;
  int stage = 0;      // the boundary stage -> stage + 1
  bool back = false;  // gradients (stage + 1 -> stage)
  int cls = 0;        // channels of pipelines in step: same boundary, direction, shape
  std::size_t flows_begin = 0, flows_end = 0;  // its flows (BoundaryFlow)
  std::size_t nics_begin = 0, nics_end = 0;    // its NIC directions (NicUse)
  double bytes = 0;                            // the activation (or its gradient)
  double gather_s = 0;  // the receiving TP group's all-gather (0 for one device)
  double time_s = 0;
  double busy = 0;  // fraction of the pipeline's time its transfers run
};

// A point-to-point flow of a boundary: what its time takes that does not depend on the
// NIC load (CostModel::transfer_s).
struct BoundaryFlow {
  int from_machine = 0, to_machine = 0;
  double bytes = 0;  // its message
  double link_Bps = 0;
  double efficiency = 1;  // of the flow's message on its transport
  double latency_s = 0;   // per step
};

// A channel's off-machine flows through one NIC direction (2 * machine, + 1 for the
// receiving side), and the slot of (its class, that direction).
struct NicUse {
  int nic = 0;
  double flows = 0;
  int slot = 0;
};

}  // namespace

// The pipelines of a plan run together, event by event, with boundary transfers
// sharing NICs as they overlap in time (the fluid model of fluid.hpp: max-min fair rates,
// rates()).
// The same semantics as schedule.hpp's timeline otherwise (one compute at a time per stage,
// FIFO channels, sends not waited for). Used where boundary flows of different classes
// share a NIC. Each event touches what it changes: the stages and channels it can unblock,
// the channels sending through NICs (few) where their set changes or one of them ends, and
// a queue of the computes' ends, the messages' arrivals and the ends of transfers inside a
// machine (which share no NIC and so keep their own link's rate).
class SharedTimeline {
 public:
  struct Link {
    double fixed_s = 0;     // latency and the receiving group's all-gather
    double flow_bytes = 0;  // bytes per flow
    double link_Bps = 0;    // a flow's own link (shared with its source's other flows)
    std::vector<std::pair<int, double>> nics;  // (NIC direction, own flows through it)
  };

  SharedTimeline(const std::vector<PipelineEstimate>& pes, const std::vector<double>& nic_Bps,
                 PipelineSchedule schedule)
      : pes_(pes), share_(nic_Bps) {
    for (int pi = 0; pi < static_cast<int>(pes_.size()); ++pi) {
      const PipelineEstimate& pe = pes_[pi];
      const int p = static_cast<int>(pe.stages.size());
      Pipe q;
      q.order.reserve(p);
      for (int s = 0; s < p; ++s) {
        q.order.push_back(pipeline_order(schedule, s, p, pe.micro_batches));
        stages_.push_back({pi, s});
      }
      q.next.assign(p, 0);
      q.free.assign(p, 0.0);
      q.busy.assign(p, 0);
      q.channels.resize(2 * std::max(0, p - 1));
      for (int c = 0; c < static_cast<int>(q.channels.size()); ++c) {
        q.channels[c].produced.assign(pe.micro_batches, -1.0);
        q.channels[c].arrived.assign(pe.micro_batches, -1.0);
        channels_.push_back({pi, c});
      }
      q.stage_base = static_cast<int>(stages_.size()) - p;
      q.channel_base = static_cast<int>(channels_.size() - q.channels.size());
      pipes_.push_back(std::move(q));
    }
    stage_dirty_.assign(stages_.size(), 0);
    channel_dirty_.assign(channels_.size(), 0);
  }

  // The channel (pipeline, boundary stage, back) carries `link`.
  void set_link(int pipeline, int stage, bool back, Link link) {
    pipes_[pipeline].channels[2 * stage + (back ? 1 : 0)].link = std::move(link);
  }

  // Runs every pipeline to its end; fills time_s and finish_s.
  void run(std::vector<PipelineEstimate>& out) {
    for (int g = 0; g < static_cast<int>(stages_.size()); ++g) mark_stage(g);
    double now = 0;
    for (;;) {
      start_ready(now);
      const double next = std::min(events_.empty() ? kNever : events_.top().first, transfers_end_);
      if (std::isinf(next)) break;
      if (next >= transfers_end_) advance(next);  // a transfer's data phase ends
      now = next;
      while (!events_.empty() && events_.top().first <= now) {
        const int id = events_.top().second;
        events_.pop();
        const int stages = static_cast<int>(stages_.size());
        if (id < stages) {
          mark_stage(id);
        } else if (id < stages + static_cast<int>(channels_.size())) {
          arrived(id - stages);
        } else {
          sent(id - stages - static_cast<int>(channels_.size()), now);
        }
      }
    }
    for (std::size_t i = 0; i < pipes_.size(); ++i) {
      out[i].finish_s = pipes_[i].free;
      out[i].time_s = *std::max_element(pipes_[i].free.begin(), pipes_[i].free.end());
    }
  }

 private:
  struct Channel {
    Link link;
    int next = 0;                           // next message to transfer
    bool sending = false;                   // a message in its data phase
    FluidWork work;                         // bytes per flow left of it, bytes/s per flow
    std::vector<double> produced, arrived;  // per micro-batch (-1: not yet)
  };
  struct Pipe {
    std::vector<std::vector<std::pair<bool, int>>> order;
    std::vector<int> next;
    std::vector<double> free;              // when the stage's current compute ends
    std::vector<char> busy;                // a compute scheduled and not yet ended
    std::vector<Channel> channels;         // 2 per boundary: activations, gradients
    int stage_base = 0, channel_base = 0;  // global ids of its first stage and channel
  };

  Channel& act(Pipe& q, int s) { return q.channels[2 * s]; }
  Channel& grad(Pipe& q, int s) { return q.channels[2 * s + 1]; }
  Channel& channel(int g) { return pipes_[channels_[g].first].channels[channels_[g].second]; }

  void mark_stage(int g) {
    if (!stage_dirty_[g]) dirty_stages_.push_back(g);
    stage_dirty_[g] = 1;
  }
  void mark_channel(int g) {
    if (!channel_dirty_[g]) dirty_channels_.push_back(g);
    channel_dirty_[g] = 1;
  }
  // Channel g's message has arrived: its consumer may start, and its next message may go.
  void arrived(int g) {
    const auto [pi, c] = channels_[g];
    const Pipe& q = pipes_[pi];
    mark_stage(q.stage_base + (c % 2 == 0 ? c / 2 + 1 : c / 2));
    mark_channel(g);
  }

  // Starts computes whose input has arrived and transfers whose message is ready, among
  // the stages and channels an event since the last call may have unblocked.
  void start_ready(double now) {
    for (const int g : dirty_stages_) {
      stage_dirty_[g] = 0;
      const auto [pi, s] = stages_[g];
      Pipe& q = pipes_[pi];
      const int p = static_cast<int>(q.order.size());
      if (q.busy[s] && q.free[s] <= now) {
        q.busy[s] = 0;
        const auto [forward, j] = q.order[s][q.next[s] - 1];
        if (forward && s + 1 < p) {
          act(q, s).produced[j] = q.free[s];
          mark_channel(q.channel_base + 2 * s);
        }
        if (!forward && s > 0) {
          grad(q, s - 1).produced[j] = q.free[s];
          mark_channel(q.channel_base + 2 * (s - 1) + 1);
        }
      }
      if (q.busy[s] || q.next[s] >= static_cast<int>(q.order[s].size())) continue;
      const auto [forward, j] = q.order[s][q.next[s]];
      double in = 0;
      if (forward && s > 0) in = act(q, s - 1).arrived[j];
      if (!forward && s + 1 < p) in = grad(q, s).arrived[j];
      if (in < 0 || in > now) continue;
      const StageEstimate& st = pes_[pi].stages[s];
      q.free[s] = std::max(q.free[s], now) + (forward ? st.forward_s : st.backward_s);
      q.busy[s] = 1;
      ++q.next[s];
      events_.push({q.free[s], g});
    }
    dirty_stages_.clear();
    for (const int g : dirty_channels_) {
      channel_dirty_[g] = 0;
      Channel& c = channel(g);
      if (c.sending || c.next >= static_cast<int>(c.produced.size())) continue;
      const int j = c.next;
      const bool previous = j == 0 || (c.arrived[j - 1] >= 0 && c.arrived[j - 1] <= now);
      if (c.produced[j] < 0 || c.produced[j] > now || !previous) continue;
      c.sending = true;
      c.work.left = c.link.flow_bytes;
      c.work.updated_s = now;
      // A transfer through no NIC shares nothing: at its own link's rate whoever else sends,
      // it ends at a time known now (an event of its own).
      if (c.link.nics.empty()) {
        events_.push({now + c.work.left / c.link.link_Bps,
                      static_cast<int>(stages_.size() + channels_.size()) + g});
        continue;
      }
      sending_.insert(std::lower_bound(sending_.begin(), sending_.end(), g), g);
      sending_changed_ = true;
    }
    dirty_channels_.clear();
    // The rates depend on which channels send through NICs, nothing else: solved again only
    // when that changed (most events are computes starting or ending, or transfers inside a
    // machine). Until then every transfer's end stays where it is.
    if (!sending_changed_) return;
    for (const int g : sending_) channel(g).work.advance_to(now);
    rates();
    sending_changed_ = false;
    transfers_end_ = kNever;
    for (const int g : sending_)
      transfers_end_ = std::min(transfers_end_, channel(g).work.end_s(now));
  }

  // The sending channels' rates (all through NICs), max-min fair (MaxMinFair), in channel
  // order. They depend on the set alone, and pipelines in steady state send the same sets
  // again and again: each set is solved once (a set whose hash another set holds is solved
  // every time).
  void rates() {
    std::size_t h = sending_.size();
    for (const int g : sending_) h = h * 1000003u ^ static_cast<std::size_t>(g);
    const auto [it, fresh] = solved_.try_emplace(h, solved_ids_.size());
    if (!fresh) {
      const std::size_t at = it->second;
      if (solved_ids_.size() >= at + sending_.size() &&
          std::equal(sending_.begin(), sending_.end(), solved_ids_.begin() + at) &&
          (at + sending_.size() == solved_ids_.size() || solved_ids_[at + sending_.size()] < 0)) {
        for (std::size_t i = 0; i < sending_.size(); ++i)
          channel(sending_[i]).work.rate = solved_rates_[at + i];
        return;
      }
    }
    fair_.clear();
    for (const int g : sending_) {
      Channel& c = channel(g);
      fair_.push_back({c.link.link_Bps, &c.link.nics, 0});
    }
    fair_of_.clear();
    for (FairFlow& f : fair_) fair_of_.push_back(&f);
    share_.solve(fair_of_);
    for (std::size_t i = 0; i < sending_.size(); ++i)
      channel(sending_[i]).work.rate = fair_[i].rate;
    if (!fresh) return;
    // Stored as the ids, then -1; the rates at the same offsets.
    for (std::size_t i = 0; i < sending_.size(); ++i) {
      solved_ids_.push_back(sending_[i]);
      solved_rates_.push_back(fair_[i].rate);
    }
    solved_ids_.push_back(-1);
    solved_rates_.push_back(0);
  }

  // The sending channels' transfers to `to` (the soonest end), ending those done.
  void advance(double to) {
    std::size_t kept = 0;
    transfers_end_ = kNever;
    for (const int g : sending_) {
      Channel& c = channel(g);
      c.work.advance_to(to);
      // Done when nearly nothing is left, or when what is left ends within the clock's
      // resolution: late in a long iteration (thousands of seconds) a fast link's last
      // bytes take less than one ulp of `to`, and waiting for them would never advance it.
      if (c.work.left > 1e-9 * c.link.flow_bytes && c.work.end_s(to) > to) {
        sending_[kept++] = g;
        transfers_end_ = std::min(transfers_end_, c.work.end_s(to));
        continue;
      }
      sending_changed_ = true;
      sent(g, to);
    }
    sending_.resize(kept);
  }

  // Channel g's data phase ended at `to`: its message arrives after the fixed part, by the
  // next start_ready (at `to`) or at an event of its own.
  void sent(int g, double to) {
    Channel& c = channel(g);
    c.sending = false;
    c.arrived[c.next] = to + c.link.fixed_s;
    ++c.next;
    if (c.arrived[c.next - 1] <= to) {
      arrived(g);
    } else {
      events_.push({c.arrived[c.next - 1], static_cast<int>(stages_.size()) + g});
    }
  }

  const std::vector<PipelineEstimate>& pes_;
  MaxMinFair share_;
  std::vector<Pipe> pipes_;
  std::vector<std::pair<int, int>> stages_, channels_;  // global id -> (pipeline, local)
  // Stages and channels to look at in the next start_ready, and their flags.
  std::vector<int> dirty_stages_, dirty_channels_;
  std::vector<char> stage_dirty_, channel_dirty_;
  // Computes' ends (stage id), future arrivals (stage count + channel id) and the ends of
  // transfers through no NIC (stage count + channel count + channel id), soonest first.
  std::priority_queue<std::pair<double, int>, std::vector<std::pair<double, int>>, std::greater<>>
      events_;
  static constexpr double kNever = std::numeric_limits<double>::infinity();
  std::vector<int> sending_;       // channels sending through NICs, ascending
  double transfers_end_ = kNever;  // the soonest end of theirs at their rates
  // rates(): the sets solved (hash -> offset into solved_ids_ and solved_rates_).
  std::unordered_map<std::size_t, std::size_t> solved_;
  std::vector<int> solved_ids_;
  std::vector<double> solved_rates_;
  // rates(): the sending channels' flows.
  std::vector<FairFlow> fair_;
  std::vector<FairFlow*> fair_of_;
  bool sending_changed_ = true;  // since rates() last ran
};

// The flows of one direction of a boundary next to a mesh stage: mesh_boundary's messages
// summed per device pair, each at its link's rate scaled so that its time is the busier of
// its source's and its destination's bytes (all their flows of the boundary) over that link.
struct SizedFlows {
  std::vector<std::pair<int, int>> pairs;
  std::vector<double> bytes, rate_Bps;
};
SizedFlows mesh_flows(const Cluster& cluster, const Stage& from, const Stage& to,
                      double row_bytes) {
  std::map<std::pair<int, int>, double> by_pair;
  std::map<int, double> out, in;
  for (const MeshMessage& m : mesh_boundary(from, to)) {
    const double b = static_cast<double>(m.rows.size()) * row_bytes;
    by_pair[{m.from, m.to}] += b;
    out[m.from] += b;
    in[m.to] += b;
  }
  SizedFlows f;
  for (const auto& [pair, bytes] : by_pair) {
    f.pairs.push_back(pair);
    f.bytes.push_back(bytes);
    const double port = std::max(out[pair.first], in[pair.second]);
    f.rate_Bps.push_back(cluster.link(pair.first, pair.second).bandwidth_Bps * bytes / port);
  }
  return f;
}

namespace {

// CostModel::boundary_times' channels and their fixed point, in named steps: every
// boundary's two channels with their flows and NIC uses (add_channel); the in-step flows per
// (class, NIC direction) and whether any NIC carries two classes; then rounds of: the busy
// flows per NIC, each channel's transfer time under that load, the pipelines' timelines, each
// channel's busy fraction.
class BoundaryChannels {
 public:
  BoundaryChannels(const CostModel& cm, const Plan& plan)
      : cm_(cm), directions_(2 * static_cast<long long>(cm.cluster().machines().size())) {
    for (int pi = 0; pi < static_cast<int>(plan.pipelines.size()); ++pi) {
      const Pipeline& p = plan.pipelines[pi];
      for (int s = 0; s + 1 < static_cast<int>(p.stages.size()); ++s) {
        for (bool back : {false, true}) add_channel(p, pi, s, back);
      }
    }
    count_in_step();
  }

  // Whether any NIC carries channels of two classes.
  bool mixed() const { return mixed_; }
  std::size_t size() const { return ch_.size(); }

  // The fixed point's rounds (one where no NIC mixes classes): send_s, grad_s and the
  // pipelines' timelines into `pes`. The most busy flows of other classes at a channel's NIC
  // in the last round.
  double fixed_point(std::vector<PipelineEstimate>& pes) {
    const int rounds = mixed_ ? 4 : 1;
    double overlap = 0;
    busy_cls_.resize(slots_.size());
    busy_all_.resize(static_cast<std::size_t>(directions_));
    for (int round = 0; round < rounds; ++round) {
      overlap = 0;
      count_busy();
      for (Channel& c : ch_) {
        for (const NicUse& u : uses(c))
          overlap = std::max(overlap, busy_all_[u.nic] - busy_cls_[u.slot]);
        c.time_s = transfer_s(c);
        StageEstimate& se = pes[c.pipeline].stages[c.stage];
        (c.back ? se.grad_s : se.send_s) = c.time_s;
      }
      timelines(pes);
      for (Channel& c : ch_) {
        const PipelineEstimate& pe = pes[c.pipeline];
        c.busy = pe.time_s > 0 ? std::min(1.0, pe.micro_batches * c.time_s / pe.time_s) : 0.0;
      }
    }
    return overlap;
  }

 private:
  // Channel (pipeline pi, boundary stage s, direction): its class, flows (mesh_flows next to
  // a mesh stage; boundary_flows otherwise), NIC uses and the receiving group's all-gather.
  void add_channel(const Pipeline& p, int pi, int s, bool back) {
    const Cluster& cluster = cm_.cluster();
    const int stages = static_cast<int>(p.stages.size());
    Channel c;
    c.pipeline = pi;
    c.stage = s;
    c.back = back;
    const auto key = std::make_tuple(s, back, stages, p.micro_batches(), p.micro_batch);
    c.cls = classes_.emplace(key, static_cast<int>(classes_.size())).first->second;
    const Stage& from_stage = p.stages[back ? s + 1 : s];
    const Stage& to_stage = p.stages[back ? s : s + 1];
    const auto& to = to_stage.devices;
    c.bytes = hidden_bytes(cm_.model(), cm_.training(), p.micro_batch);
    const bool mesh = from_stage.mesh() || to_stage.mesh();
    SizedFlows sized;
    if (mesh) {
      sized =
          mesh_flows(cluster, from_stage, to_stage,
                     static_cast<double>(cm_.model().hidden) * cm_.training().bytes_per_element());
    } else {
      CostModel::BoundaryFlows b = cm_.boundary_flows(from_stage.devices, to, c.bytes);
      sized.pairs = std::move(b.flows);
      const double message = b.message;
      for (std::size_t k = 0; k < sized.pairs.size(); ++k) {
        sized.bytes.push_back(message);
        sized.rate_Bps.push_back(cm_.flow_link_Bps(sized.pairs, k));
      }
    }
    add_flows(c, sized);
    if (cm_.boundary_gathers(to) && !mesh) {
      auto [bw, lat] = ring_link(cluster, to, c.bytes);
      c.gather_s =
          collective_time(Collective::kAllGather, c.bytes, static_cast<int>(to.size()), bw, lat);
    }
    ch_.push_back(c);
  }

  // The channel's flows (their fixed parts) and, off-machine, their NIC directions with the
  // slot of (its class, that direction).
  void add_flows(Channel& c, const SizedFlows& sized) {
    const Cluster& cluster = cm_.cluster();
    const std::vector<std::pair<int, int>>& pairs = sized.pairs;
    c.flows_begin = flows_.size();
    c.nics_begin = nics_.size();
    for (std::size_t k = 0; k < pairs.size(); ++k) {
      const auto [a, b] = pairs[k];
      const int ma = cluster.devices()[a].machine, mb = cluster.devices()[b].machine;
      flows_.push_back({ma, mb, sized.bytes[k], sized.rate_Bps[k],
                        cluster.efficiency(a, b, sized.bytes[k]), cluster.step_latency(a, b)});
      if (ma == mb) continue;
      for (const int nic : {2 * ma, 2 * mb + 1}) {
        auto use = std::find_if(nics_.begin() + static_cast<long>(c.nics_begin), nics_.end(),
                                [&](const NicUse& u) { return u.nic == nic; });
        if (use == nics_.end()) {
          const long long id = static_cast<long long>(c.cls) * directions_ + nic;
          const int slot = slots_.emplace(id, static_cast<int>(slots_.size())).first->second;
          nics_.push_back({nic, 0.0, slot});
          use = nics_.end() - 1;
        }
        use->flows += 1;
      }
    }
    c.flows_end = flows_.size();
    c.nics_end = nics_.size();
  }

  std::span<const NicUse> uses(const Channel& c) const {
    return std::span<const NicUse>(nics_.data() + c.nics_begin, nics_.data() + c.nics_end);
  }

  // Per (class, NIC direction): its flows (summed over the channels in order); whether any
  // NIC carries channels of two classes.
  void count_in_step() {
    in_step_.assign(slots_.size(), 0.0);
    for (const Channel& c : ch_) {
      for (const NicUse& u : uses(c)) in_step_[u.slot] += 1.0 * u.flows;
    }
    std::vector<int> first(static_cast<std::size_t>(directions_), -1);
    for (const Channel& c : ch_) {
      for (const NicUse& u : uses(c)) {
        if (first[u.nic] < 0) first[u.nic] = c.cls;
        mixed_ |= first[u.nic] != c.cls;
      }
    }
  }

  // Per (class, NIC direction) and per NIC direction: flows weighted by their busy fraction
  // (summed over the channels in order).
  void count_busy() {
    std::fill(busy_cls_.begin(), busy_cls_.end(), 0.0);
    std::fill(busy_all_.begin(), busy_all_.end(), 0.0);
    for (const Channel& c : ch_) {
      for (const NicUse& u : uses(c)) {
        busy_cls_[u.slot] += c.busy * u.flows;
        busy_all_[u.nic] += c.busy * u.flows;
      }
    }
  }

  // Flows sharing NIC direction `nic` with channel c's: in step, its class's; the others,
  // their busy share (only at this channel's own NICs: transfer_s looks at no other).
  double sharing(const Channel& c, int nic) const {
    for (const NicUse& u : uses(c)) {
      if (u.nic != nic) continue;
      const double others = busy_all_[u.nic] - busy_cls_[u.slot];
      return std::max(u.flows, in_step_[u.slot] + others);
    }
    return 1.0;  // not reached: every off-machine flow's NICs are listed
  }

  // CostModel::transfer_s with that load, from the flows' fixed parts: the slowest flow
  // (each at its link and its fair share of both NICs) and the receiving group's all-gather.
  double transfer_s(const Channel& c) const {
    const Cluster& cluster = cm_.cluster();
    double worst = 0;
    for (std::size_t f = c.flows_begin; f < c.flows_end; ++f) {
      const BoundaryFlow& flow = flows_[f];
      double bw = flow.link_Bps;
      if (flow.from_machine != flow.to_machine) {
        bw = std::min(bw, fair_share(cluster.machines()[flow.from_machine].nic_Bps,
                                     sharing(c, 2 * flow.from_machine)));
        bw = std::min(bw, fair_share(cluster.machines()[flow.to_machine].nic_Bps,
                                     sharing(c, 2 * flow.to_machine + 1)));
      }
      bw *= flow.efficiency;
      worst = std::max(worst, p2p_time(flow.bytes, bw, flow.latency_s));
    }
    return worst + c.gather_s;
  }

  // Each pipeline's timeline from its stages; pipelines with the same stage times and
  // micro-batches (replicas) share a timeline.
  void timelines(std::vector<PipelineEstimate>& pes) const {
    std::map<std::pair<int, std::vector<double>>, const PipelineEstimate*> done;
    for (PipelineEstimate& pe : pes) {
      std::vector<double> key;
      key.reserve(4 * pe.stages.size());
      for (const StageEstimate& se : pe.stages) {
        key.insert(key.end(), {se.forward_s, se.backward_s, se.send_s, se.grad_s});
      }
      key.push_back(pe.chunks);
      auto [it, fresh] = done.try_emplace({pe.micro_batches, std::move(key)}, &pe);
      if (!fresh) {
        pe.time_s = it->second->time_s;
        pe.bottleneck_s = it->second->bottleneck_s;
        pe.finish_s = it->second->finish_s;
        continue;
      }
      PipelineTimeline timeline = cm_.pipeline_timeline(pe.stages, pe.micro_batches, pe.chunks);
      pe.time_s = timeline.time_s;
      pe.bottleneck_s = timeline.period_s;
      pe.finish_s = std::move(timeline.finish_s);
    }
  }

  const CostModel& cm_;
  const long long directions_;  // NIC directions: 2 per machine
  std::vector<Channel> ch_;
  std::vector<BoundaryFlow> flows_;
  std::vector<NicUse> nics_;
  std::map<std::tuple<int, bool, int, int, int>, int> classes_;
  std::unordered_map<long long, int> slots_;  // (class, NIC direction) -> slot
  bool mixed_ = false;
  std::vector<double> in_step_;              // per slot: count_in_step()
  std::vector<double> busy_cls_, busy_all_;  // per slot, per NIC direction: count_busy()
};

}  // namespace

// Boundary transfers share NICs over time. Channels of pipelines that run in step (same
// boundary position and direction, same stage count and micro-batches: e.g. a uniform
// grid, or HexiScale's replicated pipelines) transfer at the same instants and share a
// NIC fully; any other channel through it (another boundary, the other direction, a
// pipeline of another shape) is counted with the fraction of time it is busy. That
// fraction comes from the pipelines' timelines, which depend on the transfer times: a
// few fixed-point rounds, starting from in-step sharing only.
bool CostModel::boundary_times(const Plan& plan, std::vector<PipelineEstimate>& pes) const {
  BoundaryChannels channels(*this, plan);
  const double overlap = channels.fixed_point(pes);
  // Where other classes' flows are (nearly) never there, sharing changes (almost)
  // nothing. The shared timeline runs every event of every pipeline: only where that stays
  // cheap (searches estimate thousands of plans; the work bound was set when each event
  // visited every stage and channel, and is kept so that larger plans' estimates stay as
  // they are); larger plans keep the fixed point.
  if (!channels.mixed() || overlap < kSharedTimelineMinOverlap) return false;
  // The shared timeline runs plain pipelines of TP stages only: interleaved plans and plans
  // with a mesh stage keep the fixed point.
  if (plan.has_mesh()) return false;
  for (const PipelineEstimate& pe : pes) {
    if (pe.chunks > 1) return false;
  }
  double events = 0;
  for (const PipelineEstimate& pe : pes) {
    events += 4.0 * static_cast<double>(pe.stages.size()) * pe.micro_batches;
  }
  double stages = 0;
  for (const PipelineEstimate& pe : pes) stages += static_cast<double>(pe.stages.size());
  return events * (stages + static_cast<double>(channels.size())) <= kSharedTimelineWork;
}

void CostModel::shared_timeline(const Plan& plan, std::vector<PipelineEstimate>& pes) const {
  SharedTimeline timeline(pes, nic_directions(cluster_), training_.schedule);
  for (int pi = 0; pi < static_cast<int>(plan.pipelines.size()); ++pi) {
    const Pipeline& p = plan.pipelines[pi];
    const double bytes = hidden_bytes(model_, training_, p.micro_batch);
    for (int s = 0; s + 1 < static_cast<int>(p.stages.size()); ++s) {
      for (bool back : {false, true}) {
        const auto& from = p.stages[back ? s + 1 : s].devices;
        const auto& to = p.stages[back ? s : s + 1].devices;
        const auto [flows, message] = boundary_flows(from, to, bytes);
        SharedTimeline::Link link;
        // Wire bytes: the message over the least efficient flow's transport (the
        // simulator inflates each flow by its own; a boundary's flows share one class).
        double efficiency = 1.0;
        link.link_Bps = std::numeric_limits<double>::infinity();
        for (std::size_t k = 0; k < flows.size(); ++k) {
          const auto [a, b] = flows[k];
          link.link_Bps = std::min(link.link_Bps, flow_link_Bps(flows, k));
          link.fixed_s = std::max(link.fixed_s, cluster_.step_latency(a, b));
          efficiency = std::min(efficiency, cluster_.efficiency(a, b, message));
        }
        link.flow_bytes = message / efficiency;
        if (boundary_gathers(to)) {
          auto [bw, lat] = ring_link(cluster_, to, bytes);
          link.fixed_s +=
              collective_time(Collective::kAllGather, bytes, static_cast<int>(to.size()), bw, lat);
        }
        NicFlows own;
        count_off_machine(flows, own);
        for (auto [m, n] : own.out) link.nics.emplace_back(2 * m, n);
        for (auto [m, n] : own.in) link.nics.emplace_back(2 * m + 1, n);
        std::sort(link.nics.begin(), link.nics.end());
        timeline.set_link(pi, s, back, std::move(link));
      }
    }
  }
  timeline.run(pes);
}

Estimate CostModel::estimate_with_range(const Plan& plan) const {
  Estimate est = estimate(plan);
  est.iteration_time_range_s = iteration_time_range(plan, est);
  return est;
}

std::pair<double, double> CostModel::iteration_time_range(const Plan& plan,
                                                          const Estimate& stated) const {
  std::pair<double, double> range{stated.iteration_time_s, stated.iteration_time_s};
  for (const double side : {-1.0, -0.5, 0.5, 1.0}) {
    const Profile moved = profile_.at_bound(side);
    Cluster cluster = cluster_;
    std::map<Transport, TransportCurve> curves;
    for (const Transport t : kMeasuredTransports) {
      curves[t] = moved_curve(cluster_.curve(t), side);
    }
    cluster.set_curves(curves, profile_.collective_step_latencies());
    const double t = CostModel(cluster, model_, training_, moved).estimate(plan).iteration_time_s;
    range = {std::min(range.first, t), std::max(range.second, t)};
  }
  return range;
}

Estimate CostModel::estimate(const Plan& plan) const {
  return estimate_below(plan, std::numeric_limits<double>::infinity());
}

Estimate CostModel::estimate_below(const Plan& plan, double bound, OverBound over) const {
  Estimate est = stage_estimates(plan);
  const double none = std::numeric_limits<double>::infinity();
  const bool bounded = bound < none;
  if (boundary_times(plan, est.pipelines)) {
    if (bounded) {
      Estimate fixed_point = est;
      settle(plan, fixed_point);
      if (!finish_sync(plan, fixed_point, kScreenMargin * bound) ||
          !(fixed_point.iteration_time_s < kScreenMargin * bound)) {
        fixed_point.screened = true;
        return fixed_point;
      }
    }
    shared_timeline(plan, est.pipelines);
  }
  settle(plan, est);
  finish_sync(plan, est, bounded && over == OverBound::kDiscarded ? bound : none);
  return est;
}

Estimate CostModel::stage_estimates(const Plan& plan) const {
  Estimate est;
  const int dp = static_cast<int>(plan.pipelines.size());
  for (int pi = 0; pi < dp; ++pi) {
    const Pipeline& p = plan.pipelines[pi];
    PipelineEstimate pe;
    pe.micro_batches = p.micro_batches();
    pe.chunks = p.chunks();
    const int stages = static_cast<int>(p.stages.size());
    for (int si = 0; si < stages; ++si) {
      const Stage& s = p.stages[si];
      StageEstimate se = stage(s, si == 0, si == stages - 1, p.micro_batch);
      pe.stages.push_back(se);
      if (pe.chunks > 1 && si >= p.groups()) {  // a later chunk of a group: its devices' work
        for (DeviceEstimate& de : est.devices) {
          if (de.pipeline == pi && de.stage == si % p.groups())
            de.busy_s += pe.micro_batches * (se.forward_s + se.backward_s - se.tp_comm_s);
        }
        continue;
      }
      for (int r = 0; r < s.tp(); ++r) {
        DeviceEstimate de;
        de.device = s.devices[r];
        de.pipeline = pi;
        de.stage = si;
        de.tp_rank = r;
        de.memory = memory(p, si, r, dp);
        de.capacity_bytes = cluster_.device_memory_bytes(de.device);
        de.busy_s = pe.micro_batches * (se.forward_s + se.backward_s - se.tp_comm_s);
        est.devices.push_back(de);
      }
    }
    est.pipelines.push_back(std::move(pe));
  }
  return est;
}

void CostModel::settle(const Plan& plan, Estimate& est) const {
  const int dp = static_cast<int>(plan.pipelines.size());
  for (const PipelineEstimate& pe : est.pipelines)
    est.pipeline_s = std::max(est.pipeline_s, pe.time_s);
  // Adam touches fp32 master weights and both moments (read + write) and the e-byte
  // weights and grads: ~28 bytes per locally owned parameter.
  for (auto& de : est.devices) {
    const GpuSpec& gpu = cluster_.gpu(de.device);
    const double owned =
        (de.memory.weights / training_.bytes_per_element()) / (training_.zero_stage >= 1 ? dp : 1);
    de.optimizer_s = owned * 28 /
                     (gpu.memory_GBps * 1e9 *
                      type_profiles_[cluster_.devices()[de.device].gpu_type].memory_efficiency);
    est.optimizer_s = std::max(est.optimizer_s, de.optimizer_s);
    if (de.memory.total() > de.capacity_bytes) {
      est.feasible = false;
      const Machine& m = cluster_.machine_of(de.device);
      est.problems.push_back(
          "device " + std::to_string(de.device) + " (" + cluster_.gpu(de.device).name +
          " in machine " + m.name + ", pipeline " + std::to_string(de.pipeline) + " stage " +
          std::to_string(de.stage) + ") needs " + gib(de.memory.total()) + " GiB of " +
          gib(de.capacity_bytes) + " GiB: over by " + gib(de.memory.total() - de.capacity_bytes) +
          " GiB (weights " + gib(de.memory.weights) + ", gradients " + gib(de.memory.gradients) +
          ", optimizer " + gib(de.memory.optimizer) + ", activations " +
          gib(de.memory.activations) + ", logits " + gib(de.memory.logits) + ", reserve " +
          gib(de.memory.reserve) + ")");
    }
  }
}

bool CostModel::finish_sync(const Plan& plan, Estimate& est, double limit) const {
  const bool whole = est.pipeline_s + est.optimizer_s < limit && dp_sync(plan, est, limit);
  est.iteration_time_s = est.pipeline_s + est.dp_sync_s + est.optimizer_s;
  const double tokens = training_.tokens_per_iteration();
  est.tokens_per_s = tokens / est.iteration_time_s;
  if (!whole) {
    est.screened = true;
    return false;
  }
  const double flops = model_flops(model_, training_);
  est.achieved_pflops = flops / est.iteration_time_s / 1e15;
  est.mfu = flops / (est.iteration_time_s * cluster_.peak_flops());
  est.figures = flop_figures(model_, training_, hardware_flops(plan, model_, training_),
                             est.iteration_time_s, cluster_.peak_flops(), plan.num_devices());
  return true;
}

Json Estimate::to_json() const {
  Json devs = Json::array();
  for (const auto& d : devices) {
    devs.push_back({{"device", d.device},
                    {"pipeline", d.pipeline},
                    {"stage", d.stage},
                    {"tp_rank", d.tp_rank},
                    {"peak_memory_gib", d.memory.total() / kGiB},
                    {"capacity_gib", d.capacity_bytes / kGiB},
                    {"memory", d.memory.to_json()},
                    {"busy_s", d.busy_s},
                    {"dp_sync_s", d.dp_sync_s},
                    {"optimizer_s", d.optimizer_s}});
  }
  Json pipes = Json::array();
  for (const auto& p : pipelines) {
    Json stages = Json::array();
    for (const auto& s : p.stages) {
      stages.push_back({{"forward_s", s.forward_s},
                        {"backward_s", s.backward_s},
                        {"tp_comm_s", s.tp_comm_s},
                        {"send_s", s.send_s},
                        {"grad_s", s.grad_s},
                        {"recompute", to_string(s.recompute)}});
    }
    pipes.push_back({{"micro_batches", p.micro_batches},
                     {"time_s", p.time_s},
                     {"bottleneck_s", p.bottleneck_s},
                     {"stages", stages}});
  }
  Json j = {{"iteration_time_s", iteration_time_s},
            {"tokens_per_s", tokens_per_s},
            {"mfu", mfu},
            {"achieved_pflops", achieved_pflops},
            {"pipeline_s", pipeline_s},
            {"dp_sync_s", dp_sync_s},
            {"optimizer_s", optimizer_s},
            {"feasible", feasible},
            {"problems", problems},
            {"pipelines", pipes},
            {"devices", devs}};
  if (iteration_time_range_s.second > 0) {
    j["iteration_time_s_range"] = {iteration_time_range_s.first, iteration_time_range_s.second};
  }
  figures.add_to(j);
  return j;
}

double hardware_flops(const Plan& plan, const Model& m, const TrainingConfig& t) {
  double sum = 0;
  for (const Pipeline& p : plan.pipelines) {
    const int b = p.batch;
    const double forward = layer_forward_flops(m, t, b);
    std::map<Recompute, double> backward;  // per recompute choice met in this pipeline
    for (const Stage& s : p.stages) {
      const Recompute r = s.recompute_in(t);
      auto [it, fresh] = backward.try_emplace(r, 0.0);
      if (fresh) {
        it->second = kernels_flops(block_backward(m, t, Block::kAttention, b, 1.0, r)) +
                     kernels_flops(block_backward(m, t, Block::kMlp, b, 1.0, r));
      }
      sum += s.layers() * (forward + it->second);
    }
    sum += kernels_flops(head_forward(m, t, b, 1.0)) + kernels_flops(head_backward(m, t, b, 1.0));
  }
  return sum;
}

}  // namespace estimate
}  // namespace hexi
