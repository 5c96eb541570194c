#include "engine/engine_testing.hpp"

#include <cctype>
#include <cmath>
#include <cstring>
#include <mutex>
#include <numeric>
#include <sstream>

#include "engine/check.hpp"
#include "engine/comm_fake.hpp"
#include "engine/shards.hpp"
#include "kernels/bf16.hpp"
#include "kernels/llama_model.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/oracle.hpp"
#include "scenarios/testing.hpp"
#include "scheduler/program/lower.hpp"
#include "scheduler/program/lower_sequence.hpp"
#include "topologies/paths.hpp"

namespace hexi::engine {

const std::vector<PlanCase>& shipped_tiny_plans() {
  static const std::vector<PlanCase> cases = {{"tiny-llama-cpu", "tiny-single.json"},
                                              {"tiny-llama-cpu", "tiny-pp2-tp2-tp1.json"},
                                              {"tiny-llama-cpu", "tiny-dp2-tp2-vs-pp2.json"},
                                              {"tiny-llama-8l-cpu", "tiny-pp3-uneven.json"},
                                              {"tiny-llama-cpu", "tiny-tp4-to-tp1.json"},
                                              {"tiny-llama-cpu", "tiny-dp3-mixed.json"},
                                              {"tiny-llama-cpu", "tiny-8rank.json"},
                                              {"tiny-llama-cpu", "tiny-recompute-mixed.json"},
                                              {"tiny-llama-cpu-zero1", "tiny-dp3-mixed.json"},
                                              {"tiny-llama-cpu-gpipe", "tiny-pp2-tp2-tp1.json"},
                                              {"tiny-llama-cpu", "tiny-interleaved-2x2.json"},
                                              {"tiny-llama-8l-cpu", "tiny-interleaved-uneven.json"},
                                              {"tiny-llama-8l-cpu", "tiny-interleaved-edges.json"},
                                              {"tiny-llama-cpu", "tiny-dp2-edges.json"},
                                              {"tiny-moe-cpu", "tiny-moe-experts-3-1.json"},
                                              {"tiny-moe-cpu", "tiny-moe-columns.json"}};
  return cases;
}

const std::vector<PlanCase>& shipped_sequence_plans() {
  static const std::vector<PlanCase> cases = {
      {"tiny-seq-cpu", "tiny-seq-single.json"},
      {"tiny-seq-cpu", "tiny-seq-ring-5-3-2.json"},
      {"tiny-seq-cpu", "tiny-seq-ulysses-5-2-1.json"},
      {"tiny-seq-cpu", "tiny-seq-2groups.json"},
      {"tiny-seq-cpu-zero1", "tiny-seq-2groups.json"},
      {"tiny-seq-cpu-recompute", "tiny-seq-2groups.json"},
      {"tiny-seq-cpu-zero3", "tiny-seq-2groups-zero3.json"},
      // A mesh as one stage of a pipeline; DP across a TP pipeline and one with a mesh.
      {"tiny-seq-cpu", "tiny-seq-pp-tp2-mesh3.json"},
      {"tiny-seq-cpu", "tiny-seq-pp-mesh2-tp2.json"},
      {"tiny-seq-cpu-recompute", "tiny-seq-pp-mesh2-tp2.json"},
      {"tiny-seq-cpu", "tiny-seq-pp-mesh2-mesh3.json"},
      {"tiny-seq-cpu", "tiny-seq-dp-tp2-vs-mesh.json"},
      {"tiny-seq-cpu-zero1", "tiny-seq-dp-tp2-vs-mesh.json"},
      // A mixture of experts on a mesh (its own oracle, tiny-moe).
      {"tiny-moe-seq-cpu", "tiny-moe-seq-2groups.json"}};
  return cases;
}

std::string plan_case_name(const PlanCase& c) {
  std::string n = std::string(c.scenario) + "_" + c.plan;
  for (char& ch : n) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return n;
}

Result<Program> lower_shipped(const std::string& scenario, const std::string& plan_file,
                              Scenario* out, const std::string& precision) {
  auto sc = load_scenario(scenario, testing::shipped_gpus(), testing::shipped_models());
  HEXI_TRY(sc);
  if (!precision.empty()) sc->training.precision = precision;
  const auto path = data_root() / "scenarios/plans" / plan_file;
  auto doc = read_json_file(path.string());
  HEXI_TRY(doc);
  if (doc->is_object() && doc->contains("sequence")) {  // a sequence mesh (hexisim seq --out)
    auto layout = layout_from_json((*doc)["sequence"], path.string());
    HEXI_TRY(layout);
    auto program =
        lower_sequence(*layout, sc->cluster, sc->model, sc->training, sc->name, path.string());
    if (out != nullptr) *out = std::move(*sc);
    return program;
  }
  auto plan = load_plan(path);
  HEXI_TRY(plan);
  LowerOptions lo;
  lo.scenario = sc->name;
  auto program = lower_plan(*plan, sc->cluster, sc->model, sc->training, lo, path.string());
  if (out != nullptr) *out = std::move(*sc);
  return program;
}

namespace {

// Calls fn(rank, tensor, i, j, src, dst) for every element (i, j) of every tensor of every
// rank: src indexes the rank's flat buffers, dst the full-model tensor's.
template <class Fn>
Status each_element(const std::vector<kernels::ParamLayout>& layouts,
                    const kernels::ParamLayout& full, Fn fn) {
  for (std::size_t r = 0; r < layouts.size(); ++r) {
    for (const auto& t : layouts[r].tensors) {
      const kernels::TensorInfo* ft = full.find(t.name);
      for (int i = 0; i < t.rows; ++i) {
        for (int j = 0; j < t.cols; ++j) {
          const std::size_t src = t.offset + static_cast<std::size_t>(i) * t.cols + j;
          const std::size_t dst =
              ft->offset + static_cast<std::size_t>(t.row_begin + i) * ft->cols + t.col_begin + j;
          HEXI_TRY(fn(r, t, t.row_begin + i, t.col_begin + j, src, dst));
        }
      }
    }
  }
  return {};
}

std::string element(const kernels::TensorInfo& t, int i, int j) {
  return t.name + " element (" + std::to_string(i) + ", " + std::to_string(j) + ")";
}

// Writes every rank's elements into full-model tensors (only those a rank owns when
// `owned_only`). Elements written twice must agree bit for bit.
Status assemble(const std::vector<RankResult>& ranks,
                const std::vector<kernels::ParamLayout>& layouts, const kernels::LlamaDims& dims,
                std::vector<float> RankResult::*field, bool owned_only,
                kernels::Params<float>& full, const std::string& what) {
  full = kernels::Params<float>(kernels::model_layout(dims));
  std::vector<char> written(full.data.size(), 0);
  HEXI_TRY(each_element(
      layouts, full.layout,
      [&](std::size_t r, const kernels::TensorInfo& t, int i, int j, std::size_t src,
          std::size_t dst) -> Status {
        if (owned_only && !ranks[r].owned[src]) return {};
        const float v = (ranks[r].*field)[src];
        if (written[dst] && std::memcmp(&full.data[dst], &v, sizeof(float)) != 0) {
          return failure(what + " of " + element(t, i, j) +
                         " differs between ranks: " + std::to_string(full.data[dst]) + " vs " +
                         std::to_string(v) + " (rank " + std::to_string(r) + ")");
        }
        full.data[dst] = v;
        written[dst] = 1;
        return {};
      }));
  for (const auto& t : full.layout.tensors) {
    for (std::size_t i = 0; i < t.size(); ++i) {
      if (!written[t.offset + i])
        return failure(what + ": element " + std::to_string(i) + " of " + t.name + " has no rank");
    }
  }
  return {};
}

// bf16 runs: a rank's copy of a parameter it does not update (received from its owner in
// bf16: a ZeRO-1 all-gather, the TP broadcast of norm gains) is the owner's float32 master
// rounded to bf16, bit for bit.
Status check_bf16_replicas(const std::vector<RankResult>& ranks,
                           const std::vector<kernels::ParamLayout>& layouts,
                           const kernels::Params<float>& masters) {
  return each_element(layouts, masters.layout,
                      [&](std::size_t r, const kernels::TensorInfo& t, int i, int j,
                          std::size_t src, std::size_t dst) -> Status {
                        if (ranks[r].owned[src]) return {};
                        const float want = kernels::round_bf16(masters.data[dst]);
                        const float got = ranks[r].params[src];
                        if (std::memcmp(&want, &got, sizeof(float)) == 0) return {};
                        return failure("parameter of " + element(t, i, j) + " on rank " +
                                       std::to_string(r) + ": " + std::to_string(got) +
                                       ", its owner's master rounded to bf16 is " +
                                       std::to_string(want));
                      });
}

// The layout a device holds (the same function the runtime uses).
kernels::ParamLayout device_layout(const Program& p, const DeviceLayout& l,
                                   const kernels::LlamaDims& dims) {
  return held_layout(p, l, dims);
}

}  // namespace

Status run_rank(const Program& program, const Model& model, const DataSource& data,
                const RuntimeOptions& options, int steps, Communicator& world, Backend& backend,
                RankResult& mine, std::vector<double>& losses) {
  Progress progress;
  auto rt = RankRuntime::create(program, model, world, backend, data, options, progress);
  HEXI_TRY(rt);
  losses.assign(steps, 0.0);
  for (int k = 0; k < steps; ++k) {
    auto st = (*rt)->step();
    HEXI_TRY(st);
    double sums[2] = {st->loss_sum, st->loss_tokens};
    HEXI_TRY(world.all_reduce(sums, 2, DType::kF64, ReduceOp::kSum));
    losses[k] = sums[0] / sums[1];
    auto g = (*rt)->grads();
    HEXI_TRY(g);
    if (k == 0) mine.grads_first = *g;
    mine.grads_last = std::move(*g);
  }
  auto p = (*rt)->params();
  HEXI_TRY(p);
  mine.params = std::move(*p);
  mine.owned = (*rt)->owned();
  return {};
}

Result<Trajectory> assemble_trajectory(const Program& program, const Model& model,
                                       const std::vector<RankResult>& ranks,
                                       std::vector<double> losses) {
  auto dims = llama_dims(model);
  HEXI_TRY(dims);
  std::vector<kernels::ParamLayout> layouts;
  for (const auto& l : program.devices) layouts.push_back(device_layout(program, l, *dims));
  Trajectory t;
  t.losses = std::move(losses);
  // float32: every copy of a parameter is the same; bf16: copies that a rank does not
  // update are its owner's master rounded to bf16.
  const bool bf16 = program.bytes_per_element == 2;
  // ZeRO-3: a device holds only the parameters it owns between steps.
  const bool owned_only = bf16 || (program.sequence && program.zero_stage >= 3);
  HEXI_TRY(
      assemble(ranks, layouts, *dims, &RankResult::params, owned_only, t.params_last, "parameter"));
  if (bf16) HEXI_TRY(check_bf16_replicas(ranks, layouts, t.params_last));
  HEXI_TRY(assemble(ranks, layouts, *dims, &RankResult::grads_first, true, t.grads_first,
                    "first-step gradient"));
  HEXI_TRY(assemble(ranks, layouts, *dims, &RankResult::grads_last, true, t.grads_last,
                    "last-step gradient"));
  return t;
}

Result<Trajectory> run_fake(const Program& program, const Model& model, const DataSource& data,
                            const RuntimeOptions& options, int steps) {
  const int n = static_cast<int>(program.devices.size());
  std::vector<RankResult> results(n);
  std::vector<std::vector<double>> losses(n);
  auto statuses = run_fake_world(n, [&](Communicator& world) -> Status {
    auto backend = make_cpu_backend();
    return run_rank(program, model, data, options, steps, world, *backend, results[world.rank()],
                    losses[world.rank()]);
  });
  for (int r = 0; r < n; ++r) {
    if (!statuses[r].ok()) {
      return Error{statuses[r].error().kind,
                   "rank " + std::to_string(r) + ": " + statuses[r].error().message};
    }
  }
  return assemble_trajectory(program, model, results, losses[0]);
}

Result<Trajectory> run_mpi(const Program& program, const Model& model, const DataSource& data,
                           const RuntimeOptions& options, int steps, Communicator& world) {
  auto backend = make_cpu_backend();
  RankResult mine;
  std::vector<double> losses;
  HEXI_TRY(run_rank(program, model, data, options, steps, world, *backend, mine, losses));
  const int n = world.size();
  std::vector<std::int32_t> owned(mine.owned.begin(), mine.owned.end());
  if (world.rank() != 0) {
    std::vector<std::unique_ptr<Request>> reqs;
    int tag = 100;
    for (auto* v : {&mine.params, &mine.grads_first, &mine.grads_last}) {
      auto r = world.isend(v->data(), v->size(), DType::kF32, 0, tag++);
      HEXI_TRY(r);
      reqs.push_back(std::move(*r));
    }
    auto r = world.isend(owned.data(), owned.size(), DType::kI32, 0, tag);
    HEXI_TRY(r);
    reqs.push_back(std::move(*r));
    for (auto& q : reqs) HEXI_TRY(q->wait());
    HEXI_TRY(world.barrier());
    return Trajectory{};
  }
  auto dims = llama_dims(model);
  HEXI_TRY(dims);
  std::vector<RankResult> results(n);
  results[0] = std::move(mine);
  for (int r = 1; r < n; ++r) {
    const std::size_t size = device_layout(program, program.devices[r], *dims).total;
    RankResult& rr = results[r];
    int tag = 100;
    for (auto* v : {&rr.params, &rr.grads_first, &rr.grads_last}) {
      v->resize(size);
      HEXI_TRY(world.recv(v->data(), size, DType::kF32, r, tag++));
    }
    std::vector<std::int32_t> o(size);
    HEXI_TRY(world.recv(o.data(), size, DType::kI32, r, tag));
    rr.owned.assign(o.begin(), o.end());
  }
  HEXI_TRY(world.barrier());
  return assemble_trajectory(program, model, results, losses);
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
                                 const kernels::Params<float>& got, double atol_fraction,
                                 double rtol) {
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
      if (!(d <= atol_fraction * scale + rtol * std::fabs(r))) e.ok = false;
    }
    e.max_rel = scale > 0 ? e.max_abs / scale : e.max_abs;
    out.push_back(e);
  }
  return out;
}

