#include "sim/simulator.hpp"

#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <numbers>
#include <set>
#include <sstream>
#include <string_view>
#include <tuple>

#include "scheduler/cost/collectives.hpp"
#include "scheduler/estimate/estimate.hpp"
#include "sim/executor.hpp"
#include "sim/metrics.hpp"
#include "sim/platform.hpp"

namespace hexi {

namespace {

// The closed form's time of a mesh stage's pass (Fold::mesh).
double mesh_pass_s(const Program& p, const Fold& f, const Cluster& cluster, const Profile& profile,
                   const Model* model, const TrainingConfig* training) {
  if (model == nullptr || training == nullptr) {
    throw std::logic_error("compute_durations: a mesh stage's fold needs the model and training");
  }
  Stage st;
  st.sequence = p.meshes[static_cast<std::size_t>(f.mesh)];
  st.devices = st.sequence->devices();
  st.layer_end = f.layers;
  const StageEstimate e =
      CostModel(cluster, *model, *training, profile).mesh_stage(st, f.first, f.last);
  return f.forward ? e.forward_s : e.backward_s;
}

}  // namespace

std::vector<double> compute_durations(const Program& p, const Cluster& cluster,
                                      const Profile& profile, std::vector<double>* folded,
                                      const Model* model, const TrainingConfig* training) {
  const std::size_t types = cluster.gpu_types().size();
  std::vector<double> shape_time(p.shapes.size() * types, -1.0);
  std::vector<double> fold_time(p.folds.size(), -1.0);
  std::vector<double> out(p.num_ops(), 0.0);
  if (folded != nullptr) folded->assign(p.num_ops(), 0.0);
  for (int id = 0; id < p.num_ops(); ++id) {
    const Op& op = p.ops[id];
    if (op.kind != OpKind::kCompute) continue;
    const int type = cluster.devices()[op.device].gpu_type;
    double& st = shape_time[op.shape * types + type];
    if (st < 0) {
      const GpuSpec& gpu = cluster.gpu_types()[type];
      st = kernels_time(p.shapes[op.shape].kernels, gpu, profile.device(gpu));
    }
    double fold = 0;
    if (op.folded >= 0 && p.folds[op.folded].mesh >= 0) {
      double& pass = fold_time[op.folded];
      if (pass < 0) pass = mesh_pass_s(p, p.folds[op.folded], cluster, profile, model, training);
      out[id] = std::max(st, pass);  // the pass exactly: no rounding through st + fold
      if (folded != nullptr) (*folded)[id] = out[id] - st;
      continue;
    }
    if (op.folded >= 0) {
      double& ft = fold_time[op.folded];
      if (ft < 0) {
        const Fold& f = p.folds[op.folded];
        const auto& devs = p.groups[f.group].devices;
        auto [bw, lat] = ring_link(cluster, devs, f.bytes);
        auto [stats_bw, stats_lat] = ring_link(cluster, devs, f.loss_stats_bytes);
        const int n = static_cast<int>(devs.size());
        ft = f.count * collective_time(f.collective, f.bytes, n, bw, lat) +
             collective_time(Collective::kAllGather, f.loss_stats_bytes, n, stats_bw, stats_lat);
      }
      fold = ft;
    }
    out[id] = st + fold;
    if (folded != nullptr) (*folded)[id] = fold;
  }
  return out;
}

namespace {

namespace sg4 = simgrid::s4u;

// One device's stream of standard normal numbers: splitmix64 and Box-Muller, written out so
// that the same program gives the same draws with any standard library.
class Normals {
 public:
  explicit Normals(std::uint64_t seed) : state_(seed) {}
  double next() {
    const double u1 = (static_cast<double>(bits() >> 11) + 0.5) / 9007199254740992.0;
    const double u2 = static_cast<double>(bits() >> 11) / 9007199254740992.0;
    return std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
  }

