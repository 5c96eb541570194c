#pragma once
// A sweep file (format version 1, scenarios/README.md "Sweep file"): axes whose cross
// product, or an explicit list of points, each point one (cluster, model, sequence length,
// global batch, scheduler, fidelity, seed), and the metrics to keep. `hexisim sweep`
// (cli/cmd_sweep.cpp) runs every point; this file only reads and expands the sweep:
//
//   {"version": 1, "name": "mixes", "training": {"micro_batch": 1},
//    "axes": {"cluster": [{"mix": "A100:2x8,RTX4090:4x8"}, "mix-128-4types"],
//             "model": ["llama2-7b"], "global_batch": [32, 64],
//             "scheduler": ["hexiscale", "uniform"], "fidelity": ["closed_form"]},
//    "metrics": ["tokens_per_s", "mfu"]}
//
// Every value is checked on load (GPU mixes parsed, cluster files loaded, models found,
// schedulers and metrics among those the caller knows): a bad sweep is refused before any
// point runs, naming the file, the JSON path and what was expected.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "scenarios/model.hpp"
#include "scenarios/prices.hpp"
#include "scenarios/training.hpp"
#include "topologies/cluster.hpp"
#include "topologies/cluster_gen.hpp"
#include "topologies/enum_names.hpp"
#include "topologies/gpu_catalog.hpp"
#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi {

// How far a point goes: the closed form only (plan + estimate), or also a SimGrid
// simulation of the plan at layer or stage fidelity.
enum class Fidelity { kClosedForm, kLayer, kStage };
inline constexpr auto kFidelityNames = enum_names<Fidelity>({{Fidelity::kClosedForm, "closed_form"},
                                                             {Fidelity::kLayer, "layer"},
                                                             {Fidelity::kStage, "stage"}});

// A cluster of the sweep: a generated GPU mix (`{"mix": "A100:2x8", ...fabric}`) or a
// shipped cluster name / cluster file path (relative to the sweep file's folder).
struct SweepCluster {
  std::string label;  // in point keys, CSV and plots: "label", the mix, or the name as written
  Cluster cluster;
  std::string digest;  // FNV-1a 64 (hex) of the cluster JSON as loaded or generated
};

struct SweepModel {
  std::string label;  // the model's name
  Model model;
};

// A scheduler and its options (the scenario file's "scheduler" member: a name, or an
// object {"name": ..., options...}, plus an optional "label" for keys and plots).
struct SweepScheduler {
  std::string label;
  std::string name;
  Json options = Json::object();
};

// A price book of the sweep's "prices" axis (scenarios/prices.hpp): a shipped name or a file.
struct SweepPrices {
  std::string label;  // the name or path as written
  PriceBook book;
  std::string digest;  // FNV-1a 64 (hex) of the book's JSON
};

// One point: indices into Sweep's value lists, and the scalar axes.
struct SweepPoint {
  int index = 0;  // position in the sweep (the CSV's order)
  int cluster = 0, model = 0, scheduler = 0;
  int seq_len = 0, global_batch = 0;
  Fidelity fidelity = Fidelity::kClosedForm;
  std::uint64_t seed = 1;
  int prices = -1;  // index into Sweep::prices; -1: the sweep prices nothing
  std::string key;  // "cluster=...;model=...;...": unique in the sweep, what resumes match
};

// The names a caller accepts (the scheduler registry and the metric table live above
// scenarios/ in the dependency order, so they are passed in).
struct SweepVocabulary {
  std::vector<std::string> schedulers;
  std::vector<std::string> metrics;
};

struct Sweep {
  std::string name;
  std::string description;
  std::filesystem::path file;
  TrainingConfig training;   // the base config; seq_len and global_batch come from each point
  double time_budget_s = 0;  // per point search budget; 0: to convergence (deterministic)
  std::vector<SweepCluster> clusters;
  std::vector<SweepModel> models;
  std::vector<SweepScheduler> schedulers;
  std::vector<SweepPrices> prices;   // empty: no "prices" axis (no cost metrics, no key part)
  std::vector<std::string> metrics;  // kept in results; every known metric when not given
  std::vector<SweepPoint> points;

  // The point's axis values: {"cluster": label, "model": ..., "seq_len": ..., "global_batch":
  // ..., "scheduler": label, "fidelity": ..., "seed": ...} (keys in kSweepAxes order).
  Json point_json(const SweepPoint& p) const;
  // The point's training config: the base with its seq_len and global_batch.
  TrainingConfig training_of(const SweepPoint& p) const;
};

// The axes, in cross-product order (the first varies slowest) and CSV column order.
// "prices" appears in keys and rows only when the sweep names price books.
inline constexpr const char* kSweepAxes[] = {"cluster",   "model",    "seq_len", "global_batch",
                                             "scheduler", "fidelity", "seed",    "prices"};

// Reads and expands a sweep file. Bad input (file, JSON path, what was expected) for any
// value that is wrong, for duplicate points and for more than kMaxSweepPoints points.
Result<Sweep> load_sweep(const std::filesystem::path& file, const GpuCatalog& gpus,
                         const ModelCatalog& models, const SweepVocabulary& vocabulary);
Result<Sweep> sweep_from_json(const Json& json, const std::filesystem::path& file,
                              const GpuCatalog& gpus, const ModelCatalog& models,
                              const SweepVocabulary& vocabulary);

inline constexpr std::size_t kMaxSweepPoints = 1'000'000;

}  // namespace hexi
