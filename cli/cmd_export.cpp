// hexisim export megatron SCENARIO [--plan FILE] [--out FILE] [--json]: a plan as the
// Megatron-LM arguments and torchrun launch that run it, or what Megatron-LM cannot express
// in it and hexisim's own launch (studies/megatron.hpp).

#include <iostream>

#include "cli/commands.hpp"
#include "cli/plan_report.hpp"
#include "studies/megatron.hpp"

namespace hexi::cli {
namespace {

struct ExportOptions {
  ScenarioFlags scenario;  // SCENARIO, its parts, --profile
  std::string plan;
  std::string out;
  bool json = false;
};

// The launch as a shell script (hexisim's own writes its rank file first).
std::string launch_script(const MegatronExport& e) {
  std::string out = "#!/bin/sh\n";
  if (!e.runs) {
    out += "# Megatron-LM cannot run this plan as planned:\n";
    for (const auto& r : e.reasons) out += "#   " + r + "\n";
    return out + "cat > rankfile.txt <<'EOF'\n" + e.rankfile + "EOF\n" + e.launch + "\n";
  }
  out += std::string("# ") + kMegatronVersion + ": TP " + std::to_string(e.tp) + ", PP " +
         std::to_string(e.pp) + ", DP " + std::to_string(e.dp) + "; " + e.placement_note + "\n";
  out += "# Run on every node with NODE_RANK and MASTER_ADDR set.\n";
  if (!e.nodes.empty()) {
    out += "case \"$NODE_RANK\" in\n";
    for (std::size_t n = 0; n < e.nodes.size(); ++n) {
      out += "  " + std::to_string(n) + ") NODE_GPUS=" + e.nodes[n].gpus + " ;;  # " +
             e.nodes[n].machine + "\n";
    }
    out += "  *) echo \"NODE_RANK must be 0-" + std::to_string(e.nodes.size() - 1) +
           "\" >&2; exit 2 ;;\nesac\n";
  }
  return out + e.launch + "\n";
}

void print_export(const MegatronExport& e, std::ostream& out) {
  if (!e.runs) {
    out << kMegatronVersion << " cannot run this plan as planned:\n";
    for (const auto& r : e.reasons) out << "  - " << r << "\n";
    out << "hexisim's own launch (the OpenMPI rank file, as rankfile.txt, follows):\n"
        << e.launch << "\n"
        << e.rankfile;
    for (const auto& note : e.notes) out << "note: " << note << "\n";
    return;
  }
  out << kMegatronVersion << " runs this plan: TP " << e.tp << ", PP " << e.pp << ", DP " << e.dp
      << (e.virtual_stages > 1 ? ", " + std::to_string(e.virtual_stages) + " virtual stages" : "")
      << " (" << e.tp * e.pp * e.dp << " GPUs)\n"
      << "placement: " << e.placement_note << "\n";
  for (std::size_t n = 0; n < e.nodes.size(); ++n) {
    out << "  NODE_RANK=" << n << ": machine " << e.nodes[n].machine
        << ", NODE_GPUS=" << e.nodes[n].gpus << "\n";
  }
  out << e.launch << "\n";
  for (const auto& note : e.notes) out << "note: " << note << "\n";
}

int run_export(const ExportOptions& opt) {
  auto sc = load_scenario_flags(opt.scenario);
  if (!sc) return report(sc.error());
  if (!opt.out.empty()) {
    if (auto st = check_output_file("--out", opt.out, command_inputs(*sc, {opt.plan})); !st) {
      return report(st.error());
    }
  }
  auto plan = load_checked_plan(*sc, opt.plan);
  if (!plan) return report(plan.error());
  const MegatronExport e = export_megatron(*sc, *plan, scenario_command_text(opt.scenario),
                                           plan_file_text(*sc, opt.plan));
  if (!opt.out.empty()) {
    if (auto st = write_file(opt.out, launch_script(e)); !st) return report(st.error());
  }
  if (opt.json) {
    Json out = e.to_json();
    out["scenario"] = sc->name;
    print_json(out);
  } else {
    print_export(e, std::cout);
    if (!opt.out.empty()) std::cout << "wrote " << opt.out << "\n";
  }
  return 0;
}

}  // namespace

void add_export_command(CLI::App& app, Runner& run) {
  auto* exp = app.add_subcommand("export", "Turn a plan into another framework's launch");
  exp->require_subcommand(1);
  auto opt = std::make_shared<ExportOptions>();
  auto* cmd = exp->add_subcommand(
      "megatron", std::string("A plan as ") + kMegatronVersion +
                      " arguments and a torchrun launch, or what Megatron-LM cannot express in "
                      "it and hexisim's own launch");
  add_scenario_options(cmd, opt->scenario);
  cmd->add_option("--plan", opt->plan, "Plan file (default: the scenario's \"plan\")");
  cmd->add_option("--out", opt->out, "Write the launch as a shell script to this file");
  cmd->add_flag("--json", opt->json, "Print one JSON object instead of text");
  cmd->callback([&run, opt] { run = [opt] { return run_export(*opt); }; });
}

}  // namespace hexi::cli
