#include "studies/reproduce.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "studies/report_text.hpp"
#include "topologies/text.hpp"

namespace hexi {
inline namespace studies {
namespace {

double mean(const std::map<std::int64_t, double>& values) {
  if (values.empty()) return 0;
  double sum = 0;
  for (const auto& [seed, v] : values) sum += v;
  return sum / static_cast<double>(values.size());
}

std::string times(double ratio) {
  return ratio > 0 && std::isfinite(ratio) ? fixed(ratio, 2) + "×" : "-";
}

// A markdown table.
class Markdown {
 public:
  explicit Markdown(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string text() const {
    std::string out = line(header_);
    std::vector<std::string> rule(header_.size(), "---");
    out += line(rule);
    for (const auto& r : rows_) out += line(r);
    return out;
  }

 private:
  static std::string line(const std::vector<std::string>& cells) {
    std::string out = "|";
    for (const auto& c : cells) out += " " + c + " |";
    return out + "\n";
  }
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// tokens/s of a measure as a table cell: "-" when absent, "failed" when its point failed,
// "(OOM)" after plans that do not fit.
std::string tokens_cell(const Measure* m, bool simulated) {
  if (m == nullptr) return "-";
  if (m->closed.empty()) return simulated ? "-" : "failed";
  const double v = simulated ? m->simulated_mean() : m->closed_mean();
  if (!(v > 0)) return "-";
  std::string s = grouped(v);
  if (m->closed.size() > 1) s += " (mean of " + std::to_string(m->closed.size()) + ")";
  if (m->infeasible) s += " (OOM)";
  return s;
}

// The strongest of `names` at `s` that fits (closed form, or simulated where `simulated`: a
// baseline that was not simulated stands in with its closed form, and `stand_in` says so;
// 0 when none of them was simulated).
double best_of(const ResultTable& t, const Setting& s, const std::vector<std::string>& names,
               bool simulated, bool* stand_in = nullptr) {
  double best = 0;
  bool any_simulated = false;
  for (const auto& n : names) {
    const Measure* m = t.find(s, n);
    if (m == nullptr || !m->ok()) continue;
    double v = m->closed_mean();
    if (simulated) {
      if (m->simulated.empty()) {
        if (stand_in != nullptr) *stand_in = true;
      } else {
        v = m->simulated_mean();
        any_simulated = true;
      }
    }
    best = std::max(best, v);
  }
  return simulated && !any_simulated ? 0 : best;
}

// min, mean and max of ratios, as "1.05×–1.30× (mean 1.16×, N settings)".
std::string spread(const std::vector<double>& r) {
  if (r.empty()) return "no setting measured";
  if (r.size() == 1) return times(r.front()) + " (1 setting)";
  const auto [lo, hi] = std::minmax_element(r.begin(), r.end());
  double sum = 0;
  for (double v : r) sum += v;
  return times(*lo) + "–" + times(*hi) + " (mean " + times(sum / static_cast<double>(r.size())) +
         ", " + std::to_string(r.size()) + " settings)";
}

std::string model_label(const Setting& s) {
  return s.model + ", " + std::to_string(s.seq_len / 1024) + "K";
}

// A table section: its heading and the paper's figures (fragment `intro`), hexisim's table,
// then what hexisim measured (fragment `result`, filled with `values`).
void table_section(TextWriter& w, const std::string& intro, const Markdown& table,
                   const std::string& result, const Fill& values) {
  w.raw("\n").fragment(intro).raw("\n\n").raw(table.text()).raw("\n").fill(result, values);
  w.raw("\n");
}

// The report's head: the command, the sweep and how to read the tables.
void head(TextWriter& w, const ResultTable& t, const std::string& sweep_file,
          const std::string& command) {
  const std::string failed =
      t.errors().empty() ? ""
                         : w.text("head.failed", {{"failed", std::to_string(t.errors().size())}});
  w.fill("head", {{"command", command},
                  {"rows", std::to_string(t.rows())},
                  {"sweep_file", sweep_file},
                  {"failed_note", failed}});
  w.raw("\n");
}

// What differs from the paper and why; the bullet on --quick when the grid was the quick one.
void differs(TextWriter& w, bool quick) {
  w.raw("\n").fragment("differs").raw("\n");
  if (quick) w.fragment("differs.quick").raw("\n");
}

// The failures, so that a missing cell is explained.
void failed_points(TextWriter& w, const ResultTable& t) {
  if (t.errors().empty()) return;
  w.raw("\n").fragment("failed.intro").raw("\n\n");
  for (const auto& [key, message] : t.errors()) {
    w.fill("failed.point", {{"key", key}, {"message", message}}).raw("\n");
  }
}

// ---- HexiScale ---------------------------------------------------------------------------

struct HeteroSetting {
  const char* cluster;
  const char* gpus;  // the paper's description
  const char* homogeneous;
};
const HeteroSetting kHexiScaleSettings[] = {
    {"hexiscale-setting1", "8×3080 Ti + 8×3090 + 24×4090", "a800-pcie-2x8"},
    {"hexiscale-setting2", "8×3080 Ti + 8×3090 + 8×4090 + 8×A800", "a800-pcie-2x8"},
    {"hexiscale-setting3", "16×3090 + 32×4090 + 8×A800", "a800-pcie-4x8"},
};
const std::vector<std::string> kHexiScaleBaselines = {"uniform",   "random",     "ff-random",
                                                      "flashflex", "metis-like", "amp-like"};
const std::vector<std::string> kPaperBaselines = {"metis-like", "amp-like"};  // Metis, AMP

// num / den as a cell, kept in `acc`; "-" when either was not measured.
std::string ratio_cell(double num, double den, std::vector<double>& acc) {
  if (!(num > 0) || !(den > 0)) return "-";
  acc.push_back(num / den);
  return times(num / den);
}

// Section 1's ratios over the settings: against Metis and AMP (the paper's), and against the
// best of every baseline.
struct BaselineRatios {
  std::vector<double> paper_closed, paper_sim, all_closed, all_sim;
  bool stand_in = false;  // a baseline without a simulation stood in with its closed form
};

std::vector<std::string> baselines_row(const ResultTable& t, const HeteroSetting& hs,
                                       const Setting& s, BaselineRatios& r) {
  const Measure* hx = t.find(s, "hexiscale");
  std::vector<std::string> row = {s.cluster, model_label(s), hs.gpus, tokens_cell(hx, false),
                                  tokens_cell(hx, true)};
  for (const auto& b : kHexiScaleBaselines) row.push_back(tokens_cell(t.find(s, b), false));
  const bool ok = hx != nullptr && hx->ok();
  const double hx_closed = ok ? hx->closed_mean() : 0;
  const double hx_sim = ok ? hx->simulated_mean() : 0;
  const double paper_best = best_of(t, s, kPaperBaselines, false);
  const double paper_best_sim = best_of(t, s, kPaperBaselines, true, &r.stand_in);
  const double best = best_of(t, s, kHexiScaleBaselines, false);
  const double best_sim = best_of(t, s, kHexiScaleBaselines, true, &r.stand_in);
  row.push_back(ratio_cell(hx_closed, paper_best, r.paper_closed));
  row.push_back(ratio_cell(hx_sim, paper_best_sim, r.paper_sim));
  row.push_back(ratio_cell(hx_closed, best, r.all_closed));
  row.push_back(ratio_cell(hx_sim, best_sim, r.all_sim));
  return row;
}

// 1. Heterogeneity-aware baselines on the same clusters.
void hexiscale_baselines(const ResultTable& t, TextWriter& w) {
  std::vector<std::string> header = {"setting", "model", "GPUs", "HexiScale closed", "sim"};
  for (const auto& b : kHexiScaleBaselines) header.push_back(b + " closed");
  header.insert(header.end(), {"vs metis/amp closed", "sim", "vs best baseline closed", "sim"});
  Markdown table(header);
  BaselineRatios r;
  for (const auto& hs : kHexiScaleSettings) {
    for (const Setting& s : t.settings_of(hs.cluster)) table.add(baselines_row(t, hs, s, r));
  }
  table_section(w, "baselines.intro", table, "baselines.result",
                {{"paper_closed", spread(r.paper_closed)},
                 {"paper_sim", spread(r.paper_sim)},
                 {"all_closed", spread(r.all_closed)},
                 {"all_sim", spread(r.all_sim)},
                 {"stand_in", r.stand_in ? w.text("baselines.stand_in") : ""}});
}

// The cells of a heterogeneous cluster's scheduler (`ours`) set against the best tokens/s
// on its homogeneous twin (`best`, `best_sim`; `any_hom` for its peak): peak, tokens/s
// closed and simulated, the twin's name, peak and best, and the two ratios, which are also
// kept in `closed` and `sim`.
std::vector<std::string> versus_cells(const Measure* ours, const std::string& hom_cluster,
                                      const Measure* any_hom, double best, double best_sim,
                                      std::vector<double>& closed, std::vector<double>& sim) {
  const bool ok = ours != nullptr && ours->ok();
  std::string r = "-", rs = "-";
  if (ok && best > 0) {
    closed.push_back(ours->closed_mean() / best);
    r = times(closed.back());
  }
  if (ok && ours->simulated_mean() > 0 && best_sim > 0) {
    sim.push_back(ours->simulated_mean() / best_sim);
    rs = times(sim.back());
  }
  return {ours ? fixed(ours->peak_pflops, 2) : "-",
          tokens_cell(ours, false),
          tokens_cell(ours, true),
          hom_cluster,
          any_hom ? fixed(any_hom->peak_pflops, 2) : "-",
          best > 0 ? grouped(best) : "-",
          best_sim > 0 ? grouped(best_sim) : "-",
          r,
          rs};
}

// A heterogeneous setting against its homogeneous cluster (the better of uniform and
// HexiScale on it); the ratios kept in `closed` and `sim`.
std::vector<std::string> homogeneous_row(const ResultTable& t, const HeteroSetting& hs,
                                         const Setting& s, std::vector<double>& closed,
                                         std::vector<double>& sim) {
  Setting hom = s;
  hom.cluster = hs.homogeneous;
  const Measure* hu = t.find(hom, "uniform");
  const Measure* hh = t.find(hom, "hexiscale");
  std::vector<std::string> row = {s.cluster, model_label(s)};
  for (auto& cell : versus_cells(t.find(s, "hexiscale"), hom.cluster, hu != nullptr ? hu : hh,
                                 best_of(t, hom, {"uniform", "hexiscale"}, false),
                                 best_of(t, hom, {"uniform", "hexiscale"}, true), closed, sim)) {
    row.push_back(std::move(cell));
  }
  return row;
}

// 2. Homogeneous clusters of about the same FLOPS.
void hexiscale_homogeneous(const ResultTable& t, TextWriter& w) {
  Markdown homog({"setting", "model", "peak PFLOP/s", "HexiScale closed", "sim",
                  "homogeneous cluster", "peak PFLOP/s", "best of uniform, HexiScale closed", "sim",
                  "hetero / homogeneous closed", "sim"});
  std::vector<double> closed, sim;
  for (const auto& hs : kHexiScaleSettings) {
    for (const Setting& s : t.settings_of(hs.cluster)) {
      homog.add(homogeneous_row(t, hs, s, closed, sim));
    }
  }
  table_section(w, "homogeneous.intro", homog, "homogeneous.result",
                {{"closed", spread(closed)}, {"sim", spread(sim)}});
}

// 3. Random graph partitioning.
void hexiscale_random(const ResultTable& t, TextWriter& w) {
  Markdown rnd({"setting", "model", "HexiScale closed", "ff-random closed", "HexiScale / ff-random",
                "random closed", "HexiScale / random"});
  std::vector<double> ff, rd;
  for (const auto& hs : kHexiScaleSettings) {
    for (const Setting& s : t.settings_of(hs.cluster)) {
      const Measure* hx = t.find(s, "hexiscale");
      const Measure* f = t.find(s, "ff-random");
      const Measure* r = t.find(s, "random");
      const auto ratio = [&](const Measure* b, std::vector<double>& acc) {
        if (hx == nullptr || !hx->ok() || b == nullptr || !b->ok()) return std::string("-");
        acc.push_back(hx->closed_mean() / b->closed_mean());
        return times(acc.back());
      };
      rnd.add({s.cluster, model_label(s), tokens_cell(hx, false), tokens_cell(f, false),
               ratio(f, ff), tokens_cell(r, false), ratio(r, rd)});
    }
  }
  table_section(w, "random.intro", rnd, "random.result",
                {{"ff_random", spread(ff)}, {"random", spread(rd)}});
}

// The settings of the search at scale: Llama-2 70B on the 128- to 1 024-GPU mixes.
std::vector<Setting> scaling_settings(const ResultTable& t) {
  std::vector<Setting> scaling;
  for (const char* c : {"mix-128-4types", "mix-256-4types", "mix-512-4types", "mix-1024-4types"}) {
    for (const Setting& s : t.settings_of(c)) scaling.push_back(s);
  }
  return scaling;
}

// 4. The search at scale.
void hexiscale_scale(const ResultTable& t, TextWriter& w) {
  Markdown scale({"cluster", "GPUs", "HexiScale search s", "HexiScale closed", "flashflex closed",
                  "metis-like closed", "amp-like closed", "uniform closed",
                  "HexiScale / best baseline"});
  for (const Setting& s : scaling_settings(t)) {
    const Measure* hx = t.find(s, "hexiscale");
    const double best = best_of(t, s, {"flashflex", "metis-like", "amp-like", "uniform"}, false);
    scale.add({s.cluster, hx ? std::to_string(hx->num_gpus) : "-",
               hx && !hx->search_s.empty() ? fixed(hx->search_mean(), 2) : "-",
               tokens_cell(hx, false), tokens_cell(t.find(s, "flashflex"), false),
               tokens_cell(t.find(s, "metis-like"), false),
               tokens_cell(t.find(s, "amp-like"), false), tokens_cell(t.find(s, "uniform"), false),
               hx && hx->ok() && best > 0 ? times(hx->closed_mean() / best) : "-"});
  }
  table_section(w, "scale.intro", scale, "scale.note", {});
}

// The figures: tokens/s per scheduler for each model, and the search time against cluster size
// when the sweep has more than one size.
std::vector<Figure> hexiscale_figures(const ResultTable& t, TextWriter& w) {
  std::vector<Figure> figures;
  for (const char* model : {"llama2-7b", "llama2-13b", "llama-30b"}) {
    const std::string file = std::string("schedulers-") + model + ".png";
    figures.push_back(
        {{"--x", "cluster", "--y", "tokens_per_s", "--by", "scheduler", "--kind", "bar", "--where",
          std::string("model=") + model, "--where", "fidelity=stage", "--title",
          w.text("figure.schedulers.title", {{"model", model}})},
         file,
         w.text("figure.schedulers.caption", {{"model", model}})});
  }
  if (scaling_settings(t).size() > 1) {
    figures.push_back(
        {{"--x", "num_gpus", "--y", "search_time_s", "--by", "scheduler", "--kind", "line",
          "--log-y", "--where", "model=llama2-70b", "--title", w.text("figure.search_time.title")},
         "search-time.png",
         w.text("figure.search_time.caption")});
  }
  return figures;
}

// The HexiScale report's sections after its head; returns its figures.
std::vector<Figure> hexiscale_report(const ResultTable& t, bool quick, TextWriter& w) {
  hexiscale_baselines(t, w);
  hexiscale_homogeneous(t, w);
  hexiscale_random(t, w);
  hexiscale_scale(t, w);
  differs(w, quick);
  return hexiscale_figures(t, w);
}

// ---- HexiSeq -----------------------------------------------------------------------------

struct SeqCluster {
  const char* cluster;
  const char* role;  // "testbed", "simulation", "pair"
  const char* gpus;
  const char* homogeneous;  // FLOP pairs: the homogeneous side
};
const SeqCluster kHexiSeqClusters[] = {
    {"hexiseq-paper-testbed-h100-a100", "testbed", "8 H100 + 8 A100, a NIC per GPU", nullptr},
    {"hexiseq-testbed-h100-a100", "testbed", "8 H100 + 8 A100, one NIC per machine", nullptr},
    {"hexiseq-32-3types", "simulation", "32 of 3 types", nullptr},
    {"hexiseq-64-4types", "simulation", "64 of 4 types", nullptr},
    {"hexiseq-128-4types", "simulation", "128 of 4 types", nullptr},
    {"hexiseq-56-h100-a100", "pair", "48 H100 + 8 A100", "hexiseq-152-a100"},
    {"hexiseq-64-h100-a100-a800", "pair", "52 H100 + 4 A100 + 8 A800", "hexiseq-168-a100"},
};
// The baselines with HexiSeq's freedoms (GPU subsets, every degree and placement, ZeRO stage),
// and ring, Ulysses and USP on every GPU as the paper ran them (its definition of the margin).
const std::vector<std::string> kSameFreedoms = {"ring", "ulysses", "usp", "megatron-cp"};
const std::vector<std::string> kEveryGpu = {"ring-every-gpu", "ulysses-every-gpu", "usp-every-gpu"};
const char* const kSeqRoles[] = {"testbed", "simulation", "pair"};

// The strongest of `names` at a setting that fits: closed form, or simulated (a baseline that
// was not simulated stands in with its closed form, marked).
struct Strongest {
  std::string name;
  const Measure* m = nullptr;
  double value = 0;
  bool stand_in = false;
};
Strongest strongest_of(const ResultTable& t, const Setting& s,
                       const std::vector<std::string>& names, bool simulated) {
  Strongest best;
  for (const auto& n : names) {
    const Measure* m = t.find(s, n);
    if (m == nullptr || !m->ok()) continue;
    const bool stand_in = simulated && m->simulated.empty();
    const double v = simulated && !stand_in ? m->simulated_mean() : m->closed_mean();
    if (v > best.value) best = {n, m, v, stand_in};
  }
  return best;
}

// "usp: ulysses 8 x ring 1; H100-SXM only (8 GPUs), ZeRO-3"
std::string configuration_cell(const Strongest& b) {
  if (b.m == nullptr) return "-";
  std::string out = b.name;
  if (!b.m->configuration.empty()) out += ": " + b.m->configuration;
  if (b.m->zero_stage >= 0) out += ", ZeRO-" + std::to_string(b.m->zero_stage);
  return out;
}

// Section 1's ratios of one kind of setting.
struct KindRatios {
  std::vector<double> same_closed, same_sim, every_closed, every_sim;
  bool stand_in = false;  // a baseline without a simulation stood in with its closed form
};

std::string ratio_of(const Measure* hq, double den, bool simulated, std::vector<double>& acc) {
  if (hq == nullptr || !hq->ok()) return "-";
  const double num = simulated ? hq->simulated_mean() : hq->closed_mean();
  if (!(num > 0) || !(den > 0)) return "-";
  acc.push_back(num / den);
  return times(acc.back());
}

// Model TFLOP/s per GPU of a measure: over the GPUs it uses / over the cluster's.
std::string tflops_cell(const Measure* m) {
  if (m == nullptr || !m->ok() || m->num_gpus == 0 || m->gpus_used == 0) return "-";
  const double tflops = m->mfu * m->peak_pflops * 1e3;
  return fixed(tflops / m->gpus_used, 0) + " / " + fixed(tflops / m->num_gpus, 0);
}

std::vector<std::string> strongest_row(const ResultTable& t, const SeqCluster& c, const Setting& s,
                                       KindRatios& ratios) {
  const Measure* hq = t.find(s, "hexiseq");
  std::vector<std::string> row = {s.cluster + std::string(" (") + c.gpus + ")",
                                  model_label(s),
                                  std::to_string(s.global_batch),
                                  tokens_cell(hq, false),
                                  tokens_cell(hq, true),
                                  hq && hq->gpus_used ? std::to_string(hq->gpus_used) : "-",
                                  tflops_cell(hq)};
  const auto versus = [&](const std::vector<std::string>& names, std::vector<double>& closed,
                          std::vector<double>& sim) {
    const Strongest bc = strongest_of(t, s, names, false);
    // Simulated baselines only beside a simulated HexiSeq (a stand-in marked).
    const bool simulated = hq != nullptr && hq->simulated_mean() > 0;
    const Strongest bs = simulated ? strongest_of(t, s, names, true) : Strongest{};
    ratios.stand_in = ratios.stand_in || bs.stand_in;
    row.push_back(configuration_cell(bc));
    row.push_back(bc.m ? grouped(bc.value) : "-");
    row.push_back(bs.m ? grouped(bs.value) + (bs.stand_in ? " †" : "") : "-");
    row.push_back(ratio_of(hq, bc.value, false, closed));
    row.push_back(simulated ? ratio_of(hq, bs.value, true, sim) : "-");
  };
  versus(kSameFreedoms, ratios.same_closed, ratios.same_sim);
  versus(kEveryGpu, ratios.every_closed, ratios.every_sim);
  return row;
}

// 1. HexiSeq against the strongest baselines, per kind of setting (never pooled across kinds).
void hexiseq_strongest(const ResultTable& t, TextWriter& w) {
  w.raw("\n").fragment("strongest.intro").raw("\n");
  for (const char* role : kSeqRoles) {
    Markdown table({"cluster", "model, context", "sequences", "HexiSeq closed", "sim", "GPUs used",
                    "TFLOP/s per GPU used / all", "strongest, same freedoms", "closed", "sim",
                    "HexiSeq / it closed", "sim", "strongest on every GPU", "closed", "sim",
                    "HexiSeq / it closed", "sim"});
    KindRatios r;
    bool any = false;
    for (const auto& c : kHexiSeqClusters) {
      if (std::string(c.role) != role) continue;
      for (const Setting& s : t.settings_of(c.cluster)) {
        table.add(strongest_row(t, c, s, r));
        any = true;
      }
    }
    if (!any) continue;
    const std::string kind = std::string("strongest.") + role;
    w.raw("\n").fragment(kind).raw("\n\n").raw(table.text()).raw("\n");
    w.fill("strongest.result", {{"same_closed", spread(r.same_closed)},
                                {"same_sim", spread(r.same_sim)},
                                {"every_closed", spread(r.every_closed)},
                                {"every_sim", spread(r.every_sim)},
                                {"paper", w.text(kind + ".paper")},
                                {"stand_in", r.stand_in ? w.text("strongest.stand_in") : ""}});
    w.raw("\n");
  }
}

// Section 2's ratios, heterogeneous over homogeneous.
struct PairRatios {
  std::vector<double> closed, sim;
  bool stand_in = false;  // on the homogeneous side, a closed form stood in
};

std::vector<std::string> pair_row(const ResultTable& t, const SeqCluster& c, const Setting& s,
                                  PairRatios& ratios) {
  static const std::vector<std::string> every = {"hexiseq", "ring", "ulysses", "usp",
                                                 "megatron-cp"};
  Setting hom = s;
  hom.cluster = c.homogeneous;
  const double best = best_of(t, hom, every, false);
  const double best_sim = best_of(t, hom, every, true, &ratios.stand_in);
  std::vector<std::string> row = {s.cluster};
  for (auto& cell : versus_cells(t.find(s, "hexiseq"), hom.cluster, t.find(hom, "hexiseq"), best,
                                 best_sim, ratios.closed, ratios.sim)) {
    row.push_back(std::move(cell));
  }
  return row;
}

// 2. FLOP-comparable pairs: the heterogeneous cluster against the homogeneous one.
void hexiseq_pairs(const ResultTable& t, TextWriter& w) {
  Markdown pairs({"heterogeneous", "peak PFLOP/s", "HexiSeq closed", "sim", "homogeneous",
                  "peak PFLOP/s", "best on it closed", "sim", "hetero / homogeneous closed",
                  "sim"});
  PairRatios r;
  for (const auto& c : kHexiSeqClusters) {
    if (c.homogeneous == nullptr) continue;
    for (const Setting& s : t.settings_of(c.cluster)) pairs.add(pair_row(t, c, s, r));
  }
  table_section(w, "pairs.intro", pairs, "pairs.result",
                {{"closed", spread(r.closed)},
                 {"sim", spread(r.sim)},
                 {"stand_in", r.stand_in && !r.sim.empty() ? w.text("pairs.stand_in") : ""}});
}

// 3. Search time.
void hexiseq_search(const ResultTable& t, TextWriter& w) {
  Markdown search({"cluster", "GPUs", "model, context", "HexiSeq search s", "layouts scored"});
  for (const auto& c : kHexiSeqClusters) {
    for (const Setting& s : t.settings_of(c.cluster)) {
      const Measure* hq = t.find(s, "hexiseq");
      search.add({s.cluster, hq ? std::to_string(hq->num_gpus) : "-", model_label(s),
                  hq && !hq->search_s.empty() ? fixed(hq->search_mean(), 2) : "-",
                  hq ? grouped(hq->candidates) : "-"});
    }
  }
  table_section(w, "search.intro", search, "search.note", {});
}

// The HexiSeq report's sections after its head; returns its figures.
std::vector<Figure> hexiseq_report(const ResultTable& t, bool quick, TextWriter& w) {
  hexiseq_strongest(t, w);
  hexiseq_pairs(t, w);
  hexiseq_search(t, w);
  differs(w, quick);
  return {{{"--x", "cluster", "--y", "tokens_per_s", "--by", "scheduler", "--kind", "bar",
            "--log-y", "--title", w.text("figure.schedulers.title")},
           "schedulers.png",
           w.text("figure.schedulers.caption")}};
}

}  // namespace

const std::vector<Paper>& reproducible_papers() {
  static const std::vector<Paper> papers = {
      {"hexiscale", "HexiScale (arXiv 2409.01143): asymmetric DP/TP/PP on mixed GPUs"},
      {"hexiseq", "HexiSeq (arXiv 2605.07569): asymmetric context + head parallelism"}};
  return papers;
}

std::string reproduce_sweep_file(const std::string& paper, bool quick) {
  return "scenarios/sweeps/reproduce-" + paper + (quick ? "-quick" : "") + ".json";
}

bool Setting::operator<(const Setting& o) const {
  return std::tie(cluster, model, seq_len, global_batch) <
         std::tie(o.cluster, o.model, o.seq_len, o.global_batch);
}

double Measure::closed_mean() const {
  return mean(closed);
}
double Measure::simulated_mean() const {
  return mean(simulated);
}
double Measure::search_mean() const {
  return mean(search_s);
}

ResultTable::ResultTable(const std::vector<Json>& rows) {
  for (const Json& row : rows) {
    const Json& p = row.at("point");
    Setting s{p.at("cluster").get<std::string>(), p.at("model").get<std::string>(),
              p.at("seq_len").get<std::int64_t>(), p.at("global_batch").get<std::int64_t>()};
    if (!cells_.count(s)) order_.push_back(s);
    Measure& m = cells_[s][p.at("scheduler").get<std::string>()];
    const std::int64_t seed = p.at("seed").get<std::int64_t>();
    ++rows_;
    if (row.contains("error")) {
      errors_.emplace_back(row.value("key", ""), row["error"].value("message", ""));
      continue;
    }
    const Json& metrics = row.at("metrics");
    if (metrics.contains("tokens_per_s")) m.closed[seed] = metrics["tokens_per_s"].get<double>();
    if (metrics.contains("sim_tokens_per_s"))
      m.simulated[seed] = metrics["sim_tokens_per_s"].get<double>();
    if (row.contains("search_time_s")) m.search_s[seed] = row["search_time_s"].get<double>();
    if (metrics.contains("feasible") && !metrics["feasible"].get<bool>()) m.infeasible = true;
    if (metrics.contains("candidates")) m.candidates = metrics["candidates"].get<double>();
    if (metrics.contains("num_gpus")) m.num_gpus = metrics["num_gpus"].get<int>();
    if (metrics.contains("peak_pflops")) m.peak_pflops = metrics["peak_pflops"].get<double>();
    if (metrics.contains("gpus_used")) m.gpus_used = metrics["gpus_used"].get<int>();
    if (metrics.contains("mfu")) m.mfu = metrics["mfu"].get<double>();
    if (metrics.contains("zero_stage")) m.zero_stage = metrics["zero_stage"].get<int>();
    if (metrics.contains("configuration") && metrics["configuration"].is_string()) {
      m.configuration = metrics["configuration"].get<std::string>();
    }
  }
}

const Measure* ResultTable::find(const Setting& s, const std::string& scheduler) const {
  auto it = cells_.find(s);
  if (it == cells_.end()) return nullptr;
  auto m = it->second.find(scheduler);
  return m == it->second.end() ? nullptr : &m->second;
}

std::vector<Setting> ResultTable::settings_of(const std::string& cluster) const {
  std::vector<Setting> out;
  for (const Setting& s : order_) {
    if (s.cluster == cluster) out.push_back(s);
  }
  return out;
}

std::string reproduce_text_file(const std::string& paper) {
  return "scenarios/reproduce/" + paper + ".md";
}

Result<Report> reproduce_report(const std::string& paper, const ResultTable& table, bool quick,
                                const std::string& sweep_file, const std::string& command) {
  auto text = ReportText::load(reproduce_text_file(paper));
  if (!text) return text.error();
  TextWriter w(*text);
  head(w, table, sweep_file, command);
  Report rep;
  rep.figures =
      paper == "hexiseq" ? hexiseq_report(table, quick, w) : hexiscale_report(table, quick, w);
  failed_points(w, table);
  auto markdown = w.finish();
  if (!markdown) return markdown.error();
  rep.markdown = std::move(*markdown);
  return rep;
}

}  // namespace studies
}  // namespace hexi
