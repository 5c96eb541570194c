#pragma once
// `hexisim reproduce PAPER`: the papers' experiment grids as shipped sweep files
// (scenarios/sweeps/reproduce-<paper>[-quick].json) and the report written from their rows:
// tables of hexisim's numbers with the papers' published figures beside them (quoted with
// their source, never fitted to), and what differs and why. The report's prose and the
// papers' quotes are data (scenarios/reproduce/<paper>.md, read by studies/report_text.hpp);
// the code computes the tables and the numbers it fills in.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi {
inline namespace studies {

// The papers `reproduce` knows, and their sweep files (relative to the data root).
struct Paper {
  const char* name;   // "hexiscale", "hexiseq"
  const char* title;  // for the report
};
const std::vector<Paper>& reproducible_papers();
std::string reproduce_sweep_file(const std::string& paper, bool quick);
// The report's prose (named fragments with placeholders), relative to the data root.
std::string reproduce_text_file(const std::string& paper);

// One experiment setting: a cluster (label) and a workload.
struct Setting {
  std::string cluster, model;
  std::int64_t seq_len = 0, global_batch = 0;
  bool operator<(const Setting& o) const;
};

// What the sweep measured for one scheduler at one setting (several seeds: one value each).
struct Measure {
  std::map<std::int64_t, double> closed;     // tokens/s, closed form, per seed
  std::map<std::int64_t, double> simulated;  // tokens/s, SimGrid, per seed
  std::map<std::int64_t, double> search_s;   // the scheduler's search time, per seed
  bool infeasible = false;                   // some plan does not fit in memory
  double candidates = 0;                     // plans (layouts) the search scored
  int num_gpus = 0;
  double peak_pflops = 0;
  int gpus_used = 0;          // GPUs the plan or layout uses
  double mfu = 0;             // model FLOPs over the whole cluster's peak, closed form
  int zero_stage = -1;        // the ZeRO stage it was scored under (-1: not recorded)
  std::string configuration;  // a sequence layout's configuration (grouping, GPU subset)

  bool ok() const { return !closed.empty() && !infeasible; }  // measured and fits
  double closed_mean() const;
  double simulated_mean() const;  // 0 when not simulated
  double search_mean() const;
};

// A sweep's rows by setting and scheduler label.
class ResultTable {
 public:
  explicit ResultTable(const std::vector<Json>& rows);
  // nullptr when the sweep has no row for it.
  const Measure* find(const Setting& s, const std::string& scheduler) const;
  // The settings of a cluster, in the rows' order.
  std::vector<Setting> settings_of(const std::string& cluster) const;
  std::size_t rows() const { return rows_; }
  // The failed points: key and error message.
  const std::vector<std::pair<std::string, std::string>>& errors() const { return errors_; }

 private:
  std::map<Setting, std::map<std::string, Measure>> cells_;
  std::vector<Setting> order_;
  std::size_t rows_ = 0;
  std::vector<std::pair<std::string, std::string>> errors_;
};

// The figures a report shows: `hexisim plot` arguments after RESULTS (the file name last,
// relative to the report's folder).
struct Figure {
  std::vector<std::string> args;
  std::string file;
  std::string caption;
};

struct Report {
  std::string markdown;
  std::vector<Figure> figures;
};

// The report of a finished (or partly finished) reproduction; `sweep_file` and `command` are
// quoted in its head. An error (naming the file and the fragment) when the report's text
// cannot be read or lacks a fragment or placeholder the report needs.
Result<Report> reproduce_report(const std::string& paper, const ResultTable& table, bool quick,
                                const std::string& sweep_file, const std::string& command);

}  // namespace studies
}  // namespace hexi
