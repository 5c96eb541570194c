#include "scheduler/program/program.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "topologies/enum_names.hpp"
#include "topologies/text.hpp"

namespace hexi {
inline namespace program {

std::string_view to_string(OpKind k) {
  return kOpKindNames.name(k);
}

std::string_view to_string(Stream s) {
  return kStreamNames.name(s);
}

std::string_view to_string(ComputeKind k) {
  return kComputeKindNames.name(k);
}

bool is_forward(ComputeKind k) {
  switch (k) {
    case ComputeKind::kEmbeddingFwd:
    case ComputeKind::kAttnFwd:
    case ComputeKind::kMlpFwd:
    case ComputeKind::kHeadFwd:
    case ComputeKind::kStageFwd:
    case ComputeKind::kPreFwd:
    case ComputeKind::kRingFwd:
    case ComputeKind::kPostFwd:
      return true;
    default:
      return false;
  }
}

bool is_backward(ComputeKind k) {
  return k != ComputeKind::kOptimizer && !is_forward(k);
}

bool is_ulysses(TensorKind k) {
  return k == TensorKind::kQkv || k == TensorKind::kAttnOut || k == TensorKind::kAttnOutGrad ||
         k == TensorKind::kQkvGrad;
}

bool is_ring(TensorKind k) {
  return k == TensorKind::kKv || k == TensorKind::kKvGrad;
}

std::string_view to_string(TensorKind k) {
  return kTensorKindNames.name(k);
}

std::string_view to_string(GroupKind k) {
  return kGroupKindNames.name(k);
}

std::string_view to_string(Granularity g) {
  return kGranularityNames.name(g);
}

std::string_view intern_name(std::string_view name) {
  static std::mutex mu;
  static std::unordered_set<std::string> pool;  // node-based: element addresses are stable
  std::lock_guard<std::mutex> lock(mu);
  return *pool.emplace(name).first;
}

double Shape::bytes() const {
  double sum = 0;
  for (const auto& k : kernels) sum += k.bytes;
  return sum;
}

std::vector<int> stream_predecessors(const Program& p) {
  std::vector<int> prev(p.num_ops(), -1);
  std::unordered_map<std::uint64_t, int> last;  // (stream, peer, kind) -> previous op, per device
  for (const auto& l : p.devices) {
    last.clear();
    for (int id = l.op_begin; id < l.op_end; ++id) {
      const Op& op = p.ops[id];
      const bool p2p = op.stream == Stream::kP2p;
      // Stage-boundary gradients have their own channel (interleaved pipelines send
      // activations and gradients between the same two devices).
      const bool grads = p2p && op.tensor == TensorKind::kActivationGrad;
      const std::uint64_t key = (static_cast<std::uint64_t>(op.stream) << 40) |
                                (static_cast<std::uint64_t>(p2p ? op.peer + 1 : 0) << 8) |
                                (p2p ? static_cast<std::uint64_t>(op.kind) : 0) |
                                (grads ? std::uint64_t{1} << 7 : 0);
      auto [it, fresh] = last.emplace(key, id);
      if (!fresh) {
        prev[id] = it->second;
        it->second = id;
      }
    }
  }
  return prev;
}

ChunkLayout chunk_layout(const DeviceLayout& l, int chunk) {
  if (!l.chunks.empty()) return l.chunks[static_cast<std::size_t>(chunk)];
  return {l.stage, l.layer_begin, l.layer_end, l.first, l.last};
}

int num_chunks(const DeviceLayout& l) {
  return l.chunks.empty() ? 1 : static_cast<int>(l.chunks.size());
}

StageShape chunk_shape(const DeviceLayout& l, int chunk, int in_flight, int dp) {
  StageShape s = stage_shape(l, in_flight, dp);
  const ChunkLayout c = chunk_layout(l, chunk);
  s.layer_begin = c.layer_begin;
  s.layer_end = c.layer_end;
  s.first = c.first;
  s.last = c.last;
  return s;
}

MemoryBreakdown chunked_memory(const Model& model, const TrainingConfig& training,
                               const DeviceLayout& l, const std::vector<int>& in_flight, int dp) {
  if (l.chunks.empty()) return device_memory(model, training, stage_shape(l, in_flight.at(0), dp));
  MemoryBreakdown sum;
  for (int c = 0; c < num_chunks(l); ++c) {
    const MemoryBreakdown m = device_memory(
        model, training, chunk_shape(l, c, in_flight.at(static_cast<std::size_t>(c)), dp));
    sum.add_chunk(m);
  }
  return sum;
}

std::vector<double> chunk_activation_bytes(const Model& model, const TrainingConfig& training,
                                           const DeviceLayout& l) {
  std::vector<double> bytes;
  for (int c = 0; c < num_chunks(l); ++c)
    bytes.push_back(device_memory(model, training, chunk_shape(l, c, 1, 1)).activations);
  return bytes;
}

StageShape stage_shape(const DeviceLayout& l, int in_flight, int dp) {
  StageShape s;
  s.layer_begin = l.layer_begin;
  s.layer_end = l.layer_end;
  s.first = l.first;
  s.last = l.last;
  s.tp = l.tp;
  s.phi = l.phi;
  s.experts = l.experts;
  s.in_flight = in_flight;
  s.dp = dp;
  s.micro_batch = l.micro_batch;
  s.recompute = l.recompute;
  return s;
}

const DeviceLayout* Program::layout(int device) const {
  auto it = std::lower_bound(devices.begin(), devices.end(), device,
                             [](const DeviceLayout& l, int d) { return l.device < d; });
  return it != devices.end() && it->device == device ? &*it : nullptr;
}

namespace {

std::string op_name(const Program& p, int id) {
  const Op& op = p.ops[id];
  return "op " + std::to_string(id) + " (device " + std::to_string(op.device) + ", " +
         std::string(to_string(op.kind)) + ")";
}

class Checker {
 public:
  Checker(const Program& p, const std::string& origin) : p_(p), origin_(origin) {}

  Status run() {
    if (auto st = check_layouts(); !st) return st;
    if (auto st = check_fields(); !st) return st;
    if (auto st = check_p2p(); !st) return st;
    if (auto st = check_collectives(); !st) return st;
    return check_cycles();
  }

 private:
  Error fail(const std::string& what) const { return bad_input(origin_ + ": " + what); }

  Status check_layouts() {
    int next = 0, prev_device = -1;
    for (const auto& l : p_.devices) {
      if (l.device <= prev_device || l.device >= p_.num_devices) {
        return fail("device layouts must list distinct devices 0.." +
                    std::to_string(p_.num_devices - 1) + " in increasing order (got device " +
                    std::to_string(l.device) + ")");
      }
      prev_device = l.device;
      if (l.op_begin != next || l.op_end < l.op_begin) {
        return fail("device " + std::to_string(l.device) +
                    ": ops must be numbered contiguously; expected ids from " +
                    std::to_string(next));
      }
      for (int id = l.op_begin; id < l.op_end; ++id) {
        if (id >= p_.num_ops() || p_.ops[id].device != l.device) {
          return fail("op " + std::to_string(id) + " is listed under device " +
                      std::to_string(l.device) + " but does not belong to it");
        }
      }
      next = l.op_end;
    }
    if (next != p_.num_ops()) return fail("ops " + std::to_string(next) + ".. belong to no device");
    return {};
  }

  Status check_fields() {
    const int n = p_.num_ops();
    for (int id = 0; id < n; ++id) {
      const Op& op = p_.ops[id];
      if (static_cast<std::size_t>(op.deps_begin) + op.deps_count > p_.dep_ids.size()) {
        return fail(op_name(p_, id) + ": dependency list out of range");
      }
      for (int d : p_.deps(op)) {
        if (d < 0 || d >= n || d == id) {
          return fail(op_name(p_, id) + ": dependency " + std::to_string(d) +
                      " is not another op of the program");
        }
      }
      switch (op.kind) {
        case OpKind::kCompute:
          if (op.shape < 0 || op.shape >= static_cast<int>(p_.shapes.size())) {
            return fail(op_name(p_, id) + ": shape " + std::to_string(op.shape) +
                        " does not exist");
          }
          if (op.folded >= static_cast<int>(p_.folds.size())) {
            return fail(op_name(p_, id) + ": fold " + std::to_string(op.folded) +
                        " does not exist");
          }
          if (op.folded >= 0 && p_.folds[op.folded].mesh >= static_cast<int>(p_.meshes.size())) {
            return fail(op_name(p_, id) + ": fold " + std::to_string(op.folded) + " names mesh " +
                        std::to_string(p_.folds[op.folded].mesh) + ", which does not exist");
          }
          break;
        case OpKind::kSend:
        case OpKind::kRecv:
          if (op.peer < 0 || op.peer >= p_.num_devices || op.peer == op.device || op.tag < 0) {
            return fail(op_name(p_, id) +
                        ": needs a peer device other than its own and a tag >= 0");
          }
          break;
        case OpKind::kCollective: {
          if (op.group < 0 || op.group >= static_cast<int>(p_.groups.size())) {
            return fail(op_name(p_, id) + ": group " + std::to_string(op.group) +
                        " does not exist");
          }
          const auto& members = p_.groups[op.group].devices;
          if (std::find(members.begin(), members.end(), op.device) == members.end()) {
            return fail(op_name(p_, id) + ": its device is not a member of group " +
                        std::to_string(op.group));
          }
          if (op.instance < 0) return fail(op_name(p_, id) + ": needs an instance >= 0");
          break;
        }
      }
      if (op.bucket >= static_cast<int>(p_.buckets.size())) {
        return fail(op_name(p_, id) + ": bucket " + std::to_string(op.bucket) + " does not exist");
      }
    }
    return {};
  }

  // (src, dst, tag) of a send or recv as one hash key.
  struct TripleHash {
    std::size_t operator()(const std::tuple<int, int, int>& k) const {
      auto [a, b, c] = k;
      std::uint64_t h = static_cast<std::uint32_t>(a);
      h = h * 0x9E3779B97F4A7C15ULL + static_cast<std::uint32_t>(b);
      h = h * 0x9E3779B97F4A7C15ULL + static_cast<std::uint32_t>(c);
      return static_cast<std::size_t>(h ^ (h >> 29));
    }
  };

  Status check_p2p() {
    std::unordered_map<std::tuple<int, int, int>, int, TripleHash> sends,
        recvs;  // (src, dst, tag) -> op
    for (int id = 0; id < p_.num_ops(); ++id) {
      const Op& op = p_.ops[id];
      if (op.kind != OpKind::kSend && op.kind != OpKind::kRecv) continue;
      bool send = op.kind == OpKind::kSend;
      auto key = send ? std::make_tuple(op.device, op.peer, op.tag)
                      : std::make_tuple(op.peer, op.device, op.tag);
      auto& table = send ? sends : recvs;
      auto [it, fresh] = table.emplace(key, id);
      if (!fresh) {
        return fail(op_name(p_, id) + " and op " + std::to_string(it->second) +
                    " use the same (source " + std::to_string(std::get<0>(key)) + ", destination " +
                    std::to_string(std::get<1>(key)) + ", tag " + std::to_string(op.tag) + ")");
      }
    }
    // In op order, so that the first problem reported does not depend on hashing.
    for (int id = 0; id < p_.num_ops(); ++id) {
      const Op& op = p_.ops[id];
      if (op.kind == OpKind::kSend) {
        auto it = recvs.find({op.device, op.peer, op.tag});
        if (it == recvs.end()) {
          return fail("unmatched send: " + op_name(p_, id) + " to device " +
                      std::to_string(op.peer) + " with tag " + std::to_string(op.tag) +
                      " has no matching recv");
        }
        if (op.bytes != p_.ops[it->second].bytes) {
          return fail("send op " + std::to_string(id) + " and recv op " +
                      std::to_string(it->second) + " disagree on the message size");
        }
        partner_.emplace_back(id, it->second);
      } else if (op.kind == OpKind::kRecv && sends.count({op.peer, op.device, op.tag}) == 0) {
        return fail("unmatched recv: " + op_name(p_, id) + " from device " +
                    std::to_string(op.peer) + " with tag " + std::to_string(op.tag) +
                    " has no matching send");
      }
    }
    return {};
  }

  Status check_collectives() {
    std::vector<int> ids;  // collective ops, sorted by (group, instance, id)
    std::vector<int> stream_of(p_.groups.size(), -1);
    std::unordered_map<std::uint64_t, int> last_instance;  // (device, group) -> instance
    for (int id = 0; id < p_.num_ops(); ++id) {
      const Op& op = p_.ops[id];
      if (op.kind != OpKind::kCollective) continue;
      ids.push_back(id);
      int& s = stream_of[op.group];
      if (s >= 0 && s != static_cast<int>(op.stream)) {
        return fail(op_name(p_, id) + ": group " + std::to_string(op.group) +
                    " is used by two streams");
      }
      s = static_cast<int>(op.stream);
      const std::uint64_t key =
          (static_cast<std::uint64_t>(op.device) << 32) | static_cast<std::uint32_t>(op.group);
      auto [it, fresh] = last_instance.emplace(key, op.instance);
      if (!fresh) {
        if (op.instance <= it->second) {
          return fail(op_name(p_, id) + ": collective instance " + std::to_string(op.instance) +
                      " on group " + std::to_string(op.group) + " comes after instance " +
                      std::to_string(it->second) +
                      " on this device (members must issue a group's collectives in one order)");
        }
        it->second = op.instance;
      }
    }
    auto key = [&](int id) { return std::make_tuple(p_.ops[id].group, p_.ops[id].instance, id); };
    std::sort(ids.begin(), ids.end(), [&](int a, int b) { return key(a) < key(b); });
    for (std::size_t i = 0; i < ids.size();) {
      std::size_t j = i;
      const Op& first = p_.ops[ids[i]];
      while (j < ids.size() && p_.ops[ids[j]].group == first.group &&
             p_.ops[ids[j]].instance == first.instance)
        ++j;
      if (auto st = check_instance({ids.begin() + i, ids.begin() + j}); !st) return st;
      i = j;
    }
    return {};
  }

  // The ops of one collective instance: one per member, same kind and size.
  Status check_instance(std::vector<int> ids) {
    const Op& b = p_.ops[ids.front()];
    const auto& members = p_.groups[b.group].devices;
    std::vector<int> devices;
    for (int id : ids) {
      const Op& a = p_.ops[id];
      devices.push_back(a.device);
      if (a.collective != b.collective || a.bytes != b.bytes) {
        return fail("ops " + std::to_string(ids.front()) + " and " + std::to_string(id) +
                    " of instance " + std::to_string(b.instance) + " on group " +
                    std::to_string(b.group) + " disagree on the collective or its size");
      }
    }
    std::sort(devices.begin(), devices.end());
    if (auto dup = std::adjacent_find(devices.begin(), devices.end()); dup != devices.end()) {
      return fail(op_name(p_, ids.front()) + ": device " + std::to_string(*dup) +
                  " joins instance " + std::to_string(b.instance) + " of group " +
                  std::to_string(b.group) + " twice");
    }
    if (devices.size() != members.size()) {
      std::string missing;
      for (int d : members) {
        if (!std::binary_search(devices.begin(), devices.end(), d)) {
          missing += (missing.empty() ? "" : ", ") + std::to_string(d);
        }
      }
      return fail("incomplete collective: op " + std::to_string(ids.front()) + " (instance " +
                  std::to_string(b.instance) + " on group " + std::to_string(b.group) +
                  ") has no matching op on device(s) " + missing);
    }
    rendezvous_.push_back(std::move(ids));
    return {};
  }

  // Ops that rendezvous (a send and its recv, the members of a collective) start
  // together, so they become one node; edges are deps and stream order.
  Status check_cycles() {
    const int n = p_.num_ops();
    std::vector<int> node(n);
    std::iota(node.begin(), node.end(), 0);
    for (auto [a, b] : partner_) node[b] = a;
    for (const auto& ids : rendezvous_) {
      for (int id : ids) node[id] = ids.front();
    }
    // Edges (from, to) between nodes, then CSR both ways.
    std::vector<std::pair<int, int>> edges;
    edges.reserve(p_.dep_ids.size() + n);
    for (int id = 0; id < n; ++id) {
      for (int d : p_.deps(id)) edges.emplace_back(node[d], node[id]);
    }
    const std::vector<int> prev = stream_predecessors(p_);
    for (int id = 0; id < n; ++id) {
      if (prev[id] >= 0) edges.emplace_back(node[prev[id]], node[id]);
    }
    std::vector<int> out_begin(n + 1, 0), in_begin(n + 1, 0);
    for (auto [a, b] : edges) {
      ++out_begin[a + 1];
      ++in_begin[b + 1];
    }
    for (int i = 0; i < n; ++i) {
      out_begin[i + 1] += out_begin[i];
      in_begin[i + 1] += in_begin[i];
    }
    std::vector<int> out(edges.size()), in(edges.size()), indegree(n, 0);
    {
      std::vector<int> fo(out_begin.begin(), out_begin.end() - 1),
          fi(in_begin.begin(), in_begin.end() - 1);
      for (auto [a, b] : edges) {
        out[fo[a]++] = b;
        in[fi[b]++] = a;
        ++indegree[b];
      }
    }
    std::vector<int> ready;
    int nodes = 0;
    for (int v = 0; v < n; ++v) {
      if (node[v] != v) continue;
      ++nodes;
      if (indegree[v] == 0) ready.push_back(v);
    }
    int done = 0;
    while (!ready.empty()) {
      int v = ready.back();
      ready.pop_back();
      ++done;
      for (int i = out_begin[v]; i < out_begin[v + 1]; ++i) {
        if (--indegree[out[i]] == 0) ready.push_back(out[i]);
      }
    }
    if (done == nodes) return {};
    return fail("dependency cycle: " + describe_cycle(node, in_begin, in, indegree));
  }

  // Every node left after Kahn's algorithm has a predecessor that is also left:
  // walking predecessors from one of them must close a cycle.
  std::string describe_cycle(const std::vector<int>& node, const std::vector<int>& in_begin,
                             const std::vector<int>& in, const std::vector<int>& indegree) const {
    const int n = p_.num_ops();
    int v = 0;
    while (node[v] != v || indegree[v] == 0) ++v;
    std::vector<int> seen_at(n, -1), path;
    while (seen_at[v] < 0) {
      seen_at[v] = static_cast<int>(path.size());
      path.push_back(v);
      for (int i = in_begin[v]; i < in_begin[v + 1]; ++i) {
        if (indegree[in[i]] > 0) {
          v = in[i];
          break;
        }
      }
    }
    std::vector<int> cycle(path.begin() + seen_at[v], path.end());
    std::reverse(cycle.begin(), cycle.end());
    const bool whole = cycle.size() <= 16;
    if (whole) {
      cycle.push_back(cycle.front());
    } else {
      cycle.resize(16);
    }
    std::string text;
    for (int c : cycle) {
      std::string members;
      for (int id = 0; id < n; ++id) {
        if (node[id] == c) members += (members.empty() ? "" : "+") + std::to_string(id);
      }
      text += (text.empty() ? "op " : " -> op ") + members;
    }
    return text + (whole ? "" : " -> ...") +
           " (each op waits on the one before it through deps, stream order, or a send/recv or "
           "collective"
           " rendezvous)";
  }

  const Program& p_;
  const std::string& origin_;
  std::vector<std::pair<int, int>> partner_;
  std::vector<std::vector<int>> rendezvous_;
};

}  // namespace

Status validate_program(const Program& program, const std::string& origin) {
  return Checker(program, origin).run();
}

// JSON-safe: the names are plain ASCII without quotes or backslashes.
std::string op_label(const Program& p, int id) {
  const Op& op = p.ops[id];
  std::string s;
  if (op.kind == OpKind::kCompute) {
    s = std::string(to_string(op.compute));
    if (op.layer >= 0) s += " L" + std::to_string(op.layer);
    if (op.step >= 0) s += " step" + std::to_string(op.step);
  } else if (op.kind == OpKind::kCollective) {
    s = std::string(to_string(op.collective)) + " " + std::string(to_string(op.tensor));
  } else {
    s = std::string(to_string(op.kind)) + " " + std::string(to_string(op.tensor)) +
        (op.kind == OpKind::kSend ? " to " : " from ") + std::to_string(op.peer);
    if (op.layer >= 0) s += " L" + std::to_string(op.layer);
    if (op.step >= 0) s += " step" + std::to_string(op.step);
  }
  if (op.micro_batch >= 0) s += " mb" + std::to_string(op.micro_batch);
  return s;
}

std::string input_digest(const Json& json) {
  return fnv1a64_hex(dump_json(json));
}

Status check_program_inputs(const Program& program, const Model& model,
                            const TrainingConfig& training, const std::string& origin) {
  if (program.model_digest.empty() || program.training_digest.empty()) {
    return bad_input(origin +
                     ": the program does not record what it was lowered from "
                     "(written by an older hexisim?); lower the plan again");
  }
  if (program.model_digest != input_digest(to_json(model))) {
    return bad_input(origin + ": lowered for model " + program.model +
                     ", not for this scenario's model " + model.name +
                     " (or the model differs); lower the plan again for this scenario");
  }
  if (program.training_digest != input_digest(to_json(training))) {
    return bad_input(
        origin + ": lowered for another training config (global batch " +
        std::to_string(program.global_batch) + ", seq_len " + std::to_string(program.seq_len) +
        "; this scenario: " + std::to_string(training.global_batch) + ", " +
        std::to_string(training.seq_len) + "); lower the plan again for this scenario");
  }
  return {};
}

}  // namespace program
}  // namespace hexi
