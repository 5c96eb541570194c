#include "scenarios/sweep.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "scenarios/scenario.hpp"
#include "topologies/text.hpp"

namespace hexi {
namespace {

namespace fs = std::filesystem;

// Each distinct value of one kind (clusters, models or schedulers) is read once, however
// many points name it; values are told apart by their JSON text, and their labels must
// differ as well (labels are what keys, the CSV and plots show).
template <class T>
class Values {
 public:
  explicit Values(std::vector<T>& out, const char* what) : out_(out), what_(what) {}

  template <class Read>
  int index(const JsonNode& node, Read&& read) {
    const std::string text = dump_json(node.json());
    if (auto it = by_text_.find(text); it != by_text_.end()) return it->second;
    T value = read(node);
    for (const T& other : out_) {
      if (other.label == value.label) {
        node.fail_message(std::string("a second ") + what_ + " labelled \"" + value.label +
                          "\" that differs from the first; give each its own \"label\"");
      }
    }
    out_.push_back(std::move(value));
    const int i = static_cast<int>(out_.size()) - 1;
    by_text_[text] = i;
    return i;
  }

 private:
  std::vector<T>& out_;
  const char* what_;
  std::map<std::string, int> by_text_;
};

FabricOptions read_fabric(const JsonNode& node) {
  FabricOptions f;
  f.name = node.str_or("name", "");
  if (auto n = node.find("nic_GBps")) f.nic_GBps = n->positive();
  f.nics_per_machine = static_cast<int>(node.integer_or("nics", 1, 64, f.nics_per_machine));
  f.machines_per_leaf =
      static_cast<int>(node.integer_or("machines_per_leaf", 0, 1 << 20, f.machines_per_leaf));
  if (auto o = node.find("oversubscription")) f.oversubscription = o->number_in(1, 1024);
  return f;
}

SweepCluster read_mix(const JsonNode& node, const GpuCatalog& gpus) {
  node.allow_only(
      {"mix", "label", "name", "nic_GBps", "nics", "machines_per_leaf", "oversubscription"});
  const JsonNode mix_node = node.at("mix");
  const std::string mix = mix_node.str();
  auto entries = parse_mix(mix, gpus);
  if (!entries) mix_node.fail_message(entries.error().message);
  const Json json = generate_cluster_json(*entries, read_fabric(node));
  auto cluster = Cluster::from_json(json, node.origin() + " " + node.path(), gpus);
  if (!cluster) node.fail_message(cluster.error().message);
  return {node.str_or("label", mix), std::move(*cluster), fnv1a64_hex(dump_json(json))};
}

SweepCluster read_cluster(const JsonNode& node, const GpuCatalog& gpus, const fs::path& dir) {
  if (node.json().is_object()) return read_mix(node, gpus);
  if (!node.json().is_string()) {
    node.fail("a shipped cluster name, a cluster file path, or {\"mix\": \"TYPE:MxG,...\"}");
  }
  const std::string ref = node.str();
  auto cluster = load_cluster(ref, gpus, dir);
  if (!cluster) node.fail_message(cluster.error().message);
  auto json = read_json_file(cluster_file(ref, dir));
  if (!json) node.fail_message(json.error().message);
  return {ref, std::move(*cluster), fnv1a64_hex(dump_json(*json))};
}

SweepModel read_sweep_model(const JsonNode& node, const ModelCatalog& models) {
  if (node.json().is_string()) {
    const Model* m = models.find(node.str());
    if (m == nullptr)
      node.fail("a model from the catalog (" + models.names() + ") or an inline model");
    return {m->name, *m};
  }
  Model m = read_model(node);
  return {m.name, m};
}

SweepScheduler read_scheduler(const JsonNode& node, const SweepVocabulary& vocabulary) {
  SweepScheduler s;
  JsonNode name_node = node;
  if (node.json().is_object()) {
    name_node = node.at("name");
    s.options = node.json();
    s.options.erase("name");
    s.options.erase("label");
  } else if (!node.json().is_string()) {
    node.fail("a scheduler name or {\"name\": ..., options...}");
  }
  s.name = name_node.str();
  const auto& known = vocabulary.schedulers;
  if (std::find(known.begin(), known.end(), s.name) == known.end()) {
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    name_node.fail("a scheduler (" + list + ")");
  }
  s.label = s.options.empty() ? s.name : s.name + dump_json(s.options);
  if (node.json().is_object()) s.label = node.str_or("label", s.label);
  return s;
}

std::vector<std::string> read_metrics(const JsonNode& root, const SweepVocabulary& vocabulary) {
  auto node = root.find("metrics");
  if (!node) return vocabulary.metrics;
  node->require_array();
  std::vector<std::string> out;
  std::string known;
  for (const auto& k : vocabulary.metrics) known += (known.empty() ? "" : ", ") + k;
  for (std::size_t i = 0; i < node->size(); ++i) {
    const JsonNode m = node->at(i);
    const std::string name = m.str();
    if (std::find(vocabulary.metrics.begin(), vocabulary.metrics.end(), name) ==
        vocabulary.metrics.end()) {
      m.fail("a metric (" + known + ")");
    }
    if (std::find(out.begin(), out.end(), name) != out.end()) m.fail("a metric not listed before");
    out.push_back(name);
  }
  if (out.empty()) node->fail("a non-empty list of metrics");
  return out;
}

// Reads the sweep's values and points.
class Reader {
 public:
  Reader(Sweep& sweep, const GpuCatalog& gpus, const ModelCatalog& models,
         const SweepVocabulary& vocabulary)
      : sweep_(sweep),
        gpus_(gpus),
        models_(models),
        vocabulary_(vocabulary),
        clusters_(sweep.clusters, "cluster"),
        model_values_(sweep.models, "model"),
        schedulers_(sweep.schedulers, "scheduler"),
        prices_(sweep.prices, "prices") {}

