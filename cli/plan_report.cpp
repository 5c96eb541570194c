#include "cli/plan_report.hpp"

#include <algorithm>
#include <iostream>
#include <map>
#include <ostream>

#include <unistd.h>

#include "cli/common.hpp"
#include "scheduler/cost/flop_figures.hpp"
#include "topologies/text.hpp"

namespace hexi::cli {

void print_answer(const Scenario& sc, const Answer& a, std::ostream& out) {
  out << "answer: " << fmt(a.iteration_s, 3) << " s per iteration, " << grouped(a.tokens_per_s)
      << " tokens/s";
  if (a.simulated_tokens_per_s) out << " (" << grouped(*a.simulated_tokens_per_s) << " simulated)";
  out << ", MFU " << fmt(100 * a.mfu, 1) << " % (" << mfu_convention(sc.training) << "), "
      << a.gpus_used << " of " << sc.cluster.num_devices() << " GPUs; plan: " << a.source << "\n";
}

void print_estimate_summary(const Scenario& sc, const Estimate& est, bool explain,
                            std::ostream& out) {
  out << "scenario " << sc.name << ": " << sc.model.name << " on " << sc.cluster.name() << " ("
      << sc.cluster.num_devices() << " GPUs), global batch " << sc.training.global_batch << " x "
      << sc.training.seq_len << " tokens\n";
  Table t({"iteration s", "tokens/s", "MFU", "PFLOP/s", "pipelines s", "DP exposed s",
           "optimizer s", "fits"});
  t.add({fmt(est.iteration_time_s, 3), fmt(est.tokens_per_s, 0), fmt(100 * est.mfu, 1) + "%",
         fmt(est.achieved_pflops, 3), fmt(est.pipeline_s, 3), fmt(est.dp_sync_s, 3),
         fmt(est.optimizer_s, 3), est.feasible ? "yes" : "NO"});
  t.print(out);
  if (const auto [low, high] = est.iteration_time_range_s; high > 0) {
    out << "  " << fmt(low, 3) << " to " << fmt(high, 3)
        << " s per iteration with every kernel and transfer moved across its uncertainty\n";
  }
  for (const auto& p : est.problems) out << "  over memory: " << p << "\n";
  if (explain) {
    print_flop_figures(sc, est.mfu, est.figures, static_cast<int>(est.devices.size()), out);
  }
}

void print_plan_outline(const Plan& plan, std::ostream& out) {
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    const Pipeline& pipe = plan.pipelines[p];
    std::string tps;
    for (const auto& s : pipe.stages) tps += (tps.empty() ? "" : ",") + std::to_string(s.tp());
    out << "  pipeline " << p << ": " << pipe.num_devices() << " GPUs, " << pipe.stages.size()
        << " stages (TP " << tps << "), batch " << pipe.batch << "\n";
  }
  out << "(--explain shows every stage and the FLOPs in every convention)\n";
}

void print_flop_figures(const Scenario& sc, double mfu, const FlopFigures& f, int gpus_used,
                        std::ostream& out) {
  // Utilisation scales with the FLOPs counted: X / (T x P) = MFU x X / M.
  auto of_peak = [&](double tflops_per_gpu) {
    return f.model_tflops_per_gpu > 0
               ? fmt(100 * mfu * tflops_per_gpu / f.model_tflops_per_gpu, 1) + "%"
               : std::string("-");
  };
  Table t({"FLOPs counted", "of peak", "TFLOP/s per GPU"});
  t.add({"MFU (model FLOPs, " + attention_convention(sc.training) + ")",
         of_peak(f.model_tflops_per_gpu), fmt(f.model_tflops_per_gpu, 1)});
  t.add({"HFU (hardware FLOPs, recompute included)", of_peak(f.hardware_tflops_per_gpu),
         fmt(f.hardware_tflops_per_gpu, 1)});
  t.add({"Megatron-LM formula, not MFU (full recompute counted)",
         of_peak(f.megatron_tflops_per_gpu), fmt(f.megatron_tflops_per_gpu, 1)});
  out << "\n";
  t.print(out);
  out << "  MFU counts " << f.mfu_convention
      << "; HFU what the GPUs execute, each stage's recompute included\n"
      << "  Megatron-LM: 96BsLh^2(1+s/6h+V/16Lh): GPT shapes, full recompute, attention not "
         "halved, whatever the plan runs\n"
      << "  of peak: of the cluster's summed peak (" << sc.cluster.num_devices()
      << " GPUs); per GPU: total FLOP/s / the " << gpus_used
      << " GPUs used (their mean on a mixed cluster)\n";
}

