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

#include "topologies/text.hpp"

namespace hexi::cli {

int report(const Error& error) {
  std::cerr << "hexisim: error: " << error.message << "\n";
  return exit_code(error);
}

Result<Catalogs> load_catalogs() {
  auto gpus = GpuCatalog::load_shipped();
  if (!gpus) return gpus.error();
  auto models = ModelCatalog::load_shipped();
  if (!models) return models.error();
  return Catalogs{std::move(*gpus), std::move(*models)};
}

Result<Scenario> load_scenario_arg(const std::string& ref, const std::string& profile) {
  auto catalogs = load_catalogs();
  if (!catalogs) return catalogs.error();
  auto s = load_scenario(ref, catalogs->gpus, catalogs->models);
  if (!s || profile.empty()) return s;
  auto p = Profile::load(profile);
  if (!p) return p.error();
  use_profile(*s, std::move(*p));
  s->inputs.push_back(profile);
  return s;
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

std::string grouped(double v, int decimals) {
  std::string s = fmt(std::abs(v), decimals);
  const std::size_t dot = s.find('.');
  for (std::size_t i = dot == std::string::npos ? s.size() : dot; i > 3; i -= 3)
    s.insert(i - 3, ",");
  return (v < 0 ? "-" : "") + s;
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

}  // namespace hexi::cli