  // One axis value of each kind; `axis` is the member name (kSweepAxes).
  int value(const char* axis, const JsonNode& v) {
    const std::string a = axis;
    if (a == "cluster") {
      return clusters_.index(
          v, [&](const JsonNode& n) { return read_cluster(n, gpus_, sweep_.file.parent_path()); });
    }
    if (a == "model") {
      const int m =
          model_values_.index(v, [&](const JsonNode& n) { return read_sweep_model(n, models_); });
      return m;
    }
    if (a == "scheduler") {
      return schedulers_.index(v,
                               [&](const JsonNode& n) { return read_scheduler(n, vocabulary_); });
    }
    if (a == "seq_len") return static_cast<int>(v.integer_in(1, 1 << 24));
    if (a == "global_batch") {
      const int b = static_cast<int>(v.integer_in(1, 1 << 24));
      if (b % sweep_.training.micro_batch != 0) {
        v.fail("a multiple of training.micro_batch (" +
               std::to_string(sweep_.training.micro_batch) + ")");
      }
      return b;
    }
    if (a == "fidelity") {
      auto f = kFidelityNames.parse(v.json().is_string() ? v.str() : "");
      if (!f) v.fail(kFidelityNames.list("\"", " or "));
      return static_cast<int>(*f);
    }
    if (a == "prices") {
      return prices_.index(v, [&](const JsonNode& n) { return read_prices(n); });
    }
    // seed: any 64-bit value a scenario takes; kept as an index into seeds_.
    seeds_.push_back(static_cast<std::uint64_t>(v.integer_in(0, INT64_MAX)));
    return static_cast<int>(seeds_.size()) - 1;
  }

