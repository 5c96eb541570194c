#include "validation/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>

#include "scheduler/program/lower_sequence.hpp"
#include "sim/simulator.hpp"
#include "topologies/paths.hpp"
#include "topologies/text.hpp"

namespace hexi::validation {
namespace {

namespace fs = std::filesystem;

// The simulated comparison of a measured run's program under `profile`.
Result<TraceComparison> simulated(const MeasuredRun& run, const Profile& profile) {
  Scenario sc = run.scenario;
  use_profile(sc, profile);
  SimOptions so;
  so.trace = true;
  auto out = simulate(run.program, sc.cluster, sc.model, sc.training, sc.profile, so);
  if (!out) return out.error();
  auto json = parse_json_text(out->trace_json, "simulated trace of " + run.origin);
  if (!json) return json.error();
  auto trace = trace_from_json(*json, "simulated trace of " + run.origin);
  if (!trace) return trace.error();
  return compare_traces(run.program, *trace, run.trace, run.origin);
}

std::vector<SuiteRun> read_runs(const JsonNode& list, const fs::path& dir, const GpuCatalog& gpus,
                                const ModelCatalog& models, const std::string& cluster_file) {
  list.require_array();
  std::vector<SuiteRun> out;
  for (std::size_t i = 0; i < list.json().size(); ++i) {
    auto node = list.at(i);
    node.allow_only({"name", "what", "scenario", "plan"});
    SuiteRun r;
    r.name = node.str("name");
    // The name names the run's files in --out (traces, logs): a file name, never a path.
    if (r.name.empty() || r.name == "." || r.name == ".." ||
        r.name.find_first_of(std::string("/\\\0", 3)) != std::string::npos) {
      node.at("name").fail(
          "a file name (no '/', not '.' or '..'): it names the run's files in --out");
    }
    r.what = node.find("what") ? node.str("what") : "";
    const std::string sc = node.str("scenario");
    r.scenario = looks_like_path(sc) ? (dir / sc).string() : sc;
    r.plan = (dir / node.str("plan")).string();
    auto scenario = load_scenario(r.scenario, gpus, models);
    if (!scenario) node.at("scenario").fail_message(scenario.error().message);
    if (cluster_file_of(*scenario) != cluster_file) {
      node.at("scenario")
          .fail_message("runs on cluster " + scenario->cluster_ref + ", not the suite's cluster");
    }
    auto plan = read_plan_file(r.plan);
    if (!plan) node.at("plan").fail_message(plan.error().message);
    r.devices = plan->num_devices();
    out.push_back(std::move(r));
  }
  return out;
}

// The runs of `all` named in `names` (a "quick" list), in its order, each once (a run's name
// names its files in --out).
std::vector<SuiteRun> pick(const std::vector<SuiteRun>& all, const JsonNode& names) {
  names.require_array();
  std::vector<SuiteRun> out;
  for (std::size_t i = 0; i < names.json().size(); ++i) {
    const std::string n = names.at(i).str();
    auto it = std::find_if(all.begin(), all.end(), [&](const SuiteRun& r) { return r.name == n; });
    if (it == all.end()) names.at(i).fail_message("no run named \"" + n + "\" in the suite");
    if (std::any_of(out.begin(), out.end(), [&](const SuiteRun& r) { return r.name == n; })) {
      names.at(i).fail_message("run \"" + n + "\" is listed twice");
    }
    out.push_back(*it);
  }
  return out;
}

struct Errors {
  double mape = 0, max = 0;
};
Errors errors(const std::vector<RunResult>& runs, bool calibrated) {
  Errors e;
  for (const auto& r : runs) {
    const double x = std::abs(calibrated ? r.error() : r.error_default());
    e.mape += x;
    e.max = std::max(e.max, x);
  }
  if (!runs.empty()) e.mape /= static_cast<double>(runs.size());
  return e;
}

std::string pct(double x) {
  return format("%+.1f %%", 100 * x);
}

// The files of round `round` (0-based) of run `name` in the output folder are this stem +
// ".trace.json" and ".log": NAME for the first round, NAME.round<k+1> for the others.
std::string round_stem(const std::string& name, int round) {
  return round == 0 ? name : name + format(".round%d", round + 1);
}

// The rounds' medians against each other (Reproducibility).
Reproducibility reproducibility(const std::vector<RunResult>& runs, int rounds) {
  std::vector<std::string> names;
  for (const auto& r : runs) names.push_back(r.name);
  Reproducibility out;
  for (int i = 0; i < rounds; ++i) {
    for (int j = 0; j < rounds; ++j) {
      if (i == j) continue;
      std::vector<double> predicted, measured;
      double sum = 0;
      for (const auto& r : runs) {
        predicted.push_back(r.round_measured_s[i]);
        measured.push_back(r.round_measured_s[j]);
        const double e = std::abs(predicted.back() / measured.back() - 1);
        sum += e;
        out.max_error = std::max(out.max_error, e);
      }
      out.mape += sum / static_cast<double>(runs.size());
      out.tau = std::min(out.tau, kendall_tau(names, measured, predicted).tau);
      ++out.pairs;
    }
  }
  out.mape /= out.pairs;
  return out;
}

}  // namespace

std::string cluster_file_of(const Scenario& s) {
  return fs::weakly_canonical(cluster_file(s.cluster_ref, s.file.parent_path())).string();
}

Result<Suite> load_suite(const std::string& path, bool quick, const GpuCatalog& gpus,
                         const ModelCatalog& models) {
  auto json = read_json_file(path);
  if (!json) return json.error();
  return load_with([&] {
    JsonNode root(*json, path);
    root.allow_only({"version", "name", "description", "cluster", "steps", "rounds", "backend",
                     "calibration", "validation", "quick", "compare"});
    if (root.at("version").integer_in(1, 1) != 1) root.at("version").fail("version 1");
    Suite s;
    s.file = path;
    s.name = root.str("name");
    s.description = root.find("description") ? root.str("description") : "";
    const fs::path dir = fs::path(path).parent_path();
    const std::string cluster = root.str("cluster");
    s.cluster = looks_like_path(cluster) ? (dir / cluster).string() : cluster;
    const std::string cfile = fs::weakly_canonical(cluster_file(s.cluster)).string();
    if (auto steps = root.find("steps")) s.steps = static_cast<int>(steps->integer_in(3, 1000));
    if (auto rounds = root.find("rounds")) s.rounds = static_cast<int>(rounds->integer_in(1, 100));
    s.calibration = read_runs(root.at("calibration"), dir, gpus, models, cfile);
    s.validation = read_runs(root.at("validation"), dir, gpus, models, cfile);
    if (auto backend = root.find("backend")) {
      s.backend = backend->str();
      if (s.backend != "cpu" && s.backend != "cuda") backend->fail("\"cpu\" or \"cuda\"");
      for (auto* list : {&s.calibration, &s.validation}) {
        for (auto& r : *list) r.backend = s.backend;
      }
    }
    std::set<std::string> names;
    for (const auto* list : {&s.calibration, &s.validation}) {
      for (const auto& r : *list) {
        if (!names.insert(r.name).second)
          root.fail_message("two runs are named \"" + r.name + "\"");
      }
    }
    for (const auto& c : s.calibration) {
      for (const auto& v : s.validation) {
        if (fs::weakly_canonical(c.plan) == fs::weakly_canonical(v.plan) &&
            c.scenario == v.scenario) {
          root.fail_message("validation run \"" + v.name + "\" is calibration run \"" + c.name +
                            "\" (the same scenario and plan): validate on what was not fitted");
        }
      }
    }
    if (auto cmp = root.find("compare")) {
      cmp->require_array();
      if (cmp->json().size() != 2) cmp->fail("two validation run names [plan, baseline]");
      s.compare = std::pair{cmp->at(std::size_t{0}).str(), cmp->at(std::size_t{1}).str()};
    }
    if (quick) {
      auto q = root.at("quick");
      q.allow_only({"calibration", "validation"});
      s.calibration = pick(s.calibration, q.at("calibration"));
      s.validation = pick(s.validation, q.at("validation"));
    }
    if (s.compare) {
      for (const std::string& n : {s.compare->first, s.compare->second}) {
        if (std::none_of(s.validation.begin(), s.validation.end(),
                         [&](const SuiteRun& r) { return r.name == n; })) {
          if (quick) {
            s.compare.reset();
            break;
          }
          root.at("compare").fail_message("\"" + n + "\" is not a validation run");
        }
      }
    }
    if (s.calibration.empty() || s.validation.empty())
      root.fail_message("needs at least one calibration and one validation run");
    return s;
  });
}

Ranking kendall_tau(const std::vector<std::string>& names, const std::vector<double>& measured,
                    const std::vector<double>& simulated) {
  Ranking r;
  int concordant = 0, discordant = 0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    for (std::size_t j = i + 1; j < names.size(); ++j) {
      const double m = measured[i] - measured[j];
      const double s = simulated[i] - simulated[j];
      if (m * s > 0) {
        ++concordant;
      } else if (m * s < 0 || (m == 0) != (s == 0)) {
        ++discordant;
        const double apart = std::abs(measured[i] / measured[j] - 1);
        r.discordant.push_back(names[i] + " vs " + names[j] + ": measured " +
                               format("%.1f", 100 * apart) + " % apart");
      }
    }
  }
  const int pairs = static_cast<int>(names.size() * (names.size() - 1) / 2);
  r.tau = pairs > 0 ? static_cast<double>(concordant - discordant) / pairs : 1.0;
  return r;
}