 private:
  std::uint64_t bits() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::uint64_t state_;
};

// Each compute op's kernel time drawn around the model's where its device type's profile has a
// spread (DeviceProfile::op_time_spread, s): the model's time x a log-normal of mean 1 and
// relative deviation s, one stream per device, drawn in op order. Deterministic: the same
// program and profile give the same times.
void spread_durations(const Program& p, const Cluster& cluster, const Profile& profile,
                      const std::vector<double>& folded, std::vector<double>& duration) {
  std::vector<double> s2(cluster.num_devices(), 0.0);  // the log's variance, per device
  bool any = false;
  for (int d = 0; d < cluster.num_devices(); ++d) {
    const double spread = profile.device(cluster.gpu(d)).op_time_spread;
    s2[d] = std::log1p(spread * spread);
    any = any || spread > 0;
  }
  if (!any) return;
  std::vector<Normals> normals;
  for (int d = 0; d < cluster.num_devices(); ++d) normals.emplace_back(0x5eed0000ULL + d);
  for (int id = 0; id < p.num_ops(); ++id) {
    const Op& op = p.ops[id];
    const double v = s2[op.device];
    if (op.kind != OpKind::kCompute || v <= 0) continue;
    const double kernels = duration[id] - folded[id];  // a folded collective keeps its time
    duration[id] =
        folded[id] + kernels * std::exp(std::sqrt(v) * normals[op.device].next() - v / 2);
  }
}

// Every transfer and collective must stay inside one connected part of the cluster.
Status check_fits(const Program& p, const Cluster& cluster) {
  if (p.num_devices != cluster.num_devices()) {
    return bad_input("program: lowered for " + std::to_string(p.num_devices) +
                     " devices but cluster \"" + cluster.name() + "\" has " +
                     std::to_string(cluster.num_devices()));
  }
  std::vector<int> part(cluster.machines().size(), 0);
  auto parts = cluster.connected_parts();
  for (std::size_t i = 0; i < parts.size(); ++i) {
    for (int m : parts[i]) part[m] = static_cast<int>(i);
  }
  auto part_of = [&](int d) { return part[cluster.devices()[d].machine]; };
  for (int id = 0; id < p.num_ops(); ++id) {
    const Op& op = p.ops[id];
    bool ok = true;
    if (op.kind == OpKind::kSend) ok = part_of(op.device) == part_of(op.peer);
    if (op.kind == OpKind::kCollective) {
      for (int d : p.groups[op.group].devices) ok = ok && part_of(d) == part_of(op.device);
    }
    if (!ok) {
      return bad_input("program: op " + std::to_string(id) + " (device " +
                       std::to_string(op.device) + ") communicates with a device that cluster \"" +
                       cluster.name() + "\" cannot reach (no spine between their leaves)");
    }
  }
  return {};
}

struct Inputs {
  const Program& program;
  const Cluster& cluster;
  const Model& model;
  const TrainingConfig& training;
  const Profile& profile;
  const SimOptions& options;
};

// The flows of a replica-folded program that leave its simulated devices for the rest
// (ReplicaFold): each collective on a group that spans every pipeline, expanded over the
// whole group as the executor does.
std::vector<sim::MirrorHop> mirror_hops(const Program& p, const Cluster& cluster,
                                        sim::Algorithm algorithm) {
  if (!p.replicas.folded()) return {};
  std::set<std::tuple<int, Collective, double>> collectives;
  for (const Op& op : p.ops) {
    if (op.kind == OpKind::kCollective && !p.groups[op.group].whole.empty())
      collectives.emplace(op.group, op.collective, op.bytes);
  }
  const std::vector<char> simulated = sim::simulated_devices(p, cluster.num_devices());
  std::set<std::pair<int, int>> hops;
  for (const auto& [group, collective, bytes] : collectives) {
    for (const sim::Phase& ph :
         sim::expand_collective(collective, p.groups[group].whole, bytes, algorithm, cluster)) {
      for (const sim::FlowSpec& f : ph.flows) {
        if (simulated[f.src] && !simulated[f.dst]) hops.emplace(f.src, f.dst);
      }
    }
  }
  std::vector<sim::MirrorHop> out;
  for (auto [src, dst] : hops) out.push_back({src, dst, p.replicas.image[dst]});
  return out;
}

// The devices the program's ops run on or send to (the platform builds their machines only).
std::vector<char> needed_devices(const Program& p, const Cluster& cluster) {
  std::vector<char> needed(cluster.num_devices(), 0);
  for (const Op& op : p.ops) {
    needed[op.device] = 1;
    if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) needed[op.peer] = 1;
  }
  return needed;
}

// Runs SimGrid in this process (once per process).
// Simulated times stay below kMaxSimulatedSeconds (about 31.7 years): a trace writes whole
// nanoseconds in 64 bits (up to 292 years) and tables print seconds in fixed notation. An
// op or an iteration longer than that is no training step's (a program whose flops or
// bytes were edited to 1e300): bad input naming the longest op.
constexpr double kMaxSimulatedSeconds = 1e9;

Status check_simulated_time(const Program& program, const std::vector<double>& times,
                            std::string_view what) {
  int longest = -1;
  for (std::size_t i = 0; i < times.size(); ++i) {
    if (longest < 0 || !(times[i] <= times[longest])) longest = static_cast<int>(i);
  }
  if (longest < 0 || times[longest] <= kMaxSimulatedSeconds) return {};
  std::ostringstream why;
  why << "op " << longest << " (" << op_label(program, longest) << ") " << what << " "
      << std::setprecision(3) << times[longest] << " s, beyond the simulator's limit of "
      << kMaxSimulatedSeconds << " s (31.7 years): its flops or bytes are not a training step's";
  return bad_input(why.str());
}

Result<SimOutput> run_here(const Inputs& in) {
  static bool used = false;
  if (used)
    return failure("simulate: SimGrid runs one engine per process; use SimOptions::isolate");
  used = true;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<double> folded;
  std::vector<double> duration =
      compute_durations(in.program, in.cluster, in.profile, &folded, &in.model, &in.training);
  spread_durations(in.program, in.cluster, in.profile, folded, duration);
  if (auto st = check_simulated_time(in.program, duration, "takes"); !st) return st.error();
  char arg0[] = "hexisim-simulate";
  char arg1[] = "--log=root.thres:critical";
  char* argv[] = {arg0, arg1, nullptr};
  int argc = 2;
  auto* engine =
      new sg4::Engine(&argc, argv);  // lives until the process ends (SimGrid 3.32 cannot restart)
  (void)engine;
  sg4::Engine::set_config("network/model:CM02");   // latency + size / bandwidth, max-min sharing
  sg4::Engine::set_config("network/TCP-gamma:0");  // no TCP window cap
  sg4::Engine::set_config("network/crosstraffic:0");
  // Every share recomputed at every event: SimGrid 3.32's lazy update let the column flows
  // of a hierarchical all-reduce across PCIe machines run at their PCIe share, 100x over a
  // NIC of 0.05 GB/s (Simulator.HierarchicalAllReduceIsBoundByTheNicOnPcieMachines); no
  // slower here (mix-1024 stage: 0.78 s both ways).
  sg4::Engine::set_config("network/optim:Full");
  const auto tp = std::chrono::steady_clock::now();
  sim::Platform platform(
      in.cluster, needed_devices(in.program, in.cluster),
      mirror_hops(in.program, in.cluster, in.options.all_reduce),
      in.program.replicas.folded() ? in.program.replicas.uplink_share : std::vector<double>{});
  const double platform_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - tp).count();
  sim::ExecutionResult r;
  {
    sim::Executor executor(in.program, platform, in.cluster, duration, in.options.all_reduce,
                           in.options.analytic_uncontended);
    r = executor.run();
  }
  if (!r.unfinished.empty()) {
    std::string ids;
    for (std::size_t i = 0; i < r.unfinished.size() && i < 12; ++i)
      ids += (i ? ", " : "") + std::to_string(r.unfinished[i]);
    return failure("simulation stalled: " + std::to_string(r.unfinished.size()) +
                   " ops never completed (" + ids + (r.unfinished.size() > 12 ? ", ..." : "") +
                   ")");
  }
  if (auto st = check_simulated_time(in.program, r.end, "ends at"); !st) return st.error();
  sim::RunInputs run{in.program, in.cluster, in.model,         in.training,
                     duration,   folded,     platform.links(), &platform};
  SimOutput out;
  out.report = sim::make_report(run, r);
  out.report.scenario = in.options.scenario.empty() ? in.program.scenario : in.options.scenario;
  out.report.algorithm = std::string(sim::to_string(in.options.all_reduce));
  out.report.plan = in.options.plan;
  out.report.plan_digest = in.options.plan_digest;
  out.report_json = dump_json(out.report.to_json(), 1) + "\n";
  if (in.options.trace) out.trace_json = sim::make_trace(run, r);
  out.report.wall_time_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.report.platform_s = platform_s;
  return out;
}