TensorError worst(const std::vector<TensorError>& errors) {
  TensorError w;
  w.name = "all";
  for (const auto& e : errors) {
    w.max_abs = std::max(w.max_abs, e.max_abs);
    w.max_rel = std::max(w.max_rel, e.max_rel);
    w.ok = w.ok && e.ok;
  }
  return w;
}

Result<OracleInputs> load_oracle_inputs(const std::string& precision, const std::string& model) {
  kernels::Oracle o;
  std::string error;
  if (!kernels::load_oracle(kernels::oracle_path(model, precision), o, error))
    return bad_input(error);
  OracleInputs in;
  in.data = std::make_unique<FixedSource>(o.tokens, o.targets, o.seq);
  in.options.init = o.init;
  in.options.adamw =
      AdamW{o.adamw.lr, o.adamw.beta1, o.adamw.beta2, o.adamw.eps, o.adamw.weight_decay};
  in.grads = kernels::Params<float>(kernels::model_layout(o.dims));
  for (const auto& t : in.grads.layout.tensors) {
    auto it = o.tensors.find("grad/" + t.name);
    if (it == o.tensors.end() || it->second.size() != t.size())
      return bad_input("oracle lacks grad/" + t.name);
    std::copy(it->second.begin(), it->second.end(), in.grads.get(t));
  }
  in.loss = o.loss;
  in.loss_after_1 = o.loss_after_1;
  in.loss_after_2 = o.loss_after_2;
  in.batch = o.batch;
  in.dims = o.dims;
  return in;
}

