#include "validation/calibrate.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "scheduler/cost/collectives.hpp"
#include "scheduler/cost/cost_model.hpp"
#include "scheduler/program/lower_sequence.hpp"
#include "topologies/eigen.hpp"
#include "topologies/text.hpp"
#include "validation/trace_compare.hpp"

namespace hexi::validation {
namespace {

constexpr double kRidge = 1e-7;      // pull towards the start, in log space
constexpr double kExercised = 0.02;  // |d log t / d log p| of at least one point
constexpr double kDerivStep = 1e-4;  // forward difference in log space
constexpr int kIterations = 200;

// The parameters a compute fit may move, and the value a zero base starts from (a
// half-point of 0 means "no saturation": the fit starts where it has an effect).
struct Candidate {
  Param param;
  double seed;  // file units
};
constexpr Candidate kCandidates[] = {
    {Param::kGemmCeiling, 0.5},
    {Param::kGemmKHalf, 32},
    {Param::kGemmMHalf, 32},
    {Param::kAttentionFwd, 0.5},
    {Param::kAttentionBwd, 0.5},
    {Param::kAttentionSHalfFwd, 64},
    {Param::kAttentionSHalfBwd, 64},
    {Param::kAttentionDenseTokenTraffic, 1},
    {Param::kAttentionDenseTrafficFwd, 1},
    {Param::kAttentionDenseTrafficBwd, 1},
    {Param::kMemoryEfficiency, 0.5},
    {Param::kKernelOverheadUs, 1},
};

using Residuals = std::function<Eigen::VectorXd(const Eigen::VectorXd&)>;

// Levenberg-Marquardt on the sum of squared residuals, x kept inside [lo, hi].
Eigen::VectorXd least_squares(const Residuals& f, Eigen::VectorXd x, const Eigen::VectorXd& lo,
                              const Eigen::VectorXd& hi) {
  const Eigen::Index n = x.size();
  Eigen::VectorXd r = f(x);
  double cost = r.squaredNorm();
  double lambda = 1e-3;
  for (int it = 0; it < kIterations; ++it) {
    Eigen::MatrixXd j(r.size(), n);
    for (Eigen::Index c = 0; c < n; ++c) {
      Eigen::VectorXd xs = x;
      xs[c] += kDerivStep;
      j.col(c) = (f(xs) - r) / kDerivStep;
    }
    const Eigen::MatrixXd jtj = j.transpose() * j;
    const Eigen::VectorXd g = j.transpose() * r;
    bool improved = false;
    for (int tries = 0; tries < 20 && !improved; ++tries) {
      Eigen::MatrixXd a = jtj;
      for (Eigen::Index c = 0; c < n; ++c) a(c, c) += lambda * std::max(jtj(c, c), 1e-12);
      Eigen::VectorXd step = a.ldlt().solve(-g);
      Eigen::VectorXd next = (x + step).cwiseMax(lo).cwiseMin(hi);
      Eigen::VectorXd rn = f(next);
      const double c2 = rn.squaredNorm();
      if (std::isfinite(c2) && c2 < cost) {
        const bool converged = cost - c2 < 1e-12 * std::max(cost, 1e-30);
        x = next;
        r = rn;
        cost = c2;
        lambda = std::max(lambda / 3, 1e-9);
        improved = true;
        if (converged) return x;
      } else {
        lambda *= 4;
      }
    }
    if (!improved) break;
  }
  return x;
}

// A measured compute op's time at its device's average rate. A device under a CPU quota
// (the testbed's cpu-NN) runs at full speed and is paused when its quota of the period is
// spent; the simulator replays that (sim/quota_clock.hpp) from the op's work, which is its
// CPU time: at the average rate, CPU time / share. Its wall time would count the pauses the
// op happened to meet, which depend on what ran before it. Otherwise the wall time.
double compute_seconds(const TraceOp& e, const GpuSpec& gpu) {
  if (gpu.quota_pauses() && e.cpu_us >= 0) return e.cpu_us * 1e-6 / gpu.quota_share;
  return (e.end_us - e.start_us) * 1e-6;
}

// One compute data point: a shape on a device type, its measured mean time.
struct ComputePoint {
  const std::vector<Kernel>* kernels = nullptr;
  std::string op_class;
  double measured_s = 0;  // per op, mean over the ops and steps merged here
  int samples = 0;        // op instances x steps
  int ops = 0;            // program ops (one iteration)
};

double model_time(const ComputePoint& p, const GpuSpec& gpu, const DeviceProfile& d) {
  return kernels_time(*p.kernels, gpu, d);
}

// R^2 of fitted against measured (weights per point).
double r_squared(const std::vector<double>& measured, const std::vector<double>& fitted,
                 const std::vector<double>& weight) {
  double wsum = 0, mean = 0;
  for (std::size_t i = 0; i < measured.size(); ++i) {
    wsum += weight[i];
    mean += weight[i] * measured[i];
  }
  mean /= wsum;
  double res = 0, tot = 0;
  for (std::size_t i = 0; i < measured.size(); ++i) {
    res += weight[i] * (fitted[i] - measured[i]) * (fitted[i] - measured[i]);
    tot += weight[i] * (measured[i] - mean) * (measured[i] - mean);
  }
  return tot > 0 ? 1 - res / tot : (res == 0 ? 1 : 0);
}

// Relative residuals: (rms, max), with weights normalised to 1.
std::pair<double, double> relative_errors(const std::vector<double>& measured,
                                          const std::vector<double>& fitted,
                                          const std::vector<double>& weight) {
  double wsum = 0, ss = 0, worst = 0;
  for (std::size_t i = 0; i < measured.size(); ++i) {
    const double e = fitted[i] / measured[i] - 1;
    wsum += weight[i];
    ss += weight[i] * e * e;
    worst = std::max(worst, std::abs(e));
  }
  return {std::sqrt(ss / wsum), worst};
}

// A term's points as they are scored: per point the measured, base-profile and fitted time
// and its weight; per op class their sums (a point standing for `ops` program ops).
struct Scores {
  std::vector<double> measured, before, after, weight;
  std::map<std::string, ClassFit> classes;

