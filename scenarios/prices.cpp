#include "scenarios/prices.hpp"

#include <algorithm>
#include <cctype>

#include "scenarios/scenario.hpp"
#include "topologies/paths.hpp"

namespace hexi {
namespace {

namespace fs = std::filesystem;

// {"value": number in [min, max], "source": non-empty text}.
Priced read_priced(const JsonNode& node, double min, double max) {
  node.require_object();
  node.allow_only({"value", "source"});
  Priced p;
  p.value = node.at("value").number_in(min, max);
  const JsonNode source = node.at("source");
  p.source = source.str();
  if (p.source.find_first_not_of(" \t\n") == std::string::npos)
    source.fail("where the number comes from (\"estimate: ...\" when it is one)");
  return p;
}

std::optional<Priced> read_optional(const JsonNode& node, std::string_view key, double min,
                                    double max) {
  if (auto n = node.find(key)) return read_priced(*n, min, max);
  return std::nullopt;
}

bool is_date(const std::string& s) {
  if (s.size() != 10 || s[4] != '-' || s[7] != '-') return false;
  for (std::size_t i : {0, 1, 2, 3, 5, 6, 8, 9}) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  const int month = std::stoi(s.substr(5, 2)), day = std::stoi(s.substr(8, 2));
  return month >= 1 && month <= 12 && day >= 1 && day <= 31;
}

GpuPrice read_gpu(const JsonNode& node, const GpuCatalog& catalog) {
  node.require_object();
  node.allow_only({"gpu", "purchase_usd", "server_usd", "cloud_usd_per_hour", "tdp_watts"});
  GpuPrice g;
  const JsonNode name = node.at("gpu");
  const GpuSpec* spec = catalog.find(name.str());
  if (spec == nullptr) name.fail("a GPU type of the catalog (" + catalog.names() + ")");
  g.gpu = spec->name;
  g.purchase_usd = read_optional(node, "purchase_usd", 0, 1e9);
  g.server_usd = read_optional(node, "server_usd", 0, 1e9);
  g.cloud_usd_per_hour = read_optional(node, "cloud_usd_per_hour", 0, 1e6);
  g.tdp_watts = read_priced(node.at("tdp_watts"), 1, 1e5);
  if (!g.purchase_usd && !g.cloud_usd_per_hour)
    node.fail_message("expected \"purchase_usd\" or \"cloud_usd_per_hour\" (or both)");
  return g;
}

}  // namespace

const GpuPrice* PriceBook::find(std::string_view gpu) const {
  for (const auto& g : gpus) {
    if (g.gpu == gpu) return &g;
  }
  return nullptr;
}

double PriceBook::machine_usd(const GpuPrice& gpu, int n) const {
  const double server = gpu.server_usd ? gpu.server_usd->value : server_usd.value;
  return n * gpu.purchase_usd.value_or(Priced{}).value + server + network_usd.value;
}

double PriceBook::machine_watts(const GpuPrice& gpu, int n) const {
  return (n * gpu.tdp_watts.value + host_watts.value) * pue.value;
}

double PriceBook::energy_usd_per_hour(double watts) const {
  return watts * (usd_per_kwh.value / 1000.0);
}

double PriceBook::machine_owned_usd_per_hour(const GpuPrice& gpu, int n) const {
  return machine_usd(gpu, n) / (amortization_years.value * kHoursPerYear) +
         energy_usd_per_hour(machine_watts(gpu, n));
}

double PriceBook::machine_rent_usd_per_hour(const GpuPrice& gpu, int n) const {
  return n * gpu.cloud_usd_per_hour.value_or(Priced{}).value;
}

Result<PriceBook> price_book_from_json(const Json& json, const std::string& origin,
                                       const GpuCatalog& catalog) {
  return load_with([&]() -> PriceBook {
    JsonNode root(json, origin);
    root.require_object();
    root.allow_only(
        {"version", "name", "date", "currency", "description", "energy", "machine", "gpus"});
    root.require_version(1);
    PriceBook b;
    b.name = root.str("name");
    const JsonNode date = root.at("date");
    b.date = date.str();
    if (!is_date(b.date)) date.fail("the date the prices were gathered, as YYYY-MM-DD");
    if (auto currency = root.find("currency")) {
      b.currency = currency->str();
      if (b.currency != "USD") currency->fail("\"USD\" (the only currency advise reports in)");
    }
    b.description = root.str_or("description", "");
    const JsonNode energy = root.at("energy");
    energy.require_object();
    energy.allow_only({"usd_per_kwh", "pue"});
    b.usd_per_kwh = read_priced(energy.at("usd_per_kwh"), 0, 10);
    b.pue = read_priced(energy.at("pue"), 1, 5);
    const JsonNode machine = root.at("machine");
    machine.require_object();
    machine.allow_only({"network_usd", "server_usd", "host_watts", "amortization_years"});
    b.network_usd = read_priced(machine.at("network_usd"), 0, 1e9);
    b.server_usd = read_priced(machine.at("server_usd"), 0, 1e9);
    b.host_watts = read_priced(machine.at("host_watts"), 0, 1e6);
    b.amortization_years = read_priced(machine.at("amortization_years"), 0.01, 100);
    const JsonNode gpus = root.at("gpus");
    gpus.require_array();
    if (gpus.size() == 0) gpus.fail("at least one GPU type");
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      GpuPrice g = read_gpu(gpus.at(i), catalog);
      if (b.find(g.gpu) != nullptr)
        gpus.at(i).at("gpu").fail_message("GPU type \"" + g.gpu + "\" is priced twice");
      b.gpus.push_back(std::move(g));
    }
    return b;
  });
}

std::vector<std::string> shipped_price_books() {
  return json_stems(data_root() / "scenarios/prices");
}

Result<PriceBook> load_price_book(const std::string& ref, const GpuCatalog& catalog,
                                  const fs::path& relative_to) {
  auto p = find_shipped_or_path(ref, "scenarios/prices", "price book", relative_to);
  if (!p) return p.error();
  auto json = read_json_file(*p);
  if (!json) return json.error();
  auto book = price_book_from_json(*json, p->string(), catalog);
  if (book) book->file = *p;
  return book;
}

}  // namespace hexi
