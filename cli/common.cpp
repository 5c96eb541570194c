#include "cli/common.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "studies/sweep_run.hpp"
#include "topologies/text.hpp"

namespace hexi::cli {

int report(const Error& error) {
  std::cerr << "hexisim: error: " << error.message << "\n";
  return exit_code(error);
}

void note_unnamed_transport(const Cluster& c) {
  if (const std::string note = unnamed_transport_note(c); !note.empty()) {
    std::cerr << "hexisim: note: " << note << "\n";
  }
}

Result<Scenario> load_scenario_arg(const std::string& ref, const std::string& profile) {
  auto catalogs = load_shipped_catalogs();
  if (!catalogs) return catalogs.error();
  auto s = load_scenario(ref, catalogs->gpus, catalogs->models);
  if (s) note_unnamed_transport(s->cluster);
  if (!s || profile.empty()) return s;
  auto p = Profile::load(profile);
  if (!p) return p.error();
  use_profile(*s, std::move(*p));
  s->inputs.push_back(profile);
  return s;
}

namespace {

// A scenario error about a part given as a flag, told by the flag: "<file>: /model: x" ->
// "--model: x".
std::string flag_message(const std::string& message, const std::string& origin,
                         const ScenarioQuestion& q) {
  const struct {
    const char* at;
    const char* flag;
    bool given;
  } parts[] = {{": /model:", "--model", !q.model.empty()},
               {": /cluster:", "--cluster", !q.cluster.empty()},
               {" (cluster): /network/transport:", "--transport", !q.transport.empty()},
               {": /training/global_batch:", "--global-batch", q.global_batch.has_value()},
               {": /training/micro_batch:", "--micro-batch", q.micro_batch.has_value()},
               {": /training/seq_len:", "--seq-len", q.seq_len.has_value()},
               {": /training/zero_stage:", "--zero-stage", q.zero_stage.has_value()},
               {": /training/precision:", "--precision", !q.precision.empty()},
               {": /training/recompute:", "--recompute", !q.recompute.empty()}};
  for (const auto& part : parts) {
    const std::string at = origin + part.at;
    if (part.given && message.rfind(at, 0) == 0) {
      return std::string(part.flag) + ":" + message.substr(at.size());
    }
  }
  return message;
}

}  // namespace

Result<Scenario> load_scenario_flags(const ScenarioFlags& flags) {
  const ScenarioQuestion& q = flags.question;
  if (!q.any_part() && flags.save.empty() && !q.base.empty()) {
    return load_scenario_arg(q.base, flags.profile);
  }
  auto catalogs = load_shipped_catalogs();
  if (!catalogs) return catalogs.error();
  auto asked = ask_scenario(q, catalogs->gpus);
  if (!asked) return asked.error();
  const std::filesystem::path origin =
      asked->file.empty() ? std::filesystem::path("<command line>") : asked->file;
  auto s = scenario_from_json(asked->json, origin, catalogs->gpus, catalogs->models);
  if (!s) return Error{s.error().kind, flag_message(s.error().message, origin.string(), q)};
  if (asked->file.empty()) std::erase(s->inputs, origin);  // "<command line>" is no file
  note_unnamed_transport(s->cluster);
  if (!flags.save.empty()) {
    if (auto st = check_output_file("--save-scenario", flags.save, s->inputs); !st) {
      return st.error();
    }
    if (auto st = write_file(flags.save, dump_json(asked->json, 2) + "\n"); !st) return st.error();
  }
  if (!flags.profile.empty()) {
    auto p = Profile::load(flags.profile);
    if (!p) return p.error();
    use_profile(*s, std::move(*p));
    s->inputs.push_back(flags.profile);
  }
  return s;
}

std::string scenario_command_text(const ScenarioFlags& flags) {
  if (!flags.save.empty()) return flags.save;
  const ScenarioQuestion& q = flags.question;
  std::string out = q.base;
  auto add = [&out](const char* flag, const std::string& value) {
    if (!value.empty()) out += std::string(out.empty() ? "" : " ") + flag + " " + value;
  };
  auto number = [](const auto& v) { return v ? format("%g", static_cast<double>(*v)) : ""; };
  add("--mix", q.mix);
  add("--cluster", q.cluster);
  add("--nic-GBps", number(q.nic_GBps));
  add("--nics", number(q.nics_per_machine));
  add("--transport", q.transport);
  add("--model", q.model);
  add("--global-batch", number(q.global_batch));
  add("--micro-batch", number(q.micro_batch));
  add("--seq-len", number(q.seq_len));
  add("--zero-stage", number(q.zero_stage));
  add("--precision", q.precision);
  add("--recompute", q.recompute);
  return out;
}

void print_json(const Json& json) {
  std::cout << dump_json(json, 2) << "\n";
}

std::vector<std::filesystem::path> command_inputs(const Scenario& scenario,
                                                  std::initializer_list<std::string> more) {
  std::vector<std::filesystem::path> inputs = scenario.inputs;
  for (const std::string& m : more) {
    if (!m.empty()) inputs.emplace_back(m);
  }
  return inputs;
}

Status write_file(const std::string& path, const std::string& text) {
  bool replaced = false;
  if (auto st = write_file_atomically(path, text, &replaced); !st) return st;
  if (replaced) std::cerr << "hexisim: note: replaced the existing " << path << "\n";
  return {};
}

void Table::print(std::ostream& out) const {
  std::vector<std::size_t> width(header_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (std::size_t i = 0; i < row.size() && i < width.size(); ++i)
      width[i] = std::max(width[i], row[i].size());
  };
  measure(header_);
  for (const auto& r : rows_) measure(r);
  auto line = [&](const std::vector<std::string>& row) {
    std::string text;
    for (std::size_t i = 0; i < width.size(); ++i) {
      std::string cell = i < row.size() ? row[i] : "";
      text += cell + std::string(width[i] - cell.size() + (i + 1 < width.size() ? 2 : 0), ' ');
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out << "  " << text << "\n";
  };
  line(header_);
  std::vector<std::string> rule;
  for (auto w : width) rule.push_back(std::string(w, '-'));
  line(rule);
  for (const auto& r : rows_) line(r);
}

std::string fmt(double value, int decimals) {
  return fixed(value, decimals);
}

std::string this_executable() {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("hexisim") : p.string();
}

Result<int> run_python(const std::vector<std::string>& args) {
  static constexpr const char* kPython = "/usr/bin/python3";
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(kPython));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return failure(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::execv(kPython, argv.data());
    std::cerr << "hexisim: error: cannot run " << kPython << ": " << std::strerror(errno)
              << " (install Python 3 and python3-matplotlib: scripts/setup.sh)\n";
    ::_exit(1);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

void print_sweep_summary(const SweepSummary& s, bool json) {
  if (json) {
    print_json({{"sweep", s.sweep},
                {"points", s.points},
                {"done", s.done},
                {"failed", s.failed},
                {"computed", s.computed},
                {"skipped", s.done - s.computed},
                {"interrupted", s.interrupted},
                {"wall_time_s", s.wall_time_s},
                {"workers", s.workers},
                {"results", s.jsonl.string()},
                {"csv", s.csv.string()}});
    return;
  }
  std::cout << (s.interrupted ? "interrupted: " : "done: ") << s.done << "/" << s.points
            << " points";
  if (s.failed > 0) std::cout << " (" << s.failed << " failed: see the error column)";
  std::cout << "; " << s.computed << " computed in " << fmt(s.wall_time_s, 1) << " s on "
            << s.workers << "\n";
  if (s.interrupted) std::cout << "rerun the same command to compute the other points\n";
  std::cout << "wrote " << s.jsonl.string() << " and " << s.csv.string() << "\n";
}

void print_planning_note(const std::string& line) {
  std::cerr << "hexisim: " << line << "\n";
}

}  // namespace hexi::cli
