#pragma once
// The planning call: a pipeline scheduler of the registry (scheduler/scheduler.hpp), then its
// plans re-ranked with the simulator (`hexisim plan --verify K`, `hexisim simulate` when it
// searches): the search's best plan and its K runners-up by the closed form are lowered at
// stage fidelity and simulated; the fastest simulated one is returned, so the plan is the
// simulator's best of the closed form's top K + 1, not the closed form's alone. Where the
// closed form and the simulator agree (most plans, within 3 %) the best plan stays; where they
// disagree (slow or shared links) the simulator decides.

#include <functional>
#include <optional>
#include <string>

#include "scenarios/scenario.hpp"
#include "scheduler/program/program.hpp"
#include "scheduler/scheduler.hpp"
#include "scheduler/search/search.hpp"
#include "sim/simulator.hpp"
#include "topologies/status.hpp"

namespace hexi {
inline namespace studies {

// Runners-up verified by default: kDefaultVerify up to kVerifyMaxGpus GPUs, none above
// (stage-fidelity simulations of larger clusters take seconds each), and none where every
// plan's program would exceed what the lowering materialises (check_program_size, lower.hpp).
inline constexpr int kDefaultVerify = 8;
inline constexpr int kVerifyMaxGpus = 256;
int default_verify(const Scenario& scenario);

// One iteration of a lowered program simulated without a trace (a lowering's error passed on):
// what verification and the sweep's points need of the simulator.
Result<SimReport> simulate_untraced(const Scenario& scenario, const Result<Program>& program);

// Simulates r.plan and r.runners_up (in order); when a runner-up simulates faster, it
// becomes r.plan (ties keep the better closed form). Fills r.verified, r.verified_chosen,
// r.verified_fidelity and r.verify_time_s, adds a note when the plan changed, and empties
// r.runners_up. Nothing to do when r has no runners-up. A plan whose program would exceed
// kMaxProgramComputeOps (lower.hpp) is not simulated, with a note: a runner-up is left out;
// r.plan itself means no verification.
// What the planning call says it does, one line at a time (the CLI prints them on stderr;
// sweeps and advise pass none).
using PlanningLog = std::function<void(const std::string&)>;

Status verify_with_simulator(const Scenario& scenario, SearchResult& r,
                             const PlanningLog& log = {});

// The planning call for pipeline plans, the one `hexisim plan`, `simulate` (when it
// searches), every sweep point and advise make, so that they agree by construction: scheduler
// `name` on the scenario with `options` (its runners_up replaced by `verify`,
// default_verify(scenario) when unset), then verify_with_simulator. Bad input for an unknown
// name or a scheduler of another kind, and, before the search, for a `verify` > 0 that no
// plan's program allows (check_program_size); unset, such a verification is skipped with a
// note.
//
// `name` kBestPlan ("best", the default of `hexisim plan`): every scheduler marked in_best
// (HexiScale and the cheap baselines, scheduler/scheduler.hpp) runs so, one after another; the
// plan returned is the fastest simulated where every plan was simulated (the closed form's
// fastest otherwise), so that it is never behind a registered baseline. r.compared lists each
// scheduler's outcome; a scheduler that finds no plan is listed with its error, but the
// scenario's own "scheduler" failing (bad options, say) is returned, as when it runs alone, and
// so is the first error when none finds a plan. Where the plan returned leaves GPUs idle and
// another scheduler's plan runs on all of them, r.all_gpus is the fastest such plan.
Result<SearchResult> plan_pipeline(const std::string& name, const Scenario& scenario,
                                   SearchOptions options, std::optional<int> verify = {},
                                   const PlanningLog& log = {});

// The sequence schedulers the default long-context answer runs: HexiSeq and the baselines with
// its freedoms (each scores its configurations in the closed form: milliseconds).
inline constexpr const char* kBestLayoutSchedulers[] = {"hexiseq", "ring", "ulysses", "usp",
                                                        "megatron-cp"};

// The default long-context answer (`hexisim seq`, hexisim.seq() in Python): the fastest
// fitting of kBestLayoutSchedulers' layouts and, with several sequences per iteration to fill
// one, the pipelines of meshes (options.max_stages bounds them); ties keep the earlier (hexiseq
// first). The first error when nothing returns a layout.
struct SequencePlanning {
  Json rows = Json::array();  // per scheduler: scheduler, grouping (stages), tokens_per_s, fits;
                              // or scheduler, error
  std::string line;           // "best of hexiseq, ...: NAME, N tokens/s (hexiseq: M tokens/s)"
  std::optional<HexiSeqResult> layout;         // when a one-mesh layout won
  std::string layout_scheduler;                // its scheduler
  std::optional<MeshPipelineResult> pipeline;  // when a pipeline of meshes won
};
Result<SequencePlanning> plan_sequence(const Scenario& scenario, const SchedulerOptions& options,
                                       const PlanningLog& log = {});

}  // namespace studies
}  // namespace hexi