Result<MeasuredRun> join_rounds(std::vector<MeasuredRun> rounds) {
  if (rounds.empty()) return bad_input("join_rounds: no round");
  MeasuredRun out = std::move(rounds.front());
  int next = 0;  // the joined run's next step number
  for (const TraceOp& e : out.trace.ops) next = std::max(next, e.step + 1);
  for (std::size_t k = 1; k < rounds.size(); ++k) {
    const MeasuredRun& r = rounds[k];
    if (r.program.num_ops() != out.program.num_ops() || r.plan_file != out.plan_file) {
      return bad_input(r.origin + ": not a round of the run of " + out.origin +
                       " (another plan or program)");
    }
    int last = 0;
    for (const TraceOp& e : r.trace.ops) {
      if (e.step < 1) continue;  // the round's first step warms up again
      // A joined step is an int with room for one more (the trace reader's bound on a step).
      const std::int64_t step = std::int64_t{next} + e.step - 1;
      if (step >= std::numeric_limits<int>::max()) {
        return bad_input(r.origin + ": step " + std::to_string(e.step) +
                         ", numbered on after the " + std::to_string(next) +
                         " steps of the rounds before it, is past " +
                         std::to_string(std::numeric_limits<int>::max() - 1));
      }
      TraceOp joined = e;
      joined.step = static_cast<int>(step);
      out.trace.ops.push_back(joined);
      last = std::max(last, e.step);
    }
    next += last;
  }
  return out;
}