OracleTolerance oracle_tolerance(const std::string& precision) {
  return precision == "bf16" ? OracleTolerance{2e-3, 2e-2, 5e-2}
                             : OracleTolerance{2e-5, 1e-5, 1e-4};
}

double rms_difference(const kernels::Params<float>& ref, const kernels::Params<float>& got) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < ref.data.size(); ++i) {
    const double d = double(got.data[i]) - ref.data[i];
    diff += d * d;
    norm += double(ref.data[i]) * ref.data[i];
  }
  return std::sqrt(diff / norm);
}

Result<Bf16Evidence> bf16_evidence(const kernels::Params<float>& grads_first) {
  auto bf16 = load_oracle_inputs("bf16");
  HEXI_TRY(bf16);
  auto fp32 = load_oracle_inputs("fp32");
  HEXI_TRY(fp32);
  Bf16Evidence e;
  e.to_bf16 = rms_difference(bf16->grads, grads_first);
  e.to_fp32 = rms_difference(fp32->grads, grads_first);
  e.torch_gap = rms_difference(fp32->grads, bf16->grads);
  if (e.to_fp32 <= 0.5 * e.torch_gap)
    e.problem = "the run is (nearly) float32: " + std::to_string(e.to_fp32) +
                " rms from torch's float32 gradients";
  else if (e.to_bf16 >= 0.9 * e.to_fp32)
    e.problem = "the run is not closer to torch's bf16 gradients (" + std::to_string(e.to_bf16) +
                " rms) than to its float32 ones (" + std::to_string(e.to_fp32) + ")";
  return e;
}

