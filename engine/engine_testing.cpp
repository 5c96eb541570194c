#include "engine/engine_testing.hpp"

#include <cmath>
#include <cstring>
#include <mutex>
#include <numeric>
#include <sstream>

#include "engine/check.hpp"
#include "engine/comm_fake.hpp"
#include "kernels/llama_model.hpp"
#include "kernels/optimizer.hpp"
#include "scheduler/lower.hpp"
#include "topologies/paths.hpp"

namespace hexi::engine {

Result<Program> lower_shipped(const std::string& scenario, const std::string& plan_file,
                              Scenario* out) {
  auto gpus = GpuCatalog::load_shipped();
  HEXI_TRY(gpus);
  auto models = ModelCatalog::load_shipped();
  HEXI_TRY(models);
  auto sc = load_scenario(scenario, *gpus, *models);
  HEXI_TRY(sc);
  const auto path = data_root() / "scenarios/plans" / plan_file;
  auto plan = load_plan(path);
  HEXI_TRY(plan);
  LowerOptions lo;
  lo.scenario = sc->name;
  auto program = lower_plan(*plan, sc->cluster, sc->model, sc->training, lo, path.string());
  if (out != nullptr) *out = std::move(*sc);
  return program;
}

namespace {

// What one rank hands back after its last step.
struct RankResult {
  kernels::ParamLayout layout;
  std::vector<float> params, grads_first, grads_last;
  std::vector<char> owned;
};

// Writes every rank's elements into full-model tensors; `pick` selects which elements a
// rank contributes. Elements written twice must agree bit for bit.
Status assemble(const std::vector<RankResult>& ranks, const kernels::LlamaDims& dims,
                std::vector<float> RankResult::*field, bool owned_only,
                kernels::Params<float>& full, const std::string& what) {
  full = kernels::Params<float>(kernels::model_layout(dims));
  std::vector<char> written(full.data.size(), 0);
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const RankResult& rr = ranks[r];
    for (const auto& t : rr.layout.tensors) {
      const kernels::TensorInfo* ft = full.layout.find(t.name);
      for (int i = 0; i < t.rows; ++i) {
        for (int j = 0; j < t.cols; ++j) {
          const std::size_t src = t.offset + static_cast<std::size_t>(i) * t.cols + j;
          if (owned_only && !rr.owned[src]) continue;
          const std::size_t dst =
              ft->offset + static_cast<std::size_t>(t.row_begin + i) * ft->cols + t.col_begin + j;
          const float v = (rr.*field)[src];
          if (written[dst] && std::memcmp(&full.data[dst], &v, sizeof(float)) != 0) {
            return failure(what + " of " + t.name + " element (" + std::to_string(t.row_begin + i) +
                           ", " + std::to_string(t.col_begin + j) +
                           ") differs between ranks: " + std::to_string(full.data[dst]) + " vs " +
                           std::to_string(v) + " (rank " + std::to_string(r) + ")");
          }
          full.data[dst] = v;
          written[dst] = 1;
        }
      }
    }
  }
  for (const auto& t : full.layout.tensors) {
    for (std::size_t i = 0; i < t.size(); ++i) {
      if (!written[t.offset + i])
        return failure(what + ": element " + std::to_string(i) + " of " + t.name + " has no rank");
    }
  }
  return {};
}

}  // namespace

