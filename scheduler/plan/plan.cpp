#include "scheduler/plan/plan.hpp"

#include <algorithm>
#include <numeric>

namespace hexi {
inline namespace plan {

double Stage::phi(int rank, int heads) const {
  if (head_split.empty()) return 1.0 / tp();
  return static_cast<double>(head_split[rank]) / heads;
}

double Stage::max_phi(int heads) const {
  double best = 0;
  for (int r = 0; r < tp(); ++r) best = std::max(best, phi(r, heads));
  return best;
}

int Pipeline::num_devices() const {
  int n = 0;
  for (const auto& s : stages) n += s.tp();
  return n;
}

int Plan::num_devices() const {
  int n = 0;
  for (const auto& p : pipelines) n += p.num_devices();
  return n;
}

std::vector<int> Plan::devices() const {
  std::vector<int> out;
  for (const auto& p : pipelines) {
    for (const auto& s : p.stages) out.insert(out.end(), s.devices.begin(), s.devices.end());
  }
  return out;
}

namespace {

Stage read_stage(const JsonNode& node) {
  node.allow_only({"devices", "layers", "head_split", "recompute", "comment"});
  Stage s;
  auto devices = node.at("devices");
  if (devices.size() == 0) devices.fail("a non-empty array of device ids");
  for (std::size_t i = 0; i < devices.size(); ++i) {
    s.devices.push_back(static_cast<int>(devices.at(i).integer_in(0, INT32_MAX)));
  }
  auto layers = node.at("layers");
  if (!layers.json().is_array() || layers.size() != 2) layers.fail("a layer range [l0, l1)");
  s.layer_begin = static_cast<int>(layers.at(std::size_t{0}).integer_in(0, INT32_MAX));
  s.layer_end = static_cast<int>(layers.at(std::size_t{1}).integer_in(0, INT32_MAX));
  if (s.layer_end <= s.layer_begin) layers.fail("a non-empty layer range [l0, l1) with l0 < l1");
  if (auto split = node.find("head_split")) {
    if (split->size() != s.devices.size()) {
      split->fail("one head count per device (" + std::to_string(s.devices.size()) + " entries)");
    }
    for (std::size_t i = 0; i < split->size(); ++i) {
      s.head_split.push_back(static_cast<int>(split->at(i).integer_in(1, INT32_MAX)));
    }
  }
  if (auto r = node.find("recompute")) s.recompute = read_recompute(*r);
  return s;
}

Pipeline read_pipeline(const JsonNode& node) {
  node.allow_only({"batch", "micro_batch", "stages", "comment"});
  Pipeline p;
  p.batch = static_cast<int>(node.integer_in("batch", 1, INT32_MAX));
  p.micro_batch = static_cast<int>(node.integer_or("micro_batch", 1, INT32_MAX, 1));
  if (p.batch % p.micro_batch != 0) {
    node.at("batch").fail("a multiple of micro_batch (" + std::to_string(p.micro_batch) + ")");
  }
  auto stages = node.at("stages");
  if (stages.size() == 0) stages.fail("a non-empty array of stages");
  for (std::size_t i = 0; i < stages.size(); ++i) p.stages.push_back(read_stage(stages.at(i)));
  return p;
}

std::string stage_path(std::size_t p, std::size_t s) {
  return "/pipelines/" + std::to_string(p) + "/stages/" + std::to_string(s);
}

}  // namespace

Result<Plan> plan_from_json(const Json& json, const std::string& origin) {
  return load_with([&] {
    JsonNode root(json, origin);
    root.allow_only({"version", "scheduler", "comment", "pipelines"});
    root.require_version(1);
    Plan plan;
    plan.scheduler = root.str_or("scheduler", "hand");
    plan.comment = root.str_or("comment", "");
    auto pipelines = root.at("pipelines");
    if (pipelines.size() == 0) pipelines.fail("a non-empty array of pipelines");
    for (std::size_t i = 0; i < pipelines.size(); ++i)
      plan.pipelines.push_back(read_pipeline(pipelines.at(i)));
    return plan;
  });
}

Result<Plan> load_plan(const std::filesystem::path& path) {
  auto json = read_json_file(path);
  if (!json) return json.error();
  return plan_from_json(*json, path.string());
}

Json to_json(const Plan& plan) {
  Json pipelines = Json::array();
  for (const auto& p : plan.pipelines) {
    Json stages = Json::array();
    for (const auto& s : p.stages) {
      Json stage = {{"devices", s.devices}, {"layers", {s.layer_begin, s.layer_end}}};
      if (!s.head_split.empty()) stage["head_split"] = s.head_split;
      if (s.recompute) stage["recompute"] = to_string(*s.recompute);
      stages.push_back(stage);
    }
    pipelines.push_back({{"batch", p.batch}, {"micro_batch", p.micro_batch}, {"stages", stages}});
  }
  Json out = {{"version", 1}, {"scheduler", plan.scheduler.empty() ? "hand" : plan.scheduler}};
  if (!plan.comment.empty()) out["comment"] = plan.comment;
  out["pipelines"] = pipelines;
  return out;
}

std::string plan_text(const Plan& plan) {
  return to_json(plan).dump(2) + "\n";
}

Status validate_plan(const Plan& plan, const Cluster& cluster, const Model& model,
                     const TrainingConfig& training, const std::string& origin) {
  auto fail = [&](const std::string& path, const std::string& what) {
    return bad_input(origin + ": " + path + ": " + what);
  };
  std::vector<int> used_at(cluster.num_devices(), -1);
  std::vector<std::string> used_where(cluster.num_devices());
  int batch_sum = 0;
  for (std::size_t pi = 0; pi < plan.pipelines.size(); ++pi) {
    const Pipeline& p = plan.pipelines[pi];
    batch_sum += p.batch;
    int next_layer = 0;
    for (std::size_t si = 0; si < p.stages.size(); ++si) {
      const Stage& s = p.stages[si];
      const std::string path = stage_path(pi, si);
      for (std::size_t r = 0; r < s.devices.size(); ++r) {
        int d = s.devices[r];
        std::string dpath = path + "/devices/" + std::to_string(r);
        if (d >= cluster.num_devices()) {
          return fail(dpath, "device " + std::to_string(d) + " does not exist (cluster \"" +
                                 cluster.name() + "\" has devices 0.." +
                                 std::to_string(cluster.num_devices() - 1) + ")");
        }
        if (used_at[d] >= 0) {
          return fail(dpath,
                      "device " + std::to_string(d) + " is already used at " + used_where[d]);
        }
        used_at[d] = static_cast<int>(pi);
        used_where[d] = dpath;
      }
      if (s.layer_begin != next_layer) {
        std::string what =
            s.layer_begin > next_layer
                ? "layers [" + std::to_string(next_layer) + ", " + std::to_string(s.layer_begin) +
                      ") are not assigned (gap before this stage)"
                : "layers [" + std::to_string(s.layer_begin) + ", " + std::to_string(next_layer) +
                      ") are assigned twice (overlap with the previous stage)";
        return fail(path + "/layers", what);
      }
      next_layer = s.layer_end;
      if (s.layer_end > model.layers) {
        return fail(path + "/layers", "layer range ends at " + std::to_string(s.layer_end) +
                                          " but " + model.name + " has " +
                                          std::to_string(model.layers) + " layers");
      }
      if (!s.head_split.empty()) {
        int sum = std::accumulate(s.head_split.begin(), s.head_split.end(), 0);
        if (sum != model.heads) {
          return fail(path + "/head_split", "head counts sum to " + std::to_string(sum) +
                                                ", expected " + std::to_string(model.heads) +
                                                " (the model's heads)");
        }
        const int group = model.heads / model.kv_heads;  // query heads per KV head (GQA)
        for (std::size_t r = 0; r < s.head_split.size(); ++r) {
          if (s.head_split[r] % group != 0) {
            return fail(path + "/head_split/" + std::to_string(r),
                        "expected a multiple of " + std::to_string(group) +
                            " heads (whole grouped-query KV groups), got " +
                            std::to_string(s.head_split[r]));
          }
        }
      } else {
        const int t = s.tp(), a = model.heads, k = model.kv_heads;
        if (!model.even_tp_degree(t)) {
          return fail(path + "/devices",
                      "TP degree " + std::to_string(t) + " does not divide " + std::to_string(a) +
                          " heads / " + std::to_string(k) +
                          " KV heads evenly; give an explicit \"head_split\" or another degree");
        }
      }
    }
    if (next_layer != model.layers) {
      return fail("/pipelines/" + std::to_string(pi) + "/stages",
                  "stages cover layers [0, " + std::to_string(next_layer) + ") but " + model.name +
                      " has " + std::to_string(model.layers) + " layers");
    }
  }
  if (batch_sum != training.global_batch) {
    return fail("/pipelines", "batch shares sum to " + std::to_string(batch_sum) +
                                  " sequences, expected the global batch " +
                                  std::to_string(training.global_batch));
  }
  return {};
}

}  // namespace plan
}  // namespace hexi