  void add(const std::string& op_class, double measured_s, double before_s, double after_s,
           double w, int ops = 1) {
    measured.push_back(measured_s);
    before.push_back(before_s);
    after.push_back(after_s);
    weight.push_back(w);
    ClassFit& c = classes[op_class];
    c.op_class = op_class;
    c.points += 1;
    c.measured_s += measured_s * ops;
    c.fitted_s += after_s * ops;
    c.before_s += before_s * ops;
  }
  void into(TermFit& t) const {
    for (const auto& [name, c] : classes) t.classes.push_back(c);
    t.r2 = r_squared(measured, after, weight);
    t.r2_before = r_squared(measured, before, weight);
    std::tie(t.rms_rel, t.max_rel) = relative_errors(measured, after, weight);
    t.rms_rel_before = relative_errors(measured, before, weight).first;
  }
};

std::string traces_text(const std::vector<MeasuredRun>& runs) {
  std::string out;
  for (const auto& r : runs) out += (out.empty() ? "" : ", ") + r.origin;
  return out;
}

// The compute fit of one device type, in named steps: weigh the points by their share of the
// measured time, keep the candidates the data can see, least squares in log space from the
// base profile, score before and after and record the fitted parameters.
class ComputeFit {
 public:
  ComputeFit(const GpuSpec& gpu, const std::vector<ComputePoint>& points, const Profile& base)
      : gpu_(gpu), points_(points), start_(base.device(gpu)) {}

  Result<TermFit> run(Profile& out, const std::string& traces) {
    weigh();
    choose_params();
    TermFit t;
    t.term = "compute " + gpu_.name;
    t.points = static_cast<int>(points_.size());
    for (const auto& p : points_) t.samples += p.samples;
    if (params_.empty()) {
      return bad_input(t.term + ": no device-model parameter changes the time of its " +
                       std::to_string(points_.size()) + " measured shapes");
    }
    const DeviceProfile fitted = profile_at(params_, fit());
    score(fitted, t);
    record(fitted, out, traces, t);
    return t;
  }

 private:
  // Each point's share of the measured time.
  void weigh() {
    double total = 0;
    for (const auto& p : points_) total += p.measured_s * p.ops;
    for (const auto& p : points_) weight_.push_back(p.measured_s * p.ops / total);
  }

  DeviceProfile profile_at(const std::vector<Param>& params, const Eigen::VectorXd& x) const {
    DeviceProfile d = start_;
    for (std::size_t j = 0; j < params.size(); ++j) d.set(params[j], std::exp(x[j]));
    return d;
  }

  Eigen::VectorXd log_ratios(const DeviceProfile& d) const {
    Eigen::VectorXd r(points_.size());
    for (std::size_t i = 0; i < points_.size(); ++i)
      r[i] = std::log(model_time(points_[i], gpu_, d) / points_[i].measured_s);
    return r;
  }

  // Which candidates the data can see: d log t / d log p at the start (seeded) values.
  void choose_params() {
    std::vector<Param> all;
    Eigen::VectorXd x_all(std::size(kCandidates));
    for (std::size_t j = 0; j < std::size(kCandidates); ++j) {
      all.push_back(kCandidates[j].param);
      const double v = start_.get(kCandidates[j].param);
      x_all[j] = std::log(v > 0 ? v : kCandidates[j].seed);
    }
    const Eigen::VectorXd r_all = log_ratios(profile_at(all, x_all));
    for (std::size_t j = 0; j < all.size(); ++j) {
      Eigen::VectorXd xs = x_all;
      xs[j] += kDerivStep;
      const double sensitivity =
          ((log_ratios(profile_at(all, xs)) - r_all) / kDerivStep).cwiseAbs().maxCoeff();
      if (sensitivity < kExercised) continue;
      const ParamInfo& info = param_info(all[j]);
      params_.push_back(all[j]);
      x0v_.push_back(x_all[j]);
      lov_.push_back(std::log(std::max(info.min, 1e-6)));
      hiv_.push_back(std::log(info.max));
    }
  }

  // The chosen parameters' fitted values (log space): weighted log ratios, pulled towards
  // the start by the ridge.
  Eigen::VectorXd fit() const {
    const Eigen::Index n = static_cast<Eigen::Index>(params_.size());
    Eigen::VectorXd x0 = Eigen::Map<const Eigen::VectorXd>(x0v_.data(), n);
    const Eigen::VectorXd lo = Eigen::Map<const Eigen::VectorXd>(lov_.data(), n);
    const Eigen::VectorXd hi = Eigen::Map<const Eigen::VectorXd>(hiv_.data(), n);
    x0 = x0.cwiseMax(lo).cwiseMin(hi);
    const Residuals residuals = [&](const Eigen::VectorXd& x) {
      Eigen::VectorXd r(points_.size() + params_.size());
      const Eigen::VectorXd lr = log_ratios(profile_at(params_, x));
      for (std::size_t i = 0; i < points_.size(); ++i) r[i] = std::sqrt(weight_[i]) * lr[i];
      for (Eigen::Index j = 0; j < n; ++j)
        r[static_cast<Eigen::Index>(points_.size()) + j] = std::sqrt(kRidge) * (x[j] - x0[j]);
      return r;
    };
    return least_squares(residuals, x0, lo, hi);
  }

  void score(const DeviceProfile& fitted, TermFit& t) const {
    Scores scores;
    for (std::size_t i = 0; i < points_.size(); ++i) {
      const ComputePoint& p = points_[i];
      scores.add(p.op_class, p.measured_s, model_time(p, gpu_, start_), model_time(p, gpu_, fitted),
                 weight_[i], p.ops);
    }
    scores.into(t);
  }