  // The default of an axis a sweep does not give.
  int default_value(const char* axis) {
    const std::string a = axis;
    if (a == "seq_len") return sweep_.training.seq_len;
    if (a == "global_batch") return sweep_.training.global_batch;
    if (a == "fidelity") return static_cast<int>(Fidelity::kClosedForm);
    if (a == "scheduler") {
      const Json name = "hexiscale";
      return value(axis, JsonNode(name, sweep_.file.string(), "/axes/scheduler"));
    }
    if (a == "prices") return -1;
    seeds_.push_back(1);
    return static_cast<int>(seeds_.size()) - 1;
  }

  SweepPrices read_prices(const JsonNode& n) const {
    const std::string ref = n.str();
    auto book = load_price_book(ref, gpus_, sweep_.file.parent_path());
    if (!book) n.fail_message(book.error().message);
    auto json = read_json_file(book->file);
    if (!json) n.fail_message(json.error().message);
    return {ref, std::move(*book), fnv1a64_hex(dump_json(*json))};
  }

  // A point from one value per axis (in kSweepAxes order).
  SweepPoint point(const std::vector<int>& v) const {
    SweepPoint p;
    p.index = static_cast<int>(sweep_.points.size());
    p.cluster = v[0];
    p.model = v[1];
    p.seq_len = v[2];
    p.global_batch = v[3];
    p.scheduler = v[4];
    p.fidelity = static_cast<Fidelity>(v[5]);
    p.seed = seeds_[v[6]];
    p.prices = v[7];
    p.key = "cluster=" + sweep_.clusters[p.cluster].label +
            ";model=" + sweep_.models[p.model].label + ";seq_len=" + std::to_string(p.seq_len) +
            ";global_batch=" + std::to_string(p.global_batch) +
            ";scheduler=" + sweep_.schedulers[p.scheduler].label +
            ";fidelity=" + std::string(kFidelityNames.name(p.fidelity)) +
            ";seed=" + std::to_string(p.seed);
    if (p.prices >= 0) p.key += ";prices=" + sweep_.prices[p.prices].label;
    return p;
  }

  void axes(const JsonNode& node);
  void points(const JsonNode& node);

