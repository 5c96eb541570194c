#pragma once
// Small inline scenarios for scheduler tests (tests feed tiny inline text, not shipped files).

#include <string>

#include "scenarios/scenario.hpp"

namespace hexi::testing {

// Two 4-GPU A100 NVSwitch machines on a 25 GB/s network, tiny-llama-8l (8 layers,
// 4 heads, 2 KV heads), global batch 8 x 64 tokens.
inline const char* kTinyScenario = R"({
  "version": 1, "name": "tiny",
  "cluster": {"version": 1, "name": "two-a100-boxes", "network": {"nic_GBps": 25},
              "machines": [{"name": "m", "gpu": "A100", "gpus": 4, "repeat": 2}]},
  "model": "tiny-llama-8l",
  "training": {"global_batch": 8, "micro_batch": 1, "seq_len": 64}})";

inline Scenario tiny_scenario(const std::string& text = kTinyScenario) {
  static const GpuCatalog gpus = *GpuCatalog::load_shipped();
  static const ModelCatalog models = *ModelCatalog::load_shipped();
  auto json = parse_json_text(text, "tiny.json");
  auto s = scenario_from_json(*json, "tiny.json", gpus, models);
  if (!s.ok()) throw std::runtime_error(s.error().message);
  return std::move(*s);
}

}  // namespace hexi::testing
