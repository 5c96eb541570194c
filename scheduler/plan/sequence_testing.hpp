#pragma once
// Test-only helpers for the sequence-layout tests (layout, closed form, searches, lowering): inline
// clusters of mixed machines, models of the shipped catalog or small inline ones, training configs
// for one long sequence. Loader failures throw with the loader's message (the test fails).

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "scenarios/model.hpp"
#include "scenarios/training.hpp"
#include "topologies/cluster.hpp"
#include "topologies/testing.hpp"

namespace hexi::testing {

// One kind of machine of a test cluster: `gpus` GPUs of `gpu`, `repeat` machines.
struct MachineSpec {
  std::string gpu;
  int gpus = 8;
  int repeat = 1;
};

// Machines on one leaf switch with a `nic_GBps` NIC each (one NIC per machine).
inline Cluster mixed_cluster(const std::vector<MachineSpec>& machines, double nic_GBps = 25) {
  Json ms = Json::array();
  for (const auto& m : machines) {
    ms.push_back({{"gpu", m.gpu}, {"gpus", m.gpus}, {"repeat", m.repeat}});
  }
  Json j = {{"version", 1},
            {"name", "hexiseq-test"},
            {"network", {{"nic_GBps", nic_GBps}, {"machines_per_leaf", 0}}},
            {"machines", ms}};
  auto c = Cluster::from_json(j, "<test cluster>", shipped_gpus());
  if (!c) throw std::runtime_error(c.error().message);
  return std::move(*c);
}

// A model of the shipped catalog (scenarios/models.json).
inline Model catalog_model(std::string_view name) {
  static const ModelCatalog catalog = [] {
    auto c = ModelCatalog::load_shipped();
    if (!c) throw std::runtime_error(c.error().message);
    return std::move(*c);
  }();
  const Model* m = catalog.find(name);
  if (m == nullptr) throw std::runtime_error("no model " + std::string(name));
  return *m;
}

// A small Llama-shaped model with few heads (the exact MILP's size grows with them):
// `layers` layers, hidden 1024, `heads` heads of 128 with `kv` kv heads.
inline Model small_model(int heads = 8, int kv = 2, int layers = 8) {
  Json j = {{"name", "small"}, {"layers", layers}, {"hidden", 128 * heads}, {"ffn", 344 * heads},
            {"heads", heads},  {"kv_heads", kv},   {"vocab", 32000},        {"max_seq", 1 << 20}};
  return read_model(JsonNode(j, "<test model>"));
}

// One sequence of `seq` tokens per micro-batch, bf16, selective recompute, ZeRO-1.
inline TrainingConfig long_context(int seq, int global_batch = 1) {
  TrainingConfig t;
  t.global_batch = global_batch;
  t.micro_batch = 1;
  t.seq_len = seq;
  t.zero_stage = 1;
  return t;
}

// long_context(seq) under full activation recompute (what the baselines' tests compare on).
inline TrainingConfig with_full_recompute(int seq) {
  TrainingConfig t = long_context(seq);
  t.recompute = Recompute::kFull;
  return t;
}

}  // namespace hexi::testing