  // Every candidate before and after into the term; the fitted ones into `out`.
  void record(const DeviceProfile& fitted, Profile& out, const std::string& traces,
              TermFit& t) const {
    const std::string source = format(
        "hexisim calibrate: least squares on %d measured shapes (%d op instances) from %s; "
        "R^2 %.4f, time-weighted rms error %.1f %%",
        t.points, t.samples, traces.c_str(), t.r2, 100 * t.rms_rel);
    for (const auto& c : kCandidates) {
      const bool fitted_here = std::find(params_.begin(), params_.end(), c.param) != params_.end();
      t.params.push_back({std::string(param_info(c.param).name), start_.get(c.param),
                          fitted.get(c.param), fitted_here});
      if (fitted_here) out.set_device_param(gpu_.name, c.param, fitted.get(c.param), source);
    }
  }

  const GpuSpec& gpu_;
  const std::vector<ComputePoint>& points_;
  const DeviceProfile start_;
  std::vector<double> weight_;           // each point's share of the measured time
  std::vector<Param> params_;            // the candidates the data can see
  std::vector<double> x0v_, lov_, hiv_;  // theirs: start, bounds (log space)
};

Result<TermFit> fit_compute(const GpuSpec& gpu, const std::vector<ComputePoint>& points,
                            const Profile& base, Profile& out, const std::string& traces) {
  return ComputeFit(gpu, points, base).run(out, traces);
}

// One message: its transfer time (s) and what the model needs.
struct LinkPoint {
  double bytes = 0;
  double seconds = 0;    // measured transfer time
  double hop_s = 0;      // the cluster's path latency
  double nominal_s = 0;  // bytes / nominal single-flow rate
  std::string op_class;
  int samples = 0;
  double cpu_s = 0;  // the sender's and receiver's CPU at their quota's average rate
  std::array<const GpuSpec*, 2> ends = {nullptr, nullptr};  // sender's, receiver's device
};

Result<TermFit> fit_link(Transport transport, const std::vector<LinkPoint>& points,
                         const TransportCurve& start, const TransportCurve& cpu, Profile& out,
                         const std::string& traces) {
  TermFit t;
  t.term = "link " + std::string(to_string(transport));
  t.points = static_cast<int>(points.size());
  std::set<double> sizes;
  for (const auto& p : points) {
    sizes.insert(p.bytes);
    t.samples += p.samples;
  }
  if (sizes.size() < 2) {
    return bad_input(t.term + ": its " + std::to_string(points.size()) +
                     " point-to-point messages in the traces all have " +
                     format("%.0f", *sizes.begin()) +
                     " bytes; latency and bandwidth need messages of at least two sizes "
                     "(add a trace of a plan with another micro-batch or sequence length)");
  }
  // alpha + nominal_s / eta: linear least squares on relative error, alpha >= 0.
  auto solve = [&](bool with_alpha) {
    Eigen::MatrixXd a(points.size(), with_alpha ? 2 : 1);
    Eigen::VectorXd b(points.size());
    for (std::size_t i = 0; i < points.size(); ++i) {
      const double w = 1 / points[i].seconds;
      const auto r = static_cast<Eigen::Index>(i);
      a(r, 0) = w * points[i].nominal_s;
      if (with_alpha) a(r, 1) = w;
      b[r] = w * (points[i].seconds - points[i].hop_s - points[i].cpu_s);
    }
    Eigen::VectorXd s = a.colPivHouseholderQr().solve(b);
    return std::pair<double, double>{s[0], with_alpha ? s[1] : 0.0};
  };
  auto [inv_eta, alpha] = solve(true);
  if (alpha < 0) std::tie(inv_eta, alpha) = solve(false);
  // eta per message size: the median over that size's messages of what alpha leaves.
  TransportCurve curve;
  curve.transport = transport;
  curve.step_latency_s = alpha;
  curve.cpu = cpu.cpu;
  curve.cpu_by_device = cpu.cpu_by_device;
  for (double size : sizes) {
    std::vector<double> etas;
    for (const auto& p : points) {
      if (p.bytes != size) continue;
      const double wire = p.seconds - p.hop_s - p.cpu_s - alpha;
      etas.push_back(wire > 0 ? p.nominal_s / wire : 1.5);
    }
    const double eta = inv_eta > 0 ? median(etas) : 1.5;
    curve.points.push_back({size, std::clamp(eta, 1e-4, 1.5)});
  }
  auto time_of = [](const TransportCurve& c, const LinkPoint& p) {
    return p.hop_s + p.cpu_s + c.step_latency_s + p.nominal_s / c.efficiency(p.bytes);
  };
  Scores scores;
  for (const auto& p : points)
    scores.add(p.op_class, p.seconds, time_of(start, p), time_of(curve, p), 1);
  scores.into(t);
  t.params.push_back({"step_latency_us", start.step_latency_s * 1e6, alpha * 1e6, true});
  for (const auto& pt : curve.points) {
    t.params.push_back(
        {format("eta@%.0f", pt.bytes), start.efficiency(pt.bytes), pt.efficiency, true});
  }
  curve.source = format(
      "hexisim calibrate: %d point-to-point messages (%d sizes, mean of each over the steps) "
      "from %s; R^2 %.4f, rms error %.1f %%",
      t.points, static_cast<int>(sizes.size()), traces.c_str(), t.r2, 100 * t.rms_rel);
  out.set_transport(std::move(curve));
  return t;
}

// A device's CPU quota share where its quota pauses it, else 0 (no communication CPU is
// charged: GPUs, and a whole core).
double pausing_share(const GpuSpec& gpu) {
  return gpu.quota_pauses() ? gpu.quota_share : 0.0;
}

// One communication op on a device with a CPU quota: the host CPU it spent (the engine's
// process CPU time in the op, mean over the steps), its bytes and its mean duration.
struct CpuPoint {
  double bytes = 0;
  double cpu_s = 0;
  double seconds = 0;
  bool collective = false;
  std::string op_class;
  int samples = 0;
  std::string device_type;
};

// Least squares on relative error of cpu_s against offset(p) + the columns of feature(p)
// (one row per point), each point weighted by its share of the measured CPU (as the compute
// fit weighs by share of time), each coefficient >= 0: a column whose coefficient comes out
// negative, or that no point exercises, is dropped (0) and the rest refitted. With equal
// weights, the hundreds of 256 KiB TP all-reduces of a calibration set the per-byte cost of
// its few gradient all-reduces 200 times their size, where the quota time goes.
template <int kTerms, class Features, class Offset>
std::array<double, kTerms> fit_nonnegative(const std::vector<const CpuPoint*>& points,
                                           const Features& feature, const Offset& offset) {
  std::array<bool, kTerms> use{};
  for (const CpuPoint* p : points) {
    const auto f = feature(*p);
    for (int k = 0; k < kTerms; ++k) use[k] = use[k] || f[k] != 0;
  }
  std::array<double, kTerms> x{};
  for (int round = 0; round < kTerms; ++round) {
    std::vector<int> cols;
    for (int k = 0; k < kTerms; ++k)
      if (use[k]) cols.push_back(k);
    if (cols.empty()) break;
    Eigen::MatrixXd a(points.size(), cols.size());
    Eigen::VectorXd b(points.size());
    for (std::size_t i = 0; i < points.size(); ++i) {
      const CpuPoint& p = *points[i];
      // Relative error r, weight cpu_s: the row scaled by sqrt(cpu_s) / cpu_s.
      const double w = 1 / std::sqrt(std::max(p.cpu_s, 1e-6));
      const auto f = feature(p);
      const auto r = static_cast<Eigen::Index>(i);
      for (std::size_t c = 0; c < cols.size(); ++c)
        a(r, static_cast<Eigen::Index>(c)) = w * f[cols[c]];
      b[r] = w * (p.cpu_s - offset(p));
    }
    const Eigen::VectorXd s = a.colPivHouseholderQr().solve(b);
    x.fill(0);
    bool negative = false;
    for (std::size_t c = 0; c < cols.size(); ++c) {
      x[cols[c]] = std::max(0.0, s[static_cast<Eigen::Index>(c)]);
      if (s[static_cast<Eigen::Index>(c)] < 0) {
        use[cols[c]] = false;
        negative = true;
      }
    }
    if (!negative) break;
  }
  return x;
}

void score_comm_cpu(const std::vector<const CpuPoint*>& points, const CommCpuLaw& before,
                    const CommCpuLaw& after, TermFit& t) {
  Scores scores;
  for (const CpuPoint* point : points) {
    const CpuPoint& p = *point;
    auto law = [&](const CommCpuLaw& l) {
      return l.seconds(p.bytes, p.collective) + l.poll_fraction * p.seconds;
    };
    scores.add(p.op_class, p.cpu_s, law(before), law(after), 1);
  }
  scores.into(t);
  t.params.push_back({"cpu_us_per_op", before.op_s * 1e6, after.op_s * 1e6, true});
  t.params.push_back({"cpu_ns_per_byte", before.byte_s * 1e9, after.byte_s * 1e9, true});
  t.params.push_back({"collective_cpu_us_per_op", before.collective_op_s * 1e6,
                      after.collective_op_s * 1e6, true});
  t.params.push_back({"collective_cpu_ns_per_byte", before.collective_byte_s * 1e9,
                      after.collective_byte_s * 1e9, true});
  t.params.push_back({"poll_cpu_fraction", before.poll_fraction, after.poll_fraction, true});
}

// The CPU a communication op costs a rank on a transport: a + b x bytes for a send or a
// receive, a' + b' x bytes for a collective member, + f x duration for both (what it spends
// polling while it waits, its sleeps backing off: engine/comm_mpi.cpp); least squares on
// relative error weighted by each op's share of the CPU, each term >= 0. The simulator
// charges the work, a + b x bytes (CommCpuLaw::seconds), and the polls, f x the time waited
// (CommCpuLaw::poll_fraction), on the quota clock.
Result<TermFit> fit_comm_cpu(Transport transport, const std::vector<CpuPoint>& points,
                             CommCpuLaw& out) {
  TermFit t;
  t.term = "comm cpu " + std::string(to_string(transport));
  t.points = static_cast<int>(points.size());
  for (const auto& p : points) t.samples += p.samples;
  if (points.size() < 5) {
    return bad_input(t.term + ": " + std::to_string(points.size()) +
                     " communication ops with a measured CPU time; the CPU they cost needs at "
                     "least 5 (the traces of hexisim train on the cpu backend record it)");
  }
  std::vector<const CpuPoint*> all;
  for (const auto& p : points) all.push_back(&p);
  const auto x = fit_nonnegative<5>(
      all,
      [](const CpuPoint& p) {
        const double p2p = p.collective ? 0.0 : 1.0, coll = 1 - p2p;
        return std::array<double, 5>{p2p, p2p * p.bytes, coll, coll * p.bytes, p.seconds};
      },
      [](const CpuPoint&) { return 0.0; });
  const CommCpuLaw fitted{x[0], x[1], x[2], x[3], x[4]};
  score_comm_cpu(all, out, fitted, t);
  out = fitted;
  return t;
}

// Each device type's own law on a transport where its ops there are of several types: one
// shape shared by the types (a + b x bytes for a message, a' + b' x bytes for a collective
// member), scaled per type by one factor for its messages and another for its collectives (device
// types need not spend alike per op; on the testbed they poll differently), and each type's
// own poll fraction f. Least squares on relative error weighted by share of the CPU, every
// term >= 0, by alternating the shape (the factors and fractions held) and the factors and
// fractions (the shape held) until neither moves. A type measured at one message size
// extrapolates as the others' sizes say; a kind of op a type has no measurement of keeps the
// transport's law (`law`). One term per type, scored on its own ops, against the transport's
// law.
std::vector<TermFit> fit_device_comm_cpu(
    Transport transport, const std::map<std::string, std::vector<const CpuPoint*>>& by_type,
    const CommCpuLaw& law, std::map<std::string, CommCpuLaw, std::less<>>& out) {
  struct Scale {
    double message = 1, collective = 1, poll = 0;
    bool messages = false, collectives = false;
  };
  std::map<std::string, Scale> scale;
  std::vector<const CpuPoint*> all;
  for (const auto& [type, points] : by_type) {
    Scale& k = scale[type];
    k.poll = law.poll_fraction;
    for (const CpuPoint* p : points) {
      (p->collective ? k.collectives : k.messages) = true;
      all.push_back(p);
    }
  }
  CommCpuLaw shape = law;
  for (int round = 0; round < 100; ++round) {
    double moved = 0;
    for (const auto& [type, points] : by_type) {
      const auto x = fit_nonnegative<3>(
          points,
          [&](const CpuPoint& p) {
            const double work = shape.seconds(p.bytes, p.collective);
            return std::array<double, 3>{p.collective ? 0.0 : work, p.collective ? work : 0.0,
                                         p.seconds};
          },
          [](const CpuPoint&) { return 0.0; });
      Scale& k = scale[type];
      const Scale next{k.messages ? x[0] : 1, k.collectives ? x[1] : 1, x[2], k.messages,
                       k.collectives};
      moved = std::max({moved, std::abs(next.message - k.message),
                        std::abs(next.collective - k.collective), std::abs(next.poll - k.poll)});
      k = next;
    }
    const auto y = fit_nonnegative<4>(
        all,
        [&](const CpuPoint& p) {
          const Scale& k = scale.at(p.device_type);
          const double m = p.collective ? 0.0 : k.message, c = p.collective ? k.collective : 0.0;
          return std::array<double, 4>{m, m * p.bytes, c, c * p.bytes};
        },
        [&](const CpuPoint& p) { return scale.at(p.device_type).poll * p.seconds; });
    shape = {y[0], y[1], y[2], y[3], 0};
    if (moved < 1e-9) break;
  }
  std::vector<TermFit> terms;
  for (const auto& [type, points] : by_type) {
    const Scale& k = scale.at(type);
    CommCpuLaw own = law;
    if (k.messages) own.op_s = k.message * shape.op_s, own.byte_s = k.message * shape.byte_s;
    if (k.collectives) {
      own.collective_op_s = k.collective * shape.collective_op_s;
      own.collective_byte_s = k.collective * shape.collective_byte_s;
    }
    own.poll_fraction = k.poll;
    out[type] = own;
    TermFit t;
    t.term = "comm cpu " + std::string(to_string(transport)) + " " + type;
    t.points = static_cast<int>(points.size());
    for (const CpuPoint* p : points) t.samples += p->samples;
    score_comm_cpu(points, law, own, t);
    terms.push_back(std::move(t));
  }
  return terms;
}

// A run's spread of compute op times from op to op on each device type under a CPU quota:
// the ops of one shape in one step on one device type are one group (so the machine's drift
// between steps and rounds stays out); the rms over every op of (time / its group's mean -
// 1), groups of 3 ops or more. Only ops whose CPU time was measured: a wall time counts the
// quota's pauses.
std::map<std::string, double> op_time_spread(const Program& prog, const Cluster& cluster,
                                             const MeasuredOps& measured) {
  std::map<std::tuple<std::string, int, int>, std::vector<double>> groups;  // type, shape, step
  for (int id = 0; id < prog.num_ops(); ++id) {
    const Op& op = prog.ops[id];
    const GpuSpec& gpu = cluster.gpu(op.device);
    if (op.kind != OpKind::kCompute || !gpu.quota_pauses()) continue;
    for (const TraceOp& e : measured.by_op[id]) {
      if (e.cpu_us >= 0) groups[{gpu.name, op.shape, e.step}].push_back(compute_seconds(e, gpu));
    }
  }
  std::map<std::string, std::pair<double, int>> sums;  // type -> (sum of squares, ops)
  for (const auto& [key, times] : groups) {
    if (times.size() < 3) continue;
    double mean = 0;
    for (double t : times) mean += t / static_cast<double>(times.size());
    if (mean <= 0) continue;
    auto& [squares, n] = sums[std::get<0>(key)];
    for (double t : times) squares += (t / mean - 1) * (t / mean - 1);
    n += static_cast<int>(times.size());
  }
  std::map<std::string, double> out;
  for (const auto& [type, sum] : sums) out[type] = std::sqrt(sum.first / sum.second);
  return out;
}

// One collective instance: its measured time (the mean over the steps of the last member's
// end minus the last member's start: waiting for late members left out) and the model's
// time with the fitted links and no extra step latency.
struct CollectivePoint {
  double seconds = 0;
  double model_s = 0;
  int steps = 0;  // latency steps of its algorithm
  std::string op_class;
  int samples = 0;
};

// The extra latency per collective step on a transport, by least squares through the origin
// on (measured - model) against steps, at least 0.
TermFit fit_collectives(Transport transport, const std::vector<CollectivePoint>& points,
                        Profile& out) {
  TermFit t;
  t.term = "collectives " + std::string(to_string(transport));
  t.points = static_cast<int>(points.size());
  double num = 0, den = 0;
  for (const auto& p : points) {
    t.samples += p.samples;
    num += (p.seconds - p.model_s) * p.steps;
    den += static_cast<double>(p.steps) * p.steps;
  }
  const double alpha = den > 0 ? std::max(0.0, num / den) : 0.0;
  Scores scores;
  for (const auto& p : points)
    scores.add(p.op_class, p.seconds, p.model_s, p.model_s + alpha * p.steps, 1);
  scores.into(t);
  t.params.push_back({"collective_step_latency_us", 0, alpha * 1e6, true});
  out.set_collective_step_latency(transport, alpha);
  return t;
}

// The send op of each received message: (source device, destination, tag) -> send op id.
std::map<std::tuple<int, int, int>, int> sends_by_message(const Program& program) {
  std::map<std::tuple<int, int, int>, int> out;
  for (int id = 0; id < program.num_ops(); ++id) {
    const Op& op = program.ops[id];
    if (op.kind == OpKind::kSend) out[{op.device, op.peer, op.tag}] = id;
  }
  return out;
}

}  // namespace

Result<MeasuredRun> load_measured_run(const std::string& trace_file, const GpuCatalog& gpus,
                                      const ModelCatalog& models) {
  auto trace = load_trace(trace_file);
  if (!trace) return trace.error();
  const Json& other = trace->other_data;
  auto named = [&](const char* key) -> Result<std::string> {
    if (!other.is_object() || !other.contains(key) || !other[key].is_string()) {
      return bad_input(trace_file + ": otherData." + key +
                       " is missing: calibration needs a trace written by `hexisim train "
                       "--trace` (it names the scenario and plan files it ran)");
    }
    return other[key].get<std::string>();
  };
  auto scenario_file = named("scenario_file");
  if (!scenario_file) return scenario_file.error();
  auto plan_file = named("plan_file");
  if (!plan_file) return plan_file.error();
  auto scenario = load_scenario(*scenario_file, gpus, models);
  if (!scenario) {
    return Error{scenario.error().kind, trace_file + ": its scenario: " + scenario.error().message};
  }
  auto file = read_plan_file(*plan_file);
  if (!file) return Error{file.error().kind, trace_file + ": its plan: " + file.error().message};
  LowerOptions lo;
  lo.scenario = scenario->name;
  auto program = lower_plan_file(*file, scenario->cluster, scenario->model, scenario->training, lo,
                                 *plan_file);
  if (!program) return program.error();
  return MeasuredRun{trace_file, std::move(*scenario), *plan_file, std::move(*program),
                     std::move(*trace)};
}

namespace {

// The calibration of a profile from measured runs, in named steps: gather each run's points
// (compute shapes, messages, the CPU of communication ops, the transports collectives use),
// fit compute per device type, check every collective transport has messages, fit the
// communication CPU, then the links (on what that CPU leaves), then the collectives against
// the fitted links.
class Calibrator {
 public:
  Calibrator(const std::vector<MeasuredRun>& runs, const Profile& base)
      : runs_(runs), base_(base), traces_(traces_text(runs)) {
    c_.profile = base;
    for (const auto& r : runs) c_.traces.push_back(r.origin);
  }