namespace {

// A suite's validation, in named steps: every run on the engine, suite.rounds times,
// interleaved (measure); each run's rounds joined; calibration on the calibration runs only,
// its profile written; every validation run simulated with both profiles; the summary.
class Validation {
 public:
  Validation(const Suite& suite, const Launcher& launch, const fs::path& out_dir,
             const std::function<void(const std::string&)>& log)
      : suite_(suite), launch_(launch), out_dir_(out_dir), log_(log) {}

  Result<ValidationReport> run() {
    std::error_code ec;
    fs::create_directories(out_dir_, ec);
    if (ec) return failure(out_dir_.string() + ": cannot create the folder: " + ec.message());
    auto gpus = GpuCatalog::load_shipped();
    if (!gpus) return gpus.error();
    auto models = ModelCatalog::load_shipped();
    if (!models) return models.error();
    if (Status s = measure(*gpus, *models); !s) return s.error();
    if (Status s = join(); !s) return s.error();
    if (Status s = calibrate_on_runs(); !s) return s.error();
    if (Status s = simulate_runs(); !s) return s.error();
    summarise();
    return std::move(rep_);
  }

 private:
  // 1. Every run on the engine, suite.rounds times, interleaved.
  Status measure(const GpuCatalog& gpus, const ModelCatalog& models) {
    const int per_round = static_cast<int>(suite_.calibration.size() + suite_.validation.size());
    const int total = suite_.rounds * per_round;
    int done = 0;
    for (int k = 0; k < suite_.rounds; ++k) {
      for (const auto* list : {&suite_.calibration, &suite_.validation}) {
        for (const SuiteRun& r : *list) {
          if (Status s = measure_round(r, k, ++done, total, gpus, models); !s) return s;
        }
      }
    }
    return {};
  }

