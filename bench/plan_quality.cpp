// The pipeline planners' quality on seeded random clusters shaped like users' (2 to 4 GPU
// types in machines of 1-8 GPUs, TCP or RDMA networks, Llama 7B-70B;
// studies/random_scenarios.hpp): HexiScale against every registered pipeline baseline and,
// up to --exact-max-gpus GPUs, the exact search, all with default options, judged by the
// closed form (studies/plan_quality.hpp).
// Targets, on the clusters where some planner's plan fits (per network kind and over all):
// HexiScale >= 0.99 x the best baseline on >= 95 % of them and >= 0.95 x on every one, and
// >= 0.97 x the exact optimum where the exact search ran.
//   build/bench/plan_quality        100 clusters of 12-90 GPUs, seeds 1..100
//   build/bench/plan_quality --clusters 24 --min-gpus 8 --max-gpus 16 --max-params 14e9
//       --exact-max-gpus 8          the first clusters of plan_quality_test
// The exact search's time grows steeply with the machines and the batch: seconds at 8 GPUs,
// up to minutes at 9-16 GPUs in 4-5 machines.
// One row per cluster and the summary on stdout (the same bytes for the same flags but for
// the search-time column), progress on stderr; --json FILE writes every outcome (with its
// plan) and the summary; --scenarios DIR writes each cluster's scenario file. Exit 0 whether
// or not the targets are met (a measurement); 2 on bad flags.

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "scheduler/hexiscale/exact.hpp"
#include "studies/plan_quality.hpp"
#include "studies/random_scenarios.hpp"
#include "topologies/text.hpp"