Result<OracleComparison> compare_with_oracle(const OracleInputs& oracle,
                                             const std::vector<double>& losses,
                                             const kernels::Params<float>& grads_first,
                                             const std::string& precision) {
  const OracleTolerance tol = oracle_tolerance(precision);
  OracleComparison c;
  const double torch[3] = {oracle.loss, oracle.loss_after_1, oracle.loss_after_2};
  for (int k = 0; k < 3; ++k) {
    if (k >= static_cast<int>(losses.size())) {
      c.failures.push_back("no loss after " + std::to_string(k) + " steps");
    } else if (!(std::abs(losses[k] - torch[k]) <= tol.loss)) {
      c.failures.push_back("loss after " + std::to_string(k) + " steps " +
                           std::to_string(losses[k]) + ", torch " + std::to_string(torch[k]) +
                           " (bound " + std::to_string(tol.loss) + ")");
    }
  }
  c.grads = compare(oracle.grads, grads_first, tol.atol_fraction, tol.rtol);
  for (const auto& e : c.grads) {
    if (!e.ok) c.failures.push_back("gradient of " + e.name + ":" + format_errors({e}));
  }
  if (precision == "bf16") {
    auto evidence = bf16_evidence(grads_first);
    HEXI_TRY(evidence);
    if (!evidence->problem.empty()) c.failures.push_back(evidence->problem);
    c.evidence = *evidence;
  }
  return c;
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