 private:
  Sweep& sweep_;
  const GpuCatalog& gpus_;
  const ModelCatalog& models_;
  const SweepVocabulary& vocabulary_;
  Values<SweepCluster> clusters_;
  Values<SweepModel> model_values_;
  Values<SweepScheduler> schedulers_;
  Values<SweepPrices> prices_;
  std::vector<std::uint64_t> seeds_;
};

constexpr std::size_t kNumAxes = std::size(kSweepAxes);

void Reader::axes(const JsonNode& node) {
  node.require_object();
  node.allow_only(
      {"cluster", "model", "seq_len", "global_batch", "scheduler", "fidelity", "seed", "prices"});
  std::vector<std::vector<int>> values(kNumAxes);
  std::size_t total = 1;
  for (std::size_t a = 0; a < kNumAxes; ++a) {
    const char* axis = kSweepAxes[a];
    auto list = a < 2 ? std::optional<JsonNode>(node.at(axis)) : node.find(axis);
    if (!list) {
      values[a].push_back(default_value(axis));
    } else {
      if (!list->json().is_array() || list->size() == 0) list->fail("a non-empty array of values");
      std::set<std::string> seen;
      for (std::size_t i = 0; i < list->size(); ++i) {
        const JsonNode v = list->at(i);
        if (!seen.insert(dump_json(v.json())).second) v.fail("a value not listed before");
        values[a].push_back(value(axis, v));
      }
    }
    total *= values[a].size();
    if (total > kMaxSweepPoints) {
      node.fail_message("the cross product has more than " + std::to_string(kMaxSweepPoints) +
                        " points");
    }
  }
  // The cross product, the last axis varying fastest.
  std::vector<std::size_t> at(kNumAxes, 0);
  for (std::size_t n = 0; n < total; ++n) {
    std::vector<int> v(kNumAxes);
    for (std::size_t a = 0; a < kNumAxes; ++a) v[a] = values[a][at[a]];
    sweep_.points.push_back(point(v));
    for (std::size_t a = kNumAxes; a-- > 0;) {
      if (++at[a] < values[a].size()) break;
      at[a] = 0;
    }
  }
}

void Reader::points(const JsonNode& node) {
  if (!node.json().is_array() || node.size() == 0) node.fail("a non-empty array of points");
  if (node.size() > kMaxSweepPoints) {
    node.fail_message("more than " + std::to_string(kMaxSweepPoints) + " points");
  }
  std::map<std::string, std::size_t> keys;
  for (std::size_t i = 0; i < node.size(); ++i) {
    const JsonNode p = node.at(i);
    p.require_object();
    p.allow_only(
        {"cluster", "model", "seq_len", "global_batch", "scheduler", "fidelity", "seed", "prices"});
    std::vector<int> v(kNumAxes);
    for (std::size_t a = 0; a < kNumAxes; ++a) {
      const char* axis = kSweepAxes[a];
      auto member = a < 2 ? std::optional<JsonNode>(p.at(axis)) : p.find(axis);
      v[a] = member ? value(axis, *member) : default_value(axis);
    }
    SweepPoint point = this->point(v);
    if (auto [it, fresh] = keys.emplace(point.key, i); !fresh) {
      p.fail_message("the same point as /points/" + std::to_string(it->second) +
                     " (each point is listed once)");
    }
    sweep_.points.push_back(std::move(point));
  }
}

// Names that are safe as a folder name (the default output folder is out/sweeps/<name>).
bool plain_name(const std::string& s) {
  if (s.empty() || s == "." || s == "..") return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

}  // namespace

Json Sweep::point_json(const SweepPoint& p) const {
  Json j = {{"cluster", clusters[p.cluster].label},
            {"model", models[p.model].label},
            {"seq_len", p.seq_len},
            {"global_batch", p.global_batch},
            {"scheduler", schedulers[p.scheduler].label},
            {"fidelity", kFidelityNames.name(p.fidelity)},
            {"seed", p.seed}};
  if (p.prices >= 0) j["prices"] = prices[p.prices].label;
  return j;
}

TrainingConfig Sweep::training_of(const SweepPoint& p) const {
  TrainingConfig t = training;
  t.seq_len = p.seq_len;
  t.global_batch = p.global_batch;
  return t;
}

Result<Sweep> sweep_from_json(const Json& json, const fs::path& file, const GpuCatalog& gpus,
                              const ModelCatalog& models, const SweepVocabulary& vocabulary) {
  return load_with([&]() -> Sweep {
    JsonNode root(json, file.string());
    root.require_object();
    root.allow_only({"version", "name", "description", "training", "time_budget_s", "axes",
                     "points", "metrics"});
    root.require_version(1);
    Sweep s;
    s.file = file;
    s.name = root.str("name");
    if (!plain_name(s.name)) root.at("name").fail("a name of letters, digits, '-', '_' and '.'");
    s.description = root.str_or("description", "");
    if (auto t = root.find("training")) s.training = read_training(*t);
    if (auto b = root.find("time_budget_s")) s.time_budget_s = b->number_in(0, 1e7);
    s.metrics = read_metrics(root, vocabulary);
    Reader reader(s, gpus, models, vocabulary);
    const auto axes = root.find("axes");
    const auto points = root.find("points");
    if (axes && points) {
      root.fail_message("give either \"axes\" (a cross product) or \"points\" (a list), not both");
    }
    if (axes) {
      reader.axes(*axes);
    } else if (points) {
      reader.points(*points);
    } else {
      root.fail_message("expected \"axes\" (a cross product) or \"points\" (a list of points)");
    }
    return s;
  });
}

Result<Sweep> load_sweep(const fs::path& file, const GpuCatalog& gpus, const ModelCatalog& models,
                         const SweepVocabulary& vocabulary) {
  auto json = read_json_file(file);
  if (!json) return json.error();
  return sweep_from_json(*json, file, gpus, models, vocabulary);
}

}  // namespace hexi
