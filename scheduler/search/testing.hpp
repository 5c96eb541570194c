#pragma once
// Test helpers for the scheduler tests: scenarios from inline cluster JSON, shipped
// scenarios, and seeded random heterogeneous clusters.

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "scenarios/scenario.hpp"
#include "scenarios/testing.hpp"
#include "scheduler/search/random.hpp"

namespace hexi::testing {

// A scenario over an inline cluster; `model` is a catalog name or an inline object.
inline Result<Scenario> make_scenario(const Json& cluster, const Json& model, const Json& training,
                                      const std::string& scheduler = "hexiscale") {
  Json sc = {{"version", 1},   {"name", "test"},       {"cluster", cluster},
             {"model", model}, {"training", training}, {"scheduler", scheduler}};
  return scenario_from_json(sc, "inline-test.json", shipped_gpus(), shipped_models());
}

// A 12-layer Llama-7B-wide model (hidden 4096, MHA) whose layers weigh ~3 GiB with
// optimizer state, so that 12 and 24 GiB GPUs hold only a few each: memory decides the
// split as much as speed (and with long sequences, recompute decides it).
inline Json small_model(int max_seq) {
  return {{"name", "test-12l"}, {"layers", 12},   {"hidden", 4096}, {"ffn", 11008},
          {"heads", 32},        {"kv_heads", 32}, {"vocab", 32000}, {"max_seq", max_seq}};
}

// A cluster JSON: machines as (gpu type, gpus per machine), one switch, NIC GB/s.
inline Json cluster_json(const std::string& name,
                         const std::vector<std::pair<std::string, int>>& machines,
                         double nic_GBps = 12.5) {
  Json ms = Json::array();
  for (std::size_t i = 0; i < machines.size(); ++i) {
    ms.push_back({{"name", "m" + std::to_string(i)},
                  {"gpu", machines[i].first},
                  {"gpus", machines[i].second}});
  }
  return {{"version", 1}, {"name", name}, {"network", {{"nic_GBps", nic_GBps}}}, {"machines", ms}};
}

// Random heterogeneous cluster number `index` of a seeded family: 2-3 machines of
// 2, 4 or 8 GPUs (8-16 GPUs in all), types from a pool of data-centre and
// consumer cards, NIC 12.5 or 25 GB/s.
inline Json random_cluster(std::uint64_t seed, int index) {
  static const char* pool[] = {"RTX3090", "RTX4090", "A6000", "A100-PCIe-40GB",
                               "L40S",    "A10",     "V100",  "A100-SXM-80GB"};
  std::uint64_t state = seed * 1000003ULL + static_cast<std::uint64_t>(index);
  std::vector<std::pair<std::string, int>> machines;
  int total = 0;
  const int want = 2 + static_cast<int>(next_random(state) % 2);
  while (static_cast<int>(machines.size()) < want || total < 8) {
    static const int sizes[] = {2, 4, 8};
    int g = sizes[next_random(state) % 3];
    while (total + g > 16) g /= 2;
    if (g < 2) break;
    total += g;
    machines.emplace_back(pool[next_random(state) % 8], g);
  }
  const double nic = next_random(state) % 2 ? 25.0 : 12.5;
  return cluster_json("random-" + std::to_string(index), machines, nic);
}

// "4xA10 + 8xRTX3090" for a cluster JSON from cluster_json / random_cluster.
inline std::string machines_text(const Json& cluster) {
  std::string out;
  for (const auto& m : cluster["machines"]) {
    out += (out.empty() ? "" : " + ") + std::to_string(m["gpus"].get<int>()) + "x" +
           m["gpu"].get<std::string>();
  }
  return out;
}

// Every split of `layers` into `k` parts of at least one layer: `visit` sees each in `cur`.
inline void compositions(int layers, int k, std::vector<int>& cur,
                         const std::function<void()>& visit) {
  if (static_cast<int>(cur.size()) == k - 1) {
    cur.push_back(layers);
    visit();
    cur.pop_back();
    return;
  }
  for (int l = 1; l <= layers - (k - 1 - static_cast<int>(cur.size())); ++l) {
    cur.push_back(l);
    compositions(layers - l, k, cur, visit);
    cur.pop_back();
  }
}

}  // namespace hexi::testing
