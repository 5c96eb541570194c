#pragma once
// Runs the hexisim executable (path in $HEXISIM_BIN) and captures its exit code,
// stdout and stderr, for end-to-end tests of the command line contract (the contract: README
// command table).

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <sys/wait.h>

namespace hexi::testing {

struct CliResult {
  int code = -1;
  std::string out;
  std::string err;
};

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// A fresh scratch folder per test (under the system temp dir), removed when the test is over
// unless it failed (then its path is printed, to look inside) or HEXISIM_KEEP_TEST_DIRS is set.
class ScratchDir : public std::filesystem::path {
 public:
  explicit ScratchDir(std::filesystem::path p) : std::filesystem::path(std::move(p)) {
    std::filesystem::remove_all(*this);
    std::filesystem::create_directories(*this);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    if (std::getenv("HEXISIM_KEEP_TEST_DIRS") != nullptr) return;
    if (::testing::Test::HasFailure()) {
      std::fprintf(stderr, "kept the failed test's folder %s\n", c_str());
      return;
    }
    std::error_code ec;
    std::filesystem::remove_all(*this, ec);
  }
};

inline ScratchDir scratch_dir(const std::string& name) {
  return ScratchDir(std::filesystem::temp_directory_path() /
                    ("hexisim-test-" + name + "-" + std::to_string(::getpid())));
}

// `args` is appended to the executable path as shell words (tests quote their own).
// Runs it from the folder `cwd` (empty: this process's current folder), after the shell
// words `prefix` (limits, an environment: "ulimit -v 1048576; ").
inline CliResult run_cli_in(const std::filesystem::path& cwd, const std::string& args,
                            const std::string& prefix = "") {
  const char* bin = std::getenv("HEXISIM_BIN");
  CliResult r;
  if (bin == nullptr) {
    r.err = "HEXISIM_BIN is not set";
    return r;
  }
  auto dir = std::filesystem::temp_directory_path();
  auto out = dir / ("hexisim-cli-" + std::to_string(::getpid()) + ".out");
  auto err = dir / ("hexisim-cli-" + std::to_string(::getpid()) + ".err");
  std::string cmd =
      prefix + std::string(bin) + " " + args + " >" + out.string() + " 2>" + err.string();
  if (!cwd.empty()) cmd = "cd '" + cwd.string() + "' && " + cmd;
  int status = std::system(cmd.c_str());
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_text(out);
  r.err = read_text(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

inline CliResult run_cli(const std::string& args) {
  return run_cli_in({}, args);
}

}  // namespace hexi::testing