Result<Trajectory> run_fake(const Program& program, const Model& model, const DataSource& data,
                            const RuntimeOptions& options, int steps) {
  const int n = static_cast<int>(program.devices.size());
  std::vector<RankResult> results(n);
  std::vector<double> losses(steps, 0.0);
  auto statuses = run_fake_world(n, [&](Communicator& world) -> Status {
    auto backend = make_cpu_backend();
    Progress progress;
    auto rt = RankRuntime::create(program, model, world, *backend, data, options, progress);
    HEXI_TRY(rt);
    RankResult& mine = results[world.rank()];
    for (int k = 0; k < steps; ++k) {
      auto st = (*rt)->step();
      HEXI_TRY(st);
      double sums[2] = {st->loss_sum, st->loss_tokens};
      HEXI_TRY(world.all_reduce(sums, 2, DType::kF64, ReduceOp::kSum));
      if (world.rank() == 0) losses[k] = sums[0] / sums[1];
      auto g = (*rt)->grads();
      HEXI_TRY(g);
      if (k == 0) mine.grads_first = *g;
      mine.grads_last = std::move(*g);
    }
    auto p = (*rt)->params();
    HEXI_TRY(p);
    mine.params = std::move(*p);
    mine.layout = (*rt)->layout();
    mine.owned = (*rt)->owned();
    return {};
  });
  for (int r = 0; r < n; ++r) {
    if (!statuses[r].ok())
      return Error{statuses[r].error().kind,
                   "rank " + std::to_string(r) + ": " + statuses[r].error().message};
  }
  auto dims = llama_dims(model);
  HEXI_TRY(dims);
  Trajectory t;
  t.losses = losses;
  HEXI_TRY(assemble(results, *dims, &RankResult::params, false, t.params_last, "parameter"));
  HEXI_TRY(assemble(results, *dims, &RankResult::grads_first, true, t.grads_first,
                    "first-step gradient"));
  HEXI_TRY(
      assemble(results, *dims, &RankResult::grads_last, true, t.grads_last, "last-step gradient"));
  return t;
}

Trajectory run_reference(const Model& model, int global_batch, const DataSource& data,
                         const RuntimeOptions& options, int steps) {
  const kernels::LlamaDims dims = *llama_dims(model);
  const int s = data.seq_len();
  kernels::Params<float> params(kernels::model_layout(dims)), grads(params.layout);
  kernels::init_params(params, dims, options.init);
  kernels::AdamWState<float> state(params.layout);
  kernels::AdamWConfig cfg{options.adamw.lr, options.adamw.beta1, options.adamw.beta2,
                           options.adamw.eps, options.adamw.weight_decay};
  kernels::LlamaModel<float> model_ref(dims, global_batch, s);
  std::vector<int> tokens(static_cast<std::size_t>(global_batch) * s), targets(tokens.size());
  Trajectory t;
  for (int k = 0; k < steps; ++k) {
    batch_tokens(data, global_batch, k, 0, global_batch, tokens.data(), targets.data());
    grads.zero();
    t.losses.push_back(model_ref.forward_backward(params, tokens.data(), targets.data(), grads));
    if (k == 0) t.grads_first = grads;
    kernels::adamw_step(params, grads, state, cfg);
  }
  t.grads_last = grads;
  t.params_last = params;
  return t;
}

std::vector<TensorError> compare(const kernels::Params<float>& ref,
                                 const kernels::Params<float>& got, double atol, double rtol) {
  std::vector<TensorError> out;
  for (const auto& t : ref.layout.tensors) {
    const kernels::TensorInfo* g = got.layout.find(t.name);
    TensorError e;
    e.name = t.name;
    if (g == nullptr || g->size() != t.size()) {
      e.ok = false;
      out.push_back(e);
      continue;
    }
    double scale = 0;
    for (std::size_t i = 0; i < t.size(); ++i)
      scale = std::max(scale, std::fabs(double(ref.data[t.offset + i])));
    for (std::size_t i = 0; i < t.size(); ++i) {
      const double r = ref.data[t.offset + i], v = got.data[g->offset + i];
      const double d = std::fabs(v - r);
      e.max_abs = std::max(e.max_abs, d);
      // Relative to the element, floored at 1e-3 of the tensor's largest magnitude so that
      // elements that are zero up to rounding do not dominate.
      e.max_rel = std::max(e.max_rel, d / std::max(std::fabs(r), 1e-3 * scale + 1e-30));
      if (!(d <= atol + rtol * std::fabs(r))) e.ok = false;
    }
    out.push_back(e);
  }
  return out;
}

std::string format_errors(const std::vector<TensorError>& errors) {
  std::ostringstream s;
  s.setf(std::ios::scientific);
  s.precision(2);
  for (const auto& e : errors) {
    s << "  " << e.name << std::string(e.name.size() < 18 ? 18 - e.name.size() : 1, ' ')
      << " max abs " << e.max_abs << "  max rel " << e.max_rel << (e.ok ? "" : "  FAIL") << "\n";
  }
  return s.str();
}

}  // namespace hexi::engine