  Result<Calibration> run() {
    for (const MeasuredRun& run : runs_) {
      if (Status s = gather(run); !s) return s.error();
    }
    if (Status s = fit_compute_terms(); !s) return s.error();
    if (Status s = check_collective_links(); !s) return s.error();
    if (Status s = fit_comm_cpu_terms(); !s) return s.error();
    if (Status s = fit_link_terms(); !s) return s.error();
    std::map<Transport, std::vector<CollectivePoint>> collectives;
    for (const MeasuredRun& run : runs_) {
      if (Status s = gather_collectives(run, collectives); !s) return s.error();
    }
    for (const auto& [transport, points] : collectives) {
      if (c_.profile.transports().count(transport) == 0) continue;
      c_.terms.push_back(fit_collectives(transport, points, c_.profile));
    }
    return std::move(c_);
  }

 private:
  // Compute points by device type, merged per (run, shape); link points by transport.
  Status gather(const MeasuredRun& run) {
    auto measured = measured_ops(run.program, run.trace, run.origin);
    if (!measured) return measured.error();
    const Program& prog = run.program;
    const Cluster& cluster = run.scenario.cluster;
    for (const auto& [type, spread] : op_time_spread(prog, cluster, *measured))
      spreads_[type].push_back(spread);
    std::map<std::pair<int, std::string>, ComputePoint> shapes;  // (shape, gpu) -> point
    const auto sends = sends_by_message(prog);
    for (int id = 0; id < prog.num_ops(); ++id) {
      const Op& op = prog.ops[id];
      const auto& events = measured->by_op[id];
      if (op.kind != OpKind::kCompute && cluster.gpu(op.device).quota_pauses())
        add_cpu_point(prog, cluster, id, events);
      if (op.kind == OpKind::kCompute) {
        add_compute_point(prog, cluster, id, events, shapes);
      } else if (op.kind == OpKind::kRecv) {
        auto it = sends.find({op.peer, op.device, op.tag});
        if (it == sends.end()) continue;
        add_link_point(cluster, op, events, measured->by_op[it->second]);
      } else if (op.kind == OpKind::kCollective) {
        note_collective(run, id);
      }
    }
    for (auto& [key, point] : shapes) compute_[key.second].second.push_back(point);
    return {};
  }