// ---- child process transport ----------------------------------------------
void put(int fd, std::string_view bytes) {
  std::uint64_t n = bytes.size();
  auto write_all = [fd](const char* p, std::size_t len) {
    while (len > 0) {
      ssize_t k = ::write(fd, p, len);
      if (k <= 0) _exit(3);
      p += k;
      len -= static_cast<std::size_t>(k);
    }
  };
  write_all(reinterpret_cast<const char*>(&n), sizeof n);
  write_all(bytes.data(), bytes.size());
}

bool take(std::string_view& in, std::string& out) {
  std::uint64_t n = 0;
  if (in.size() < sizeof n) return false;
  std::memcpy(&n, in.data(), sizeof n);
  in.remove_prefix(sizeof n);
  if (in.size() < n) return false;
  out.assign(in.data(), n);
  in.remove_prefix(n);
  return true;
}

[[noreturn]] void child(int fd, const Inputs& in) {
  Result<SimOutput> out = failure("simulate: no result");
  try {
    out = run_here(in);
  } catch (const std::exception& e) {
    out = failure(std::string("simulate: ") + e.what());
  } catch (...) {
    out = failure("simulate: unknown exception in the simulation process");
  }
  if (!out) {
    put(fd, out.error().kind == ErrorKind::kBadInput ? "bad" : "fail");
    put(fd, out.error().message);
  } else {
    put(fd, "ok");
    put(fd, out->report_json);
    put(fd, out->trace_json);
    put(fd, dump_json(Json{{"wall_time_s", out->report.wall_time_s},
                           {"platform_s", out->report.platform_s}}));
  }
  ::close(fd);
  _exit(0);
}