  // Round k of run r, the done-th of `total` runs.
  Status measure_round(const SuiteRun& r, int k, int done, int total, const GpuCatalog& gpus,
                       const ModelCatalog& models) {
    const std::string stem = round_stem(r.name, k);
    const std::string trace = (out_dir_ / (stem + ".trace.json")).string();
    const std::string logfile = (out_dir_ / (stem + ".log")).string();
    log_(format("[%d/%d] ", done, total) + r.name +
         (suite_.rounds > 1 ? format(" (round %d of %d)", k + 1, suite_.rounds) : "") +
         ": hexisim train on " + std::to_string(r.devices) + " ranks, " +
         std::to_string(suite_.steps) + " steps");
    auto rc = launch_(r, suite_.steps, trace, logfile);
    if (!rc) return rc.error();
    if (*rc != 0) {
      return failure(r.name + ": hexisim train exited with status " + std::to_string(*rc) +
                     " (its output: " + logfile + ")");
    }
    auto m = load_measured_run(trace, gpus, models);
    if (!m) return m.error();
    auto ops = measured_ops(m->program, m->trace, m->origin);
    if (!ops) return ops.error();
    round_medians_[r.name].push_back(median(ops->step_seconds));
    rounds_[r.name].push_back(std::move(*m));
    return {};
  }

  Status join() {
    for (auto& [name, runs] : rounds_) {
      auto joined = join_rounds(std::move(runs));
      if (!joined) return joined.error();
      measured_.emplace(name, std::move(*joined));
    }
    return {};
  }

  // 2. Calibrate on the calibration runs only; the profile written.
  Status calibrate_on_runs() {
    std::vector<MeasuredRun> cal;
    for (const SuiteRun& r : suite_.calibration) cal.push_back(measured_.at(r.name));
    log_("calibrating on " + std::to_string(cal.size()) + " traces");
    auto c = calibrate(cal, Profile());
    if (!c) return c.error();
    rep_.suite = suite_.name;
    rep_.rounds = suite_.rounds;
    rep_.calibration = std::move(*c);
    rep_.profile_file = (out_dir_ / "profile.json").string();
    Json p = rep_.calibration.profile.to_json();
    p["comment"] = "fitted by hexisim validate (suite " + suite_.name + ")";
    return write_file_atomically(rep_.profile_file, dump_json(p, 2) + "\n");
  }

  // 3. Simulate every validation run with both profiles.
  Status simulate_runs() {
    const Profile defaults;
    for (const SuiteRun& r : suite_.validation) {
      log_("simulating " + r.name);
      const MeasuredRun& m = measured_.at(r.name);
      auto cal_cmp = simulated(m, rep_.calibration.profile);
      if (!cal_cmp) return cal_cmp.error();
      auto def_cmp = simulated(m, defaults);
      if (!def_cmp) return def_cmp.error();
      RunResult rr;
      rr.name = r.name;
      rr.what = r.what;
      rr.trace = m.origin;
      auto ops = measured_ops(m.program, m.trace, m.origin);
      if (!ops) return ops.error();
      rr.measured_s = median(ops->step_seconds);
      rr.measured_min_s = *std::min_element(ops->step_seconds.begin(), ops->step_seconds.end());
      rr.measured_max_s = *std::max_element(ops->step_seconds.begin(), ops->step_seconds.end());
      rr.steps_used = static_cast<int>(ops->step_seconds.size());
      if (suite_.rounds > 1) rr.round_measured_s = round_medians_.at(r.name);
      rr.simulated_s = cal_cmp->simulated_iteration_s;
      rr.simulated_default_s = def_cmp->simulated_iteration_s;
      rr.classes = std::move(*cal_cmp);
      rep_.runs.push_back(std::move(rr));
    }
    return {};
  }

