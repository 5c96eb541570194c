#include "scheduler/plan/plan.hpp"

#include <algorithm>
#include <numeric>

namespace hexi {
inline namespace plan {

double Stage::phi(int rank, int heads) const {
  if (head_split.empty()) return 1.0 / tp();
  return static_cast<double>(head_split[rank]) / heads;
}

double Stage::expert_share(int rank) const {
  if (expert_split.empty()) return -1;
  const int all = std::accumulate(expert_split.begin(), expert_split.end(), 0);
  return all > 0 ? static_cast<double>(expert_split[rank]) / all : 0.0;
}

double Stage::max_phi(int heads) const {
  double best = 0;
  for (int r = 0; r < tp(); ++r) best = std::max(best, phi(r, heads));
  return best;
}

int Pipeline::num_devices() const {
  int n = 0;
  for (int s = 0; s < groups(); ++s) n += stages[s].tp();
  return n;
}

int Pipeline::groups() const {
  for (std::size_t s = 1; s < stages.size(); ++s) {
    if (stages[s].devices == stages.front().devices) return static_cast<int>(s);
  }
  return static_cast<int>(stages.size());
}

bool Pipeline::has_mesh() const {
  return std::any_of(stages.begin(), stages.end(), [](const Stage& s) { return s.mesh(); });
}

bool Plan::has_mesh() const {
  return std::any_of(pipelines.begin(), pipelines.end(),
                     [](const Pipeline& p) { return p.has_mesh(); });
}

bool Plan::whole_experts() const {
  return std::any_of(pipelines.begin(), pipelines.end(), [](const Pipeline& p) {
    return std::any_of(p.stages.begin(), p.stages.end(),
                       [](const Stage& s) { return !s.expert_split.empty(); });
  });
}

namespace {

// Every mesh device's front and back rows, flat index order.
std::vector<std::pair<int, TokenRange>> mesh_rows(const Stage& mesh) {
  std::vector<std::pair<int, TokenRange>> out;
  for (int g = 0; g < static_cast<int>(mesh.sequence->groups.size()); ++g) {
    const SequenceGroup& group = mesh.sequence->groups[g];
    for (int r = 0; r < group.size(); ++r) {
      const MirroredShard rows = device_tokens(*mesh.sequence, g, r);
      out.push_back({group.devices[r], rows.front});
      out.push_back({group.devices[r], rows.back});
    }
  }
  return out;
}

}  // namespace

std::vector<MeshMessage> mesh_boundary(const Stage& from, const Stage& to) {
  std::vector<MeshMessage> out;
  if (from.mesh() && to.mesh()) {  // each destination's rows from the sources holding them
    const auto sources = mesh_rows(from);
    for (const auto& [dst, want] : mesh_rows(to)) {
      for (const auto& [src, have] : sources) {
        const TokenRange both{std::max(want.begin, have.begin), std::min(want.end, have.end)};
        if (both.size() > 0) out.push_back({src, dst, both});
      }
    }
    return out;
  }
  const Stage& mesh = from.mesh() ? from : to;
  const Stage& other = from.mesh() ? to : from;
  if (!mesh.mesh()) return out;
  const int n = mesh.tp(), t = other.tp();
  int i = 0;
  for (int g = 0; g < static_cast<int>(mesh.sequence->groups.size()); ++g) {
    for (int r = 0; r < mesh.sequence->groups[g].size(); ++r, ++i) {
      const MirroredShard rows = device_tokens(*mesh.sequence, g, r);
      for (const TokenRange& half : {rows.front, rows.back}) {
        if (half.size() == 0) continue;
        if (to.mesh()) {
          out.push_back(
              {other.devices[static_cast<std::size_t>(i * t / n)], mesh.devices[i], half});
        } else {
          for (int d : other.devices) out.push_back({mesh.devices[i], d, half});
        }
      }
    }
  }
  return out;
}

int Plan::num_devices() const {
  int n = 0;
  for (const auto& p : pipelines) n += p.num_devices();
  return n;
}

std::vector<int> Plan::devices() const {
  std::vector<int> out;
  for (const auto& p : pipelines) {
    for (int s = 0; s < p.groups(); ++s)
      out.insert(out.end(), p.stages[s].devices.begin(), p.stages[s].devices.end());
  }
  return out;
}

namespace {

// A mesh stage (plan.hpp): its layout, and its devices from it ("devices", if given, must
// list them in the same order).
void read_mesh(const JsonNode& node, Stage& s) {
  s.sequence = read_layout(node.at("sequence"));
  const std::vector<int> mesh = s.sequence->devices();
  if (auto devices = node.find("devices")) {
    std::vector<int> given;
    for (std::size_t i = 0; i < devices->size(); ++i)
      given.push_back(static_cast<int>(devices->at(i).integer_in(0, INT32_MAX)));
    if (given != mesh) {
      devices->fail("the mesh's devices group by group in rank order (" +
                    std::to_string(mesh.size()) + " devices), or no \"devices\"");
    }
  }
  if (auto split = node.find("head_split")) {
    split->fail("no head_split on a mesh stage (its groups' \"heads\" split the heads)");
  }
  if (auto r = node.find("recompute")) {
    r->fail("no recompute on a mesh stage (it runs the training config's)");
  }
  if (auto split = node.find("expert_split")) {
    split->fail("no expert_split on a mesh stage (its devices split every expert by columns)");
  }
  s.devices = mesh;
}

Stage read_stage(const JsonNode& node) {
  node.allow_only(
      {"devices", "layers", "head_split", "expert_split", "recompute", "sequence", "comment"});
  Stage s;
  if (node.find("sequence")) {
    read_mesh(node, s);
  } else {
    auto devices = node.at("devices");
    if (devices.size() == 0) devices.fail("a non-empty array of device ids");
    for (std::size_t i = 0; i < devices.size(); ++i) {
      s.devices.push_back(static_cast<int>(devices.at(i).integer_in(0, INT32_MAX)));
    }
  }
  auto layers = node.at("layers");
  if (!layers.json().is_array() || layers.size() != 2) layers.fail("a layer range [l0, l1)");
  s.layer_begin = static_cast<int>(layers.at(std::size_t{0}).integer_in(0, INT32_MAX));
  s.layer_end = static_cast<int>(layers.at(std::size_t{1}).integer_in(0, INT32_MAX));
  if (s.layer_end < s.layer_begin) layers.fail("a layer range [l0, l1) with l0 <= l1");
  if (s.mesh()) return s;
  if (auto split = node.find("head_split")) {
    if (split->size() != s.devices.size()) {
      split->fail("one head count per device (" + std::to_string(s.devices.size()) + " entries)");
    }
    for (std::size_t i = 0; i < split->size(); ++i) {
      s.head_split.push_back(static_cast<int>(split->at(i).integer_in(1, INT32_MAX)));
    }
  }
  if (auto split = node.find("expert_split")) {
    if (split->size() != s.devices.size()) {
      split->fail("one expert count per device (" + std::to_string(s.devices.size()) + " entries)");
    }
    for (std::size_t i = 0; i < split->size(); ++i) {
      s.expert_split.push_back(static_cast<int>(split->at(i).integer_in(0, INT32_MAX)));
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
      if (s.mesh()) {
        stages.push_back(
            {{"layers", {s.layer_begin, s.layer_end}}, {"sequence", to_json(*s.sequence)}});
        continue;
      }
      Json stage = {{"devices", s.devices}, {"layers", {s.layer_begin, s.layer_end}}};
      if (!s.head_split.empty()) stage["head_split"] = s.head_split;
      if (!s.expert_split.empty()) stage["expert_split"] = s.expert_split;
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
  return dump_json(to_json(plan), 2) + "\n";
}

namespace {

// The structural rules of a plan against a cluster, model and training config, one
// method per rule; check() applies them stage by stage and reports the first broken one.
class PlanChecker {
 public:
  PlanChecker(const Cluster& cluster, const Model& model, const TrainingConfig& training,
              const std::string& origin)
      : cluster_(cluster),
        model_(model),
        training_(training),
        origin_(origin),
        used_where_(cluster.num_devices()) {}

  Status check(const Plan& plan) {
    if (auto st = check_zero_stage(training_, origin_); !st) return st;
    whole_experts_ = plan.whole_experts();
    int batch_sum = 0;
    for (std::size_t pi = 0; pi < plan.pipelines.size(); ++pi) {
      const Pipeline& p = plan.pipelines[pi];
      batch_sum += p.batch;
      int next_layer = 0;
      const std::size_t groups = static_cast<std::size_t>(p.groups());
      if (groups < p.stages.size()) {
        if (auto st = interleaved(p, pi); !st) return st;
      }
      if (p.has_mesh()) {
        if (auto st = mesh_pipeline(p, pi); !st) return st;
      }
      for (std::size_t si = 0; si < p.stages.size(); ++si) {
        const Stage& s = p.stages[si];
        const std::string path = stage_path(pi, si);
        // Chunks after the first repeat the first groups' devices (checked by interleaved).
        if (s.mesh()) {
          if (auto st = mesh_stage(s, path); !st) return st;
        } else if (si < groups) {
          if (auto st = devices_exist_once(s, path); !st) return st;
        }
        if (auto st = layers_follow(s, path, next_layer); !st) return st;
        if (auto st = layers_held(p, si, path); !st) return st;
        next_layer = s.layer_end;
        if (auto st = layers_in_model(s, path); !st) return st;
        if (!s.mesh()) {
          if (auto st = heads_split(s, path); !st) return st;
          if (auto st = experts_split(s, path); !st) return st;
        }
      }
      if (auto st = layers_covered(pi, next_layer); !st) return st;
    }
    if (auto st = batch_adds_up(batch_sum); !st) return st;
    return devices_connected();
  }

 private:
  Error fail(const std::string& path, const std::string& what) const {
    return bad_input(origin_ + ": " + path + ": " + what);
  }

  // Every device exists and serves one stage only.
  Status devices_exist_once(const Stage& s, const std::string& path) {
    for (std::size_t r = 0; r < s.devices.size(); ++r) {
      const int d = s.devices[r];
      const std::string dpath = path + "/devices/" + std::to_string(r);
      if (d >= cluster_.num_devices()) {
        return fail(dpath, "device " + std::to_string(d) + " does not exist (cluster \"" +
                               cluster_.name() + "\" has devices 0.." +
                               std::to_string(cluster_.num_devices() - 1) + ")");
      }
      if (!used_where_[d].empty())
        return fail(dpath, "device " + std::to_string(d) + " is already used at " + used_where_[d]);
      used_where_[d] = dpath;
    }
    return {};
  }

  // A mesh stage: its layout's structure (hexiseq's checks, paths below the stage's
  // "sequence"), then its devices once across the plan.
  Status mesh_stage(const Stage& s, const std::string& path) {
    const std::string root = path + "/sequence";
    if (auto st = validate_structure(*s.sequence, model_, training_, cluster_, origin_, root); !st)
      return st;
    for (std::size_t g = 0; g < s.sequence->groups.size(); ++g) {
      const SequenceGroup& group = s.sequence->groups[g];
      for (int r = 0; r < group.size(); ++r) {
        const int d = group.devices[r];
        const std::string dpath =
            root + "/groups/" + std::to_string(g) + "/devices/" + std::to_string(r);
        if (!used_where_[d].empty())
          return fail(dpath,
                      "device " + std::to_string(d) + " is already used at " + used_where_[d]);
        used_where_[d] = dpath;
      }
    }
    return {};
  }

  // A pipeline with a mesh stage: one sequence per micro-batch, plain (not interleaved).
  // (ZeRO 2-3 are refused for every pipeline plan.)
  Status mesh_pipeline(const Pipeline& p, std::size_t pi) const {
    const std::string path = "/pipelines/" + std::to_string(pi);
    std::size_t first = 0;
    while (!p.stages[first].mesh()) ++first;
    const std::string mesh = stage_path(pi, first) + "/sequence";
    if (p.micro_batch != 1) {
      return fail(path + "/micro_batch", std::to_string(p.micro_batch) +
                                             " sequences per micro-batch; a pipeline with a "
                                             "mesh stage (" +
                                             mesh +
                                             ") runs one sequence per micro-batch: expected 1");
    }
    if (p.groups() < static_cast<int>(p.stages.size())) {
      return fail(mesh,
                  "a mesh stage in an interleaved pipeline (device groups repeated) is "
                  "not supported");
    }
    return {};
  }

  // An interleaved pipeline (plan.hpp): p groups repeated in the same cyclic order, v times
  // each, under 1F1B.
  Status interleaved(const Pipeline& p, std::size_t pi) const {
    const int groups = p.groups();
    const int stages = static_cast<int>(p.stages.size());
    const std::string path = "/pipelines/" + std::to_string(pi) + "/stages";
    if (groups < 2) {
      return fail(path + "/1/devices",
                  "stages 0 and 1 run on the same devices: an interleaved pipeline needs at "
                  "least 2 device groups (stage i on group i mod p)");
    }
    for (int s = groups; s < stages; ++s) {
      const Stage& want = p.stages[s % groups];
      const Stage& got = p.stages[s];
      if (got.devices != want.devices) {
        return fail(stage_path(pi, static_cast<std::size_t>(s)) + "/devices",
                    "expected the devices of stage " + std::to_string(s % groups) +
                        " (interleaved pipeline of " + std::to_string(groups) +
                        " device groups: stage i runs on group i mod " + std::to_string(groups) +
                        ", every group with the same number of chunks and no device in two "
                        "groups)");
      }
      if (got.head_split != want.head_split || got.expert_split != want.expert_split ||
          got.recompute != want.recompute) {
        return fail(stage_path(pi, static_cast<std::size_t>(s)),
                    "expected the head_split, expert_split and recompute of stage " +
                        std::to_string(s % groups) + " (the same device group)");
      }
    }
    if (stages % groups != 0) {
      return fail(path, std::to_string(stages) + " stages on " + std::to_string(groups) +
                            " device groups: every group needs the same number of chunks (a "
                            "multiple of " +
                            std::to_string(groups) + " stages)");
    }
    // Megatron-LM's condition: its order (groups of p micro-batches through each chunk) can
    // deadlock on a last, smaller group (schedule.hpp).
    if (p.micro_batches() % groups != 0) {
      return fail("/pipelines/" + std::to_string(pi) + "/batch",
                  std::to_string(p.micro_batches()) + " micro-batches (batch " +
                      std::to_string(p.batch) + " / micro_batch " + std::to_string(p.micro_batch) +
                      "): an interleaved pipeline needs a multiple of its " +
                      std::to_string(groups) + " device groups");
    }
    if (training_.schedule != PipelineSchedule::k1F1B) {
      return fail(path,
                  "an interleaved pipeline (device groups repeated) runs interleaved "
                  "1F1B: needs training.schedule \"1f1b\", got \"" +
                      std::string(to_string(training_.schedule)) + "\"");
    }
    return {};
  }

  // A stage starts where the previous one ended: no gap, no overlap.
  Status layers_follow(const Stage& s, const std::string& path, int next_layer) const {
    if (s.layer_begin == next_layer) return {};
    return fail(
        path + "/layers",
        s.layer_begin > next_layer
            ? "layers [" + std::to_string(next_layer) + ", " + std::to_string(s.layer_begin) +
                  ") are not assigned (gap before this stage)"
            : "layers [" + std::to_string(s.layer_begin) + ", " + std::to_string(next_layer) +
                  ") are assigned twice (overlap with the previous stage)");
  }

  // Only a pipeline's first stage (the embedding alone) or last stage (the head alone) may
  // hold no layer, and not a sequence mesh.
  Status layers_held(const Pipeline& p, std::size_t si, const std::string& path) const {
    const Stage& s = p.stages[si];
    if (s.layers() > 0) return {};
    if (s.mesh()) return fail(path + "/layers", "a sequence mesh stage holds at least one layer");
    if (p.stages.size() < 2 || (si != 0 && si + 1 != p.stages.size())) {
      return fail(path + "/layers",
                  "an empty layer range: only a pipeline's first stage (the embedding alone) or "
                  "last stage (the head alone) may hold no layer");
    }
    return {};
  }

  Status layers_in_model(const Stage& s, const std::string& path) const {
    if (s.layer_end <= model_.layers) return {};
    return fail(path + "/layers", "layer range ends at " + std::to_string(s.layer_end) + " but " +
                                      model_.name + " has " + std::to_string(model_.layers) +
                                      " layers");
  }

  // An explicit head_split sums to the heads in whole grouped-query KV groups; without
  // one, the TP degree splits the heads evenly (Model::even_tp_degree).
  Status heads_split(const Stage& s, const std::string& path) const {
    if (s.head_split.empty()) {
      const int t = s.tp();
      if (model_.even_tp_degree(t)) return {};
      return fail(path + "/devices",
                  "TP degree " + std::to_string(t) + " does not divide " +
                      std::to_string(model_.heads) + " heads / " + std::to_string(model_.kv_heads) +
                      " KV heads evenly; give an explicit \"head_split\" or another degree");
    }
    const int sum = std::accumulate(s.head_split.begin(), s.head_split.end(), 0);
    if (sum != model_.heads) {
      return fail(path + "/head_split", "head counts sum to " + std::to_string(sum) +
                                            ", expected " + std::to_string(model_.heads) +
                                            " (the model's heads)");
    }
    const int group = model_.heads / model_.kv_heads;  // query heads per KV head (GQA)
    for (std::size_t r = 0; r < s.head_split.size(); ++r) {
      if (s.head_split[r] % group != 0) {
        return fail(path + "/head_split/" + std::to_string(r),
                    "expected a multiple of " + std::to_string(group) +
                        " heads (whole grouped-query KV groups), got " +
                        std::to_string(s.head_split[r]));
      }
    }
    return {};
  }

  // An expert_split: on a mixture of experts, summing to its routed experts, on every TP
  // stage of the plan or on none (the DP buckets pair whole experts with whole experts).
  Status experts_split(const Stage& s, const std::string& path) const {
    if (!whole_experts_) return {};
    if (s.expert_split.empty()) {
      return fail(path,
                  "expected an \"expert_split\" (another stage of the plan gives one: "
                  "every TP stage then does)");
    }
    if (!model_.is_moe()) {
      return fail(path + "/expert_split", model_.name + " is not a mixture of experts");
    }
    const int sum = std::accumulate(s.expert_split.begin(), s.expert_split.end(), 0);
    if (sum != model_.moe.experts) {
      return fail(path + "/expert_split", "expert counts sum to " + std::to_string(sum) +
                                              ", expected " + std::to_string(model_.moe.experts) +
                                              " (the model's routed experts)");
    }
    return {};
  }

  // A pipeline's stages cover every layer of the model.
  Status layers_covered(std::size_t pi, int next_layer) const {
    if (next_layer == model_.layers) return {};
    return fail("/pipelines/" + std::to_string(pi) + "/stages",
                "stages cover layers [0, " + std::to_string(next_layer) + ") but " + model_.name +
                    " has " + std::to_string(model_.layers) + " layers");
  }

  // The pipelines' batch shares add up to the global batch.
  Status batch_adds_up(int batch_sum) const {
    if (batch_sum == training_.global_batch) return {};
    return fail("/pipelines", "batch shares sum to " + std::to_string(batch_sum) +
                                  " sequences, expected the global batch " +
                                  std::to_string(training_.global_batch));
  }

  // Every device reaches every other: stages exchange activations, DP groups span the
  // pipelines, so all of a plan's devices talk. Leaves without a spine (and no override
  // joining them) split a cluster into parts that cannot.
  Status devices_connected() const {
    const auto parts = cluster_.connected_parts();
    if (parts.size() < 2) return {};
    std::vector<int> part_of_machine(cluster_.machines().size());
    for (std::size_t i = 0; i < parts.size(); ++i) {
      for (int m : parts[i]) part_of_machine[m] = static_cast<int>(i);
    }
    auto part = [&](int d) { return part_of_machine[cluster_.devices()[d].machine]; };
    int first = -1;
    for (int d = 0; d < cluster_.num_devices(); ++d) {
      if (used_where_[d].empty()) continue;
      if (first < 0) first = d;
      if (part(d) == part(first)) continue;
      return fail(used_where_[d], "device " + std::to_string(d) + " cannot reach device " +
                                      std::to_string(first) + ": cluster \"" + cluster_.name() +
                                      "\" has no spine between their leaves");
    }
    return {};
  }

  const Cluster& cluster_;
  const Model& model_;
  const TrainingConfig& training_;
  const std::string& origin_;
  std::vector<std::string> used_where_;  // per device: the JSON path that uses it, or ""
  bool whole_experts_ = false;           // Plan::whole_experts
};

}  // namespace

Status validate_plan(const Plan& plan, const Cluster& cluster, const Model& model,
                     const TrainingConfig& training, const std::string& origin) {
  return PlanChecker(cluster, model, training, origin).check(plan);
}

}  // namespace plan
}  // namespace hexi
