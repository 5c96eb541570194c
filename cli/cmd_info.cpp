// hexisim info: GPU types, models, transports, shipped clusters and scenarios; with
// --profile, the shipped compute model per architecture family and every value's source.

#include <cmath>
#include <iostream>

#include "cli/commands.hpp"
#include "scheduler/cost/cost_model.hpp"
#include "topologies/transport.hpp"

namespace hexi::cli {
namespace {

struct InfoOptions {
  bool json = false;
  bool profile = false;
};

// Parameters per family (columns), the GPU types of each family, and every source.
int print_profile(const GpuCatalog& gpus, bool json) {
  const Profile shipped;
  if (json) {
    Json families = Json::object();
    for (int a = 0; a < kNumArchitectures; ++a) {
      Json members = Json::array();
      for (const auto& g : gpus.gpus()) {
        if (static_cast<int>(g.architecture) == a) members.push_back(g.name);
      }
      families[std::string(to_string(static_cast<Architecture>(a)))] = members;
    }
    print_json({{"profile", shipped.to_json()}, {"gpu_types", families}});
    return 0;
  }
  std::cout << "Device profile (shipped defaults, format version 2; topologies/profile.hpp):\n"
               "  kernel time = overhead + max(FLOPs / (peak x eff), bytes / (HBM x "
               "memory_efficiency))\n"
               "  GEMM eff = gemm_ceiling x waves(m, n; tile, SMs) x k / (k + gemm_k_half) "
               "x m / (m + gemm_m_half) [x gemm_misaligned]\n"
               "  flash eff = attention_<pass> x s / (s + attention_s_half_<pass>) x head-dim "
               "factor (1 at d = 128)\n\n";
  std::vector<std::string> header{"parameter"};
  for (int a = 0; a < kNumArchitectures; ++a)
    header.emplace_back(to_string(static_cast<Architecture>(a)));
  Table t(header);
  for (const auto& info : param_infos()) {
    std::vector<std::string> row{std::string(info.name)};
    for (int a = 0; a < kNumArchitectures; ++a) {
      const double v = shipped.architecture(static_cast<Architecture>(a)).get(info.param);
      row.push_back(fmt(v, v != 0 && std::abs(v) < 10 ? 4 : 0));
    }
    t.add(row);
  }
  t.print(std::cout);
  std::cout << "\nGPU types by family:\n";
  for (int a = 0; a < kNumArchitectures; ++a) {
    std::string names;
    for (const auto& g : gpus.gpus()) {
      if (static_cast<int>(g.architecture) == a) names += (names.empty() ? "" : ", ") + g.name;
    }
    if (!names.empty())
      std::cout << "  " << to_string(static_cast<Architecture>(a)) << ": " << names << "\n";
  }
  std::cout << "\nSources (scripts/fit_compute.py prints the fit errors):\n";
  for (int a = 0; a < kNumArchitectures; ++a) {
    const auto arch = static_cast<Architecture>(a);
    std::cout << "  " << to_string(arch) << "\n";
    for (const auto& info : param_infos()) {
      std::cout << "    " << info.name << ": " << shipped.architecture_source(arch, info.param)
                << "\n";
    }
  }
  return 0;
}

int run_info(const InfoOptions& opt) {
  auto catalogs = load_shipped_catalogs();
  if (!catalogs) return report(catalogs.error());
  if (opt.profile) return print_profile(catalogs->gpus, opt.json);
  Json gpus = Json::array(), models = Json::array(), clusters = Json::array(),
       scenarios = Json::array(), transports = Json::array();
  for (const auto& g : catalogs->gpus.gpus()) {
    gpus.push_back({{"name", g.name},
                    {"architecture", to_string(g.architecture)},
                    {"sms", g.sms},
                    {"tflops", g.tflops},
                    {"precision", g.precision},
                    {"memory_gib", g.memory_gib},
                    {"memory_GBps", g.memory_GBps},
                    {"intra", to_string(g.intra_kind)},
                    {"intra_GBps", g.intra_GBps},
                    {"sustained", g.sustained},
                    {"sustained_uncertainty", g.sustained_uncertainty},
                    {"sustained_source", g.sustained_source},
                    {"source", g.source}});
  }
  for (const auto& m : catalogs->models.models()) {
    models.push_back({{"name", m.name},
                      {"params", m.params()},
                      {"layers", m.layers},
                      {"hidden", m.hidden},
                      {"heads", m.heads},
                      {"kv_heads", m.kv_heads},
                      {"vocab", m.vocab}});
  }
  for (Transport t : kMeasuredTransports) {
    const TransportCurve& c = transport_curve(t);
    Json table = Json::array();
    for (const auto& p : c.points) table.push_back({p.bytes, p.efficiency});
    transports.push_back({{"name", to_string(t)}, {"efficiency", table}, {"source", c.source}});
  }
  for (const auto& c : shipped_clusters()) clusters.push_back(c);
  for (const auto& s : shipped_scenarios()) scenarios.push_back(s);
  if (opt.json) {
    print_json({{"gpus", gpus},
                {"models", models},
                {"transports", transports},
                {"clusters", clusters},
                {"scenarios", scenarios}});
    return 0;
  }
  std::cout << "GPU types (dense fp16/bf16 tensor TFLOP/s, fp32 accumulate):\n";
  Table gt({"name", "TFLOP/s", "sustained", "memory GiB", "HBM GB/s", "intra", "intra GB/s"});
  for (const auto& g : catalogs->gpus.gpus()) {
    gt.add({g.name, fmt(g.tflops, g.tflops < 1 ? 3 : 1),
            g.sustained_source.empty() ? "-" : fmt(g.sustained, 3), fmt(g.memory_gib, 0),
            fmt(g.memory_GBps, 0), std::string(to_string(g.intra_kind)), fmt(g.intra_GBps, 0)});
  }
  gt.print(std::cout);
  std::cout << "\nModels:\n";
  Table mt({"name", "params (B)", "active (B)", "layers", "hidden", "ffn", "experts", "heads",
            "kv heads", "vocab"});
  for (const auto& m : catalogs->models.models()) {
    const int digits = m.params() < 1e8 ? 5 : 2;
    mt.add({m.name, fmt(m.params() / 1e9, digits), fmt(m.active_params() / 1e9, digits),
            std::to_string(m.layers), std::to_string(m.hidden), std::to_string(m.ffn),
            m.is_moe() ? std::to_string(m.moe.top_k) + " of " + std::to_string(m.moe.experts) : "-",
            std::to_string(m.heads), std::to_string(m.kv_heads), std::to_string(m.vocab)});
  }
  mt.print(std::cout);
  std::cout << "\nTransports (achieved / nominal rate by message per step; sources: --json):\n";
  Table tt({"name", "4 KiB", "64 KiB", "1 MiB", "16 MiB", "256 MiB"});
  for (Transport t : kMeasuredTransports) {
    std::vector<std::string> row{std::string(to_string(t))};
    for (double bytes : {4096.0, 65536.0, 1048576.0, 16777216.0, 268435456.0})
      row.push_back(fmt(transport_curve(t).efficiency(bytes), 3));
    tt.add(row);
  }
  tt.print(std::cout);
  std::cout << "\nShipped clusters (topologies/clusters/):\n";
  for (const auto& c : shipped_clusters()) std::cout << "  " << c << "\n";
  std::cout << "\nShipped scenarios (scenarios/shipped/):\n";
  for (const auto& s : shipped_scenarios()) std::cout << "  " << s << "\n";
  return 0;
}

}  // namespace

void add_info_command(CLI::App& app, Runner& run) {
  auto opt = std::make_shared<InfoOptions>();
  auto* cmd = app.add_subcommand(
      "info", "List GPU types, models, transports, shipped clusters and scenarios");
  cmd->add_flag("--json", opt->json, "Print one JSON object instead of tables");
  cmd->add_flag("--profile", opt->profile,
                "Print the shipped compute model per architecture family (every parameter and "
                "its source) instead; with --json: the profile file (version 2) and the GPU "
                "types of each family");
  cmd->callback([&run, opt] { run = [opt] { return run_info(*opt); }; });
}

}  // namespace hexi::cli