  // A communication op on a device with a CPU quota: its CPU and duration, mean over the
  // steps that measured its CPU, by the transport to its peer (a collective: the next member).
  void add_cpu_point(const Program& prog, const Cluster& cluster, int id,
                     const std::vector<TraceOp>& events) {
    const Op& op = prog.ops[id];
    int peer = op.peer;
    if (op.kind == OpKind::kCollective) {
      const auto& devs = prog.groups[op.group].devices;
      const auto at = std::find(devs.begin(), devs.end(), op.device) - devs.begin();
      peer = devs[static_cast<std::size_t>(at + 1) % devs.size()];
    }
    CpuPoint p{.bytes = op.bytes,
               .collective = op.kind == OpKind::kCollective,
               .op_class = op_class(prog, id),
               .device_type = cluster.gpu(op.device).name};
    for (const TraceOp& e : events) {
      if (e.cpu_us < 0) continue;
      p.cpu_s += e.cpu_us * 1e-6;
      p.seconds += (e.end_us - e.start_us) * 1e-6;
      ++p.samples;
    }
    if (p.samples > 0 && peer != op.device && op.bytes > 0) {
      p.cpu_s /= p.samples;
      p.seconds /= p.samples;
      comm_cpu_[cluster.transport(op.device, peer)].push_back(p);
    }
  }