  // 4. Summary.
  void summarise() {
    const Errors e = errors(rep_.runs, true), d = errors(rep_.runs, false);
    rep_.mape = e.mape;
    rep_.max_error = e.max;
    rep_.mape_default = d.mape;
    rep_.max_error_default = d.max;
    std::vector<std::string> names;
    std::vector<double> meas, sim, sim_default;
    for (const auto& r : rep_.runs) {
      names.push_back(r.name);
      meas.push_back(r.measured_s);
      sim.push_back(r.simulated_s);
      sim_default.push_back(r.simulated_default_s);
    }
    rep_.ranking = kendall_tau(names, meas, sim);
    if (suite_.rounds > 1) rep_.reproducibility = reproducibility(rep_.runs, suite_.rounds);
    rep_.ranking_default = kendall_tau(names, meas, sim_default);
    if (suite_.compare) {
      auto find = [&](const std::string& n) {
        return *std::find_if(rep_.runs.begin(), rep_.runs.end(),
                             [&](const RunResult& r) { return r.name == n; });
      };
      const RunResult& plan = find(suite_.compare->first);
      const RunResult& base = find(suite_.compare->second);
      rep_.compare = suite_.compare;
      rep_.compare_measured = base.measured_s / plan.measured_s;
      rep_.compare_simulated = base.simulated_s / plan.simulated_s;
    }
  }

  const Suite& suite_;
  const Launcher& launch_;
  const fs::path& out_dir_;
  const std::function<void(const std::string&)>& log_;
  std::map<std::string, std::vector<MeasuredRun>> rounds_;    // per run, its rounds
  std::map<std::string, std::vector<double>> round_medians_;  // each round's measured median
  std::map<std::string, MeasuredRun> measured_;               // per run, its rounds joined
  ValidationReport rep_;
};

}  // namespace

Result<ValidationReport> validate(const Suite& suite, const Launcher& launch,
                                  const fs::path& out_dir,
                                  const std::function<void(const std::string&)>& log) {
  return Validation(suite, launch, out_dir, log).run();
}

Json to_json(const ValidationReport& r) {
  Json runs = Json::array();
  for (const auto& x : r.runs) {
    runs.push_back({{"name", x.name},
                    {"what", x.what},
                    {"trace", x.trace},
                    {"measured_s", x.measured_s},
                    {"measured_min_s", x.measured_min_s},
                    {"measured_max_s", x.measured_max_s},
                    {"steps_used", x.steps_used},
                    {"round_measured_s", x.round_measured_s},
                    {"simulated_s", x.simulated_s},
                    {"simulated_default_s", x.simulated_default_s},
                    {"error", x.error()},
                    {"error_default", x.error_default()},
                    {"classes", to_json(x.classes)["classes"]}});
  }
  auto ranking = [](const Ranking& k) {
    return Json{{"kendall_tau", k.tau}, {"discordant", k.discordant}};
  };
  Json out = {{"suite", r.suite},
              {"rounds", r.rounds},
              {"profile", r.profile_file},
              {"mape", r.mape},
              {"max_error", r.max_error},
              {"kendall_tau", r.ranking.tau},
              {"discordant", r.ranking.discordant},
              {"uncalibrated",
               {{"mape", r.mape_default},
                {"max_error", r.max_error_default},
                {"ranking", ranking(r.ranking_default)}}},
              {"plans", runs},
              {"calibration", to_json(r.calibration)}};
  if (r.reproducibility) {
    out["reproducibility"] = {{"mape", r.reproducibility->mape},
                              {"max_error", r.reproducibility->max_error},
                              {"kendall_tau", r.reproducibility->tau},
                              {"round_pairs", r.reproducibility->pairs}};
  }
  if (r.compare) {
    out["compare"] = {{"plan", r.compare->first},
                      {"baseline", r.compare->second},
                      {"measured_speedup", r.compare_measured},
                      {"simulated_speedup", r.compare_simulated}};
  }
  return out;
}

