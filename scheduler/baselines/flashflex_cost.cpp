// The FlashFlex reference cost model (see flashflex.hpp), line by line.
#include <algorithm>
#include <cmath>

#include "scheduler/baselines/flashflex.hpp"

namespace hexi::flashflex {

FfConfig make_config(const Model& model, const TrainingConfig& training, int pipelines) {
  FfConfig c;
  c.h = model.hidden;
  c.L = model.layers;
  c.V = model.vocab;
  c.S = training.seq_len;
  c.mb = training.micro_batch;
  c.n_mb = std::max(1, training.global_batch / training.micro_batch / std::max(1, pipelines));
  c.e = 2;  // B_type: the reference assumes 16-bit everything
  return c;
}

FfCost::FfCost(const Cluster& cluster, const FfConfig& config) : cluster_(cluster), c_(config) {}

double FfCost::comp(const std::vector<int>& tp) const {
  // mb_tp_layer_comp_cost with recompute (alpha 96).
  const double flops =
      96 * c_.mb * c_.S * c_.h * c_.h * (1 + c_.S / (6 * c_.h) + c_.V / (16 * c_.L * c_.h));
  return flops / (cluster_.device_flops(tp.front()) * static_cast<double>(tp.size()));
}

double FfCost::tp_comm(const std::vector<int>& tp) const {
  // mb_tp_layer_comm_cost with recompute (alpha 12).
  double worst = 0;
  for (int i : tp) {
    double sum = 0;
    for (int j : tp) {
      if (j != i) sum += c_.mb * c_.S * c_.h * c_.e / (static_cast<double>(tp.size()) * bw(i, j));
    }
    worst = std::max(worst, sum);
  }
  return 12 * worst;
}

double FfCost::pp_comm(const std::vector<int>& pre, const std::vector<int>* post) const {
  if (post == nullptr) return 0;
  const double bytes = c_.mb * c_.S * c_.h * c_.e;
  double best = std::numeric_limits<double>::infinity();
  for (int a : pre) {
    for (int b : *post) {
      double broadcast = 0;
      for (int to : *post) {
        if (to != b) broadcast += bytes / (static_cast<double>(post->size()) * bw(b, to));
      }
      best = std::min(best, bytes / bw(a, b) + broadcast);
    }
  }
  return 2 * best;
}

double FfCost::pipeline_cost(const FfPipeline& p) const {
  const int k = static_cast<int>(p.stages.size()), n = c_.n_mb;
  std::vector<double> cost(k);  // stage + send, per micro-batch
  for (int s = 0; s < k; ++s) {
    cost[s] = p.layers[s] * (comp(p.stages[s]) + tp_comm(p.stages[s])) +
              pp_comm(p.stages[s], s + 1 < k ? &p.stages[s + 1] : nullptr);
  }
  // gen_gpipe_map: row i (costs reversed: stage k-1-i) is busy in columns
  // [k-1-i, n+k-1-i); the pipeline takes the sum over columns of the slowest busy row.
  double total = 0;
  for (int col = 0; col < n + k - 1; ++col) {
    double worst = 0;
    for (int i = 0; i < k; ++i) {
      const bool busy = col >= k - i - 1 && col < n + k - 1 - i;
      if (busy) worst = std::max(worst, cost[k - 1 - i]);
    }
    total += worst;
  }
  return total;
}

double FfCost::dp_cost(const std::vector<FfPipeline>& pipes) const {
  double total = 0;
  for (int layer = 0; layer < static_cast<int>(c_.L); ++layer) {
    std::vector<const std::vector<int>*> holders;  // the stage holding `layer` in each pipeline
    for (const auto& p : pipes) {
      int seen = 0;
      for (std::size_t s = 0; s < p.stages.size(); ++s) {
        seen += p.layers[s];
        if (layer < seen) {
          holders.push_back(&p.stages[s]);
          break;
        }
      }
    }
    std::size_t max_tp = 0, min_tp = SIZE_MAX;
    for (const auto* h : holders) {
      max_tp = std::max(max_tp, h->size());
      min_tp = std::min(min_tp, h->size());
    }
    // gen_layer_dp_rank_group: each group padded to max_tp by repeating ranks; rank
    // group r takes position r of every padded group; max_tp/min_tp groups count.
    const std::size_t groups = max_tp / min_tp;
    for (std::size_t r = 0; r < groups; ++r) {
      std::vector<int> dp;
      for (const auto* h : holders) dp.push_back((*h)[r / (max_tp / h->size())]);
      double worst = 0;
      for (int i : dp) {
        double sum = 0;
        for (int j : dp) {
          if (j != i) {
            sum += 12 * c_.h * c_.h * c_.e /
                   (static_cast<double>(min_tp) * static_cast<double>(dp.size()) * bw(i, j));
          }
        }
        worst = std::max(worst, sum);
      }
      total += 2 * worst;
    }
  }
  return total;
}

double FfCost::overall_cost(const std::vector<FfPipeline>& pipes) const {
  double pp = 0;
  for (const auto& p : pipes) pp = std::max(pp, pipeline_cost(p));
  return pp * 1.8 + dp_cost(pipes) * 1.1;
}

double FfCost::stage_memory_gb(const std::vector<int>& stage) const {
  double sum = 0;
  for (int d : stage) sum += cluster_.gpu(d).memory_gib;
  return sum;
}

bool FfCost::out_of_memory(const std::vector<int>& stage, int layers, bool first, bool last) const {
  const double tp = static_cast<double>(stage.size()), gb = 1024.0 * 1024.0 * 1024.0;
  const double params = layers * 12 * c_.h * c_.h / tp + c_.h * (last ? 1 : 0) +
                        c_.V * c_.h * (last ? 1 : 0) + c_.h * (c_.V + c_.S) * (first ? 1 : 0);
  const double param_gb = params * c_.e / gb * 4;
  const double act_gb = (layers * c_.mb * c_.S * c_.h / tp + c_.mb * c_.S * c_.h * 2) * c_.e / gb;
  return param_gb + act_gb > stage_memory_gb(stage) / tp;
}

}  // namespace hexi::flashflex
