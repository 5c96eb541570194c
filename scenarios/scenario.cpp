#include "scenarios/scenario.hpp"

#include <algorithm>

#include "topologies/paths.hpp"

namespace hexi {
namespace fs = std::filesystem;

std::vector<std::string> json_stems(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool looks_like_path(const std::string& ref) {
  return ref.find('/') != std::string::npos ||
         (ref.size() > 5 && ref.compare(ref.size() - 5, 5, ".json") == 0);
}

std::vector<std::string> shipped_scenarios() {
  return json_stems(data_root() / "scenarios/shipped");
}
std::vector<std::string> shipped_clusters() {
  return json_stems(data_root() / "topologies/clusters");
}

fs::path shipped_or_path(const std::string& ref, const std::string& folder,
                         const fs::path& relative_to) {
  if (!looks_like_path(ref)) return data_root() / folder / (ref + ".json");
  fs::path p = ref;
  // Relative to the referring file, never the current folder: the same scenario must name
  // the same cluster wherever it is run from.
  if (p.is_relative() && !relative_to.empty()) p = relative_to / p;
  return p;
}

Result<fs::path> find_shipped_or_path(const std::string& ref, const std::string& folder,
                                      const std::string& what, const fs::path& relative_to) {
  fs::path p = shipped_or_path(ref, folder, relative_to);
  std::error_code ec;  // a 5 000-character name must not throw (ENAMETOOLONG): not found
  if (!looks_like_path(ref) && !fs::exists(p, ec)) {
    std::string known;
    for (const auto& n : json_stems(data_root() / folder)) known += (known.empty() ? "" : ", ") + n;
    return bad_input("unknown " + what + " \"" + ref + "\" (not a file path; shipped " + what +
                     "s: " + known + ")");
  }
  return p;
}

fs::path cluster_file(const std::string& ref, const fs::path& relative_to) {
  return shipped_or_path(ref, "topologies/clusters", relative_to);
}

Result<Cluster> load_cluster(const std::string& ref, const GpuCatalog& catalog,
                             const fs::path& relative_to) {
  auto p = find_shipped_or_path(ref, "topologies/clusters", "cluster", relative_to);
  if (!p) return p.error();
  return Cluster::load(*p, catalog);
}

namespace {

// A scenario file's fields in named steps, each reading its part of `root` into the
// scenario; load_with turns a field's InputError into the Error. The cluster and profile
// files report their own errors (naming their own file): those are kept in nested_error_.
class ScenarioReader {
 public:
  ScenarioReader(const fs::path& file, const GpuCatalog& catalog, const ModelCatalog& models)
      : file_(file),
        origin_(file.string()),
        dir_(file.parent_path()),
        catalog_(catalog),
        models_(models) {}

  Result<Scenario> read(const Json& json) {
    auto scenario = load_with([&]() -> Scenario {
      JsonNode root(json, origin_);
      root.allow_only({"version", "name", "description", "cluster", "model", "training",
                       "scheduler", "seed", "plan", "profile"});
      root.require_version(1);
      Scenario s;
      s.file = file_;
      if (!file_.empty()) s.inputs.push_back(file_);
      s.name = root.str("name");
      s.description = root.str_or("description", "");
      set_cluster(root.at("cluster"), s);
      set_model(root.at("model"), s);
      set_training(root, s);
      set_scheduler(root, s);
      if (auto seed = root.find("seed"))
        s.seed = static_cast<std::uint64_t>(seed->integer_in(0, INT64_MAX));
      if (auto plan = root.find("plan")) {
        fs::path p = plan->str();
        s.plan = p.is_relative() ? dir_ / p : p;
        s.inputs.push_back(*s.plan);
      }
      if (auto profile = root.find("profile")) set_profile(*profile, s);
      return s;
    });
    if (!scenario && nested_error_) return *nested_error_;
    return scenario;
  }

 private:
  // A shipped cluster's name, a cluster file's path, or an inline cluster object.
  void set_cluster(const JsonNode& cluster, Scenario& s) {
    Result<Cluster> loaded = bad_input("");
    if (cluster.json().is_string()) {
      s.cluster_ref = cluster.str();
      loaded = load_cluster(s.cluster_ref, catalog_, dir_);
      s.inputs.push_back(cluster_file(s.cluster_ref, dir_));
    } else if (cluster.json().is_object()) {
      s.cluster_ref = "<inline>";
      loaded = Cluster::from_json(cluster.json(), origin_ + " (cluster)", catalog_);
    } else {
      cluster.fail("a cluster name, a cluster file path, or an inline cluster object");
    }
    if (!loaded) {
      nested_error_ = loaded.error();
      throw InputError(loaded.error().message);
    }
    s.cluster = std::move(*loaded);
  }

  // A model of the catalog by name, or an inline model.
  void set_model(const JsonNode& model, Scenario& s) const {
    if (model.json().is_string()) {
      const Model* m = models_.find(model.str());
      if (m == nullptr)
        model.fail("a model from the catalog (" + models_.names() + ") or an inline model");
      s.model = *m;
    } else {
      s.model = read_model(model);
    }
  }

  // The training config, its sequence no longer than the model's.
  static void set_training(const JsonNode& root, Scenario& s) {
    const auto training = root.find("training");
    if (training) s.training = read_training(*training);
    if (s.training.seq_len > s.model.max_seq) {
      const std::string why = "seq_len " + std::to_string(s.training.seq_len) +
                              " is longer than the model's max_seq " +
                              std::to_string(s.model.max_seq);
      if (training && training->has("seq_len")) training->at("seq_len").fail_message(why);
      root.fail_message(why + " (the default seq_len; set \"training\": {\"seq_len\": ...})");
    }
  }

  // A scheduler's name, or an object of its name and options.
  static void set_scheduler(const JsonNode& root, Scenario& s) {
    if (auto sched = root.find("scheduler")) {
      if (sched->json().is_string()) {
        s.scheduler = sched->str();
      } else {
        s.scheduler = sched->str_or("name", s.scheduler);
        s.scheduler_options = sched->json();
        s.scheduler_options.erase("name");
      }
    }
  }

  // A profile file (relative to the scenario's folder), used for the scenario's cluster.
  void set_profile(const JsonNode& profile, Scenario& s) {
    fs::path p = profile.str();
    if (p.is_relative()) p = dir_ / p;
    s.inputs.push_back(p);
    auto loaded_profile = Profile::load(p);
    if (!loaded_profile) {
      nested_error_ = loaded_profile.error();
      throw InputError(loaded_profile.error().message);
    }
    use_profile(s, std::move(*loaded_profile));
  }

  const fs::path& file_;
  const std::string origin_;
  const fs::path dir_;
  const GpuCatalog& catalog_;
  const ModelCatalog& models_;
  std::optional<Error> nested_error_;
};

}  // namespace

Result<Scenario> scenario_from_json(const Json& json, const fs::path& file,
                                    const GpuCatalog& catalog, const ModelCatalog& models) {
  return ScenarioReader(file, catalog, models).read(json);
}

void use_profile(Scenario& s, Profile profile) {
  s.profile = std::move(profile);
  s.cluster.set_curves(s.profile.transports(), s.profile.collective_step_latencies());
}

Result<Scenario> load_scenario(const std::string& ref, const GpuCatalog& catalog,
                               const ModelCatalog& models) {
  auto p = find_shipped_or_path(ref, "scenarios/shipped", "scenario");
  if (!p) return p.error();
  auto json = read_json_file(*p);
  if (!json) return json.error();
  return scenario_from_json(*json, *p, catalog, models);
}

JsonNode Scenario::scheduler_options_node() const {
  if (!scheduler_options_origin.empty()) return {scheduler_options, scheduler_options_origin};
  return {scheduler_options, file.string(), "/scheduler"};
}

Result<ShippedCatalogs> load_shipped_catalogs() {
  auto gpus = GpuCatalog::load_shipped();
  if (!gpus) return gpus.error();
  auto models = ModelCatalog::load_shipped();
  if (!models) return models.error();
  return ShippedCatalogs{std::move(*gpus), std::move(*models)};
}

}  // namespace hexi