std::string to_markdown(const ValidationReport& r) {
  std::string md = "# hexisim validate: " + r.suite + "\n\n";
  md += format(
      "Calibrated profile (`%s`): MAPE %.2f %%, worst %.2f %%, Kendall tau %.3f.  \n"
      "Uncalibrated (shipped defaults): MAPE %.2f %%, worst %.2f %%, Kendall tau %.3f.\n\n",
      r.profile_file.c_str(), 100 * r.mape, 100 * r.max_error, r.ranking.tau, 100 * r.mape_default,
      100 * r.max_error_default, r.ranking_default.tau);
  md += "| plan | what | measured s (min-max) | simulated s | error | uncalibrated s | error |\n";
  md += "|---|---|---|---|---|---|---|\n";
  for (const auto& x : r.runs) {
    md += format("| %s | %s | %.4f (%.4f-%.4f) | %.4f | %s | %.4f | %s |\n", x.name.c_str(),
                 x.what.c_str(), x.measured_s, x.measured_min_s, x.measured_max_s, x.simulated_s,
                 pct(x.error()).c_str(), x.simulated_default_s, pct(x.error_default()).c_str());
  }
  if (r.rounds > 1) {
    md += format(
        "\nEvery run was executed %d times, interleaved (round k runs each once); the "
        "measured figures join the rounds' steps.\n\n",
        r.rounds);
    if (r.reproducibility) {
      md += format(
          "The measurement against itself (one round's medians as a prediction of another's, "
          "%d ordered pairs): MAPE %.2f %%, worst %.2f %%, lowest Kendall tau %.3f.\n\n",
          r.reproducibility->pairs, 100 * r.reproducibility->mape,
          100 * r.reproducibility->max_error, r.reproducibility->tau);
    }
    md += "Each round's median, in order:\n\n";
    md += "| plan | rounds' medians s | spread |\n|---|---|---|\n";
    for (const auto& x : r.runs) {
      if (x.round_measured_s.empty()) continue;
      std::string list;
      for (double m : x.round_measured_s) list += (list.empty() ? "" : ", ") + format("%.4f", m);
      const auto [lo, hi] =
          std::minmax_element(x.round_measured_s.begin(), x.round_measured_s.end());
      md += format("| %s | %s | %.1f %% |\n", x.name.c_str(), list.c_str(), 100 * (*hi / *lo - 1));
    }
  }
  if (!r.ranking.discordant.empty()) {
    md += "\nPairs the calibrated simulation orders differently from the measurement:\n";
    for (const auto& d : r.ranking.discordant) md += "- " + d + "\n";
  }
  if (r.compare) {
    md += format("\n%s against %s: measured %.3fx, simulated %.3fx (%s).\n",
                 r.compare->first.c_str(), r.compare->second.c_str(), r.compare_measured,
                 r.compare_simulated, pct(r.compare_simulated / r.compare_measured - 1).c_str());
  }
  md += "\n## Per op class (calibrated; summed op time of one iteration, all devices)\n\n";
  std::map<std::string, std::pair<double, double>> classes;
  for (const auto& x : r.runs) {
    for (const auto& c : x.classes.classes) {
      classes[c.op_class].first += c.measured_s;
      classes[c.op_class].second += c.simulated_s;
    }
  }
  md += "| op class | measured s | simulated s | error |\n|---|---|---|---|\n";
  for (const auto& [name, t] : classes) {
    md += format("| %s | %.4f | %.4f | %s |\n", name.c_str(), t.first, t.second,
                 t.first > 0 ? pct(t.second / t.first - 1).c_str() : "-");
  }
  md += "\n## Calibration\n\n";
  for (const auto& t : r.calibration.terms) {
    md += format("- %s: %d points, R^2 %.4f (uncalibrated %.4f), rms error %.1f %%\n",
                 t.term.c_str(), t.points, t.r2, t.r2_before, 100 * t.rms_rel);
  }
  return md;
}

}  // namespace hexi::validation
