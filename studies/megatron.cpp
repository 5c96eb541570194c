#include "studies/megatron.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "topologies/text.hpp"

namespace hexi {
inline namespace studies {
namespace {

std::string join(const std::vector<int>& v, const char* sep) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + std::to_string(v[i]);
  return out;
}

// Layers per stage of a pipeline, in stage order.
std::vector<int> layer_split(const Pipeline& p) {
  std::vector<int> out;
  for (const Stage& s : p.stages) out.push_back(s.layers());
  return out;
}

// What Megatron-LM cannot express in a plan (empty: it runs the plan's parallelism).
std::vector<std::string> unexpressible(const Plan& plan, const TrainingConfig& training) {
  std::vector<std::string> why;
  const Pipeline& first = plan.pipelines.front();
  std::set<int> tps, depths, chunks, batches, micro;
  std::set<std::string> recomputes;
  std::set<std::vector<int>> splits;
  for (std::size_t d = 0; d < plan.pipelines.size(); ++d) {
    const Pipeline& p = plan.pipelines[d];
    depths.insert(p.groups());
    chunks.insert(p.chunks());
    batches.insert(p.batch);
    micro.insert(p.micro_batch);
    splits.insert(layer_split(p));
    for (std::size_t s = 0; s < p.stages.size(); ++s) {
      const Stage& st = p.stages[s];
      const std::string where = "pipeline " + std::to_string(d) + " stage " + std::to_string(s);
      if (st.mesh()) {
        why.push_back(where +
                      " is a sequence mesh (uneven shards and heads over unlike GPUs): "
                      "Megatron-LM's context parallelism splits the sequence evenly over equal "
                      "ranks");
        continue;
      }
      tps.insert(st.tp());
      recomputes.insert(std::string(to_string(st.recompute_in(training))));
      if (!st.head_split.empty() &&
          std::adjacent_find(st.head_split.begin(), st.head_split.end(), std::not_equal_to<>()) !=
              st.head_split.end()) {
        why.push_back(where + " gives its TP ranks " + join(st.head_split, ", ") +
                      " heads: Megatron-LM's tensor parallelism splits the heads evenly");
      }
      if (!st.expert_split.empty() &&
          std::adjacent_find(st.expert_split.begin(), st.expert_split.end(),
                             std::not_equal_to<>()) != st.expert_split.end()) {
        why.push_back(where + " gives its ranks " + join(st.expert_split, ", ") +
                      " experts: Megatron-LM's expert parallelism splits the experts evenly");
      }
    }
  }
  auto listed = [](const std::set<int>& s) {
    return join(std::vector<int>(s.begin(), s.end()), ", ");
  };
  if (tps.size() > 1) {
    why.push_back("TP degrees " + listed(tps) +
                  " in one plan: Megatron-LM runs one tensor-parallel degree");
  }
  if (depths.size() > 1) {
    why.push_back("pipelines of " + listed(depths) +
                  " stages: Megatron-LM runs one pipeline depth for every data-parallel rank");
  }
  if (chunks.size() > 1) {
    why.push_back("pipelines interleaved " + listed(chunks) +
                  " ways: Megatron-LM interleaves every pipeline alike");
  }
  if (batches.size() > 1) {
    why.push_back("pipelines take " + listed(batches) +
                  " sequences of the batch: Megatron-LM gives every data-parallel rank the "
                  "same share");
  }
  if (micro.size() > 1) {
    why.push_back("micro-batches of " + listed(micro) + " sequences: Megatron-LM runs one size");
  }
  if (splits.size() > 1) {
    why.push_back("the pipelines split the layers differently (" + join(layer_split(first), "/") +
                  " and " + join(*std::next(splits.begin()), "/") +
                  "): Megatron-LM splits them alike on every data-parallel rank");
  }
  if (recomputes.size() > 1) {
    std::string kinds;
    for (const auto& r : recomputes) kinds += (kinds.empty() ? "" : " and ") + r;
    why.push_back("stages recompute differently (" + kinds +
                  "): Megatron-LM recomputes alike on every stage");
  }
  return why;
}

// The plan's device of Megatron-LM rank r (TP fastest, then DP, then PP).
int device_of_rank(const Plan& plan, int r, int tp, int dp) {
  const int t = r % tp, d = (r / tp) % dp, s = r / (tp * dp);
  return plan.pipelines[d].stages[s].devices[t];
}

// Whether torchrun's nodes (G ranks each) can be the plan's machines; fills the nodes.
bool keep_placement(const Plan& plan, const Cluster& cluster, MegatronExport& e) {
  const int ranks = e.tp * e.pp * e.dp;
  std::map<int, int> used;  // machine -> GPUs the plan uses on it
  for (int dev : plan.devices()) ++used[cluster.devices()[dev].machine];
  std::set<int> per_machine;
  for (const auto& [m, n] : used) per_machine.insert(n);
  if (per_machine.size() > 1) {
    e.placement_note = "the plan uses " +
                       join(std::vector<int>(per_machine.begin(), per_machine.end()), " and ") +
                       " GPUs of its machines, and torchrun starts as many ranks on every node: "
                       "Megatron-LM's placement instead";
    return false;
  }
  const int g = *per_machine.begin();
  std::set<int> machines_seen;
  std::vector<MegatronNode> nodes;
  for (int node = 0; node * g < ranks; ++node) {
    const int machine = cluster.devices()[device_of_rank(plan, node * g, e.tp, e.dp)].machine;
    MegatronNode out{cluster.machines()[machine].name, ""};
    std::vector<int> local;
    for (int r = node * g; r < (node + 1) * g; ++r) {
      const Device& dev = cluster.devices()[device_of_rank(plan, r, e.tp, e.dp)];
      if (dev.machine != machine) {
        e.placement_note =
            "Megatron-LM's rank order (TP, then DP, then PP) puts ranks of one node on machines " +
            cluster.machines()[machine].name + " and " + cluster.machines()[dev.machine].name +
            " in this plan: the degrees are the plan's, the placement Megatron-LM's";
        return false;
      }
      local.push_back(dev.local);
    }
    if (!machines_seen.insert(machine).second) {
      e.placement_note = "Megatron-LM's rank order gives machine " +
                         cluster.machines()[machine].name +
                         " two nodes' ranks: the degrees are the plan's, the placement "
                         "Megatron-LM's";
      return false;
    }
    out.gpus = join(local, ",");
    nodes.push_back(std::move(out));
  }
  e.nodes = std::move(nodes);
  e.placement_note =
      "the plan's: each NODE_RANK on the machine listed for it, its GPUs in rank order "
      "(NODE_GPUS)";
  return true;
}

void add(MegatronExport& e, const std::string& flag, const std::string& value = "") {
  e.args.emplace_back(flag, value);
}

void add_arguments(MegatronExport& e, const Scenario& sc, const Plan& plan) {
  const Model& m = sc.model;
  const TrainingConfig& t = sc.training;
  const Pipeline& p = plan.pipelines.front();
  const std::vector<int> split = layer_split(p);
  add(e, "--tensor-model-parallel-size", std::to_string(e.tp));
  add(e, "--pipeline-model-parallel-size", std::to_string(e.pp));
  const bool even = std::set<int>(split.begin(), split.end()).size() == 1;
  if (!even) {
    // Stage by stage in layer order (Megatron-LM's order too: virtual stage v of PP rank p is
    // entry v P + p), the embedding on the first, the loss on the last.
    std::string layout = "E";
    for (std::size_t s = 0; s < split.size(); ++s) {
      layout += (s ? "|" : "") + std::string("t*") + std::to_string(split[s]);
    }
    add(e, "--pipeline-model-parallel-layout", "\"" + layout + "L\"");
  } else if (e.virtual_stages > 1) {
    add(e, "--num-layers-per-virtual-pipeline-stage", std::to_string(split.front()));
  }
  if (t.sequence_parallel && e.tp > 1) add(e, "--sequence-parallel");
  add(e, "--num-layers", std::to_string(m.layers));
  add(e, "--hidden-size", std::to_string(m.hidden));
  add(e, "--ffn-hidden-size", std::to_string(m.ffn));
  add(e, "--num-attention-heads", std::to_string(m.heads));
  if (m.kv_heads < m.heads) {
    add(e, "--group-query-attention");
    add(e, "--num-query-groups", std::to_string(m.kv_heads));
  }
  add(e, "--seq-length", std::to_string(t.seq_len));
  add(e, "--max-position-embeddings", std::to_string(std::max(t.seq_len, m.max_seq)));
  if (m.mlp == MlpKind::kSwiGlu) add(e, "--swiglu");
  if (m.is_moe()) {
    // Every expert split by columns over the TP group (or, with an expert_split, whole
    // experts spread over it), tokens all-gathered to it: what the plan's cost model and
    // lowering assume.
    const bool whole = plan.whole_experts();
    add(e, "--num-experts", std::to_string(m.moe.experts));
    add(e, "--moe-router-topk", std::to_string(m.moe.top_k));
    add(e, "--moe-ffn-hidden-size", std::to_string(m.ffn));
    if (m.moe.shared_ffn > 0)
      add(e, "--moe-shared-expert-intermediate-size", std::to_string(m.moe.shared_ffn));
    add(e, "--expert-model-parallel-size", whole ? std::to_string(e.tp) : "1");
    add(e, "--expert-tensor-parallel-size", whole ? "1" : std::to_string(e.tp));
    add(e, "--moe-token-dispatcher-type", "allgather");
    add(e, "--moe-grouped-gemm");
    if (m.moe.capacity_factor > 0) {  // every expert padded to its capacity, as estimated
      std::ostringstream c;
      c << m.moe.capacity_factor;
      add(e, "--moe-expert-capacity-factor", c.str());
      add(e, "--moe-pad-expert-input-to-capacity");
    }
  }
  add(e, "--normalization", m.layer_norm ? "LayerNorm" : "RMSNorm");
  add(e, "--position-embedding-type", m.learned_positions ? "learned_absolute" : "rope");
  if (!m.bias) add(e, "--disable-bias-linear");
  if (!m.tied_embeddings) add(e, "--untie-embeddings-and-output-weights");
  add(e, "--micro-batch-size", std::to_string(p.micro_batch));
  add(e, "--global-batch-size", std::to_string(t.global_batch));
  if (t.precision == "bf16") add(e, "--bf16");
  if (t.precision == "fp16") add(e, "--fp16");
  switch (p.stages.front().recompute_in(t)) {
    case Recompute::kFull:
      add(e, "--recompute-granularity", "full");
      add(e, "--recompute-method", "uniform");
      add(e, "--recompute-num-layers", "1");
      break;
    case Recompute::kSelective:
      add(e, "--recompute-granularity", "selective");
      break;
    case Recompute::kNone:
      break;
  }
  if (t.zero_stage == 1) add(e, "--use-distributed-optimizer");
  if (t.zero_stage >= 2) {
    add(e, "--use-megatron-fsdp");
    add(e, "--data-parallel-sharding-strategy",
        t.zero_stage == 2 ? "optim_grads" : "optim_grads_params");
  }
  if (t.attention == AttentionKernel::kFlash) add(e, "--attention-backend", "flash");
  add(e, "--tokenizer-type", "NullTokenizer");
  add(e, "--vocab-size", std::to_string(m.vocab));
  add(e, "--mock-data");
  e.notes.push_back(
      "--mock-data and NullTokenizer stand for your data: replace them with "
      "--data-path and your tokenizer, and add the optimizer, schedule and "
      "checkpoint flags you train with");
  if (t.zero_stage >= 2) {
    e.notes.push_back("ZeRO-" + std::to_string(t.zero_stage) +
                      " is Megatron-LM's FSDP path (--use-megatron-fsdp); its classic "
                      "distributed optimizer shards the optimizer states only (ZeRO-1)");
  }
}

std::string torchrun_line(const MegatronExport& e, int nodes, int per_node) {
  return "torchrun --nnodes " + std::to_string(nodes) + " --nproc-per-node " +
         std::to_string(per_node) +
         " --node-rank $NODE_RANK --master-addr $MASTER_ADDR --master-port 6000 "
         "pretrain_gpt.py \\\n  " +
         e.arguments_text();
}

}  // namespace

std::string MegatronExport::arguments_text() const {
  std::string out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    out += args[i].first + (args[i].second.empty() ? "" : " " + args[i].second);
    if (i + 1 < args.size()) out += " \\\n  ";
  }
  return out;
}

