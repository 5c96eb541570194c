// libFuzzer target: validation suite files as `hexisim validate SUITE [--quick]` loads them
// (load_suite, shipped catalogs). A suite's paths are relative to its file: the input is
// written to suite.json in a folder of this process's own (removed at exit) that links the
// shipped suites' plan and scenario folders (validation/suites/*/), so the shipped suites
// load from there as they are. Each input is loaded in full and with --quick. A loaded suite
// names every run by a plain file name (not empty, no '/' or '\', not "." or ".."; it names
// the run's files in --out), no name twice, steps and rounds in range, at least one
// calibration and one validation run, and a comparison only of validation runs.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "tests/fuzz/fuzz.hpp"
#include "topologies/paths.hpp"
#include "validation/validate.hpp"

namespace {

namespace fs = std::filesystem;

// This process's folder, with a link to every folder of validation/suites.
const fs::path& suite_dir() {
  static const fs::path& dir = []() -> const fs::path& {
    const fs::path& made = hexi::fuzz::process_dir("hexisim-fuzz-suite");
    for (const auto& entry : fs::directory_iterator(hexi::data_root() / "validation/suites")) {
      if (entry.is_directory()) {
        fs::create_directory_symlink(entry.path(), made / entry.path().filename());
      }
    }
    return made;
  }();
  return dir;
}

bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string("/\\\0", 3)) == std::string::npos;
}

void check_suite(const hexi::validation::Suite& s) {
  using namespace hexi;
  std::set<std::string> names;
  for (const auto* runs : {&s.calibration, &s.validation}) {
    for (const auto& r : *runs) {
      fuzz::check(plain_file_name(r.name), "a run name that is not a plain file name", r.name);
      fuzz::check(names.insert(r.name).second, "two runs of one name", r.name);
      fuzz::check(r.devices >= 1, "a run without devices", r.name);
      fuzz::check(r.backend == s.backend, "a run's backend is not the suite's", r.name);
    }
  }
  fuzz::check(!s.calibration.empty() && !s.validation.empty(), "a suite without runs");
  fuzz::check(s.steps >= 3 && s.steps <= 1000 && s.rounds >= 1 && s.rounds <= 100,
              "steps or rounds out of range");
  fuzz::check(s.backend == "cpu" || s.backend == "cuda", "an unknown backend", s.backend);
  if (s.compare) {
    for (const std::string& n : {s.compare->first, s.compare->second}) {
      fuzz::check(std::any_of(s.validation.begin(), s.validation.end(),
                              [&](const auto& r) { return r.name == n; }),
                  "a comparison of a run that is not a validation run", n);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hexi;
  static const ModelCatalog models = fuzz::must(ModelCatalog::load_shipped(), "shipped models");
  const fs::path file = suite_dir() / "suite.json";
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  for (bool quick : {false, true}) {
    auto suite = validation::load_suite(file.string(), quick, fuzz::shipped_gpus(), models);
    if (suite) {
      check_suite(*suite);
    } else {
      fuzz::check(suite.error().kind == ErrorKind::kBadInput, "loading a suite failed on its own",
                  suite.error().message);
    }
  }
  return 0;
}
