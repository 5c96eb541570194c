#pragma once
// Shared pieces of the hexisim subcommands: catalogs, error reporting, tables.

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "scenarios/model.hpp"
#include "scenarios/scenario.hpp"
#include "topologies/gpu_catalog.hpp"
#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi::cli {

// What a parsed subcommand runs; returns the process exit code.
using Runner = std::function<int()>;

// Prints "hexisim: error: <message>" to stderr; returns 2 (bad input) or 1 (failure).
int report(const Error& error);

// Loads the shipped GPU and model catalogs (or reports why not).
struct Catalogs {
  GpuCatalog gpus;
  ModelCatalog models;
};
Result<Catalogs> load_catalogs();

// Loads a scenario by name or path with the shipped catalogs.
Result<Scenario> load_scenario_arg(const std::string& ref);

// One JSON object on stdout.
void print_json(const Json& json);

// Writes text to a file, creating parent folders; names the file on failure.
Status write_file(const std::string& path, const std::string& text);

// A plain aligned text table.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& out) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// Fixed-point formatting: fmt(3.14159, 2) == "3.14".
std::string fmt(double value, int decimals);

}  // namespace hexi::cli
