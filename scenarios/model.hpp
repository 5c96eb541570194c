#pragma once
// Transformer model shapes (scenarios/models.json) and their parameter counts.

#include <filesystem>
#include <string>
#include <vector>

#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi {

enum class MlpKind {
  kSwiGlu,  // Llama: gate and up (h -> f), down (f -> h): 3hf weights
  kGelu,    // GPT: fc1 (h -> f), fc2 (f -> h): 2hf weights
};

// Mixture-of-experts MLP (Mixtral, Qwen-MoE, DeepSeek-MoE): a router picks top_k of `experts`
// routed experts per token, each a SwiGLU MLP of width Model::ffn; shared experts (width
// shared_ffn in all, 0 when none) see every token. Tokens are routed uniformly (every expert
// receives top_k / experts of them). Under tensor parallelism every expert is split by
// columns like a dense MLP (expert-tensor parallelism equal to TP, Megatron-LM's default);
// the router is replicated.
struct Moe {
  int experts = 0;     // E routed experts; 0: a dense MLP
  int top_k = 0;       // experts per token
  int shared_ffn = 0;  // total width of the shared experts
  // Router load, a stated parameter (routing depends on the data, not on the plan):
  // imbalance, the busiest expert's tokens over the mean bs k / E (1: uniform), with
  // dropless routing; capacity_factor > 0 instead caps and pads every expert to that many
  // times the mean (GShard, Switch; Megatron-LM's --moe-expert-capacity-factor with
  // --moe-pad-expert-input-to-capacity), dropping what overflows.
  double imbalance = 1.0;
  double capacity_factor = 0;
};

struct Model {
  std::string name;
  std::string description;
  int layers = 0;
  int hidden = 0;    // h
  int ffn = 0;       // f (mixture of experts: each routed expert's width)
  int heads = 0;     // a
  int kv_heads = 0;  // k (grouped-query attention when k < a)
  int vocab = 0;     // V
  int max_seq = 0;   // context length the model was trained for
  MlpKind mlp = MlpKind::kSwiGlu;
  bool tied_embeddings = false;    // output head shares the embedding matrix
  bool bias = false;               // GPT-style linear biases
  bool layer_norm = false;         // LayerNorm (weight + bias) instead of RMSNorm
  bool learned_positions = false;  // GPT-style position embedding table (max_seq x h)
  bool dropout = false;            // counts dropout masks in activation memory (GPT-3)
  Moe moe;                         // experts (moe.experts == 0: dense)

  bool is_moe() const { return moe.experts > 0; }
  int head_dim() const { return hidden / heads; }  // d
  int kv_dim() const { return kv_heads * head_dim(); }
  // Whether TP degree t splits the heads evenly (Megatron's rule, the one every plan
  // check and search uses): t divides the query heads, and t divides the KV heads or is
  // a multiple of them (each KV head then replicated on t / k ranks).
  bool even_tp_degree(int t) const {
    return t >= 1 && heads % t == 0 && (kv_heads % t == 0 || t % kv_heads == 0);
  }

  double attention_params() const;  // per layer: q, k, v, o (+ biases)
  // Per layer, split by TP ranks: the MLP, or every routed expert and the shared experts.
  double mlp_params() const;
  double norm_params() const;    // per layer: two norms
  double router_params() const;  // per layer: the MoE router (h x E; replicated), 0 if dense
  double layer_params() const {
    return attention_params() + mlp_params() + norm_params() + router_params();
  }
  // Parameters one token's forward uses (MoE: top_k routed experts, not all of them).
  double active_params() const;
  double embedding_params() const;  // token (+ position) embeddings
  double head_params() const;       // output projection (0 when tied) + final norm
  double params() const;            // whole model
};

class ModelCatalog {
 public:
  static Result<ModelCatalog> load_shipped();  // scenarios/models.json
  static Result<ModelCatalog> load(const std::filesystem::path& path);
  static Result<ModelCatalog> from_json(const Json& json, const std::string& origin);

  const std::vector<Model>& models() const { return models_; }
  const Model* find(std::string_view name) const;
  std::string names() const;

 private:
  std::vector<Model> models_;
};

// Reads one model object (catalog entry or a scenario's inline model).
Model read_model(const JsonNode& node);
// The model as read_model reads it (without the description).
Json to_json(const Model& model);

}  // namespace hexi
