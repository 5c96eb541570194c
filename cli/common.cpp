#include "cli/common.hpp"

#include <algorithm>
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

Result<Scenario> load_scenario_arg(const std::string& ref) {
  auto catalogs = load_catalogs();
  if (!catalogs) return catalogs.error();
  return load_scenario(ref, catalogs->gpus, catalogs->models);
}

void print_json(const Json& json) {
  std::cout << json.dump(2) << "\n";
}

Status write_file(const std::string& path, const std::string& text) {
  std::error_code ec;
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream out(path, std::ios::binary);
  if (!out) return failure(path + ": cannot open for writing");
  out << text;
  out.close();
  if (!out) return failure(path + ": write failed");
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

}  // namespace hexi::cli
