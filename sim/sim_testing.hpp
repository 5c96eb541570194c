#pragma once
// Test-only: hand-built programs and clusters of round-number GPUs, so that
// simulated times can be checked by hand.

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "scheduler/program/program.hpp"
#include "topologies/cluster.hpp"
#include "topologies/gpu_catalog.hpp"
#include "topologies/profile.hpp"

namespace hexi::testing {

// A catalog with one GPU of exactly 1 TFLOP/s, 1 TB/s HBM, 100 GB/s NVSwitch,
// 50 GB/s PCIe, 80 GiB.
inline const GpuCatalog& unit_catalog() {
  static GpuCatalog c = [] {
    Json j = {{"version", 1},
              {"gpus",
               {{{"name", "unit"},
                 {"tflops", 1},
                 {"precision", "test"},
                 {"memory_gib", 80},
                 {"memory_GBps", 1000},
                 {"pcie_GBps", 50},
                 {"intra", {{"kind", "nvswitch"}, {"GBps", 100}}},
                 {"source", "test"}}}}};
    auto loaded = GpuCatalog::from_json(j, "<unit catalog>");
    if (!loaded) throw std::runtime_error(loaded.error().message);
    return std::move(*loaded);
  }();
  return c;
}

// `machines` machines of `gpus` unit GPUs, one NIC of nic_GBps each, one switch.
// Latencies: NVSwitch 2 us, NIC 5 us, switch 2 us. Nominal rates (no transport efficiency).
inline Cluster unit_cluster(int machines, int gpus, double nic_GBps = 25,
                            Json extra_machine = Json::object()) {
  Json machine = {{"gpu", "unit"}, {"gpus", gpus}, {"repeat", machines}};
  machine.update(extra_machine);
  Json j = {{"version", 1},
            {"name", "unit-cluster"},
            {"network",
             {{"nic_GBps", nic_GBps},
              {"rates", "nominal"},
              {"latency_us", {{"nvswitch", 2}, {"nic", 5}, {"switch", 2}}}}},
            {"machines", {machine}}};
  auto c = Cluster::from_json(j, "<unit cluster>", unit_catalog());
  if (!c) throw std::runtime_error(c.error().message);
  return std::move(*c);
}

// Compute time is exactly FLOPs / peak: efficiency 1, no launch overhead.
inline Profile ideal_profile() {
  Profile p;
  p.set_default(DeviceProfile::constant(1.0, 1.0, 1.0, 0.0), "ideal (tests)");
  return p;
}

// Builds a program op by op. Handles index ops in creation order; deps are handles.
class ProgramBuilder {
 public:
  explicit ProgramBuilder(int num_devices) { p_.num_devices = num_devices; }

  // A compute op of `flops` (one GEMM kernel, no memory traffic).
  int compute(int device, double flops, std::vector<int> deps = {}, int micro_batch = -1,
              ComputeKind kind = ComputeKind::kAttnFwd) {
    auto [it, fresh] =
        shapes_.emplace(std::make_pair(flops, kind), static_cast<int>(p_.shapes.size()));
    if (fresh) {
      Shape s;
      s.kind = kind;
      s.kernels.push_back({"test", KernelClass::kGemm, flops, 0.0});
      p_.shapes.push_back(s);
    }
    Op op;
    op.kind = OpKind::kCompute;
    op.compute = kind;
    op.shape = it->second;
    op.micro_batch = micro_batch;
    return add(device, op, std::move(deps));
  }
  // Stage-boundary gradients (TensorKind::kActivationGrad) have their own FIFO channel.
  int send(int device, int peer, double bytes, int tag, std::vector<int> deps = {},
           TensorKind tensor = TensorKind::kActivation) {
    return p2p(OpKind::kSend, device, peer, bytes, tag, std::move(deps), tensor);
  }
  int recv(int device, int peer, double bytes, int tag, std::vector<int> deps = {},
           TensorKind tensor = TensorKind::kActivation) {
    return p2p(OpKind::kRecv, device, peer, bytes, tag, std::move(deps), tensor);
  }
  int group(std::vector<int> devices, GroupKind kind = GroupKind::kDp) {
    p_.groups.push_back({kind, std::move(devices), {}});
    return static_cast<int>(p_.groups.size()) - 1;
  }
  // Every member of `group` gets the op (same instance); returns their handles.
  std::vector<int> collective(int group, Collective c, double bytes, Stream stream = Stream::kDp,
                              std::map<int, std::vector<int>> deps = {}) {
    std::vector<int> handles;
    const int instance = instances_[group]++;
    for (int d : p_.groups[group].devices) {
      Op op;
      op.kind = OpKind::kCollective;
      op.stream = stream;
      op.collective = c;
      op.group = group;
      op.instance = instance;
      op.bytes = bytes;
      op.tensor = TensorKind::kGradBucket;
      handles.push_back(add(d, op, deps[d]));
    }
    return handles;
  }

  Program build() const {
    Program p = p_;
    std::vector<int> id_of(ops_.size());
    std::map<int, std::vector<int>> by_device;
    for (std::size_t h = 0; h < ops_.size(); ++h)
      by_device[ops_[h].first.device].push_back(static_cast<int>(h));
    int next = 0;
    for (auto& [d, hs] : by_device) {
      for (int h : hs) id_of[h] = next++;
    }
    for (auto& [d, hs] : by_device) {
      DeviceLayout l;
      l.device = d;
      l.stage = d;
      l.op_begin = static_cast<int>(p.ops.size());
      for (int h : hs) {
        Op op = ops_[h].first;
        op.deps_begin = static_cast<std::uint32_t>(p.dep_ids.size());
        for (int x : ops_[h].second) p.dep_ids.push_back(id_of[x]);
        op.deps_count = static_cast<std::uint32_t>(ops_[h].second.size());
        p.ops.push_back(op);
      }
      l.op_end = static_cast<int>(p.ops.size());
      p.devices.push_back(l);
    }
    return p;
  }

 private:
  int p2p(OpKind kind, int device, int peer, double bytes, int tag, std::vector<int> deps,
          TensorKind tensor) {
    Op op;
    op.kind = kind;
    op.stream = Stream::kP2p;
    op.tensor = tensor;
    op.peer = peer;
    op.tag = tag;
    op.bytes = bytes;
    return add(device, op, std::move(deps));
  }
  int add(int device, Op op, std::vector<int> deps) {
    op.device = device;
    ops_.emplace_back(op, std::move(deps));
    return static_cast<int>(ops_.size()) - 1;
  }

  Program p_;
  std::vector<std::pair<Op, std::vector<int>>> ops_;
  std::map<std::pair<double, ComputeKind>, int> shapes_;
  std::map<int, int> instances_;
};

}  // namespace hexi::testing
