// hexisim lower SCENARIO --plan FILE --out program.json: the plan lowered into
// per-device op streams (scheduler/program/program.hpp), for reading and for the engine.

#include <iostream>
#include <map>

#include "cli/commands.hpp"
#include "cli/plan_report.hpp"
#include "scheduler/program/lower.hpp"

namespace hexi::cli {
namespace {

struct LowerCmdOptions {
  std::string scenario;
  std::string plan;
  std::string out;
  std::string granularity = "layer";
  bool json = false;
};

// Counts of ops by kind (compute ops by name) for the summary.
std::map<std::string, int> op_counts(const Program& p) {
  std::map<std::string, int> counts;
  for (const auto& op : p.ops) {
    std::string key = op.kind == OpKind::kCompute      ? std::string(to_string(op.compute))
                      : op.kind == OpKind::kCollective ? std::string(to_string(op.collective)) +
                                                             " " + std::string(to_string(op.tensor))
                                                       : std::string(to_string(op.kind));
    ++counts[key];
  }
  return counts;
}

Json summary_json(const Program& p, const std::string& out) {
  Json counts = Json::object();
  for (const auto& [k, n] : op_counts(p)) counts[k] = n;
  return {{"program", out},
          {"ops", p.num_ops()},
          {"devices", p.devices.size()},
          {"groups", p.groups.size()},
          {"buckets", p.buckets.size()},
          {"granularity", to_string(p.granularity)},
          {"schedule", to_string(p.schedule)},
          {"op_counts", counts}};
}

int run_lower(const LowerCmdOptions& opt) {
  auto sc = load_scenario_arg(opt.scenario);
  if (!sc) return report(sc.error());
  if (auto st = check_output_file("--out", opt.out, command_inputs(*sc, {opt.plan})); !st)
    return report(st.error());
  std::string plan_path = opt.plan.empty() && sc->plan ? sc->plan->string() : opt.plan;
  auto plan = load_checked_plan(*sc, opt.plan);
  if (!plan) return report(plan.error());
  LowerOptions lo;
  lo.scenario = sc->name;
  lo.granularity = opt.granularity == "stage" ? Granularity::kStage : Granularity::kLayer;
  auto program = lower_plan(*plan, sc->cluster, sc->model, sc->training, lo, plan_path);
  if (!program) return report(program.error());
  if (auto st = validate_program(*program, "lowered program"); !st)
    return report(failure(st.error().message));
  if (auto st = write_file(opt.out, program_text(*program)); !st) return report(st.error());
  if (opt.json) {
    print_json(summary_json(*program, opt.out));
    return 0;
  }
  std::cout << "lowered " << sc->name << " (" << to_string(program->schedule) << ", "
            << to_string(program->granularity) << " granularity): " << program->num_ops()
            << " ops on " << program->devices.size() << " devices, " << program->groups.size()
            << " groups, " << program->buckets.size() << " DP buckets -> " << opt.out << "\n";
  Table t({"op", "count"});
  for (const auto& [k, n] : op_counts(*program)) t.add({k, std::to_string(n)});
  t.print(std::cout);
  return 0;
}

}  // namespace

void add_lower_command(CLI::App& app, Runner& run) {
  auto opt = std::make_shared<LowerCmdOptions>();
  auto* cmd = app.add_subcommand("lower", "Lower a plan into per-device op streams (program JSON)");
  cmd->add_option("SCENARIO", opt->scenario, "Scenario file, or the name of a shipped scenario")
      ->required();
  cmd->add_option("--plan", opt->plan, "Plan file (default: the scenario's \"plan\")");
  cmd->add_option("--out", opt->out, "Program file to write")->required();
  cmd->add_option("--granularity", opt->granularity,
                  "layer (one op per block; what the engine runs) or stage")
      ->check(CLI::IsMember({"layer", "stage"}))
      ->capture_default_str();
  cmd->add_flag("--json", opt->json, "Print a JSON summary instead of tables");
  cmd->callback([&run, opt] { run = [opt] { return run_lower(*opt); }; });
}

}  // namespace hexi::cli
