#pragma once
// Price books (scenarios/prices/<name>.json, format version 1): dated, every number with
// its source. What `hexisim advise` prices GPU mixes with: per GPU type a purchase price
// and/or a cloud price per GPU-hour and its TDP; per machine a server (chassis, CPUs,
// memory; per GPU type where it needs a special baseboard), a network share and the host's
// own power; the price of energy, the facility's PUE and how long hardware is written off.
//
//   {"version": 1, "name": ..., "date": "YYYY-MM-DD", "currency": "USD", "description": ...,
//    "energy": {"usd_per_kwh": P, "pue": P},
//    "machine": {"network_usd": P, "server_usd": P, "host_watts": P, "amortization_years": P},
//    "gpus": [{"gpu": NAME, "purchase_usd": P, "server_usd": P, "cloud_usd_per_hour": P,
//              "tdp_watts": P}, ...]}
//   P = {"value": number, "source": "where it comes from (\"estimate: ...\" when it is one)"}
// A GPU needs tdp_watts and at least one of purchase_usd, cloud_usd_per_hour; server_usd
// is optional per GPU (the machine's otherwise).

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "topologies/gpu_catalog.hpp"
#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi {

// A number and where it comes from.
struct Priced {
  double value = 0;
  std::string source;
};

inline constexpr double kHoursPerYear = 8766.0;  // 365.25 days

struct GpuPrice {
  std::string gpu;                           // GPU catalog name
  std::optional<Priced> purchase_usd;        // $ per GPU
  std::optional<Priced> server_usd;          // $ per machine; absent: the book's machine price
  std::optional<Priced> cloud_usd_per_hour;  // $ per GPU-hour, power included
  Priced tdp_watts;                          // W per GPU
};

struct PriceBook {
  std::string name;
  std::string date;  // YYYY-MM-DD: when the prices were gathered
  std::string currency = "USD";
  std::string description;
  std::filesystem::path file;  // where it was loaded from (empty when inline)
  Priced usd_per_kwh;
  Priced pue;                 // facility power / IT power
  Priced network_usd;         // $ per machine: NIC, switch port share, cables
  Priced server_usd;          // $ per machine unless the GPU type names its own
  Priced host_watts;          // W per machine besides its GPUs
  Priced amortization_years;  // purchases written off over this many years
  std::vector<GpuPrice> gpus;

  const GpuPrice* find(std::string_view gpu) const;  // by catalog name; nullptr if absent
  // $ of one machine of `gpus` GPUs of `gpu` (GPUs, server and network); needs a purchase
  // price (GpuPrice::purchase_usd).
  double machine_usd(const GpuPrice& gpu, int gpus) const;
  // W at the wall of one such machine: (GPUs x TDP + host) x PUE.
  double machine_watts(const GpuPrice& gpu, int gpus) const;
  // $/h of drawing `watts` at the wall.
  double energy_usd_per_hour(double watts) const;
  // $/h of one such machine bought: machine_usd written off over amortization_years, plus
  // its energy.
  double machine_owned_usd_per_hour(const GpuPrice& gpu, int gpus) const;
  // $/h of one such machine rented: GPUs x cloud_usd_per_hour (power included); needs it.
  double machine_rent_usd_per_hour(const GpuPrice& gpu, int gpus) const;
};

Result<PriceBook> price_book_from_json(const Json& json, const std::string& origin,
                                       const GpuCatalog& catalog);
// By shipped name (scenarios/prices/<name>.json) or by path; a relative path is taken
// relative to `relative_to` when that is given.
Result<PriceBook> load_price_book(const std::string& name_or_path, const GpuCatalog& catalog,
                                  const std::filesystem::path& relative_to = {});
std::vector<std::string> shipped_price_books();

}  // namespace hexi
