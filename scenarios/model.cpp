#include "scenarios/model.hpp"

#include "topologies/paths.hpp"

namespace hexi {

double Model::attention_params() const {
  const double h = hidden, kd = kv_dim();
  double w = h * h + 2 * h * kd + h * h;  // q, k, v, o
  double b = bias ? h + 2 * kd + h : 0;
  return w + b;
}

double Model::mlp_params() const {
  const double h = hidden, f = ffn;
  if (is_moe()) return 3 * h * (f * moe.experts + moe.shared_ffn);
  if (mlp == MlpKind::kSwiGlu) return 3 * h * f + (bias ? 2 * f + h : 0);
  return 2 * h * f + (bias ? f + h : 0);
}

double Model::norm_params() const {
  return 2.0 * hidden * (layer_norm ? 2 : 1);
}

double Model::router_params() const {
  return static_cast<double>(hidden) * moe.experts;
}

double Model::active_params() const {
  if (!is_moe()) return params();
  const double idle = 3.0 * hidden * ffn * (moe.experts - moe.top_k);
  return params() - layers * idle;
}

double Model::embedding_params() const {
  return static_cast<double>(vocab) * hidden +
         (learned_positions ? static_cast<double>(max_seq) * hidden : 0);
}

double Model::head_params() const {
  double final_norm = static_cast<double>(hidden) * (layer_norm ? 2 : 1);
  return (tied_embeddings ? 0 : static_cast<double>(vocab) * hidden) + final_norm;
}

double Model::params() const {
  return embedding_params() + layers * layer_params() + head_params();
}

Model read_model(const JsonNode& node) {
  node.allow_only({"name", "description", "layers", "hidden", "ffn", "heads", "kv_heads", "vocab",
                   "max_seq", "mlp", "tied_embeddings", "bias", "layer_norm", "learned_positions",
                   "dropout", "moe"});
  Model m;
  m.name = node.str("name");
  m.description = node.str_or("description", "");
  m.layers = static_cast<int>(node.integer_in("layers", 1, 100000));
  m.hidden = static_cast<int>(node.integer_in("hidden", 1, 1 << 20));
  m.ffn = static_cast<int>(node.integer_in("ffn", 1, 1 << 22));
  m.heads = static_cast<int>(node.integer_in("heads", 1, 1 << 14));
  m.kv_heads = static_cast<int>(node.integer_or("kv_heads", 1, m.heads, m.heads));
  m.vocab = static_cast<int>(node.integer_in("vocab", 1, 1 << 24));
  m.max_seq = static_cast<int>(node.integer_in("max_seq", 1, 1 << 24));
  if (m.hidden % m.heads != 0)
    node.at("heads").fail("a divisor of hidden (" + std::to_string(m.hidden) + ")");
  if (m.heads % m.kv_heads != 0)
    node.at("kv_heads").fail("a divisor of heads (" + std::to_string(m.heads) + ")");
  std::string mlp = node.str_or("mlp", "swiglu");
  if (mlp == "swiglu") {
    m.mlp = MlpKind::kSwiGlu;
  } else if (mlp == "gelu") {
    m.mlp = MlpKind::kGelu;
  } else {
    node.at("mlp").fail("\"swiglu\" or \"gelu\"");
  }
  m.tied_embeddings = node.boolean_or("tied_embeddings", false);
  m.bias = node.boolean_or("bias", false);
  m.layer_norm = node.boolean_or("layer_norm", false);
  m.learned_positions = node.boolean_or("learned_positions", false);
  m.dropout = node.boolean_or("dropout", false);
  if (auto moe = node.find("moe")) {
    moe->allow_only({"experts", "top_k", "shared_ffn", "imbalance", "capacity_factor"});
    m.moe.experts = static_cast<int>(moe->integer_in("experts", 1, 1 << 16));
    m.moe.top_k = static_cast<int>(moe->integer_in("top_k", 1, m.moe.experts));
    m.moe.shared_ffn = static_cast<int>(moe->integer_or("shared_ffn", 0, 1 << 22, 0));
    // The busiest expert takes at most every token: E / top_k times the mean.
    const double most = static_cast<double>(m.moe.experts) / m.moe.top_k;
    if (auto imb = moe->find("imbalance")) m.moe.imbalance = imb->number_in(1, most);
    if (auto cap = moe->find("capacity_factor")) m.moe.capacity_factor = cap->number_in(0, most);
    if (m.mlp != MlpKind::kSwiGlu || m.bias)
      moe->fail_message(
          "mixture-of-experts layers are SwiGLU experts without biases (\"mlp\": "
          "\"swiglu\", \"bias\": false)");
  }
  return m;
}

Json to_json(const Model& m) {
  Json j = {{"name", m.name},
            {"layers", m.layers},
            {"hidden", m.hidden},
            {"ffn", m.ffn},
            {"heads", m.heads},
            {"kv_heads", m.kv_heads},
            {"vocab", m.vocab},
            {"max_seq", m.max_seq},
            {"mlp", m.mlp == MlpKind::kSwiGlu ? "swiglu" : "gelu"},
            {"tied_embeddings", m.tied_embeddings},
            {"bias", m.bias},
            {"layer_norm", m.layer_norm},
            {"learned_positions", m.learned_positions},
            {"dropout", m.dropout}};
  if (m.is_moe()) {
    j["moe"] = {{"experts", m.moe.experts}, {"top_k", m.moe.top_k}};
    if (m.moe.shared_ffn > 0) j["moe"]["shared_ffn"] = m.moe.shared_ffn;
    if (m.moe.imbalance != 1) j["moe"]["imbalance"] = m.moe.imbalance;
    if (m.moe.capacity_factor > 0) j["moe"]["capacity_factor"] = m.moe.capacity_factor;
  }
  return j;
}

Result<ModelCatalog> ModelCatalog::load(const std::filesystem::path& path) {
  auto json = read_json_file(path);
  if (!json) return json.error();
  return from_json(*json, path.string());
}

Result<ModelCatalog> ModelCatalog::from_json(const Json& json, const std::string& origin) {
  return load_with([&] {
    JsonNode root(json, origin);
    root.allow_only({"version", "comment", "models"});
    root.require_version(1);
    ModelCatalog catalog;
    auto models = root.at("models");
    for (std::size_t i = 0; i < models.size(); ++i) {
      Model m = read_model(models.at(i));
      if (catalog.find(m.name) != nullptr)
        models.at(i).fail_message("model \"" + m.name + "\" defined twice");
      catalog.models_.push_back(std::move(m));
    }
    return catalog;
  });
}

Result<ModelCatalog> ModelCatalog::load_shipped() {
  return load(data_root() / "scenarios/models.json");
}

const Model* ModelCatalog::find(std::string_view name) const {
  for (const auto& m : models_) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

std::string ModelCatalog::names() const {
  std::string out;
  for (const auto& m : models_) out += (out.empty() ? "" : ", ") + m.name;
  return out;
}

}  // namespace hexi
