#include "scheduler/hexiseq/mesh_pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <utility>

#include "scheduler/search/batch_split.hpp"

namespace hexi {
inline namespace hexiseq {
namespace {

// Dense FLOP/s of a machine (its GPUs' summed datasheet TFLOP/s).
double machine_tflops(const Cluster& c, int m) {
  const Machine& machine = c.machines()[m];
  return machine.num_gpus * c.gpu(machine.first_device).tflops;
}

std::vector<int> devices_of(const Cluster& c, const std::vector<int>& machines) {
  std::vector<int> out;
  for (int m : machines) {
    const Machine& machine = c.machines()[m];
    for (int g = 0; g < machine.num_gpus; ++g) out.push_back(machine.first_device + g);
  }
  return out;
}

// The stages' meshes and layer split: a plan, or why there is none.
class PipelineBuilder {
 public:
  PipelineBuilder(const Cluster& cluster, const Model& model, const TrainingConfig& training,
                  const Profile& profile, const MeshPipelineOptions& options)
      : cluster_(cluster),
        model_(model),
        training_(training),
        profile_(profile),
        options_(options),
        estimator_(cluster, model, training, profile) {}

  // The best plan over `runs` (machines per stage): the proportional layer split, then one
  // layer moved between neighbouring stages, the best move first, while the estimate improves
  // (or, from a split that does not fit, until one does).
  MeshPipelineCandidate best(const std::vector<std::vector<int>>& runs) {
    MeshPipelineCandidate out;
    out.stages = static_cast<int>(runs.size());
    std::vector<double> rate;
    for (const auto& run : runs) {
      double r = 0;
      for (int m : run) r += machine_tflops(cluster_, m);
      rate.push_back(r);
    }
    std::vector<int> layers = proportional_split(rate, model_.layers);
    if (layers.empty()) {
      out.problem = "more stages than layers";
      return out;
    }
    std::vector<std::vector<int>> devices;
    for (const auto& run : runs) devices.push_back(devices_of(cluster_, run));
    score(devices, layers, out);
    for (int sweep = 0; sweep < 2 * model_.layers; ++sweep) {
      MeshPipelineCandidate moved_best = out;
      std::vector<int> best_layers = layers;
      for (std::size_t s = 0; s + 1 < layers.size(); ++s) {
        for (int dir : {-1, 1}) {
          std::vector<int> moved = layers;
          const std::size_t from = dir > 0 ? s : s + 1, to = dir > 0 ? s + 1 : s;
          if (moved[from] <= 1) continue;
          --moved[from];
          ++moved[to];
          MeshPipelineCandidate c;
          c.stages = out.stages;
          if (score(devices, moved, c) &&
              (!moved_best.fits ||
               c.estimate.iteration_time_s < moved_best.estimate.iteration_time_s)) {
            moved_best = std::move(c);
            best_layers = moved;
          }
        }
      }
      if (best_layers == layers) break;
      layers = best_layers;
      out = std::move(moved_best);
    }
    return out;
  }

 private:
  // One plan: each stage's mesh by HexiSeq over its devices for its layers; false (with the
  // problem) when a stage has no layout or the plan does not fit.
  bool score(const std::vector<std::vector<int>>& devices, const std::vector<int>& layers,
             MeshPipelineCandidate& out) {
    Plan plan;
    plan.scheduler = "hexiseq-pipeline";
    Pipeline pipeline;
    pipeline.batch = training_.global_batch;
    pipeline.micro_batch = 1;
    int begin = 0;
    for (std::size_t s = 0; s < devices.size(); ++s) {
      auto layout = stage_layout(devices[s], layers[s]);
      if (!layout) {
        out.problem = "stage " + std::to_string(s) + ": " + layout.error().message;
        return false;
      }
      Stage stage;
      stage.devices = layout->devices();
      stage.layer_begin = begin;
      stage.layer_end = begin + layers[s];
      stage.sequence = std::move(*layout);
      begin = stage.layer_end;
      pipeline.stages.push_back(std::move(stage));
    }
    plan.pipelines.push_back(std::move(pipeline));
    out.estimate = estimator_.estimate(plan);
    out.plan = std::move(plan);
    out.fits = out.estimate.feasible;
    if (!out.fits) {
      out.problem = out.estimate.problems.empty() ? "does not fit" : out.estimate.problems.front();
      return false;
    }
    out.problem.clear();
    return true;
  }

  // HexiSeq's layout of `devices` for a model of `layers` layers (memoised: the layer moves
  // ask for the same stages again).
  Result<SequenceLayout> stage_layout(const std::vector<int>& devices, int layers) {
    const auto key = std::make_pair(devices, layers);
    if (const auto it = memo_.find(key); it != memo_.end()) return it->second;
    Model cut = model_;
    cut.layers = layers;
    const SequenceCost cost(cluster_, cut, training_, profile_);
    auto r = run_hexiseq(cost, devices, options_.sequence);
    Result<SequenceLayout> out =
        r ? Result<SequenceLayout>(std::move(r->layout)) : Result<SequenceLayout>(r.error());
    memo_.emplace(key, out);
    return out;
  }

  const Cluster& cluster_;
  const Model& model_;
  const TrainingConfig& training_;
  const Profile& profile_;
  const MeshPipelineOptions& options_;
  const CostModel estimator_;  // its caches serve every plan tried
  std::map<std::pair<std::vector<int>, int>, Result<SequenceLayout>> memo_;
};

}  // namespace

std::vector<std::vector<int>> machine_runs(const Cluster& cluster, int p) {
  const int machines = static_cast<int>(cluster.machines().size());
  if (p < 1 || p > machines) return {};
  double total = 0;
  for (int m = 0; m < machines; ++m) total += machine_tflops(cluster, m);
  std::vector<std::vector<int>> runs(p);
  double sum = 0;
  int run = 0;
  for (int m = 0; m < machines; ++m) {
    runs[run].push_back(m);
    sum += machine_tflops(cluster, m);
    const int left = machines - m - 1;  // machines after this one
    const bool reached = sum >= total * (run + 1) / p * (1 - 1e-12);
    if (run + 1 < p && (reached || left == p - run - 1)) ++run;
  }
  return runs;
}

Result<MeshPipelineResult> search_mesh_pipeline(const Cluster& cluster, const Model& model,
                                                const TrainingConfig& training,
                                                const Profile& profile,
                                                const MeshPipelineOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (auto st = check_zero_stage(training, "hexiseq pipeline"); !st) return st.error();
  const int machines = static_cast<int>(cluster.machines().size());
  int most = std::min(machines, model.layers);
  if (options.max_stages > 0) most = std::min(most, options.max_stages);
  PipelineBuilder builder(cluster, model, training, profile, options);
  MeshPipelineResult out;
  std::optional<std::size_t> best;
  for (int p = 1; p <= most; ++p) {
    out.tried.push_back(builder.best(machine_runs(cluster, p)));
    const MeshPipelineCandidate& c = out.tried.back();
    if (c.fits &&
        (!best || c.estimate.iteration_time_s < out.tried[*best].estimate.iteration_time_s))
      best = p - 1;
  }
  if (!best) {
    std::string why;
    for (const auto& c : out.tried) {
      why +=
          "; " + std::to_string(c.stages) + " stage" + (c.stages > 1 ? "s" : "") + ": " + c.problem;
    }
    return bad_input("hexiseq pipeline: no pipeline of sequence meshes fits" + why);
  }
  out.plan = out.tried[*best].plan;
  out.estimate = out.tried[*best].estimate;
  out.search_time_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

namespace {

template <class Number>
std::string per_stage_text(const Plan& plan, Number number) {
  std::string out;
  for (const Stage& s : plan.pipelines.front().stages) {
    out += (out.empty() ? "" : ",") + std::to_string(number(s));
  }
  return out;
}

}  // namespace

std::string stage_layers_text(const Plan& plan) {
  return per_stage_text(plan, [](const Stage& s) { return s.layers(); });
}

std::string stage_gpus_text(const Plan& plan) {
  return per_stage_text(plan, [](const Stage& s) { return s.devices.size(); });
}

Json MeshPipelineResult::to_json(int zero_stage) const {
  Json tried_json = Json::array();
  for (const auto& c : tried) {
    Json j = {{"stages", c.stages}, {"fits", c.fits}};
    if (!c.plan.pipelines.empty()) {
      j["iteration_time_s"] = c.estimate.iteration_time_s;
      j["tokens_per_s"] = c.estimate.tokens_per_s;
      j["layers"] = stage_layers_text(c.plan);
      j["gpus"] = stage_gpus_text(c.plan);
    }
    if (!c.problem.empty()) j["problem"] = c.problem;
    tried_json.push_back(std::move(j));
  }
  return {{"stages", plan.pipelines.front().stages.size()},
          {"zero_stage", zero_stage},
          {"iteration_time_s", estimate.iteration_time_s},
          {"tokens_per_s", estimate.tokens_per_s},
          {"search_time_s", search_time_s},
          {"tried", tried_json},
          {"plan", hexi::to_json(plan)}};
}

}  // namespace hexiseq
}  // namespace hexi