  void add_compute_point(const Program& prog, const Cluster& cluster, int id,
                         const std::vector<TraceOp>& events,
                         std::map<std::pair<int, std::string>, ComputePoint>& shapes) {
    const Op& op = prog.ops[id];
    const GpuSpec& gpu = cluster.gpu(op.device);
    ComputePoint& p = shapes[{op.shape, gpu.name}];
    double sum = 0;
    for (const TraceOp& e : events) sum += compute_seconds(e, gpu);
    // Running mean over ops of the shape (each op's mean over the steps).
    p.measured_s = (p.measured_s * p.ops + sum / static_cast<double>(events.size())) / (p.ops + 1);
    p.ops += 1;
    p.samples += static_cast<int>(events.size());
    p.kernels = &prog.shapes[op.shape].kernels;
    p.op_class = op_class(prog, id);
    compute_[gpu.name].first = &gpu;
  }

  // A received message (`events`) and its send (`sent`): the fastest arrival over the steps.
  void add_link_point(const Cluster& cluster, const Op& op, const std::vector<TraceOp>& events,
                      const std::vector<TraceOp>& sent) {
    double best = 0;
    int n = 0;
    // Only where the receive was posted before the send started: its end is then the
    // arrival. A receive posted later may find the message there already (an eager send,
    // the testbed's TCP up to 4 MiB), and its own time says nothing about the link.
    for (const TraceOp& e : events) {
      for (const TraceOp& s : sent) {
        if (s.step != e.step || e.start_us > s.start_us) continue;
        const double took = (e.end_us - s.start_us) * 1e-6;
        best = n == 0 ? took : std::min(best, took);
        ++n;
      }
    }
    if (best <= 0) return;
    const Transport t = cluster.transport(op.peer, op.device);
    auto given = base_.transports().find(t);
    start_curves_.emplace(t,
                          given != base_.transports().end() ? given->second : transport_curve(t));
    links_[t].push_back({op.bytes,
                         best,
                         cluster.latency(op.peer, op.device),
                         op.bytes / cluster.bandwidth(op.peer, op.device),
                         "message " + std::string(to_string(op.tensor)),
                         static_cast<int>(events.size()),
                         0.0,
                         {&cluster.gpu(op.peer), &cluster.gpu(op.device)}});
  }

