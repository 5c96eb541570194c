#include "scenarios/question.hpp"

#include <vector>

#include "scenarios/scenario.hpp"
#include "topologies/cluster_gen.hpp"

namespace hexi {

bool ScenarioQuestion::any_part() const {
  return !mix.empty() || !cluster.empty() || nic_GBps || nics_per_machine || !transport.empty() ||
         !model.empty() || global_batch || micro_batch || seq_len || zero_stage ||
         !precision.empty() || !recompute.empty();
}

namespace {

// The flags given of those that describe a generated cluster's network.
std::vector<std::string> network_flags(const ScenarioQuestion& q) {
  std::vector<std::string> out;
  if (q.nic_GBps) out.emplace_back("--nic-GBps");
  if (q.nics_per_machine) out.emplace_back("--nics");
  if (!q.transport.empty()) out.emplace_back("--transport");
  return out;
}

// The name of a scenario asked without a base: its cluster's and its model's.
std::string asked_name(const ScenarioQuestion& q, const Json& json) {
  std::string cluster = q.cluster;
  if (json.contains("cluster") && json["cluster"].is_object()) {
    cluster = json["cluster"].value("name", std::string("cluster"));
  } else if (json.contains("cluster") && json["cluster"].is_string()) {
    cluster = std::filesystem::path(json["cluster"].get<std::string>()).stem().string();
  }
  std::string name = cluster;
  if (json.contains("model") && json["model"].is_string()) {
    name += "-" + json["model"].get<std::string>();
  }
  return name;
}

}  // namespace

Result<AskedScenario> ask_scenario(const ScenarioQuestion& q, const GpuCatalog& gpus,
                                   const Json* base_json) {
  AskedScenario out;
  if (base_json != nullptr) {
    if (!base_json->is_object()) return bad_input("a scenario: expected a JSON object");
    out.json = *base_json;
  } else if (!q.base.empty()) {
    auto path = find_shipped_or_path(q.base, "scenarios/shipped", "scenario");
    if (!path) return path.error();
    auto json = read_json_file(*path);
    if (!json) return json.error();
    if (!json->is_object()) return bad_input(path->string() + ": expected a JSON object");
    out.json = std::move(*json);
    out.file = *path;
  } else {
    if ((q.mix.empty() && q.cluster.empty()) || q.model.empty()) {
      std::string missing = q.mix.empty() && q.cluster.empty() ? "--mix (or --cluster)" : "";
      if (q.model.empty()) missing += std::string(missing.empty() ? "" : " and ") + "--model";
      return bad_input("no scenario: give a SCENARIO (a file or a shipped name), or " + missing +
                       " to ask without one");
    }
    out.json = {{"version", 1}, {"seed", 1}};
  }
  if (!q.mix.empty() && !q.cluster.empty()) {
    return bad_input("--mix and --cluster both name the cluster: give one of them");
  }
  const std::vector<std::string> network = network_flags(q);
  if (!network.empty() && q.mix.empty()) {
    return bad_input(network.front() +
                     " describes the network of a generated cluster: give it with --mix (a "
                     "cluster file names its own network)");
  }
  if (!q.mix.empty()) {
    auto mix = parse_mix(q.mix, gpus);
    if (!mix) return bad_input("--mix: " + mix.error().message);
    FabricOptions fabric;
    if (q.nic_GBps) fabric.nic_GBps = *q.nic_GBps;
    if (q.nics_per_machine) fabric.nics_per_machine = *q.nics_per_machine;
    if (!q.transport.empty()) fabric.transport = q.transport;
    out.json["cluster"] = generate_cluster_json(*mix, fabric);
  }
  if (!q.cluster.empty()) out.json["cluster"] = q.cluster;
  if (!q.model.empty()) out.json["model"] = q.model;
  Json& training = out.json["training"];
  if (!training.is_object()) training = Json::object();
  if (q.global_batch) training["global_batch"] = *q.global_batch;
  if (q.micro_batch) training["micro_batch"] = *q.micro_batch;
  if (q.seq_len) training["seq_len"] = *q.seq_len;
  if (q.zero_stage) training["zero_stage"] = *q.zero_stage;
  if (!q.precision.empty()) training["precision"] = q.precision;
  if (!q.recompute.empty()) training["recompute"] = q.recompute;
  const bool based = base_json != nullptr || !q.base.empty();
  if (!based) {
    out.json["name"] = asked_name(q, out.json);
    out.json["description"] = "asked in parts (flags or keyword arguments)";
  } else if (q.any_part()) {
    out.json["name"] = out.json.value("name", std::string("scenario")) + "-asked";
    out.json["description"] =
        "the scenario " + (q.base.empty() ? "given" : q.base) + " with parts replaced";
  }
  return out;
}

}  // namespace hexi
