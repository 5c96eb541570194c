#pragma once
// A scenario: cluster + model + training config + scheduler + seed (scenario JSON,
// format version 1). Shipped scenarios live in scenarios/shipped/<name>.json and
// are named by what they are (hexiscale-setting1-llama2-7b, mix-1024-llama2-70b...).

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "scenarios/model.hpp"
#include "scenarios/training.hpp"
#include "topologies/cluster.hpp"
#include "topologies/gpu_catalog.hpp"
#include "topologies/json_input.hpp"
#include "topologies/profile.hpp"

namespace hexi {

struct Scenario {
  std::string name;
  std::string description;
  std::filesystem::path file;  // the scenario file it was loaded from
  std::string cluster_ref;     // as written: a shipped cluster name or a path
  Cluster cluster;
  Model model;
  TrainingConfig training;
  std::string scheduler = "hexiscale";
  Json scheduler_options = Json::object();  // scheduler-specific; validated by the scheduler
  // Where scheduler_options came from, for error messages: empty for the scenario file's
  // "scheduler" member, else e.g. "--options" when a command line replaced them.
  std::string scheduler_options_origin;
  std::uint64_t seed = 1;
  std::optional<std::filesystem::path> plan;  // optional plan file (resolved path)
  Profile profile;  // device efficiencies: the documented defaults unless "profile" names a file
  // Every file it was read from (scenario, cluster, plan, profile): what no command may
  // overwrite with its output.
  std::vector<std::filesystem::path> inputs;

  // scheduler_options, reporting errors against their origin (file and JSON path).
  JsonNode scheduler_options_node() const;
};

// Loads a scenario by file path or by shipped name. Relative cluster / plan paths are
// resolved against the scenario's folder; bare names against the shipped folders.
// The shipped GPU and model catalogs (topologies/gpus.json, scenarios/models.json).
struct ShippedCatalogs {
  GpuCatalog gpus;
  ModelCatalog models;
};
Result<ShippedCatalogs> load_shipped_catalogs();

Result<Scenario> load_scenario(const std::string& name_or_path, const GpuCatalog& catalog,
                               const ModelCatalog& models);
Result<Scenario> scenario_from_json(const Json& json, const std::filesystem::path& file,
                                    const GpuCatalog& catalog, const ModelCatalog& models);

// Makes `profile` the scenario's: its device models, and the transport curves it replaces
// in the scenario's cluster.
void use_profile(Scenario& s, Profile profile);

// The file of a cluster reference: a shipped name's file, or a path (a relative one is
// taken relative to `relative_to`, the scenario's folder, when that is given).
std::filesystem::path cluster_file(const std::string& name_or_path,
                                   const std::filesystem::path& relative_to = {});

// A cluster by shipped name (topologies/clusters/<name>.json) or by path.
Result<Cluster> load_cluster(const std::string& name_or_path, const GpuCatalog& catalog,
                             const std::filesystem::path& relative_to = {});

// A reference names a file (rather than a shipped name) when it ends in .json or contains
// a slash.
bool looks_like_path(const std::string& ref);
// The stems of the .json files in a folder, sorted (none when it cannot be read).
std::vector<std::string> json_stems(const std::filesystem::path& dir);

// The file a reference names: a shipped name's <data root>/<folder>/<name>.json, or a path
// (a relative one taken relative to `relative_to` when that is given).
std::filesystem::path shipped_or_path(const std::string& ref, const std::string& folder,
                                      const std::filesystem::path& relative_to = {});
// The same, and bad input when a name (not a path) has no shipped file: "unknown <what>
// \"x\" (not a file path; shipped <what>s: a, b, ...)".
Result<std::filesystem::path> find_shipped_or_path(const std::string& ref,
                                                   const std::string& folder,
                                                   const std::string& what,
                                                   const std::filesystem::path& relative_to = {});

// Names of shipped scenarios and clusters, sorted.
std::vector<std::string> shipped_scenarios();
std::vector<std::string> shipped_clusters();

}  // namespace hexi
