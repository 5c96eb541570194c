#pragma once
// An advise request (ADVISE.json, format version 1; examples in scenarios/advise/): what to
// train, the budget, the price book, which machines may be bought (how many at most) and
// which are owned already. `hexisim advise` searches the mixes of machines it allows.
//
//   {"version": 1, "name": ..., "description": ...,
//    "model": NAME | {inline model}, "training": {...as in a scenario...},
//    "prices": SHIPPED-NAME | "path/to/book.json" | {inline price book},
//    "workload": {"tokens": N, "tokens_per_s": X, "days": D},
//    "budget": {"capex_usd": $} | {"usd_per_hour": $},
//    "buy": [{"gpu": NAME, "gpus_per_machine": 8, "max_machines": M}, ...],
//    "owned": [{"gpu": NAME, "gpus_per_machine": 8, "machines": K}, ...],
//    "fabric": {"nic_GBps": 25, "nics_per_machine": 1, "machines_per_leaf": 16,
//               "oversubscription": 1},
//    "marginal": [{"gpu": NAME, "gpus_per_machine": 8, "machines": K}, ...],
//    "search": {...SearchSettings...}}
// The budget says how hardware is paid for: "capex_usd" buys machines at the book's purchase
// prices (the cost axis is the capex of what is bought), "usd_per_hour" rents them at its
// cloud prices (the cost axis is $/h). Owned machines cost only their energy.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "scenarios/model.hpp"
#include "scenarios/prices.hpp"
#include "scenarios/training.hpp"
#include "scheduler/hexiseq/hexiseq.hpp"
#include "topologies/cluster_gen.hpp"
#include "topologies/gpu_catalog.hpp"
#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi {
inline namespace studies {

enum class Pricing {
  kPurchase,  // machines bought at purchase prices: cost = capex, budget "capex_usd"
  kCloud,     // machines rented per GPU-hour: cost = $/h, budget "usd_per_hour"
};

// A kind of machine: `gpus` GPUs of one type, built as `cluster gen` builds them (the GPU's
// intra-machine link from the catalog, the request's fabric).
struct MachineType {
  GpuSpec gpu;      // from the catalog
  GpuPrice price;   // from the price book
  int gpus = 8;     // per machine
  int owned = 0;    // machines owned already
  int max_buy = 0;  // machines that may be bought (0: owned only)

  std::string label() const;  // "H100-SXM x8"
};

struct Workload {
  std::optional<double> tokens;        // to train
  std::optional<double> tokens_per_s;  // throughput target ("tokens_per_s", or tokens / days)
};

struct Budget {
  Pricing pricing = Pricing::kPurchase;
  double limit = 0;  // $ of capex, or $/h
};

// `machines` more of machine type `type` (an index into AdviseRequest::types).
struct Addition {
  int type = 0;
  int machines = 1;
};

// How hard to search (the "search" object; every default named here).
struct SearchSettings {
  int max_plans = 24;   // mixes planned by the guided search (besides owned, marginal,
                        // calibration)
  int plan_gpus = 128;  // larger mixes are planned as groups of at most this many GPUs
  int simulate = 6;     // front points simulated with SimGrid (stage fidelity), cheapest first
  // Runners-up each mix's planning call re-ranks with the simulator (hexisim plan --verify);
  // unset: the planning call's default (default_verify); 0: the closed form's best.
  std::optional<int> verify;
  bool prune = true;             // false: plan every mix within the budget (exhaustive; for checks)
  int hexiseq_from_seq = 32768;  // sequences this long are planned with HexiSeq
  Json scheduler_options = {{"refine", false}, {"device_level_max", 8}};  // HexiScale's
  std::uint64_t seed = 1;
  // HexiSeq's search ("hexiseq_options", read by read_hexiseq_options; the search's
  // "solver" sets its backend too): HexiSeq's own defaults (scheduler/hexiseq/hexiseq.hpp).
  HexiSeqOptions hexiseq;
  std::int64_t max_mixes = 20'000'000;  // most combinations of machine counts enumerated
};

struct AdviseRequest {
  std::string name;
  std::string description;
  std::filesystem::path file;
  Model model;
  TrainingConfig training;
  PriceBook prices;
  Workload workload;
  Budget budget;
  std::vector<MachineType> types;  // the "buy" entries in order, then owned-only ones
  FabricOptions fabric;
  std::vector<Addition> marginal;  // default: one machine of each type that may be bought,
                                   // when something is owned
  SearchSettings search;
  std::vector<std::filesystem::path> inputs;  // every file read

  bool long_context() const { return training.seq_len >= search.hexiseq_from_seq; }
  // Combinations of bought machine counts: the product of (max_buy + 1).
  std::int64_t combinations() const;
  std::vector<int> owned() const;  // machines per type owned
};

Result<AdviseRequest> advise_from_json(const Json& json, const std::filesystem::path& file,
                                       const GpuCatalog& catalog, const ModelCatalog& models);
Result<AdviseRequest> load_advise(const std::filesystem::path& path, const GpuCatalog& catalog,
                                  const ModelCatalog& models);

}  // namespace studies
}  // namespace hexi
