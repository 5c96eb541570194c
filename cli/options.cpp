#include "cli/options.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "topologies/text.hpp"

namespace hexi::cli {

void add_profile_option(CLI::App* cmd, std::string& profile) {
  cmd->add_option("--profile", profile,
                  "Device profile file (e.g. from hexisim calibrate): replaces the scenario's "
                  "\"profile\" and the shipped defaults")
      ->check(CLI::ExistingFile);
}

void add_scenario_options(CLI::App* cmd, ScenarioFlags& flags) {
  ScenarioQuestion& q = flags.question;
  cmd->add_option("SCENARIO", q.base,
                  "Scenario file, or the name of a shipped scenario (or ask without one: --mix or "
                  "--cluster, and --model)");
  add_profile_option(cmd, flags.profile);
  const char* group = "Scenario parts (ask without a file, or replace the SCENARIO's)";
  cmd->add_option("--mix", q.mix,
                  "Cluster from a GPU mix, TYPE:MACHINESxGPUS[,...], e.g. A100:2x8,RTX4090:4x4 (as "
                  "cluster gen)")
      ->group(group);
  cmd->add_option("--cluster", q.cluster, "Cluster file, or the name of a shipped cluster")
      ->group(group);
  cmd->add_option("--nic-GBps", q.nic_GBps,
                  "With --mix: NIC bandwidth per machine, GB/s, all NICs together (default 25)")
      ->check(finite_positive())
      ->group(group);
  cmd->add_option("--nics", q.nics_per_machine, "With --mix: NICs per machine (default 1)")
      ->check(CLI::Range(1, 64))
      ->group(group);
  cmd->add_option("--transport", q.transport,
                  "With --mix: the network's transport, rdma (InfiniBand/RoCE), efa, tcp or tcpxo")
      ->group(group);
  cmd->add_option("--model", q.model, "Model from the catalog (hexisim info lists them)")
      ->group(group);
  cmd->add_option("--global-batch", q.global_batch, "Sequences per iteration")
      ->check(CLI::Range(1, 1 << 24))
      ->group(group);
  cmd->add_option("--micro-batch", q.micro_batch, "Sequences per micro-batch")
      ->check(CLI::Range(1, 1 << 16))
      ->group(group);
  cmd->add_option("--seq-len", q.seq_len, "Tokens per sequence")
      ->check(CLI::Range(1, 1 << 24))
      ->group(group);
  cmd->add_option("--zero-stage", q.zero_stage, "ZeRO stage, 0-3")
      ->check(CLI::Range(0, 3))
      ->group(group);
  cmd->add_option("--precision", q.precision, "bf16, fp16 or fp32")->group(group);
  cmd->add_option("--recompute", q.recompute, "Activation recompute: none, selective or full")
      ->group(group);
  cmd->add_option("--save-scenario", flags.save,
                  "Write the scenario the flags made to this file (then: hexisim CMD FILE)")
      ->group(group);
}

namespace {

// The value of `text` as a double, if all of it is one (std::strtod: "1e-3", "inf", "nan").
std::optional<double> number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return v;
}

bool is_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80           ? 1
                          : (c >> 5) == 0x6  ? 2
                          : (c >> 4) == 0xe  ? 3
                          : (c >> 3) == 0x1e ? 4
                                             : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    }
    i += n;
  }
  return true;
}

}  // namespace

CLI::Validator finite_in(double min, double max) {
  const std::string range = "[" + format("%g", min) + ", " + format("%g", max) + "]";
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        const auto v = number(text);
        if (!v || !std::isfinite(*v) || *v < min || *v > max) {
          return "expected a finite number in " + range + ", got " + text;
        }
        return "";
      },
      "NUMBER in " + range);
}

CLI::Validator finite_positive() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const auto v = number(text);
        if (!v || !std::isfinite(*v) || !(*v > 0))
          return "expected a finite number > 0, got " + text;
        return "";
      },
      "NUMBER > 0");
}

CLI::Validator unsigned_64() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::uint64_t v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
          return "expected an integer in [0, 2^64-1], got " + text;
        }
        return "";
      },
      "UINT64");
}

CLI::Validator utf8_text() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return is_utf8(text) ? "" : "expected UTF-8 text (it is written into JSON)";
      },
      "TEXT");
}

namespace {

const CLI::App* subcommand_named(const CLI::App& app, const std::string& name) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == name) return sub;
  }
  return nullptr;
}

}  // namespace

std::string parse_hint(const CLI::App& app, const std::vector<std::string>& args) {
  std::vector<const CLI::App*> chain = {&app};
  std::vector<std::string> flags;  // the long names of the chain's options
  auto add_flags = [&flags](const CLI::App& a) {
    for (const CLI::Option* o : a.get_options()) {
      for (const std::string& n : o->get_lnames()) flags.push_back(n);
    }
  };
  add_flags(app);
  for (const std::string& arg : args) {
    if (arg.rfind("--", 0) == 0 && arg.size() > 2) {
      const std::string name = arg.substr(2, arg.find('=') - 2);
      if (std::find(flags.begin(), flags.end(), name) != flags.end()) continue;
      const std::string near = closest(name, flags);
      if (near.empty()) continue;
      return (chain.size() > 1 ? chain.back()->get_name() : std::string("hexisim")) +
             " has no option --" + name + ": did you mean --" + near + "?";
    }
    if (arg.empty() || arg[0] == '-') continue;
    const CLI::App& at = *chain.back();
    if (const CLI::App* sub = subcommand_named(at, arg)) {
      chain.push_back(sub);
      add_flags(*sub);
      continue;
    }
    // A word where a subcommand is required: the nearest subcommand's name.
    std::vector<std::string> names;
    for (const CLI::App* sub : at.get_subcommands([](const CLI::App*) { return true; })) {
      names.push_back(sub->get_name());
    }
    if (!names.empty() && at.get_require_subcommand_min() > 0) {
      const std::string near = closest(arg, names);
      if (!near.empty()) {
        return "unknown command " + arg + (chain.size() > 1 ? " of " + at.get_name() : "") +
               ": did you mean " + near + "?";
      }
    }
  }
  return "";
}

}  // namespace hexi::cli
