#include "bench/plan_gen.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "scheduler/estimate/estimate.hpp"
#include "scheduler/search/batch_split.hpp"

namespace hexi::bench {
namespace {

struct Choice {
  int tp = 0;
  int machines = 0;       // per pipeline
  double bottleneck = 0;  // s per micro-batch (steady state)
  double per_gpu = 0;     // micro-batches per second per GPU
};

// One pipeline over `machines` (indices), TP groups of `tp` consecutive GPUs.
Pipeline make_pipeline(const Cluster& c, const std::vector<int>& machines, int tp, int layers,
                       int micro_batch) {
  Pipeline p;
  p.micro_batch = micro_batch;
  std::vector<std::vector<int>> groups;
  for (int m : machines) {
    const Machine& mach = c.machines()[m];
    for (int g = 0; g + tp <= mach.num_gpus; g += tp) {
      std::vector<int> devs;
      for (int r = 0; r < tp; ++r) devs.push_back(mach.first_device + g + r);
      groups.push_back(devs);
    }
  }
  const int stages = static_cast<int>(groups.size());
  const int base = layers / stages, extra = layers % stages;
  int next = 0;
  for (int s = 0; s < stages; ++s) {
    // Extra layers go to the middle stages: the first holds the embedding, the last the head.
    const int n = base + (s >= 1 && s <= extra ? 1 : 0);
    p.stages.push_back({groups[s], next, next + n, {}, {}, {}});
    next += n;
  }
  return p;
}

// The largest memory need of the pipeline's devices as a fraction of their capacity.
double memory_ratio(const CostModel& cm, const Pipeline& p, int dp) {
  double worst = 0;
  for (int s = 0; s < static_cast<int>(p.stages.size()); ++s) {
    const double cap = cm.cluster().device_memory_bytes(p.stages[s].devices.front());
    worst = std::max(worst, cm.memory(p, s, 0, dp).total() / cap);
  }
  return worst;
}

double bottleneck(const CostModel& cm, Pipeline p) {
  const Model& m = cm.model();
  std::vector<StageEstimate> ses;
  const int n = static_cast<int>(p.stages.size());
  for (int s = 0; s < n; ++s) {
    StageEstimate se = cm.stage(p.stages[s], s == 0, s == n - 1, p.micro_batch);
    if (s + 1 < n) {
      se.send_s = cm.transfer_s(p.stages[s].devices, p.stages[s + 1].devices,
                                hidden_bytes(m, cm.training(), p.micro_batch));
      se.grad_s = se.send_s;
    }
    ses.push_back(se);
  }
  double worst = 0;
  cm.pipeline_s(ses, std::max(1, p.micro_batches()), &worst);
  return worst;
}

// The best (TP, machines per pipeline) for one GPU type: the fastest per GPU among
// those that fit in memory; when none fits (e.g. 24 GB cards under Llama-2 70B
// without recompute), the one that overflows least, so that every GPU is simulated
// (the report then flags the memory problem).
Choice choose(const CostModel& cm, const std::vector<int>& machines, int total_machines,
              int micro_batch) {
  const Cluster& c = cm.cluster();
  const int gpus = c.machines()[machines.front()].num_gpus;
  Choice best, least;
  double least_ratio = 1e300;
  const int max_k =
      std::max(1, static_cast<int>(machines.size()) / 2);  // at least two pipelines if possible
  for (int tp = 1; tp <= gpus; tp *= 2) {
    if (gpus % tp != 0 || !cm.model().even_tp_degree(tp)) continue;
    for (int k = 1; k <= max_k; ++k) {
      const int stages = k * gpus / tp;
      if (stages > cm.model().layers) break;
      Pipeline p = make_pipeline(c, {machines.begin(), machines.begin() + k}, tp, cm.model().layers,
                                 micro_batch);
      p.batch = micro_batch * std::max(1, 2 * stages);
      const int dp = std::max(1, total_machines / k);  // pipelines sharing ZeRO-1 state, roughly
      const double ratio = memory_ratio(cm, p, dp);
      if (ratio > 0.95) {
        if (ratio < least_ratio) {
          least_ratio = ratio;
          least = {tp, k, bottleneck(cm, p), 0};
        }
        continue;
      }
      Choice ch{tp, k, bottleneck(cm, p), 0};
      ch.per_gpu = 1.0 / (ch.bottleneck * k * gpus);
      if (ch.per_gpu > best.per_gpu * 1.001) best = ch;
      break;  // more machines per pipeline only adds GPUs for the same work
    }
  }
  return best.tp > 0 ? best : least;
}

}  // namespace

Result<Plan> generate_plan(const Cluster& cluster, const Model& model,
                           const TrainingConfig& training, const Profile& profile) {
  CostModel cm(cluster, model, training, profile);
  std::map<int, std::vector<int>> by_type;  // GPU type -> machines
  for (int m = 0; m < static_cast<int>(cluster.machines().size()); ++m) {
    by_type[cluster.machines()[m].gpu_type].push_back(m);
  }
  struct Candidate {
    Pipeline pipeline;
    double bottleneck;
  };
  std::vector<Candidate> pipes;
  const int total = static_cast<int>(cluster.machines().size());
  for (const auto& [type, machines] : by_type) {
    Choice ch = choose(cm, machines, total, training.micro_batch);
    if (ch.tp == 0) continue;  // this GPU type cannot hold the model in whole machines
    for (std::size_t j = 0; j + ch.machines <= machines.size(); j += ch.machines) {
      std::vector<int> ms(machines.begin() + j, machines.begin() + j + ch.machines);
      pipes.push_back(
          {make_pipeline(cluster, ms, ch.tp, model.layers, training.micro_batch), ch.bottleneck});
    }
  }
  if (pipes.empty())
    return failure("plan generator: no GPU type of cluster \"" + cluster.name() + "\" fits " +
                   model.name);
  // Batch in proportion to throughput, whole micro-batches, every pipeline >= 1.
  std::stable_sort(pipes.begin(), pipes.end(),
                   [](const auto& a, const auto& b) { return a.bottleneck < b.bottleneck; });
  const int micro = training.global_batch / training.micro_batch;
  if (static_cast<int>(pipes.size()) > micro) pipes.resize(micro);
  std::vector<double> rate;
  for (const auto& p : pipes) rate.push_back(1 / p.bottleneck);
  const std::vector<int> share = proportional_split(rate, micro);
  Plan plan;
  plan.scheduler = "bench-generator";
  plan.comment = "simulator benchmark plan: per GPU type, pipelines of whole machines";
  for (std::size_t i = 0; i < pipes.size(); ++i) {
    pipes[i].pipeline.batch = share[i] * training.micro_batch;
    plan.pipelines.push_back(std::move(pipes[i].pipeline));
  }
  return plan;
}

}  // namespace hexi::bench