namespace hexi {
namespace {

struct Flags {
  int clusters = 100;
  std::uint64_t seed = 1;
  RandomScenarioLimits limits;
  int exact_max_gpus = kExactMaxGpus;
  std::string json;
  std::string scenarios;  // folder for each cluster's scenario file; empty: none written
};

std::string tokens(double tokens_per_s) {
  return tokens_per_s > 0 ? fixed(tokens_per_s, 0) : "-";
}

std::string ratio_text(std::optional<double> r) {
  return r ? fixed(*r, 3) : "-";
}

void print_header() {
  std::printf("%-6s %-9s %-11s %-9s %10s %10s %-10s %6s %10s %6s %8s  %s\n", "seed", "network",
              "model", "batch", "hexiscale", "best base", "which", "ratio", "exact", "ratio",
              "hexi s", "mix");
}

void print_row(const ClusterQuality& q) {
  const std::string network = q.transport + " " + fixed(q.nic_GBps, 1);
  const std::string batch = std::to_string(q.global_batch) + "x" + std::to_string(q.seq_len);
  if (!q.feasible()) {
    std::printf("%-6llu %-9s %-11s %-9s %10s  %s\n", static_cast<unsigned long long>(q.seed),
                network.c_str(), q.model.c_str(), batch.c_str(), "infeasible", q.mix.c_str());
    return;
  }
  const PlannerOutcome* best = q.best_baseline();
  std::printf("%-6llu %-9s %-11s %-9s %10s %10s %-10s %6s %10s %6s %8s  %s\n",
              static_cast<unsigned long long>(q.seed), network.c_str(), q.model.c_str(),
              batch.c_str(), tokens(q.hexiscale.feasible_tokens_per_s()).c_str(),
              best ? tokens(best->tokens_per_s).c_str() : "-", best ? best->scheduler.c_str() : "-",
              ratio_text(q.ratio_to_best_baseline()).c_str(),
              q.exact ? tokens(q.exact->feasible_tokens_per_s()).c_str() : "-",
              ratio_text(q.ratio_to_exact()).c_str(), fixed(q.hexiscale.search_time_s, 2).c_str(),
              q.mix.c_str());
}

void print_summary(const QualitySummary& s) {
  const QualityTargets& t = s.targets;
  std::printf(
      "\ntargets on feasible clusters: hexiscale >= %s x best baseline on >= %s %% and "
      ">= %s x on every one; >= %s x exact\n",
      fixed(t.most, 2).c_str(), fixed(100 * t.share, 0).c_str(), fixed(t.every, 2).c_str(),
      fixed(t.exact, 2).c_str());
  std::printf("%-6s %8s %10s %8s %11s %9s %9s %12s %13s %7s %9s %8s %5s\n", "kind", "clusters",
              "infeasible", "compared", "only hexi", "min", "median", "median gain", "share>=most",
              "<every", "exact runs", "exact min", "met");
  for (const QualityGroup& g : s.groups) {
    const double median = g.median_ratio();
    std::printf("%-6s %8d %10d %8zu %11d %9s %9s %11s%% %12s%% %7d %9zu %8s %5s\n", g.kind.c_str(),
                g.clusters, g.infeasible, g.ratios.size(), g.only_hexiscale,
                g.ratios.empty() ? "-" : fixed(g.min_ratio(), 3).c_str(),
                g.ratios.empty() ? "-" : fixed(median, 3).c_str(),
                g.ratios.empty() ? "-" : fixed(100 * (median - 1), 1).c_str(),
                fixed(100 * g.share_at_least_most(), 1).c_str(), g.below_every,
                g.exact_ratios.size(),
                g.exact_ratios.empty() ? "-" : fixed(g.min_exact_ratio(), 3).c_str(),
                g.meets(t) ? "yes" : "no");
  }
  std::printf("targets met: %s\n", s.met ? "yes" : "no");
}

// A plan's pipelines, one line per distinct pipeline: "2x b=16: A100-SXM-80GB tp8 L0-20 |
// RTX4090 tp4 L20-32" (two pipelines of 16 sequences each, two stages).
std::vector<std::string> plan_stages(const Plan& plan, const Cluster& cluster) {
  std::vector<std::string> lines;
  std::vector<int> counts;
  for (const Pipeline& p : plan.pipelines) {
    std::string line = "b=" + std::to_string(p.batch) + ":";
    for (std::size_t i = 0; i < p.stages.size(); ++i) {
      const Stage& st = p.stages[i];
      line += std::string(i ? " |" : "") + " " + cluster.gpu(st.devices.front()).name + " tp" +
              std::to_string(st.tp()) + " L" + std::to_string(st.layer_begin) + "-" +
              std::to_string(st.layer_end);
    }
    auto it = std::find(lines.begin(), lines.end(), line);
    if (it == lines.end()) {
      lines.push_back(line);
      counts.push_back(1);
    } else {
      ++counts[it - lines.begin()];
    }
  }
  for (std::size_t i = 0; i < lines.size(); ++i)
    lines[i] = std::to_string(counts[i]) + "x " + lines[i];
  return lines;
}

// The feasible clusters, HexiScale's worst ratio first: its plan and the winning baseline's
// (each scenario drawn again from its seed for the GPU types of the stages).
void print_worst(const std::vector<ClusterQuality>& all, std::size_t n, const Flags& f,
                 const ShippedCatalogs& catalogs) {
  std::vector<const ClusterQuality*> worst;
  for (const ClusterQuality& q : all) {
    if (q.feasible() && q.ratio_to_best_baseline()) worst.push_back(&q);
  }
  std::stable_sort(worst.begin(), worst.end(), [](const auto* a, const auto* b) {
    return *a->ratio_to_best_baseline() < *b->ratio_to_best_baseline();
  });
  worst.resize(std::min(n, worst.size()));
  std::printf("\nworst %zu clusters (shape: pipelines x [TP degree of each stage])\n",
              worst.size());
  for (const ClusterQuality* q : worst) {
    auto sc = random_user_scenario(q->seed, f.limits, catalogs.gpus, catalogs.models);
    std::printf("seed %llu ratio %s: %s, %s %s GB/s, %s, batch %d x %d\n",
                static_cast<unsigned long long>(q->seed),
                fixed(*q->ratio_to_best_baseline(), 3).c_str(), q->mix.c_str(),
                q->transport.c_str(), fixed(q->nic_GBps, 1).c_str(), q->model.c_str(),
                q->global_batch, q->seq_len);
    for (const PlannerOutcome* o : {&q->hexiscale, q->best_baseline()}) {
      std::printf("  %-10s %10s tok/s%s  %zu pipelines, %d GPUs: %s\n", o->scheduler.c_str(),
                  tokens(o->tokens_per_s).c_str(), o->fits ? "" : " (does not fit)",
                  o->plan.pipelines.size(), o->plan.num_devices(), plan_shape(o->plan).c_str());
      if (!sc) continue;
      for (const std::string& line : plan_stages(o->plan, sc->cluster))
        std::printf("      %s\n", line.c_str());
    }
  }
}

int run(const Flags& f) {
  std::ofstream json_out;
  if (!f.json.empty()) {
    json_out.open(f.json);
    if (!json_out) {
      std::cerr << "plan_quality: error: --json " << f.json << ": cannot write the file\n";
      return 2;
    }
  }
  auto catalogs = load_shipped_catalogs();
  if (!catalogs) {
    std::cerr << "plan_quality: error: " << catalogs.error().message << "\n";
    return exit_code(catalogs.error());
  }
  PlanQualityOptions options;
  options.exact_max_gpus = f.exact_max_gpus;
  std::vector<ClusterQuality> all;
  print_header();
  for (int i = 0; i < f.clusters; ++i) {
    const std::uint64_t seed = f.seed + static_cast<std::uint64_t>(i);
    auto sc = random_user_scenario(seed, f.limits, catalogs->gpus, catalogs->models);
    if (!sc) {
      std::cerr << "plan_quality: error: " << sc.error().message << "\n";
      return exit_code(sc.error());
    }
    if (!f.scenarios.empty()) {
      const std::string path = f.scenarios + "/" + sc->name + ".json";
      std::ofstream out(path);
      out << dump_json(*random_user_scenario_json(seed, f.limits, catalogs->gpus, catalogs->models),
                       2)
          << "\n";
      if (!out) {
        std::cerr << "plan_quality: error: --scenarios: cannot write " << path << "\n";
        return 2;
      }
    }
    std::cerr << "[" << i + 1 << "/" << f.clusters << "] " << sc->name << ": "
              << sc->cluster.num_devices() << " GPUs, " << sc->model.name << " ..." << std::flush;
    options.on_outcome = [](const PlannerOutcome& o) {
      std::cerr << " " << o.scheduler << " " << fixed(o.search_time_s, 1) << "s" << std::flush;
    };
    ClusterQuality q = measure_plan_quality(*sc, options);
    q.seed = seed;
    std::cerr << "\n";
    print_row(q);
    std::fflush(stdout);
    all.push_back(std::move(q));
  }
  const QualitySummary summary = summarize_plan_quality(all, QualityTargets{});
  print_summary(summary);
  print_worst(all, 10, f, *catalogs);
  if (json_out) {
    Json rows = Json::array();
    for (const ClusterQuality& q : all) rows.push_back(to_json(q));
    json_out << dump_json({{"clusters", rows}, {"summary", to_json(summary)}}, 2) << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace hexi

int main(int argc, char** argv) {
  hexi::Flags f;
  CLI::App app{"The pipeline planners' quality on seeded random user-like clusters"};
  app.add_option("--clusters", f.clusters, "random clusters to run")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--seed", f.seed, "seed of the first cluster (then seed + 1, ...)")
      ->capture_default_str();
  app.add_option("--min-gpus", f.limits.min_gpus, "fewest GPUs in a cluster")
      ->check(CLI::Range(2, 1 << 17))
      ->capture_default_str();
  app.add_option("--max-gpus", f.limits.max_gpus, "most GPUs in a cluster")
      ->check(CLI::Range(2, 1 << 17))
      ->capture_default_str();
  app.add_option("--max-params", f.limits.max_model_params,
                 "largest model drawn, in parameters (14e9: up to 13B)")
      ->capture_default_str();
  app.add_option("--exact-max-gpus", f.exact_max_gpus,
                 "run the exact search on clusters of at most this many GPUs (0: never)")
      ->check(CLI::Range(0, hexi::kExactMaxGpus))
      ->capture_default_str();
  app.add_option("--json", f.json, "also write every outcome and the summary to this file");
  app.add_option("--scenarios", f.scenarios,
                 "write each cluster's scenario file, random-SEED.json, to this existing folder "
                 "(rerun one: hexisim plan FILE --scheduler NAME --explain)")
      ->check(CLI::ExistingDirectory);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (f.limits.min_gpus > f.limits.max_gpus) {
    std::cerr << "plan_quality: error: --min-gpus " << f.limits.min_gpus << " is above --max-gpus "
              << f.limits.max_gpus << "\n";
    return 2;
  }
  return hexi::run(f);
}