  // The transports a collective's ring crosses, each with a collective on it.
  void note_collective(const MeasuredRun& run, int id) {
    const Program& prog = run.program;
    const Cluster& cluster = run.scenario.cluster;
    const auto& devs = prog.groups[prog.ops[id].group].devices;
    for (std::size_t k = 0; k < devs.size(); ++k) {
      const int next = devs[(k + 1) % devs.size()];
      if (next == devs[k]) continue;
      collective_only_.emplace(cluster.transport(devs[k], next),
                               op_class(prog, id) + " in " + run.origin);
    }
  }

  Status fit_compute_terms() {
    for (const auto& [name, entry] : compute_) {
      auto t = fit_compute(*entry.first, entry.second, base_, c_.profile, traces_);
      if (!t) return t.error();
      // The spread from op to op: the median over the runs (one noisy run does not set it).
      auto it = spreads_.find(name);
      if (it != spreads_.end()) {
        const double spread = median(it->second);
        t->params.push_back(
            {"op_time_spread", base_.device(*entry.first).op_time_spread, spread, true});
        c_.profile.set_device_param(
            name, Param::kOpTimeSpread, spread,
            format("hexisim calibrate: rms of each compute op's time against the mean of its "
                   "shape in its step, median over %d runs, from %s",
                   static_cast<int>(it->second.size()), traces_.c_str()));
      }
      c_.terms.push_back(std::move(*t));
    }
    return {};
  }

  Status check_collective_links() const {
    for (const auto& [transport, where] : collective_only_) {
      if (transport == Transport::kNominal || links_.count(transport) != 0) continue;
      return bad_input("link " + std::string(to_string(transport)) + " carries " + where +
                       " but no point-to-point message in the traces: its latency and "
                       "bandwidth cannot be fitted (add a trace of a plan with a pipeline "
                       "boundary or a sequence ring over it)");
    }
    return {};
  }

  // The CPU of communication ops on ranks under a quota, per transport, then per device type
  // where a transport has ops of several: first, as the simulator charges it on their quota
  // clocks, so the links and collectives are fitted on what it leaves (at each rank's average
  // rate: CPU / share).
  Status fit_comm_cpu_terms() {
    for (const auto& [transport, points] : comm_cpu_) {
      if (transport == Transport::kNominal) continue;
      TransportCurve& curve = cpu_[transport];
      auto t = fit_comm_cpu(transport, points, curve.cpu);
      if (!t) return t.error();
      c_.terms.push_back(std::move(*t));
      std::map<std::string, std::vector<const CpuPoint*>> by_type;
      for (const auto& p : points) by_type[p.device_type].push_back(&p);
      std::erase_if(by_type, [](const auto& e) { return e.second.size() < 5; });  // too few
      if (by_type.size() < 2) continue;  // one type: the transport's law is its own
      for (TermFit& term : fit_device_comm_cpu(transport, by_type, curve.cpu, curve.cpu_by_device))
        c_.terms.push_back(std::move(term));
    }
    return {};
  }