Json MegatronExport::to_json() const {
  Json a = Json::array();
  for (const auto& [flag, value] : args)
    a.push_back(value.empty() ? Json(flag) : Json({flag, value}));
  Json n = Json::array();
  for (const auto& node : nodes)
    n.push_back({{"machine", node.machine}, {"cuda_visible_devices", node.gpus}});
  return {{"megatron", kMegatronVersion},
          {"runs", runs},
          {"reasons", reasons},
          {"tp", tp},
          {"pp", pp},
          {"dp", dp},
          {"virtual_stages", virtual_stages},
          {"arguments", a},
          {"placement_kept", placement_kept},
          {"placement", placement_note},
          {"nodes", n},
          {"notes", notes},
          {"launch", launch},
          {"rankfile", rankfile}};
}

MegatronExport export_megatron(const Scenario& sc, const Plan& plan,
                               const std::string& scenario_ref, const std::string& plan_ref) {
  MegatronExport e;
  e.reasons = unexpressible(plan, sc.training);
  e.runs = e.reasons.empty();
  if (!e.runs) {
    // hexisim's own launch: one rank per device, rank r on the r-th device by id.
    const std::vector<int> devices = [&] {
      std::vector<int> d = plan.devices();
      std::sort(d.begin(), d.end());
      return d;
    }();
    for (std::size_t r = 0; r < devices.size(); ++r) {
      const Device& dev = sc.cluster.devices()[devices[r]];
      e.rankfile += "rank " + std::to_string(r) + "=" + sc.cluster.machines()[dev.machine].name +
                    " slot=" + std::to_string(dev.local) + "\n";
    }
    e.notes.push_back(
        "the rank file names the cluster file's machines: use your hosts' names "
        "(or name the machines after them)");
    e.launch = "mpirun -np " + std::to_string(devices.size()) +
               " --rankfile rankfile.txt hexisim train " + scenario_ref + " --plan " + plan_ref +
               " --backend cuda";
    return e;
  }
  const Pipeline& p = plan.pipelines.front();
  e.tp = p.stages.front().tp();
  e.pp = p.groups();
  e.dp = static_cast<int>(plan.pipelines.size());
  e.virtual_stages = p.chunks();
  add_arguments(e, sc, plan);
  e.placement_kept = keep_placement(plan, sc.cluster, e);
  const int ranks = e.tp * e.pp * e.dp;
  if (e.placement_kept) {
    const int per_node = ranks / static_cast<int>(e.nodes.size());
    e.launch = "CUDA_VISIBLE_DEVICES=$NODE_GPUS " +
               torchrun_line(e, static_cast<int>(e.nodes.size()), per_node);
  } else {
    // The most ranks a node can take that divide the world: torchrun starts as many on each.
    int largest = 1;
    for (const Machine& m : sc.cluster.machines()) largest = std::max(largest, m.num_gpus);
    int per_node = std::min(largest, ranks);
    while (ranks % per_node != 0) --per_node;
    e.launch = torchrun_line(e, ranks / per_node, per_node);
  }
  return e;
}

}  // namespace studies
}  // namespace hexi
