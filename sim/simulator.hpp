#pragma once
// The simulator's public API (no SimGrid types): simulate one training iteration
// of a program on a cluster with SimGrid and report it
// (report.json and trace.json, see sim/README.md).
//
// Fidelity is the program's granularity: a `layer` program simulates every op; a
// `stage` program has each stage's forward/backward fused with its intra-machine
// TP collectives folded analytically (scheduler/program/lower.hpp). The report says which.
//
// SimGrid 3.32 allows one engine per process, so by default each simulation runs
// in a forked child process that sends its results back through a pipe; the
// report also gives that process's peak resident memory.

#include <cstdint>
#include <string>
#include <vector>

#include "scenarios/model.hpp"
#include "scenarios/training.hpp"
#include "scheduler/cost/cost_model.hpp"
#include "scheduler/cost/flop_figures.hpp"
#include "scheduler/program/program.hpp"
#include "sim/collective_algos.hpp"
#include "topologies/cluster.hpp"
#include "topologies/json_input.hpp"
#include "topologies/profile.hpp"
#include "topologies/status.hpp"

namespace hexi {

struct SimOptions {
  sim::Algorithm all_reduce = sim::Algorithm::kAuto;  // DP/TP all-reduce algorithm
  bool trace = true;                                  // build trace.json
  // Run uncontended transfers as timers (exact; see executor.hpp). false: every flow
  // is a SimGrid comm (slower; for checking that both agree).
  bool analytic_uncontended = true;
  bool isolate = true;   // run in a child process (false: in this process, at most once)
  std::string scenario;  // recorded in the report
  // What was simulated, recorded in the report when given: the plan's file and who made it,
  // and a digest of the plan's JSON (so a report names the plan it measured).
  std::string plan;
  std::string plan_digest;
};

// Time of one device's compute stream over the iteration:
//   busy + exposed_comm + bubble + idle = iteration time.
struct DeviceMetrics {
  int device = 0;
  std::string gpu;
  int pipeline = 0, stage = 0, tp_rank = 0;
  double busy_s = 0;  // computing (kernels)
  double exposed_comm_s =
      0;  // in TP collectives (incl. waiting for peers), folded TP time, waiting for DP sync
  double dp_wait_s = 0;   // the part of exposed_comm_s spent waiting for the DP sync
  double bubble_s = 0;    // waiting for a pipeline neighbour (stage-boundary transfers) or
                          // for a ZeRO-3 weight gather
  double idle_s = 0;      // nothing to do (after its last op, ...)
  double finish_s = 0;    // its last op's completion
  int max_in_flight = 0;  // micro-batches whose activations were alive at once
  double peak_memory_bytes = 0;
  double capacity_bytes = 0;
  Json memory;  // MemoryBreakdown::to_json() at the simulated peak
  // Sequence meshes (report keys only then): its group, and the parts of exposed_comm_s
  // spent waiting for its group's all-to-alls and for ring blocks.
  int sequence_group = -1;
  double ulysses_wait_s = 0;
  double ring_wait_s = 0;
};

struct LinkMetrics {
  std::string name;  // "<machine>/gpu3/pcie:up", "<machine>/nic0:down", "leaf1/uplink:up"
  std::string kind;  // pcie nvlink p2p socket nic uplink override
  double bandwidth_Bps = 0;
  double bytes = 0;
  double utilisation = 0;  // bytes / (bandwidth x iteration time)
};

struct SimReport {
  std::string scenario, cluster, model, fidelity, schedule, algorithm;
  std::string plan, plan_digest;  // SimOptions' (empty: not given; absent from the JSON)
  int devices_used = 0;
  int ops = 0;
  double iteration_time_s = 0;
  double tokens_per_s = 0;
  double achieved_pflops = 0;  // model FLOPs / iteration time
  double mfu = 0;              // against the whole cluster's summed peak
  // HFU and TFLOP/s per GPU used (flop_figures.hpp); hardware FLOPs = the FLOPs of the
  // program's compute ops (recompute included, each stage's own).
  FlopFigures figures;
  double pipeline_s = 0;        // last backward op's completion (before DP sync and optimizer)
  std::int64_t activities = 0;  // SimGrid comms + kernel timers
  std::int64_t comms = 0;
  std::int64_t timers = 0;
  std::int64_t analytic_batches = 0;  // transfers / collective phases run uncontended as timers
  std::int64_t materialised = 0;      // of those, the ones that met other traffic
  // Replica folding (program.hpp, ReplicaFold; image left out): `devices` and `links` are the
  // simulated pipelines' when folded. pipelines 0: the program was not analysed (no key).
  ReplicaFold replicas;
  bool feasible = true;
  std::vector<std::string> problems;  // devices over their memory
  std::vector<DeviceMetrics> devices;
  std::vector<LinkMetrics> links;  // links that carried bytes, in platform order
  // Not part of report.json (they vary from run to run):
  double wall_time_s = 0;     // SimGrid platform + run
  double platform_s = 0;      // building the SimGrid platform
  double peak_rss_bytes = 0;  // of the simulating process

  Json to_json() const;  // deterministic: no wall time
  static Result<SimReport> from_json(const Json& json);
};

struct SimOutput {
  SimReport report;
  std::string report_json;  // report.to_json() as canonical text (report.json)
  std::string trace_json;   // Chrome trace events (trace.json); empty when disabled
};

// Checks that the program fits the cluster (devices exist, every transfer and
// collective can be routed), then simulates one iteration. Bad input when the
// program is inconsistent (validate_program) or does not fit.
Result<SimOutput> simulate(const Program& program, const Cluster& cluster, const Model& model,
                           const TrainingConfig& training, const Profile& profile,
                           const SimOptions& options);

// Seconds of each compute op (kernel model + folded collectives), 0 for others. A mesh
// stage's op at stage granularity (Fold::mesh) lasts the closed form's time of its pass
// (CostModel::mesh_stage under `model` and `training`, which such programs need), at least
// its kernels' time; the difference is its folded part.
std::vector<double> compute_durations(const Program& program, const Cluster& cluster,
                                      const Profile& profile, std::vector<double>* folded = nullptr,
                                      const Model* model = nullptr,
                                      const TrainingConfig* training = nullptr);

}  // namespace hexi