void print_plan_table(const Scenario& sc, const Plan& plan, const Estimate& est,
                      std::ostream& out) {
  const Cluster& c = sc.cluster;
  std::size_t dev = 0;
  // Whole experts per GPU (a mixture of experts' expert_split): their counts, per TP rank.
  const bool experts = plan.whole_experts();
  for (std::size_t pi = 0; pi < plan.pipelines.size(); ++pi) {
    const Pipeline& p = plan.pipelines[pi];
    const PipelineEstimate& pe = est.pipelines[pi];
    std::map<std::string, int> types;
    for (int si = 0; si < p.groups(); ++si) {  // an interleaved pipeline's groups once
      for (int d : p.stages[si].devices) ++types[c.gpu(d).name];
    }
    std::string mix;
    for (const auto& [name, n] : types)
      mix += (mix.empty() ? "" : ", ") + std::to_string(n) + "x " + name;
    out << "\npipeline " << pi << ": " << mix << "; batch " << p.batch << " (" << p.micro_batches()
        << " micro-batches of " << p.micro_batch << "), "
        << (p.chunks() > 1
                ? "interleaved 1F1B, " + std::to_string(p.chunks()) + " chunks per group, "
                : "")
        << fmt(pe.time_s, 3) << " s\n";
    std::vector<std::string> header{"stage", "devices", "GPU", "TP"};
    if (experts) header.push_back("experts");
    for (const char* h : {"layers", "recompute", "fwd ms", "bwd ms", "TP comm ms", "send ms",
                          "mem GiB", "free GiB"})
      header.push_back(h);
    Table t(header);
    std::vector<std::size_t> group_dev;  // the first device estimate of each device group
    for (std::size_t si = 0; si < p.stages.size(); ++si) {
      const Stage& s = p.stages[si];
      const StageEstimate& se = pe.stages[si];
      double worst_mem = 0, worst_free = 1e300;
      // An interleaved pipeline's later chunks: the devices of group si mod p, once each.
      const std::size_t group = si % static_cast<std::size_t>(p.groups());
      if (group == si) group_dev.push_back(dev);
      std::size_t at = group_dev[group];
      for (int r = 0; r < s.tp(); ++r, ++at) {
        const DeviceEstimate& de = est.devices[at];
        worst_mem = std::max(worst_mem, de.memory.total());
        worst_free = std::min(worst_free, de.capacity_bytes - de.memory.total());
      }
      if (group == si) dev = at;
      std::string ids;
      for (int d : s.devices) ids += (ids.empty() ? "" : ",") + std::to_string(d);
      if (ids.size() > 24)
        ids = std::to_string(s.devices.front()) + ".." + std::to_string(s.devices.back());
      std::string gpus = c.gpu(s.devices.front()).name;
      for (int d : s.devices) {
        if (c.gpu(d).name != gpus) gpus = "mixed";
      }
      // A sequence mesh stage: its device count as "mesh n" (no TP group).
      std::vector<std::string> row{
          std::to_string(si), ids, gpus,
          s.mesh() ? "mesh " + std::to_string(s.tp()) : std::to_string(s.tp())};
      if (experts) {
        std::string split;
        for (int e : s.expert_split) split += (split.empty() ? "" : ",") + std::to_string(e);
        row.push_back(split);
      }
      for (std::string cell :
           {"[" + std::to_string(s.layer_begin) + "," + std::to_string(s.layer_end) + ")",
            std::string(to_string(se.recompute)), fmt(1e3 * se.forward_s, 2),
            fmt(1e3 * se.backward_s, 2), fmt(1e3 * se.tp_comm_s, 2), fmt(1e3 * se.send_s, 2),
            fmt(worst_mem / kGiB, 2), fmt(worst_free / kGiB, 2)})
        row.push_back(std::move(cell));
      t.add(row);
    }
    t.print(out);
  }
}

namespace {

std::string search_progress_text(const SearchProgress& p) {
  std::string eta;
  switch (p.eta) {
    case Eta::kNone:
      break;
    case Eta::kEstimate:
      eta = ", ETA " + duration_text(p.eta_s);
      break;
    case Eta::kAtLeast:
      eta = ", at least " + duration_text(p.eta_s) + " more to converge";
      break;
    case Eta::kBudget:
      eta = ", at most " + duration_text(p.eta_s) + " more (--time-budget)";
      break;
  }
  return "hexisim: " + p.scheduler + ": " + p.phase + ", " + fmt(p.elapsed_s, 1) + " s, " +
         std::to_string(p.candidates) + " candidates, best " + fmt(p.best_tokens_per_s, 0) +
         " tokens/s" + eta;
}

}  // namespace

void print_search_progress(const SearchProgress& p) {
  // A line a second on a terminal; in a log, one every 10 s.
  static const bool tty = ::isatty(STDERR_FILENO) != 0;
  static double last_s = -1e300;
  static std::string last_scheduler;
  if (!tty && p.scheduler == last_scheduler && p.elapsed_s - last_s < 10.0) return;
  last_s = p.elapsed_s;
  last_scheduler = p.scheduler;
  std::cerr << search_progress_text(p) << "\n";
}

std::string plan_file_text(const Scenario& sc, const std::string& plan_arg) {
  if (!plan_arg.empty()) return plan_arg;
  return sc.plan ? sc.plan->lexically_normal().string() : "";
}

Result<Plan> load_checked_plan(const Scenario& sc, const std::string& plan_arg) {
  std::string path = plan_arg;
  if (path.empty()) {
    if (!sc.plan)
      return bad_input(sc.file.string() +
                       ": no plan given: pass --plan FILE (the scenario names none)");
    path = sc.plan->string();
  }
  auto plan = load_plan(path);
  if (!plan) return plan.error();
  if (auto st = validate_plan(*plan, sc.cluster, sc.model, sc.training, path); !st)
    return st.error();
  return plan;
}

}  // namespace hexi::cli
