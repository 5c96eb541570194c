#pragma once
// Test-only helpers: tiny inline clusters, models and plans (never used by the
// libraries). Failures to parse abort the test with the loader's message.

#include <gtest/gtest.h>

#include <string>

#include "scenarios/model.hpp"
#include "scenarios/training.hpp"
#include "scheduler/plan/plan.hpp"
#include "topologies/cluster.hpp"
#include "topologies/gpu_catalog.hpp"
#include "topologies/testing.hpp"

namespace hexi::testing {

// `machines` machines of `gpus` GPUs of `gpu` on one switch; nic in GB/s. Nominal rates
// (datasheet links, no transport efficiency), so that times can be checked by hand.
inline Cluster make_cluster(int machines, int gpus, const std::string& gpu = "A100-SXM-80GB",
                            double nic_GBps = 25) {
  Json j = {{"version", 1},
            {"name", "test-cluster"},
            {"network", {{"nic_GBps", nic_GBps}, {"rates", "nominal"}}},
            {"machines", {{{"gpu", gpu}, {"gpus", gpus}, {"repeat", machines}}}}};
  auto c = Cluster::from_json(j, "<test cluster>", shipped_gpus());
  if (!c) throw std::runtime_error(c.error().message);
  return std::move(*c);
}

inline Cluster cluster_from(const Json& j) {
  auto c = Cluster::from_json(j, "<test cluster>", shipped_gpus());
  if (!c) throw std::runtime_error(c.error().message);
  return std::move(*c);
}

// A small Llama-shaped model: `layers` layers, hidden 64, 4 heads with `kv` kv heads.
inline Model tiny_model(int layers = 4, int kv = 2) {
  Json j = {{"name", "tiny"}, {"layers", layers}, {"hidden", 64}, {"ffn", 172},
            {"heads", 4},     {"kv_heads", kv},   {"vocab", 256}, {"max_seq", 32}};
  return read_model(JsonNode(j, "<test model>"));
}

inline TrainingConfig tiny_training(int global_batch, int micro_batch = 1, int seq = 32) {
  TrainingConfig t;
  t.global_batch = global_batch;
  t.micro_batch = micro_batch;
  t.seq_len = seq;
  return t;
}

inline Plan plan_from(const Json& j) {
  auto p = plan_from_json(j, "<test plan>");
  if (!p) throw std::runtime_error(p.error().message);
  return std::move(*p);
}

// A uniform plan: `dp` pipelines of `pp` stages of `tp` consecutive devices,
// layers split evenly, the batch split evenly.
inline Plan uniform_plan(int dp, int pp, int tp, int layers, int global_batch,
                         int micro_batch = 1) {
  Json pipes = Json::array();
  int device = 0;
  for (int p = 0; p < dp; ++p) {
    Json stages = Json::array();
    for (int s = 0; s < pp; ++s) {
      Json devs = Json::array();
      for (int r = 0; r < tp; ++r) devs.push_back(device++);
      stages.push_back({{"devices", devs}, {"layers", {s * layers / pp, (s + 1) * layers / pp}}});
    }
    pipes.push_back(
        {{"batch", global_batch / dp}, {"micro_batch", micro_batch}, {"stages", stages}});
  }
  return plan_from({{"version", 1}, {"pipelines", pipes}});
}

}  // namespace hexi::testing
