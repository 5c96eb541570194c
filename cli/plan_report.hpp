#pragma once
// Readable reports of a plan and its closed-form estimate (estimate, plan --explain).
// Every report command prints its headline and one line per pipeline, then the answer line;
// the long tables (every stage, the FLOP conventions) come with --explain.

#include <iosfwd>
#include <optional>
#include <string>

#include "scenarios/scenario.hpp"
#include "scheduler/estimate/estimate.hpp"
#include "scheduler/plan/plan.hpp"
#include "scheduler/search/search.hpp"

namespace hexi::cli {

// Headline: iteration time, tokens/s, MFU, PFLOP/s, feasibility and problems; with `explain`
// the FLOP figures in every convention (print_flop_figures).
void print_estimate_summary(const Scenario& sc, const Estimate& est, bool explain,
                            std::ostream& out);
// One line per pipeline (GPUs, stages with their TP degrees, batch share), then the hint that
// --explain shows every stage.
void print_plan_outline(const Plan& plan, std::ostream& out);

// The answer in one line, the last a command prints: "answer: 13.494 s per iteration, 38,855
// tokens/s (38,639 simulated), MFU 41.8 % (model FLOPs, ...), 31 of 32 GPUs; plan: SOURCE".
struct Answer {
  double iteration_s = 0, tokens_per_s = 0, mfu = 0;
  std::optional<double> simulated_tokens_per_s;  // beside a closed form
  int gpus_used = 0;
  std::string source;  // what the plan is and who made it
};
void print_answer(const Scenario& sc, const Answer& a, std::ostream& out);
// MFU, HFU and TFLOP/s per GPU in the conventions users compare against
// (flop_figures.hpp), one row each, and what they count.
void print_flop_figures(const Scenario& sc, double mfu, const FlopFigures& f, int gpus_used,
                        std::ostream& out);
// Per pipeline: devices by type, stages with TP degree, layers, recompute, compute/communication
// time per micro-batch, memory and headroom.
void print_plan_table(const Scenario& sc, const Plan& plan, const Estimate& est, std::ostream& out);

// Progress of a long search, one line on stderr: every report on a terminal, one per 10 s of
// a scheduler's search otherwise (a log). The line: phase, time, candidates, best, ETA.
void print_search_progress(const SearchProgress& p);

// Loads the plan named by --plan (or the scenario's "plan") and validates it.
Result<Plan> load_checked_plan(const Scenario& sc, const std::string& plan_arg);
// How a command names the plan it reads: `plan_arg` (--plan), else the scenario's "plan"
// (normalised), else "".
std::string plan_file_text(const Scenario& sc, const std::string& plan_arg);

}  // namespace hexi::cli
