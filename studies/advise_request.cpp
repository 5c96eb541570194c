#include "studies/advise_request.hpp"

#include "scheduler/hexiseq/hexiseq.hpp"
#include "topologies/cluster.hpp"

namespace hexi {
inline namespace studies {
namespace {

namespace fs = std::filesystem;

Model read_model_ref(const JsonNode& node, const ModelCatalog& models) {
  if (!node.json().is_string()) return read_model(node);
  const Model* m = models.find(node.str());
  if (m == nullptr)
    node.fail("a model from the catalog (" + models.names() + ") or an inline model");
  return *m;
}

Workload read_workload(const JsonNode& node) {
  node.require_object();
  node.allow_only({"tokens", "tokens_per_s", "days"});
  Workload w;
  if (auto t = node.find("tokens")) w.tokens = t->number_in(1, 1e18);
  if (auto t = node.find("tokens_per_s")) w.tokens_per_s = t->number_in(1e-6, 1e15);
  if (auto d = node.find("days")) {
    const double days = d->number_in(1e-6, 1e6);
    if (!w.tokens) d->fail_message("\"days\" needs \"tokens\" (the target is tokens / days)");
    if (w.tokens_per_s) d->fail_message("give either \"tokens_per_s\" or \"days\", not both");
    w.tokens_per_s = *w.tokens / (days * 86400.0);
  }
  if (!w.tokens && !w.tokens_per_s)
    node.fail_message("expected \"tokens\" (to train) or \"tokens_per_s\" (a target), or both");
  return w;
}

Budget read_budget(const JsonNode& node) {
  node.require_object();
  node.allow_only({"capex_usd", "usd_per_hour"});
  const auto capex = node.find("capex_usd");
  const auto hourly = node.find("usd_per_hour");
  if (capex.has_value() == hourly.has_value()) {
    node.fail_message(
        "expected exactly one of \"capex_usd\" (buy at purchase prices) and \"usd_per_hour\" "
        "(rent at cloud prices)");
  }
  if (capex) return {Pricing::kPurchase, capex->number_in(0, 1e15)};
  return {Pricing::kCloud, hourly->number_in(0, 1e12)};
}

SearchSettings read_search(const JsonNode& node) {
  node.require_object();
  node.allow_only({"max_plans", "plan_gpus", "simulate", "verify", "prune", "hexiseq_from_seq",
                   "scheduler_options", "hexiseq_options", "seed", "solver", "max_mixes"});
  SearchSettings s;
  s.max_plans = static_cast<int>(node.integer_or("max_plans", 0, 100000, s.max_plans));
  s.plan_gpus = static_cast<int>(node.integer_or("plan_gpus", 1, kMaxClusterGpus, s.plan_gpus));
  s.simulate = static_cast<int>(node.integer_or("simulate", 0, 1000, s.simulate));
  if (auto verify = node.find("verify")) s.verify = static_cast<int>(verify->integer_in(0, 64));
  s.prune = node.boolean_or("prune", s.prune);
  s.hexiseq_from_seq =
      static_cast<int>(node.integer_or("hexiseq_from_seq", 1, 1 << 30, s.hexiseq_from_seq));
  if (auto o = node.find("scheduler_options")) {
    o->require_object();
    s.scheduler_options = o->json();
  }
  if (auto solver = node.find("solver")) {
    auto backend = kBackendNames.parse(solver->str());
    if (!backend) solver->fail(kBackendNames.list("\"", " or "));
    s.hexiseq.backend = s.hexiseq.exact_backend = *backend;
  }
  if (auto o = node.find("hexiseq_options")) s.hexiseq = read_hexiseq_options(*o, s.hexiseq);
  if (auto seed = node.find("seed"))
    s.seed = static_cast<std::uint64_t>(seed->integer_in(0, INT64_MAX));
  s.max_mixes = node.integer_or("max_mixes", 1, std::int64_t{1} << 40, s.max_mixes);
  return s;
}

FabricOptions read_fabric(const JsonNode& node) {
  node.require_object();
  node.allow_only({"nic_GBps", "nics_per_machine", "machines_per_leaf", "oversubscription"});
  FabricOptions f;
  if (auto n = node.find("nic_GBps")) f.nic_GBps = n->number_in(1e-6, 1e6);
  f.nics_per_machine =
      static_cast<int>(node.integer_or("nics_per_machine", 1, 1024, f.nics_per_machine));
  f.machines_per_leaf =
      static_cast<int>(node.integer_or("machines_per_leaf", 0, 1 << 20, f.machines_per_leaf));
  if (auto o = node.find("oversubscription")) f.oversubscription = o->number_in(1, 1e3);
  return f;
}

// The catalog GPU and the book's price of an entry's "gpu"; `need` names the price the
// pricing mode needs (nullptr: only the TDP, for owned machines).
MachineType read_type(const JsonNode& node, const GpuCatalog& catalog, const PriceBook& book,
                      const char* need) {
  const JsonNode name = node.at("gpu");
  const GpuSpec* spec = catalog.find(name.str());
  if (spec == nullptr) name.fail("a GPU type of the catalog (" + catalog.names() + ")");
  const GpuPrice* price = book.find(spec->name);
  if (price == nullptr) {
    name.fail_message("GPU type \"" + spec->name + "\" is not in price book \"" + book.name + "\"" +
                      (book.file.empty() ? "" : " (" + book.file.string() + ")"));
  }
  if (need != nullptr && std::string(need) == "purchase_usd" && !price->purchase_usd)
    name.fail_message("price book \"" + book.name + "\" has no purchase_usd for " + spec->name);
  if (need != nullptr && std::string(need) == "cloud_usd_per_hour" && !price->cloud_usd_per_hour)
    name.fail_message("price book \"" + book.name + "\" has no cloud_usd_per_hour for " +
                      spec->name);
  MachineType t;
  t.gpu = *spec;
  t.price = *price;
  t.gpus = static_cast<int>(node.integer_or("gpus_per_machine", 1, 1024, 8));
  return t;
}

int find_type(const std::vector<MachineType>& types, const MachineType& t) {
  for (std::size_t i = 0; i < types.size(); ++i) {
    if (types[i].gpu.name == t.gpu.name && types[i].gpus == t.gpus) return static_cast<int>(i);
  }
  return -1;
}

void read_machines(const JsonNode& root, AdviseRequest& r, const GpuCatalog& catalog) {
  const char* need = r.budget.pricing == Pricing::kPurchase ? "purchase_usd" : "cloud_usd_per_hour";
  const JsonNode buy = root.at("buy");
  buy.require_array();
  for (std::size_t i = 0; i < buy.size(); ++i) {
    const JsonNode e = buy.at(i);
    e.require_object();
    e.allow_only({"gpu", "gpus_per_machine", "max_machines"});
    MachineType t = read_type(e, catalog, r.prices, need);
    t.max_buy = static_cast<int>(e.integer_in("max_machines", 0, 1 << 20));
    if (find_type(r.types, t) >= 0)
      e.fail_message("machine type " + t.label() + " is listed twice");
    r.types.push_back(std::move(t));
  }
  if (auto owned = root.find("owned")) {
    owned->require_array();
    for (std::size_t i = 0; i < owned->size(); ++i) {
      const JsonNode e = owned->at(i);
      e.require_object();
      e.allow_only({"gpu", "gpus_per_machine", "machines"});
      MachineType t = read_type(e, catalog, r.prices, nullptr);
      const int k = find_type(r.types, t);
      MachineType& into = k >= 0 ? r.types[k] : r.types.emplace_back(std::move(t));
      if (into.owned > 0) e.fail_message("machine type " + into.label() + " is owned twice");
      into.owned = static_cast<int>(e.integer_in("machines", 1, 1 << 20));
    }
  }
  std::int64_t most = 0;  // GPUs of the largest mix
  for (const auto& t : r.types) most += std::int64_t{t.gpus} * (t.owned + t.max_buy);
  if (r.types.empty() || most == 0) buy.fail("at least one machine to buy or own");
  if (most > kMaxClusterGpus) {
    buy.fail_message("the largest mix has " + std::to_string(most) +
                     " GPUs; a cluster has at most " + std::to_string(kMaxClusterGpus));
  }
}

void read_marginal(const JsonNode& root, AdviseRequest& r, const GpuCatalog& catalog) {
  const auto marginal = root.find("marginal");
  if (!marginal) {
    bool owns = false;
    for (const auto& t : r.types) owns = owns || t.owned > 0;
    for (std::size_t i = 0; i < r.types.size() && owns; ++i) {
      if (r.types[i].max_buy > 0) r.marginal.push_back({static_cast<int>(i), 1});
    }
    return;
  }
  marginal->require_array();
  for (std::size_t i = 0; i < marginal->size(); ++i) {
    const JsonNode e = marginal->at(i);
    e.require_object();
    e.allow_only({"gpu", "gpus_per_machine", "machines"});
    const JsonNode name = e.at("gpu");
    const GpuSpec* spec = catalog.find(name.str());
    if (spec == nullptr) name.fail("a GPU type of the catalog (" + catalog.names() + ")");
    const int gpus = static_cast<int>(e.integer_or("gpus_per_machine", 1, 1024, 8));
    int type = -1;
    for (std::size_t k = 0; k < r.types.size(); ++k) {
      if (r.types[k].gpu.name == spec->name && r.types[k].gpus == gpus && r.types[k].max_buy > 0)
        type = static_cast<int>(k);
    }
    if (type < 0) {
      name.fail_message(spec->name + " x" + std::to_string(gpus) +
                        " is not a machine type of \"buy\" (with max_machines >= 1)");
    }
    r.marginal.push_back({type, static_cast<int>(e.integer_in("machines", 1, 1 << 20))});
  }
}

void check_training(const JsonNode& root, const AdviseRequest& r) {
  if (r.training.seq_len > r.model.max_seq) {
    const std::string why = "seq_len " + std::to_string(r.training.seq_len) +
                            " is longer than the model's max_seq " +
                            std::to_string(r.model.max_seq);
    if (auto t = root.find("training"); t && t->has("seq_len")) t->at("seq_len").fail_message(why);
    root.fail_message(why + " (the default seq_len; set \"training\": {\"seq_len\": ...})");
  }
  if (!r.long_context()) {
    if (auto st = check_zero_stage(r.training, r.file.string()); !st)
      throw InputError(st.error().message);
  }
  if (r.combinations() > r.search.max_mixes) {
    root.at("buy").fail_message(std::to_string(r.combinations()) +
                                " combinations of machine counts (the product of "
                                "max_machines + 1); at most " +
                                std::to_string(r.search.max_mixes) +
                                " (search.max_mixes): lower some max_machines");
  }
}

}  // namespace

std::string MachineType::label() const {
  return gpu.name + " x" + std::to_string(gpus);
}

std::int64_t AdviseRequest::combinations() const {
  std::int64_t n = 1;
  for (const auto& t : types) {
    n *= t.max_buy + 1;
    if (n > (std::int64_t{1} << 50)) return n;  // far past any limit; no overflow
  }
  return n;
}

std::vector<int> AdviseRequest::owned() const {
  std::vector<int> n;
  for (const auto& t : types) n.push_back(t.owned);
  return n;
}

Result<AdviseRequest> advise_from_json(const Json& json, const fs::path& file,
                                       const GpuCatalog& catalog, const ModelCatalog& models) {
  const std::string origin = file.string();
  std::optional<Error> nested;
  auto request = load_with([&]() -> AdviseRequest {
    JsonNode root(json, origin);
    root.require_object();
    root.allow_only({"version", "name", "description", "model", "training", "prices", "workload",
                     "budget", "buy", "owned", "fabric", "marginal", "search"});
    root.require_version(1);
    AdviseRequest r;
    r.file = file;
    r.inputs.push_back(file);
    r.name = root.str("name");
    r.description = root.str_or("description", "");
    r.model = read_model_ref(root.at("model"), models);
    if (auto t = root.find("training")) r.training = read_training(*t);
    const JsonNode prices = root.at("prices");
    Result<PriceBook> book = bad_input("");
    if (prices.json().is_object()) {
      book = price_book_from_json(prices.json(), origin + " (prices)", catalog);
    } else if (prices.json().is_string()) {
      book = load_price_book(prices.str(), catalog, file.parent_path());
    } else {
      prices.fail("a shipped price book's name, a price book file, or an inline price book");
    }
    if (!book) {
      nested = book.error();
      throw InputError(book.error().message);
    }
    r.prices = std::move(*book);
    if (!r.prices.file.empty()) r.inputs.push_back(r.prices.file);
    r.workload = read_workload(root.at("workload"));
    r.budget = read_budget(root.at("budget"));
    if (auto s = root.find("search")) r.search = read_search(*s);
    if (auto f = root.find("fabric")) r.fabric = read_fabric(*f);
    read_machines(root, r, catalog);
    read_marginal(root, r, catalog);
    check_training(root, r);
    return r;
  });
  if (!request && nested) return *nested;
  return request;
}

Result<AdviseRequest> load_advise(const fs::path& path, const GpuCatalog& catalog,
                                  const ModelCatalog& models) {
  auto json = read_json_file(path);
  if (!json) return json.error();
  return advise_from_json(*json, path, catalog, models);
}

}  // namespace studies
}  // namespace hexi
