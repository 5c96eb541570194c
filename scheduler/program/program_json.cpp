// Program JSON (format version 1): writer and reader. See program.hpp for the
// semantics; the reader validates with validate_program().

#include <array>

#include "scheduler/program/program.hpp"
#include "topologies/enum_names.hpp"

namespace hexi {
inline namespace program {
namespace {

// Reads an enum by its to_string name; fails listing the accepted names.
template <class E, std::size_t N>
E parse_enum(const JsonNode& node, const EnumNames<E, N>& names) {
  if (auto value = names.parse(node.str())) return *value;
  node.fail("one of " + names.list());
}

Json op_json(const Program& p, int id) {
  const Op& op = p.ops[id];
  Json j = {{"id", id}, {"op", to_string(op.kind)}, {"stream", to_string(op.stream)}};
  if (op.kind == OpKind::kCompute) {
    j["name"] = to_string(op.compute);
    j["shape"] = op.shape;
    if (op.folded >= 0) j["folded"] = op.folded;
  } else {
    j["tensor"] = to_string(op.tensor);
    j["bytes"] = op.bytes;
  }
  if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) {
    j["peer"] = op.peer;
    j["tag"] = op.tag;
    if (op.rows_end > op.rows_begin) j["rows"] = {op.rows_begin, op.rows_end};
  }
  if (op.kind == OpKind::kCollective) {
    j["collective"] = to_string(op.collective);
    j["group"] = op.group;
    j["instance"] = op.instance;
  }
  if (op.layer >= 0) j["layer"] = op.layer;
  if (op.micro_batch >= 0) j["mb"] = op.micro_batch;
  if (op.bucket >= 0) j["bucket"] = op.bucket;
  if (op.step >= 0) j["step"] = op.step;
  if (op.chunk > 0) j["chunk"] = op.chunk;
  Json deps = Json::array();
  for (int d : p.deps(op)) deps.push_back(d);
  j["deps"] = deps;
  return j;
}

Json layout_json(const Program& p, const DeviceLayout& l) {
  Json ops = Json::array();
  for (int id = l.op_begin; id < l.op_end; ++id) ops.push_back(op_json(p, id));
  Json j = {{"device", l.device},
            {"pipeline", l.pipeline},
            {"stage", l.stage},
            {"stages", l.stages},
            {"tp_rank", l.tp_rank},
            {"tp", l.tp},
            {"tp_group", l.tp_group},
            {"gather_group", l.gather_group},
            {"layers", {l.layer_begin, l.layer_end}},
            {"first", l.first},
            {"last", l.last},
            {"heads", {l.head_begin, l.head_end}},
            {"kv_heads", {l.kv_begin, l.kv_end}},
            {"ffn", {l.ffn_begin, l.ffn_end}},
            {"vocab", {l.vocab_begin, l.vocab_end}},
            {"phi", l.phi},
            {"micro_batch", l.micro_batch},
            {"micro_batches", l.micro_batches},
            {"loss_scale", l.loss_scale},
            {"params", l.params},
            {"owned_params", l.owned_params}};
  if (l.recompute) j["recompute"] = to_string(*l.recompute);
  if (l.experts >= 0) j["experts"] = l.experts;
  if (l.routed_experts) j["routed_experts"] = {l.routed_experts->first, l.routed_experts->second};
  if (l.shared_ffn) j["shared_ffn"] = {l.shared_ffn->first, l.shared_ffn->second};
  if (l.seq_group >= 0) j["sequence"] = {l.seq_group, l.seq_rank};
  if (l.mesh >= 0) j["mesh"] = l.mesh;
  if (!l.chunks.empty()) {
    Json chunks = Json::array();
    for (const ChunkLayout& c : l.chunks) {
      chunks.push_back({{"stage", c.stage},
                        {"layers", {c.layer_begin, c.layer_end}},
                        {"first", c.first},
                        {"last", c.last}});
    }
    j["chunks"] = chunks;
  }
  j["ops"] = ops;
  return j;
}

Json shape_json(const Shape& s) {
  Json kernels = Json::array();
  for (const auto& k : s.kernels) {
    Json j = {
        {"name", k.name}, {"class", to_string(k.cls)}, {"flops", k.flops}, {"bytes", k.bytes}};
    // The shape the device model reads (absent: unknown, as in programs written before it).
    if (k.m > 0 || k.n > 0 || k.k > 0) j["shape"] = {k.m, k.n, k.k};
    if (k.score_bytes > 0) j["score_bytes"] = k.score_bytes;
    if (k.backward) j["backward"] = true;
    kernels.push_back(std::move(j));
  }
  return {{"kind", to_string(s.kind)}, {"micro_batch", s.micro_batch}, {"phi", s.phi},
          {"layers", s.layers},        {"flops", s.flops()},           {"bytes", s.bytes()},
          {"kernels", kernels}};
}

Json bucket_json(const Bucket& b) {
  Json segs = Json::array();
  for (const auto& s : b.segments) {
    segs.push_back({{"param", s.param},
                    {"layer", s.layer},
                    {"range", {s.begin, s.end}},
                    {"elements", s.elements}});
  }
  return {{"group", b.group}, {"elements", b.elements}, {"segments", segs}};
}

}  // namespace

Json to_json(const Program& p) {
  Json groups = Json::array(), shapes = Json::array(), buckets = Json::array(),
       folds = Json::array(), devices = Json::array();
  for (const auto& g : p.groups)
    groups.push_back({{"kind", to_string(g.kind)}, {"devices", g.devices}});
  for (const auto& s : p.shapes) shapes.push_back(shape_json(s));
  for (const auto& b : p.buckets) buckets.push_back(bucket_json(b));
  for (const auto& f : p.folds) {
    if (f.mesh >= 0) {
      folds.push_back({{"mesh", f.mesh},
                       {"layers", f.layers},
                       {"first", f.first},
                       {"last", f.last},
                       {"forward", f.forward}});
      continue;
    }
    folds.push_back({{"group", f.group},
                     {"collective", to_string(f.collective)},
                     {"bytes", f.bytes},
                     {"count", f.count},
                     {"loss_stats_bytes", f.loss_stats_bytes}});
  }
  for (const auto& l : p.devices) devices.push_back(layout_json(p, l));
  Json out = {{"version", 1},
              {"format", "hexisim-program"},
              {"scenario", p.scenario},
              {"cluster", p.cluster},
              {"model", p.model},
              {"granularity", to_string(p.granularity)},
              {"schedule", to_string(p.schedule)},
              {"num_devices", p.num_devices},
              {"bytes_per_element", p.bytes_per_element},
              {"global_batch", p.global_batch},
              {"seq_len", p.seq_len},
              {"zero_stage", p.zero_stage},
              {"model_digest", p.model_digest},
              {"training_digest", p.training_digest},
              {"num_ops", p.num_ops()},
              {"groups", groups},
              {"shapes", shapes},
              {"folds", folds},
              {"buckets", buckets},
              {"devices", devices}};
  if (p.sequence) out["sequence"] = to_json(*p.sequence);
  if (!p.meshes.empty()) {
    Json meshes = Json::array();
    for (const SequenceLayout& m : p.meshes) meshes.push_back(to_json(m));
    out["meshes"] = meshes;
  }
  return out;
}

std::string program_text(const Program& program) {
  return dump_json(to_json(program), 1) + "\n";
}

namespace {

std::pair<int, int> int_pair(const JsonNode& node) {
  if (!node.json().is_array() || node.size() != 2) node.fail("a pair [begin, end]");
  return {static_cast<int>(node.at(std::size_t{0}).integer_in(-1, INT32_MAX)),
          static_cast<int>(node.at(std::size_t{1}).integer_in(-1, INT32_MAX))};
}

int int_or(const JsonNode& node, std::string_view key, int fallback) {
  return static_cast<int>(node.integer_or(key, -1, INT32_MAX, fallback));
}

void read_op(const JsonNode& j, int device, Program& p) {
  j.allow_only({"id",    "op",   "stream", "name", "shape",      "folded", "tensor",
                "bytes", "peer", "tag",    "rows", "collective", "group",  "instance",
                "layer", "mb",   "bucket", "step", "chunk",      "deps"});
  const int id = p.num_ops();
  if (j.integer_in("id", 0, INT32_MAX) != id)
    j.at("id").fail("op id " + std::to_string(id) + " (ids are 0..N-1 in file order)");
  Op op;
  op.device = device;
  op.kind = parse_enum(j.at("op"), kOpKindNames);
  op.stream = parse_enum(j.at("stream"), kStreamNames);
  if (op.kind == OpKind::kCompute) {
    op.compute = parse_enum(j.at("name"), kComputeKindNames);
    op.shape = static_cast<int>(j.integer_in("shape", 0, INT32_MAX));
    op.folded = int_or(j, "folded", -1);
  } else {
    op.tensor = parse_enum(j.at("tensor"), kTensorKindNames);
    op.bytes = j.at("bytes").number_in(0, 1e300);
  }
  if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) {
    op.peer = static_cast<int>(j.integer_in("peer", 0, INT32_MAX));
    op.tag = static_cast<int>(j.integer_in("tag", 0, INT32_MAX));
    if (auto rows = j.find("rows")) std::tie(op.rows_begin, op.rows_end) = int_pair(*rows);
  }
  if (op.kind == OpKind::kCollective) {
    op.collective = parse_enum(j.at("collective"), kCollectiveNames);
    op.group = static_cast<int>(j.integer_in("group", 0, INT32_MAX));
    op.instance = static_cast<int>(j.integer_in("instance", 0, INT32_MAX));
  }
  op.layer = int_or(j, "layer", -1);
  op.micro_batch = int_or(j, "mb", -1);
  op.bucket = int_or(j, "bucket", -1);
  op.step = int_or(j, "step", -1);
  op.chunk = static_cast<int>(j.integer_or("chunk", 0, INT32_MAX, 0));
  auto deps = j.at("deps");
  op.deps_begin = static_cast<std::uint32_t>(p.dep_ids.size());
  for (std::size_t i = 0; i < deps.size(); ++i) {
    p.dep_ids.push_back(static_cast<int>(deps.at(i).integer_in(0, INT32_MAX)));
  }
  op.deps_count = static_cast<std::uint32_t>(deps.size());
  p.ops.push_back(op);
}

void read_device_layout(const JsonNode& j, Program& p) {
  j.allow_only({"device",       "pipeline",       "stage",         "stages",     "tp_rank",
                "tp",           "tp_group",       "gather_group",  "layers",     "first",
                "last",         "heads",          "kv_heads",      "ffn",        "vocab",
                "phi",          "micro_batch",    "micro_batches", "loss_scale", "params",
                "owned_params", "recompute",      "sequence",      "mesh",       "chunks",
                "experts",      "routed_experts", "shared_ffn",    "ops"});
  DeviceLayout l;
  l.device = static_cast<int>(j.integer_in("device", 0, INT32_MAX));
  l.pipeline = static_cast<int>(j.integer_in("pipeline", 0, INT32_MAX));
  l.stage = static_cast<int>(j.integer_in("stage", 0, INT32_MAX));
  l.stages = static_cast<int>(j.integer_in("stages", 1, INT32_MAX));
  l.tp_rank = static_cast<int>(j.integer_in("tp_rank", 0, INT32_MAX));
  l.tp = static_cast<int>(j.integer_in("tp", 1, INT32_MAX));
  l.tp_group = int_or(j, "tp_group", -1);
  l.gather_group = int_or(j, "gather_group", -1);
  std::tie(l.layer_begin, l.layer_end) = int_pair(j.at("layers"));
  l.first = j.at("first").boolean();
  l.last = j.at("last").boolean();
  std::tie(l.head_begin, l.head_end) = int_pair(j.at("heads"));
  std::tie(l.kv_begin, l.kv_end) = int_pair(j.at("kv_heads"));
  std::tie(l.ffn_begin, l.ffn_end) = int_pair(j.at("ffn"));
  std::tie(l.vocab_begin, l.vocab_end) = int_pair(j.at("vocab"));
  l.phi = j.at("phi").number_in(0, 1);
  l.micro_batch = static_cast<int>(j.integer_in("micro_batch", 1, INT32_MAX));
  l.micro_batches = static_cast<int>(j.integer_in("micro_batches", 0, INT32_MAX));
  l.loss_scale = j.at("loss_scale").number_in(0, 1);
  l.params = j.at("params").number_in(0, 1e300);
  l.owned_params = j.at("owned_params").number_in(0, 1e300);
  if (auto r = j.find("recompute")) l.recompute = read_recompute(*r);
  if (auto e = j.find("experts")) l.experts = e->number_in(0, 1);
  // A range of experts or columns: 0 <= begin <= end.
  const auto range = [](const JsonNode& node) {
    const std::pair<int, int> r = int_pair(node);
    if (r.first < 0 || r.second < r.first) node.fail("a range [begin, end] with 0 <= begin <= end");
    return r;
  };
  if (auto e = j.find("routed_experts")) l.routed_experts = range(*e);
  if (auto f = j.find("shared_ffn")) l.shared_ffn = range(*f);
  if (auto sq = j.find("sequence")) std::tie(l.seq_group, l.seq_rank) = int_pair(*sq);
  l.mesh = int_or(j, "mesh", -1);
  if (l.mesh >= static_cast<int>(p.meshes.size()))
    j.at("mesh").fail("an index into the program's meshes (" + std::to_string(p.meshes.size()) +
                      ")");
  if (auto chunks = j.find("chunks")) {
    for (std::size_t i = 0; i < chunks->size(); ++i) {
      const JsonNode c = chunks->at(i);
      c.allow_only({"stage", "layers", "first", "last"});
      ChunkLayout chunk;
      chunk.stage = static_cast<int>(c.integer_in("stage", 0, INT32_MAX));
      std::tie(chunk.layer_begin, chunk.layer_end) = int_pair(c.at("layers"));
      chunk.first = c.at("first").boolean();
      chunk.last = c.at("last").boolean();
      l.chunks.push_back(chunk);
    }
  }
  l.op_begin = p.num_ops();
  auto ops = j.at("ops");
  for (std::size_t i = 0; i < ops.size(); ++i) read_op(ops.at(i), l.device, p);
  l.op_end = p.num_ops();
  p.devices.push_back(l);
}

Shape read_shape(const JsonNode& j) {
  j.allow_only({"kind", "micro_batch", "phi", "layers", "flops", "bytes", "kernels"});
  Shape s;
  s.kind = parse_enum(j.at("kind"), kComputeKindNames);
  s.micro_batch = static_cast<int>(j.integer_in("micro_batch", 0, INT32_MAX));
  s.phi = j.at("phi").number_in(0, 1);
  s.layers = static_cast<int>(j.integer_in("layers", 0, INT32_MAX));
  auto kernels = j.at("kernels");
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    auto k = kernels.at(i);
    k.allow_only({"name", "class", "flops", "bytes", "shape", "score_bytes", "backward"});
    Kernel kernel{intern_name(k.str("name")), parse_enum(k.at("class"), kKernelClassNames),
                  k.at("flops").number_in(0, 1e300), k.at("bytes").number_in(0, 1e300)};
    if (auto shape = k.find("shape")) {
      if (shape->size() != 3) shape->fail("[m, n, k]");
      kernel.m = shape->at(0).number_in(0, 1e300);
      kernel.n = shape->at(1).number_in(0, 1e300);
      kernel.k = shape->at(2).number_in(0, 1e300);
    }
    if (auto sb = k.find("score_bytes")) kernel.score_bytes = sb->number_in(0, kernel.bytes);
    kernel.backward = k.boolean_or("backward", false);
    s.kernels.push_back(kernel);
  }
  return s;
}

