#include "scheduler/search/search.hpp"

#include <algorithm>

#include "topologies/text.hpp"

namespace hexi {
inline namespace search {
namespace {

std::string gib(double bytes) {
  return fixed(bytes / kGiB, 1);
}

std::string billions(double n) {
  return fixed(n / 1e9, 2);
}

}  // namespace

double minimum_memory_bytes(const Model& m, const TrainingConfig& t) {
  MemoryBreakdown mem = device_memory(m, t, whole_model_shape(m, t.micro_batch, Recompute::kFull));
  return mem.total() - mem.reserve;
}

Json SearchResult::to_json() const {
  Json points = Json::array();
  for (const auto& p : trace) {
    points.push_back(
        {{"time_s", p.time_s}, {"candidates", p.candidates}, {"tokens_per_s", p.tokens_per_s}});
  }
  Json phase_list = Json::array();
  for (const auto& p : phases) {
    phase_list.push_back({{"name", p.name}, {"time_s", p.time_s}, {"candidates", p.candidates}});
  }
  Json search = {{"mode", mode},
                 {"candidates", candidates},
                 {"phases", phase_list},
                 {"stopped", stop_reason()},
                 {"candidates_after_budget", candidates_after_budget}};
  Json compared_list = Json::array();
  auto entry = [](const ComparedScheduler& c, bool chosen) {
    Json e = {{"scheduler", c.scheduler},
              {"chosen", chosen},
              {"tokens_per_s", c.tokens_per_s},
              {"simulated_tokens_per_s",
               c.simulated_tokens_per_s > 0 ? Json(c.simulated_tokens_per_s) : Json(nullptr)},
              {"gpus", c.gpus},
              {"fits", c.fits},
              {"search_time_s", c.search_time_s}};
    if (!c.error.empty()) e["error"] = c.error;
    return e;
  };
  for (const ComparedScheduler& c : compared)
    compared_list.push_back(entry(c, c.scheduler == scheduler));
  if (compared.empty()) {
    ComparedScheduler self{
        scheduler,        "", estimate.tokens_per_s, 0, plan.num_devices(), search_time_s,
        estimate.feasible};
    if (verified_chosen >= 0)
      self.simulated_tokens_per_s = verified[verified_chosen].simulated_tokens_per_s;
    compared_list.push_back(entry(self, true));
  }
  Json out = {{"scheduler", scheduler},
              {"search_time_s", search_time_s},
              {"candidates", compared_list},
              {"budget_exhausted", budget_exhausted},
              {"notes", notes},
              {"trace", points},
              {"search", search}};
  if (all_gpus) {
    out["all_gpus"] = {{"tokens_per_s", all_gpus->estimate.tokens_per_s},
                       {"gpus", all_gpus->plan.num_devices()},
                       {"comment", all_gpus->plan.comment}};
  }
  if (!verified.empty()) {
    Json plans = Json::array();
    for (const VerifiedPlan& v : verified) {
      plans.push_back({{"rank", v.rank},
                       {"estimate_tokens_per_s", v.estimate_tokens_per_s},
                       {"simulated_tokens_per_s", v.simulated_tokens_per_s}});
    }
    out["verify"] = {{"fidelity", verified_fidelity},
                     {"plans", plans},
                     {"chosen_rank", verified[verified_chosen].rank},
                     {"time_s", verify_time_s}};
  }
  return out;
}

std::string SearchResult::summary() const {
  std::string out = scheduler + (mode.empty() ? "" : " (" + mode + ")") + ": " +
                    std::to_string(candidates) + " candidates in " + fixed(search_time_s, 2) + " s";
  for (std::size_t i = 0; i < phases.size(); ++i) {
    const PhaseTime& p = phases[i];
    out += (i ? ", " : " (") + p.name + " " + fixed(p.time_s, 2) + " s / " +
           std::to_string(p.candidates);
  }
  if (!phases.empty()) out += ")";
  return out + "; " + (budget_exhausted ? "stopped by the time budget" : "converged");
}

Status check_schedulable(const Scenario& sc) {
  if (auto st = check_zero_stage(sc.training, sc.file.empty() ? sc.name : sc.file.string()); !st)
    return st;
  const Cluster& c = sc.cluster;
  auto parts = c.connected_parts();
  if (parts.size() > 1) {
    std::string list;
    for (std::size_t i = 0; i < parts.size() && i < 4; ++i) {
      list += (i ? "; " : "") + std::string("part ") + std::to_string(i + 1) + ": " +
              std::to_string(parts[i].size()) + " machine(s) starting with " +
              c.machines()[parts[i][0]].name;
    }
    return bad_input("cluster \"" + c.name() + "\" has " + std::to_string(parts.size()) +
                     " disconnected parts (" + list +
                     "): pipelines and data parallelism need a route between every pair of GPUs; "
                     "connect the parts (spine, or an override link) or plan each part separately");
  }
  const double need = minimum_memory_bytes(sc.model, sc.training);
  const double reserve = sc.training.reserve_gib * kGiB;
  double usable = 0;
  for (int d = 0; d < c.num_devices(); ++d)
    usable += std::max(0.0, c.device_memory_bytes(d) - reserve);
  if (need > usable) {
    return bad_input(sc.model.name + " does not fit in cluster \"" + c.name() +
                     "\": any plan needs at least " + gib(need) +
                     " GiB (16 bytes per parameter for " + billions(sc.model.params()) +
                     "e9 parameters, plus activations under full recompute and logits of one "
                     "micro-batch) besides the " +
                     gib(reserve) + " GiB reserve per GPU; the cluster has " +
                     gib(c.memory_bytes()) + " GiB, " + gib(usable) + " GiB after the reserves");
  }
  return {};
}

SearchClock::SearchClock(std::string scheduler, const SearchOptions& options)
    : scheduler_(std::move(scheduler)),
      options_(options),
      start_(std::chrono::steady_clock::now()) {}

double SearchClock::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

bool SearchClock::out_of_time() const {
  if (options_.time_budget_s <= 0 || elapsed_s() < options_.time_budget_s) return false;
  if (!stopped_by_budget_) candidates_at_budget_ = candidates_;
  stopped_by_budget_ = true;
  return true;
}

void SearchClock::count(double tokens_per_s) {
  ++candidates_;
  if (tokens_per_s > best_) {
    best_ = tokens_per_s;
    trace_.push_back({elapsed_s(), candidates_, tokens_per_s});
  }
}

void SearchClock::phase(const std::string& what, Eta eta, double eta_s) {
  if (!options_.progress) return;
  const double now = elapsed_s();
  if (now - last_report_s_ < options_.progress_interval_s) return;
  last_report_s_ = now;
  if (options_.time_budget_s > 0) {
    const double left = std::max(0.0, options_.time_budget_s - now);
    if (eta == Eta::kNone || eta_s >= left) {
      eta = Eta::kBudget;
      eta_s = left;
    }
  }
  options_.progress({scheduler_, what, now, candidates_, best_, eta_s, eta});
}

double SearchClock::phase_elapsed_s() const {
  return elapsed_s() - (phase_starts_.empty() ? 0.0 : phase_starts_.back().at_s);
}

void SearchClock::begin(const std::string& phase) {
  phase_starts_.push_back({phase, elapsed_s(), candidates_});
}

void SearchClock::finish(SearchResult& result) const {
  result.scheduler = scheduler_;
  result.search_time_s = elapsed_s();
  result.phases.clear();
  for (std::size_t i = 0; i < phase_starts_.size(); ++i) {
    const PhaseStart& p = phase_starts_[i];
    const bool last = i + 1 == phase_starts_.size();
    const double end_s = last ? result.search_time_s : phase_starts_[i + 1].at_s;
    const long end_n = last ? candidates_ : phase_starts_[i + 1].candidates;
    auto same = std::find_if(result.phases.begin(), result.phases.end(),
                             [&](const PhaseTime& t) { return t.name == p.name; });
    if (same == result.phases.end()) {
      result.phases.push_back({p.name, 0, 0});
      same = result.phases.end() - 1;
    }
    same->time_s += end_s - p.at_s;
    same->candidates += end_n - p.candidates;
  }
  result.candidates = candidates_;
  result.trace = trace_;
  result.budget_exhausted = stopped_by_budget_;
  result.candidates_after_budget = stopped_by_budget_ ? candidates_ - candidates_at_budget_ : 0;
}

}  // namespace search
}  // namespace hexi