Result<SimOutput> run_isolated(const Inputs& in) {
  int fds[2];
  if (::pipe(fds) != 0) return failure("simulate: cannot create a pipe");
  std::fflush(nullptr);  // the child must not flush the parent's buffered output again
  pid_t pid = ::fork();
  if (pid < 0) return failure("simulate: cannot fork");
  if (pid == 0) {
    // Dies with its parent: a killed `hexisim sweep` worker (or simulate) leaves no
    // simulation running on.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::close(fds[0]);
    child(fds[1], in);
  }
  ::close(fds[1]);
  std::string bytes;
  char buf[1 << 16];
  for (ssize_t k; (k = ::read(fds[0], buf, sizeof buf)) != 0;) {
    if (k < 0) break;
    bytes.append(buf, static_cast<std::size_t>(k));
  }
  ::close(fds[0]);
  int status = 0;
  struct rusage usage {};
  ::wait4(pid, &status, 0, &usage);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return failure("simulate: the simulation process " +
                   (WIFSIGNALED(status) ? "died of signal " + std::to_string(WTERMSIG(status))
                                        : "exited with " + std::to_string(WEXITSTATUS(status))));
  }
  std::string_view view = bytes;
  std::string kind, a, b, c;
  if (!take(view, kind) || !take(view, a))
    return failure("simulate: truncated result from the simulation process");
  if (kind == "bad") return bad_input(a);
  if (kind != "ok") return failure(a);
  if (!take(view, b) || !take(view, c))
    return failure("simulate: truncated result from the simulation process");
  auto report = SimReport::from_json(Json::parse(a));
  if (!report) return report.error();
  SimOutput out;
  out.report = std::move(*report);
  const Json meta = Json::parse(c);
  out.report.wall_time_s = meta.at("wall_time_s").get<double>();
  out.report.platform_s = meta.at("platform_s").get<double>();
  out.report.peak_rss_bytes = static_cast<double>(usage.ru_maxrss) * 1024.0;
  out.report_json = std::move(a);
  out.trace_json = std::move(b);
  return out;
}

}  // namespace

Result<SimOutput> simulate(const Program& program, const Cluster& cluster, const Model& model,
                           const TrainingConfig& training, const Profile& profile,
                           const SimOptions& options) {
  if (auto st = validate_program(program, "program"); !st) return st.error();
  if (auto st = check_fits(program, cluster); !st) return st.error();
  Inputs in{program, cluster, model, training, profile, options};
  if (!options.isolate) {
    auto out = run_here(in);
    if (out) {
      struct rusage usage {};
      ::getrusage(RUSAGE_SELF, &usage);
      out->report.peak_rss_bytes = static_cast<double>(usage.ru_maxrss) * 1024.0;
    }
    return out;
  }
  return run_isolated(in);
}

}  // namespace hexi
