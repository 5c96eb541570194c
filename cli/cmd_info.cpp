// hexisim info: GPU types, models, transports, shipped clusters and scenarios.

#include <iostream>

#include "cli/commands.hpp"
#include "scheduler/cost/cost_model.hpp"
#include "topologies/transport.hpp"

namespace hexi::cli {
namespace {

struct InfoOptions {
  bool json = false;
};

int run_info(const InfoOptions& opt) {
  auto catalogs = load_catalogs();
  if (!catalogs) return report(catalogs.error());
  Json gpus = Json::array(), models = Json::array(), clusters = Json::array(),
       scenarios = Json::array(), transports = Json::array();
  for (const auto& g : catalogs->gpus.gpus()) {
    gpus.push_back({{"name", g.name},
                    {"tflops", g.tflops},
                    {"precision", g.precision},
                    {"memory_gib", g.memory_gib},
                    {"memory_GBps", g.memory_GBps},
                    {"intra", to_string(g.intra_kind)},
                    {"intra_GBps", g.intra_GBps},
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
  constexpr Transport kShown[] = {Transport::kNvlink, Transport::kPcie, Transport::kHost,
                                  Transport::kRdma,   Transport::kEfa,  Transport::kTcp};
  for (Transport t : kShown) {
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
  Table gt({"name", "TFLOP/s", "memory GiB", "HBM GB/s", "intra", "intra GB/s"});
  for (const auto& g : catalogs->gpus.gpus()) {
    gt.add({g.name, fmt(g.tflops, g.tflops < 1 ? 3 : 1), fmt(g.memory_gib, 0),
            fmt(g.memory_GBps, 0), std::string(to_string(g.intra_kind)), fmt(g.intra_GBps, 0)});
  }
  gt.print(std::cout);
  std::cout << "\nModels:\n";
  Table mt({"name", "params (B)", "layers", "hidden", "ffn", "heads", "kv heads", "vocab"});
  for (const auto& m : catalogs->models.models()) {
    mt.add({m.name, fmt(m.params() / 1e9, m.params() < 1e8 ? 5 : 2), std::to_string(m.layers),
            std::to_string(m.hidden), std::to_string(m.ffn), std::to_string(m.heads),
            std::to_string(m.kv_heads), std::to_string(m.vocab)});
  }
  mt.print(std::cout);
  std::cout << "\nTransports (achieved / nominal rate by message per step; sources: --json):\n";
  Table tt({"name", "4 KiB", "64 KiB", "1 MiB", "16 MiB", "256 MiB"});
  for (Transport t : kShown) {
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
  cmd->callback([&run, opt] { run = [opt] { return run_info(*opt); }; });
}

}  // namespace hexi::cli