  // The fitted CPU of a communication op on `gpu`, at its quota's average rate (0 where no
  // quota pauses it or no law was fitted).
  double cpu_at_share(Transport t, const GpuSpec& gpu, double bytes, bool collective) const {
    auto it = cpu_.find(t);
    const double share = pausing_share(gpu);
    return it == cpu_.end() || share <= 0
               ? 0.0
               : it->second.cpu_of(gpu.name).seconds(bytes, collective) / share;
  }

  Status fit_link_terms() {
    for (auto& [transport, points] : links_) {
      if (transport == Transport::kNominal) continue;  // overrides and nominal clusters: as given
      for (auto& p : points) {
        p.cpu_s = cpu_at_share(transport, *p.ends[0], p.bytes, false) +
                  cpu_at_share(transport, *p.ends[1], p.bytes, false);
      }
      auto t = fit_link(transport, points, start_curves_.at(transport), cpu_[transport], c_.profile,
                        traces_);
      if (!t) return t.error();
      c_.terms.push_back(std::move(*t));
    }
    return {};
  }

  // Collectives, against the fitted links: per transport (rings on one transport only).
  Status gather_collectives(const MeasuredRun& run,
                            std::map<Transport, std::vector<CollectivePoint>>& out) {
    auto measured = measured_ops(run.program, run.trace, run.origin);
    if (!measured) return measured.error();
    Cluster fitted = run.scenario.cluster;
    fitted.set_curves(c_.profile.transports());
    std::map<std::pair<int, int>, std::vector<int>> instances;  // (group, instance) -> ops
    for (int id = 0; id < run.program.num_ops(); ++id) {
      const Op& op = run.program.ops[id];
      if (op.kind == OpKind::kCollective && op.collective != Collective::kAllToAll)
        instances[{op.group, op.instance}].push_back(id);
    }
    for (const auto& [key, ops] : instances) add_collective(run, fitted, *measured, ops, out);
    return {};
  }

  // One collective instance (its members' ops) as a point of its transport's fit.
  void add_collective(const MeasuredRun& run, const Cluster& fitted, const MeasuredOps& measured,
                      const std::vector<int>& ops,
                      std::map<Transport, std::vector<CollectivePoint>>& out) const {
    const Op& first = run.program.ops[ops.front()];
    const auto& devs = run.program.groups[first.group].devices;
    const int n = static_cast<int>(devs.size());
    if (n < 2 || first.bytes <= 0) return;
    std::set<Transport> used;
    for (int k = 0; k < n; ++k) used.insert(fitted.transport(devs[k], devs[(k + 1) % n]));
    if (used.size() != 1 || *used.begin() == Transport::kNominal) return;
    std::map<int, std::pair<double, double>> per_step;  // step -> (last start, last end)
    for (int id : ops) {
      for (const TraceOp& e : measured.by_op[id]) {
        auto [it, fresh] = per_step.try_emplace(e.step, e.start_us, e.end_us);
        if (!fresh) {
          it->second.first = std::max(it->second.first, e.start_us);
          it->second.second = std::max(it->second.second, e.end_us);
        }
      }
    }
    if (per_step.empty()) return;
    double sum = 0;
    for (const auto& [step, span] : per_step) sum += (span.second - span.first) * 1e-6;
    const auto [bw, lat] = ring_link(fitted, devs, first.bytes);
    double cpu_s = 0;  // the slowest member's CPU (the simulator holds the ring for it)
    for (int d : devs) {
      cpu_s = std::max(cpu_s, cpu_at_share(*used.begin(), fitted.gpu(d), first.bytes, true));
    }
    out[*used.begin()].push_back(
        {sum / static_cast<double>(per_step.size()),
         cpu_s + collective_time(first.collective, first.bytes, n, bw, lat),
         latency_steps(first.collective, n), op_class(run.program, ops.front()),
         static_cast<int>(per_step.size() * ops.size())});
  }

  const std::vector<MeasuredRun>& runs_;
  const Profile& base_;
  const std::string traces_;
  Calibration c_;
  // gather(): compute points per device type, link points and the start curves per
  // transport, a collective on each transport, communication CPU points, op time spreads.
  std::map<std::string, std::pair<const GpuSpec*, std::vector<ComputePoint>>> compute_;
  std::map<Transport, std::vector<LinkPoint>> links_;
  std::map<Transport, std::string> collective_only_;  // transport -> a collective on it
  std::map<Transport, TransportCurve> start_curves_;
  std::map<Transport, std::vector<CpuPoint>> comm_cpu_;
  std::map<std::string, std::vector<double>> spreads_;  // device type -> each run's
  std::map<Transport, TransportCurve> cpu_;             // fit_comm_cpu_terms(): the CPU laws
};

}  // namespace

Result<Calibration> calibrate(const std::vector<MeasuredRun>& runs, const Profile& base) {
  if (runs.empty()) return bad_input("no trace to calibrate from");
  return Calibrator(runs, base).run();
}

Json to_json(const Calibration& c) {
  Json terms = Json::array();
  for (const TermFit& t : c.terms) {
    Json params = Json::array(), classes = Json::array();
    for (const auto& p : t.params) {
      params.push_back(
          {{"name", p.name}, {"before", p.before}, {"after", p.after}, {"fitted", p.fitted}});
    }
    for (const auto& k : t.classes) {
      classes.push_back({{"class", k.op_class},
                         {"points", k.points},
                         {"measured_s", k.measured_s},
                         {"fitted_s", k.fitted_s},
                         {"before_s", k.before_s}});
    }
    terms.push_back({{"term", t.term},
                     {"points", t.points},
                     {"samples", t.samples},
                     {"r2", t.r2},
                     {"r2_before", t.r2_before},
                     {"rms_rel", t.rms_rel},
                     {"max_rel", t.max_rel},
                     {"rms_rel_before", t.rms_rel_before},
                     {"params", params},
                     {"classes", classes}});
  }
  return {{"traces", c.traces}, {"terms", terms}};
}

}  // namespace hexi::validation
