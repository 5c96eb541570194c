#pragma once
// One point of a sweep (scenarios/sweep.hpp) computed with the library functions behind
// `hexisim plan`, `estimate` and `simulate`: the point's scheduler plans (run_scheduler,
// judged by the closed-form CostModel), and points of layer or stage fidelity are lowered
// and simulated (SimGrid, in a child process). The outcome is one results.jsonl row:
//
//   {"version": 1, "index": 3, "key": "cluster=...;...", "point": {axis values},
//    "digests": {"cluster", "model", "training", "scheduler", "gpus"},
//    "wall_time_s": 0.41, "search_time_s": 0.38, "plan_digest": "...",
//    "metrics": {"tokens_per_s": ..., ...}}                  or "error": {"kind", "message"}
//
// Everything under "metrics" (and "plan_digest") depends only on the inputs: the same
// point gives the same values in any worker, process or rank.

#include <string>
#include <vector>

#include "scenarios/sweep.hpp"
#include "topologies/json_input.hpp"

namespace hexi {
inline namespace studies {

// A metric a sweep may keep ("metrics" in the sweep file), in CSV column order.
struct SweepMetric {
  const char* name;
  const char* what;  // for --help and the README
};
const std::vector<SweepMetric>& sweep_metrics();

// The scheduler and metric names a sweep file may use.
SweepVocabulary sweep_vocabulary();

// A loaded sweep with what every point's row records besides its own inputs.
struct SweepContext {
  Sweep sweep;
  std::string gpus_digest;  // the GPU catalog's (FNV-1a 64 of its JSON)
};

// The digests of a point's inputs ("digests" in its row).
Json point_digests(const SweepContext& ctx, const SweepPoint& p);

// Computes a point; never throws: a point that fails gives a row with "error".
std::string run_point(const SweepContext& ctx, const SweepPoint& p);

// The row of a point that ended with `error` after `wall_s` seconds (e.g. the worker
// computing it died).
std::string error_row(const SweepContext& ctx, const SweepPoint& p, const Error& error,
                      double wall_s);

}  // namespace studies
}  // namespace hexi
