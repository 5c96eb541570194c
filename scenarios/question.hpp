#pragma once
// A scenario asked for in parts, without writing a file: the commands' --mix, --cluster,
// --model, --global-batch, ... flags (cli/options.hpp). The parts fill a scenario of their own,
// or replace fields of a base scenario (a file or a shipped name). What they make is scenario
// JSON (scenario.hpp's format), loaded as a file is and writable as one (--save-scenario).

#include <filesystem>
#include <optional>
#include <string>

#include "topologies/gpu_catalog.hpp"
#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi {

struct ScenarioQuestion {
  std::string base;     // a scenario file or shipped name; empty: none
  std::string mix;      // "TYPE:MACHINESxGPUS[,...]" (cluster_gen.hpp): a generated cluster
  std::string cluster;  // or a cluster file or shipped name
  // The generated cluster's network (with `mix` only: a cluster file names its own).
  std::optional<double> nic_GBps;       // per machine, all NICs together
  std::optional<int> nics_per_machine;  // rail-optimised when equal to the GPUs per machine
  std::string transport;                // "rdma", "efa", "tcp" or "tcpxo"
  std::string model;                    // a catalog model
  std::optional<int> global_batch, micro_batch, seq_len, zero_stage;
  std::string precision;  // "bf16", "fp16" or "fp32"
  std::string recompute;  // "none", "selective" or "full"

  // Whether any part is given (else the base alone is the scenario).
  bool any_part() const;
};

struct AskedScenario {
  Json json;                   // the scenario
  std::filesystem::path file;  // where relative paths in it resolve: the base's file, or none
};

// The scenario a question makes. Bad input naming the flag when a part is missing (no base:
// a cluster and a model are needed), two parts clash (--mix and --cluster), a network part
// comes without --mix, or the mix does not parse; the fields' values are checked when the
// scenario is loaded (scenario_from_json), with the flag's JSON path.
// With `base_json`, that scenario (a document in memory, not a file) is the base instead of
// q.base.
Result<AskedScenario> ask_scenario(const ScenarioQuestion& q, const GpuCatalog& gpus,
                                   const Json* base_json = nullptr);

}  // namespace hexi
