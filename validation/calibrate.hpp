#pragma once
// Calibration: a device profile fitted to measured engine traces (`hexisim calibrate`).
//
// Input: traces of `hexisim train --trace`. Each names the scenario and plan files it ran
// (its otherData), so the program is lowered again and its ops meet the trace's events by
// program op id (validation/trace_compare.hpp).
//
// Compute, per device type: every compute op of the traces is a data point: the kernels of
// its shape (scheduler/cost/cost_model.hpp) and its measured time, the mean over the steps
// used (not the median: a rank under a CPU quota is throttled for whole periods, and the
// mean is what its iteration pays). Points of one shape on one device type are merged. The
// device model's own parameters (topologies/profile.hpp: gemm_ceiling, gemm_k_half, gemm_m_half,
// attention_*, memory_efficiency, kernel_overhead_us) are fitted by Levenberg-Marquardt on
// log(model / measured), each point weighted by its share of the measured time, with a weak
// pull towards the base profile (ridge 1e-7 in log space, against weights summing to 1) for
// directions the data does not determine. A parameter no measured op is sensitive to keeps its base
// value and is reported as not exercised. This is the cost model's own
// roofline-with-efficiency-curves, so the simulator and the closed form read the fitted values
// unchanged.
//
// Communication CPU, per transport, on devices under a CPU quota (the testbed's cpu-NN
// ranks): every send, receive and collective member with a measured CPU time (the engine's
// process CPU time in the op, cpu backend) is a data point, its mean over the steps against
//   cpu = a + b x bytes (sends, receives) or a' + b' x bytes (collectives) + f x duration
// (least squares on relative error, each point weighted by its share of the measured CPU,
// so that a few large gradient all-reduces are not outvoted by many small ops; each term
// >= 0; f: polling while it waits). a, b, a', b' are the transport's cpu_us_per_op,
// cpu_ns_per_byte, collective_cpu_us_per_op and collective_cpu_ns_per_byte, f its
// poll_cpu_fraction (TransportCurve::cpu). Where a transport carries the ops of several
// device types (5 or more each), each type gets its own law (TransportCurve::cpu_by_device,
// the profile's "devices"): one shape a + b x bytes, a' + b' x bytes shared by the types,
// scaled per type by a factor for its messages and one for its collectives, and the type's
// own f (alternating least squares); a kind of op a type has no measurement of keeps the
// transport's terms. The simulator spends the device type's law on the device's quota
// clock. The links and collectives below are fitted on what that CPU leaves: the model of a
// message or a collective adds its quota devices' work at their average rate (/ share): both
// ends of a message, the slowest member of a collective.
//
// Links, per transport (host, tcp, ...: Cluster::transport of the pair): every received
// message is a data point: the transfer time = the receive's end - max(the receive's
// start, the matching send's start) (ranks on one host share the clock), the fastest over
// the steps (a receiver paused by its CPU quota adds to the others; the simulator replays
// those pauses on its quota clock), against the model
//   time = hop latency (cluster file) + both ends' communication CPU / their share
//          + alpha + bytes / (nominal single-flow rate x eta)
// alpha and one eta by least squares on relative error (alpha >= 0), then eta per message
// size (the median over that size's messages): the transport's size-dependent curve.
// Needs messages of at least two sizes per transport.
//
// Collectives, per transport (rings whose every edge uses it; all-to-all left out): each
// instance's time from its last member's start to its last end (waiting for late members
// left out), mean over the steps, against the ring model with the fitted links plus its
// slowest member's communication CPU / share: an extra latency per collective step (least
// squares through the origin, at least 0), what the rest of progress and pauses cost each
// step (Cluster::collective_step_latency).
//
// Refused (bad input, naming what is missing): a trace that does not name its scenario and
// plan files, a transport that carries collectives in the programs but no point-to-point
// message, or fewer than two message sizes on a transport.

#include <string>
#include <vector>

#include "scenarios/scenario.hpp"
#include "scheduler/program/program.hpp"
#include "scheduler/program/trace_schema.hpp"
#include "topologies/json_input.hpp"
#include "topologies/profile.hpp"
#include "topologies/status.hpp"

namespace hexi::validation {

// One measured run: the program the engine ran and its trace.
struct MeasuredRun {
  std::string origin;  // the trace file
  Scenario scenario;   // as the run loaded it
  std::string plan_file;
  Program program;
  Trace trace;
};

// Loads a trace of `hexisim train --trace` and lowers the scenario and plan it names;
// errors name the trace and the missing or unreadable file.
Result<MeasuredRun> load_measured_run(const std::string& trace_file, const GpuCatalog& gpus,
                                      const ModelCatalog& models);

struct FitParam {
  std::string name;  // profile parameter, e.g. "gemm_ceiling", or "alpha_us" / "eta@8192"
  double before = 0;
  double after = 0;
  bool fitted = false;  // false: not exercised by any measured op (kept)
};

// Fit quality of one op class within a term: summed over its points (one iteration).
struct ClassFit {
  std::string op_class;
  int points = 0;
  double measured_s = 0;
  double fitted_s = 0;
  double before_s = 0;  // with the base profile
};

struct TermFit {
  std::string term;  // "compute cpu-50", "link tcp"
  int points = 0;    // data points (distinct shapes, or messages)
  int samples = 0;   // measured op instances behind them
  double r2 = 0;     // on times, fitted
  double r2_before = 0;
  double rms_rel = 0;  // relative residuals, fitted (time-weighted for compute)
  double max_rel = 0;
  double rms_rel_before = 0;
  std::vector<FitParam> params;
  std::vector<ClassFit> classes;
};

struct Calibration {
  Profile profile;  // the base with the fitted parameters and transports
  std::vector<TermFit> terms;
  std::vector<std::string> traces;
};

// Fits `base` to the runs (see above).
Result<Calibration> calibrate(const std::vector<MeasuredRun>& runs, const Profile& base);

Json to_json(const Calibration& c);

}  // namespace hexi::validation
