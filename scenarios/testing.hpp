#pragma once
// Test-only: the shipped model catalog and scenarios, and small inline scenarios (tests
// feed tiny inline text rather than shipped files where they can).

#include <stdexcept>
#include <string>

#include "scenarios/scenario.hpp"
#include "topologies/testing.hpp"

namespace hexi::testing {

inline const ModelCatalog& shipped_models() {
  static const ModelCatalog c = [] {
    auto loaded = ModelCatalog::load_shipped();
    if (!loaded) throw std::runtime_error(loaded.error().message);
    return std::move(*loaded);
  }();
  return c;
}

// A shipped scenario by name (scenarios/shipped/<name>.json).
inline Scenario shipped_scenario(const std::string& name) {
  auto sc = load_scenario(name, shipped_gpus(), shipped_models());
  if (!sc) throw std::runtime_error(sc.error().message);
  return std::move(*sc);
}

// Two 4-GPU A100 NVSwitch machines on a 25 GB/s network, tiny-llama-8l (8 layers,
// 4 heads, 2 KV heads), global batch 8 x 64 tokens.
inline const char* kTinyScenario = R"({
  "version": 1, "name": "tiny",
  "cluster": {"version": 1, "name": "two-a100-boxes", "network": {"nic_GBps": 25, "rates": "nominal"},
              "machines": [{"name": "m", "gpu": "A100", "gpus": 4, "repeat": 2}]},
  "model": "tiny-llama-8l",
  "training": {"global_batch": 8, "micro_batch": 1, "seq_len": 64}})";

inline Scenario tiny_scenario(const std::string& text = kTinyScenario) {
  auto json = parse_json_text(text, "tiny.json");
  auto s = scenario_from_json(*json, "tiny.json", shipped_gpus(), shipped_models());
  if (!s.ok()) throw std::runtime_error(s.error().message);
  return std::move(*s);
}

}  // namespace hexi::testing