Bucket read_bucket(const JsonNode& j) {
  j.allow_only({"group", "elements", "segments"});
  Bucket b;
  b.group = static_cast<int>(j.integer_in("group", 0, INT32_MAX));
  b.elements = j.at("elements").number_in(0, 1e300);
  auto segs = j.at("segments");
  for (std::size_t i = 0; i < segs.size(); ++i) {
    auto s = segs.at(i);
    s.allow_only({"param", "layer", "range", "elements"});
    ParamSegment seg;
    seg.param = s.str("param");
    seg.layer = static_cast<int>(s.integer_in("layer", -2, INT32_MAX));
    std::tie(seg.begin, seg.end) = int_pair(s.at("range"));
    seg.elements = s.at("elements").number_in(0, 1e300);
    b.segments.push_back(std::move(seg));
  }
  return b;
}

Program read_program_json(const JsonNode& root) {
  root.allow_only({"version",     "format",     "scenario",     "cluster",           "model",
                   "granularity", "schedule",   "num_devices",  "bytes_per_element", "global_batch",
                   "seq_len",     "zero_stage", "model_digest", "training_digest",   "num_ops",
                   "groups",      "shapes",     "folds",        "buckets",           "devices",
                   "sequence",    "meshes"});
  root.require_version(1);
  if (root.str_or("format", "hexisim-program") != "hexisim-program")
    root.at("format").fail("\"hexisim-program\"");
  Program p;
  p.scenario = root.str_or("scenario", "");
  p.cluster = root.str_or("cluster", "");
  p.model = root.str_or("model", "");
  auto granularity = kGranularityNames.parse(root.str("granularity"));
  if (!granularity) root.at("granularity").fail(kGranularityNames.list("\"", " or "));
  p.granularity = *granularity;
  auto schedule = kPipelineScheduleNames.parse(root.str("schedule"));
  if (!schedule) root.at("schedule").fail(kPipelineScheduleNames.list("\"", " or "));
  p.schedule = *schedule;
  p.num_devices = static_cast<int>(root.integer_in("num_devices", 1, INT32_MAX));
  p.bytes_per_element = static_cast<int>(root.integer_in("bytes_per_element", 1, 8));
  p.global_batch = static_cast<int>(root.integer_in("global_batch", 1, INT32_MAX));
  p.seq_len = static_cast<int>(root.integer_in("seq_len", 1, INT32_MAX));
  p.zero_stage = static_cast<int>(root.integer_in("zero_stage", 0, 3));
  if (auto sq = root.find("sequence")) {
    p.sequence = plan::read_layout(*sq);
  } else if (p.zero_stage > 1) {
    root.at("zero_stage").fail("0 or 1 (ZeRO 2 and 3 are for sequence meshes)");
  }
  if (auto meshes = root.find("meshes")) {
    for (std::size_t i = 0; i < meshes->size(); ++i)
      p.meshes.push_back(plan::read_layout(meshes->at(i)));
  }
  p.model_digest = root.str_or("model_digest", "");
  p.training_digest = root.str_or("training_digest", "");
  auto groups = root.at("groups");
  for (std::size_t i = 0; i < groups.size(); ++i) {
    auto gj = groups.at(i);
    gj.allow_only({"kind", "devices"});
    Group grp;
    grp.kind = parse_enum(gj.at("kind"), kGroupKindNames);
    auto devs = gj.at("devices");
    if (devs.size() == 0) devs.fail("a non-empty array of devices");
    for (std::size_t k = 0; k < devs.size(); ++k) {
      grp.devices.push_back(static_cast<int>(devs.at(k).integer_in(0, p.num_devices - 1)));
    }
    p.groups.push_back(std::move(grp));
  }
  auto shapes = root.at("shapes");
  for (std::size_t i = 0; i < shapes.size(); ++i) p.shapes.push_back(read_shape(shapes.at(i)));
  if (auto folds = root.find("folds")) {
    for (std::size_t i = 0; i < folds->size(); ++i) {
      auto f = folds->at(i);
      Fold fold;
      if (f.has("mesh")) {  // a mesh stage's pass (meshes are read below: checked there)
        f.allow_only({"mesh", "layers", "first", "last", "forward"});
        fold.mesh = static_cast<int>(f.integer_in("mesh", 0, INT32_MAX));
        fold.layers = static_cast<int>(f.integer_in("layers", 0, INT32_MAX));
        fold.first = f.at("first").boolean();
        fold.last = f.at("last").boolean();
        fold.forward = f.at("forward").boolean();
        p.folds.push_back(fold);
        continue;
      }
      f.allow_only({"group", "collective", "bytes", "count", "loss_stats_bytes"});
      fold.group = static_cast<int>(
          f.integer_in("group", 0, static_cast<std::int64_t>(p.groups.size()) - 1));
      fold.collective = parse_enum(f.at("collective"), kCollectiveNames);
      fold.bytes = f.at("bytes").number_in(0, 1e300);
      fold.count = static_cast<int>(f.integer_in("count", 0, INT32_MAX));
      fold.loss_stats_bytes = f.at("loss_stats_bytes").number_in(0, 1e300);
      p.folds.push_back(fold);
    }
  }
  auto buckets = root.at("buckets");
  for (std::size_t i = 0; i < buckets.size(); ++i) p.buckets.push_back(read_bucket(buckets.at(i)));
  auto devices = root.at("devices");
  for (std::size_t i = 0; i < devices.size(); ++i) read_device_layout(devices.at(i), p);
  return p;
}

}  // namespace

Result<Program> program_from_json(const Json& json, const std::string& origin) {
  auto program = load_with([&] { return read_program_json(JsonNode(json, origin)); });
  if (!program) return program.error();
  if (auto st = validate_program(*program, origin); !st) return st.error();
  return program;
}

Result<Program> read_program(const std::filesystem::path& path) {
  auto json = read_json_file(path);
  if (!json) return json.error();
  return program_from_json(*json, path.string());
}

}  // namespace program
}  // namespace hexi
