#include "validation/testbed.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "topologies/paths.hpp"
#include "topologies/text.hpp"

extern char** environ;

namespace hexi::validation {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSwitch = "hxtb-sw";
constexpr const char* kPrefix = "hxtb-";
constexpr const char* kRunDir = "/run/hexisim-testbed";
constexpr const char* kSubnet = "10.77.0.0/24";
// Messages up to 4 MiB go eagerly over TCP: the sender writes them to the socket and the
// receiver's kernel takes them while the receiving rank computes, as a GPU's copy engines do.
// With OpenMPI's 64 KiB default, a larger message waits for the receiver to answer its
// rendezvous from inside an MPI call, i.e. after the rank's compute: a 128 KiB activation
// crossing a 1 Gbit/s link took 76-358 ms from send to arrival (median 264) instead of about
// 1.3 ms, and plan tp-across-link ran 14.4 s per step instead of 8.8 s.
constexpr const char* kTcpEagerBytes = "4194304";
// Ranks waiting sleeping use nonblocking collectives (engine/comm_mpi.cpp), and OpenMPI's
// libnbc all-reduces an MPI_IN_PLACE buffer with a binomial tree whatever its size: the whole
// buffer up to rank 0 and back down. Algorithm 1 is the ring, as NCCL and the simulator do:
// dp3-whole-model's 94 MB gradient all-reduce over the 200 Mbit/s link took 8.85 s (median)
// with the tree, 6.02 s with the ring (5.0 s on the wire), the same losses.
constexpr const char* kLibnbcRingAllReduce = "1";
constexpr const char* kCgroupName = "hexisim-testbed";

std::string machine_ip(int i) {
  return "10.77.0." + std::to_string(10 + i);
}

bool cgroup_v2() {
  return fs::exists("/sys/fs/cgroup/cgroup.controllers");
}

fs::path cgroup_root() {
  return cgroup_v2() ? fs::path("/sys/fs/cgroup") / kCgroupName
                     : fs::path("/sys/fs/cgroup/cpu") / kCgroupName;
}

// kRunDir, created mode 0700 if absent: a folder of this user's that nobody else can plant
// a file or link in (the testbed runs as root). Failure when the name is a link or another
// user's folder.
Status make_run_dir() {
  std::error_code ec;
  fs::create_directories(kRunDir, ec);
  struct stat st {};
  if (::lstat(kRunDir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
    return failure(std::string(kRunDir) +
                   ": not a folder of this user's (a link, or another user's); remove it");
  }
  if (::chmod(kRunDir, 0700) != 0) {
    return failure(std::string(kRunDir) + ": cannot make it private: " + std::strerror(errno));
  }
  return {};
}

// Runs argv, its stdout and stderr into *output; the exit status (127: not started).
int run(const std::vector<std::string>& args, std::string* output = nullptr) {
  if (Status s = make_run_dir(); !s) {
    if (output != nullptr) *output = s.error().message;
    return 127;
  }
  auto file = create_temporary(kRunDir, "cmd-");
  if (!file) {
    if (output != nullptr) *output = file.error().message;
    return 127;
  }
  ::close(file->fd);
  const std::string tmp = file->path.string();
  auto rc = run_logged(args, tmp);
  if (output != nullptr) {
    std::ifstream in(tmp);
    std::stringstream ss;
    ss << in.rdbuf();
    *output = rc ? ss.str() : rc.error().message;
  }
  fs::remove(tmp);
  return rc ? *rc : 127;
}

std::string joined(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) out += (out.empty() ? "" : " ") + a;
  return out;
}

Status write_text(const fs::path& path, const std::string& text, bool executable = false) {
  if (Status s = write_file_atomically(path, text); !s) return s;
  if (executable && ::chmod(path.c_str(), 0755) != 0) {
    return failure(path.string() + ": cannot make it executable: " + std::strerror(errno));
  }
  return {};
}

Status write_value(const fs::path& file, const std::string& value) {
  std::ofstream out(file);
  out << value;
  out.close();
  if (!out) return failure(file.string() + ": cannot write \"" + value + "\"");
  return {};
}

std::vector<std::string> in_ns(const std::string& ns, std::vector<std::string> args) {
  std::vector<std::string> out = {"nsenter", "--net=/run/netns/" + ns};
  for (auto& a : args) out.push_back(std::move(a));
  return out;
}

std::vector<std::string> shape(const std::string& ns, const std::string& dev, double bps) {
  return {"tc",      "-n",
          ns,        "class",
          "replace", "dev",
          dev,       "parent",
          "1:",      "classid",
          "1:1",     "htb",
          "rate",    format("%.0fbit", bps),
          "ceil",    format("%.0fbit", bps),
          "burst",   "64k",
          "cburst",  "64k",
          "quantum", "60000"};
}

const char* kRsh = R"(#!/bin/sh
# The testbed's launch agent for OpenMPI (plm_rsh_agent): rsh [options] HOST COMMAND...
# runs COMMAND in HOST's network namespace, in a UTS namespace whose host name is HOST.
while [ $# -gt 0 ]; do case "$1" in -p|-l|-o|-i) shift 2;; -*) shift;; *) break;; esac; done
host=$1; shift
exec nsenter --net=/run/netns/hxtb-$host unshare --uts /bin/sh -c 'hostname "$0"; exec /bin/sh -c "$1"' "$host" "$*"
)";

std::string rank_script() {
  return std::string(R"(#!/bin/sh
# The testbed's rank wrapper: joins the cgroup of this rank's device, then runs the program.
r=${OMPI_COMM_WORLD_RANK:-0}
d=$(echo "$HEXISIM_TB_DEVICES" | cut -d, -f$((r + 1)))
echo $$ > )") +
         cgroup_root().string() +
         R"(/d$d/cgroup.procs || { echo "hexisim testbed: rank $r cannot join the cgroup of device $d" >&2; exit 97; }
exec "$@"
)";
}

}  // namespace

Result<int> run_logged(const std::vector<std::string>& args, const std::string& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW,
                                   0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return failure("cannot run " + args[0] + ": " + std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

Result<TestbedLayout> testbed_layout(const Cluster& c) {
  TestbedLayout t;
  t.cluster = c.name();
  static const std::regex name_ok("[A-Za-z0-9_-]{1,9}");
  for (std::size_t i = 0; i < c.machines().size(); ++i) {
    const Machine& m = c.machines()[i];
    if (!std::regex_match(m.name, name_ok)) {
      return bad_input("cluster " + c.name() + ": machine \"" + m.name +
                       "\": a testbed machine name is 1-9 letters, digits, - or _ (it names a "
                       "network namespace and an interface)");
    }
    TestbedMachine tm{m.name,
                      kPrefix + m.name,
                      "hxtb" + std::to_string(i),
                      machine_ip(static_cast<int>(i)),
                      m.nic_Bps * 8,
                      {}};
    for (int g = 0; g < m.num_gpus; ++g) tm.devices.push_back(m.first_device + g);
    t.machines.push_back(tm);
  }
  if (t.machines.size() > 200) return bad_input("cluster " + c.name() + ": too many machines");
  for (int d = 0; d < c.num_devices(); ++d) {
    const GpuSpec& gpu = c.gpu(d);
    const double share = gpu.quota_share;
    const int period_us = static_cast<int>(std::lround(gpu.quota_period_s * 1e6));
    if (share <= 0 || share * period_us < 1000 - 1e-6) {
      return bad_input("cluster " + c.name() + ": device " + std::to_string(d) + " is a " +
                       gpu.name +
                       "; the testbed runs device types with a CPU quota (the catalog's "
                       "cpu-NN: NN % of one core, 20-100; a CFS quota is at least 1 ms)");
    }
    t.ranks.push_back({d, c.devices()[d].machine, share, period_us, gpu.name});
    t.cores += share;
  }
  if (t.cores > kTestbedMaxCores + 1e-9) {
    return bad_input(
        format("cluster %s: its devices' CPU quotas sum to %.2f cores; the testbed "
               "allows %.1f (this machine has %u, and the rest needs some)",
               c.name().c_str(), t.cores, kTestbedMaxCores, std::thread::hardware_concurrency()));
  }
  for (std::size_t a = 0; a < t.machines.size(); ++a) {
    for (std::size_t b = 0; b < t.machines.size(); ++b) {
      if (a == b) continue;
      const double us = c.latency(t.machines[a].devices[0], t.machines[b].devices[0]) * 1e6;
      t.flows.push_back({static_cast<int>(a), static_cast<int>(b), us});
    }
  }
  return t;
}

std::vector<std::vector<std::string>> testbed_up_commands(const TestbedLayout& t,
                                                          const std::string& nfdelay) {
  std::vector<std::vector<std::string>> cmds = {
      {"ip", "netns", "add", kSwitch},
      {"ip", "-n", kSwitch, "link", "set", "lo", "up"},
      {"ip", "-n", kSwitch, "link", "add", "br0", "type", "bridge"},
      {"ip", "-n", kSwitch, "addr", "add", "10.77.0.254/24", "dev", "br0"},
      {"ip", "-n", kSwitch, "link", "set", "br0", "up"},
  };
  for (const TestbedMachine& m : t.machines) {
    cmds.push_back({"ip", "netns", "add", m.ns});
    cmds.push_back({"ip", "-n", m.ns, "link", "set", "lo", "up"});
    cmds.push_back({"ip", "-n", m.ns, "link", "add", "eth0", "type", "veth", "peer", "name", m.port,
                    "netns", kSwitch});
    cmds.push_back({"ip", "-n", m.ns, "addr", "add", m.ip + "/24", "dev", "eth0"});
    cmds.push_back({"ip", "-n", m.ns, "link", "set", "eth0", "up"});
    cmds.push_back({"ip", "-n", kSwitch, "link", "set", m.port, "master", "br0"});
    cmds.push_back({"ip", "-n", kSwitch, "link", "set", m.port, "up"});
    for (const auto& [ns, dev] :
         {std::pair{m.ns, std::string("eth0")}, std::pair{std::string(kSwitch), m.port}}) {
      cmds.push_back({"tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb",
                      "default", "1"});
      cmds.push_back(shape(ns, dev, m.rate_bps));
    }
  }
  cmds.push_back(in_ns(kSwitch, {"sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1"}));
  cmds.push_back(in_ns(kSwitch, {"iptables-legacy", "-A", "FORWARD", "-s", kSubnet, "-d", kSubnet,
                                 "-j", "NFQUEUE", "--queue-num", "0", "--queue-bypass"}));
  std::vector<std::string> delay = in_ns(kSwitch, {"chrt", "-f", "50", nfdelay, "0"});
  for (const TestbedFlow& f : t.flows) {
    delay.push_back(t.machines[f.from].ip + "," + t.machines[f.to].ip + "=" +
                    format("%.1f", f.delay_us));
  }
  cmds.push_back(delay);  // started in the background by testbed_up
  return cmds;
}

std::string testbed_unavailable() {
  if (::geteuid() != 0) return "the testbed needs root (network namespaces, tc, cgroups)";
  for (const char* tool : {"ip", "tc", "nsenter", "unshare", "iptables-legacy", "chrt", "mpirun"}) {
    std::string out;
    if (run({"sh", "-c", std::string("command -v ") + tool}, &out) != 0)
      return std::string("the testbed needs ") + tool + " (scripts/setup.sh installs it)";
  }
  const fs::path parent = cgroup_root().parent_path();
  if (!fs::exists(parent / (cgroup_v2() ? "cgroup.controllers" : "cpu.cfs_quota_us")))
    return "no CPU cgroup controller at " + parent.string() + " (cgroup v1 cpu or v2 cpu.max)";
  std::string out;
  if (run({"ip", "netns", "add", "hxtb-probe"}, &out) != 0)
    return "cannot create network namespaces here: " + out;
  run({"ip", "netns", "del", "hxtb-probe"});
  return "";
}

Status testbed_down(const std::function<void(const std::string&)>& log) {
  const fs::path pid_file = fs::path(kRunDir) / "nfdelay.pid";
  if (fs::exists(pid_file)) {
    std::ifstream in(pid_file);
    pid_t pid = 0;
    if (in >> pid && pid > 1) {
      ::kill(pid, SIGTERM);
      for (int i = 0; i < 50 && ::kill(pid, 0) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    fs::remove(pid_file);
  }
  std::string list;
  run({"ip", "netns", "list"}, &list);
  std::istringstream lines(list);
  std::string line;
  while (std::getline(lines, line)) {
    const std::string ns = line.substr(0, line.find(' '));
    if (ns.rfind(kPrefix, 0) != 0) continue;
    std::string out;
    if (run({"ip", "netns", "del", ns}, &out) != 0)
      return failure("ip netns del " + ns + ": " + out);
    log("removed network namespace " + ns);
  }
  const fs::path cg = cgroup_root();
  if (fs::exists(cg)) {
    for (const auto& e : fs::directory_iterator(cg)) {
      if (e.is_directory() && ::rmdir(e.path().c_str()) != 0)
        return failure(e.path().string() + ": cannot remove the cgroup (a rank still in it?)");
    }
    if (::rmdir(cg.c_str()) != 0) return failure(cg.string() + ": cannot remove the cgroup");
    log("removed cgroup " + cg.string());
  }
  std::error_code ec;
  fs::remove(fs::path(kRunDir) / "cluster", ec);
  return {};
}

std::string testbed_current() {
  std::ifstream in(fs::path(kRunDir) / "cluster");
  std::string name;
  std::getline(in, name);
  return name;
}

Status testbed_up(const TestbedLayout& t, const std::string& nfdelay,
                  const std::function<void(const std::string&)>& log) {
  if (std::string why = testbed_unavailable(); !why.empty()) return bad_input(why);
  if (!fs::exists(nfdelay)) {
    return bad_input(nfdelay +
                     " is missing: the build skipped hexisim-nfdelay (install "
                     "libnetfilter-queue-dev: scripts/setup.sh, then rebuild)");
  }
  if (Status s = testbed_down(log); !s) return s;
  if (Status s = make_run_dir(); !s) return s;
  auto cmds = testbed_up_commands(t, nfdelay);
  const std::vector<std::string> delayer = cmds.back();
  cmds.pop_back();
  for (const auto& c : cmds) {
    std::string out;
    if (run(c, &out) != 0) {
      (void)testbed_down([](const std::string&) {});
      return failure(joined(c) + ": " + out);
    }
  }
  // The delayer, in the background, its own session; its pid for down.
  {
    const std::string logfile = std::string(kRunDir) + "/nfdelay.log";
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, logfile.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
    std::vector<char*> argv;
    for (const auto& a : delayer) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) return failure("cannot start " + nfdelay + ": " + std::strerror(rc));
    if (Status s = write_text(fs::path(kRunDir) / "nfdelay.pid", std::to_string(pid)); !s) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      std::ifstream in(logfile);
      std::stringstream ss;
      ss << in.rdbuf();
      return failure("hexisim-nfdelay exited at once: " + ss.str());
    }
  }
  // CPU quotas.
  const fs::path cg = cgroup_root();
  fs::create_directories(cg);
  if (cgroup_v2()) {
    (void)write_value(cg.parent_path() / "cgroup.subtree_control", "+cpu");
    (void)write_value(cg / "cgroup.subtree_control", "+cpu");
  }
  for (const TestbedRank& r : t.ranks) {
    const int period = r.period_us;
    const fs::path d = cg / ("d" + std::to_string(r.device));
    fs::create_directories(d);
    const long quota = std::lround(r.share * period);
    Status s = cgroup_v2() ? write_value(d / "cpu.max", format("%ld %d", quota, period))
                           : write_value(d / "cpu.cfs_period_us", std::to_string(period));
    if (s && !cgroup_v2()) s = write_value(d / "cpu.cfs_quota_us", std::to_string(quota));
    if (!s) return s;
  }
  if (Status s = write_text(fs::path(kRunDir) / "rsh", kRsh, true); !s) return s;
  if (Status s = write_text(fs::path(kRunDir) / "rank", rank_script(), true); !s) return s;
  if (Status s = write_text(fs::path(kRunDir) / "cluster", t.cluster + "\n"); !s) return s;
  log(format("testbed %s up: %zu machines, %zu ranks, %.2f cores of quota", t.cluster.c_str(),
             t.machines.size(), t.ranks.size(), t.cores));
  return {};
}

namespace {

// The mpirun command that starts `ranks` ranks of `argv` from `hostfile` inside the switch's
// namespace, on devices `list` (comma-separated), over the testbed's subnet.
std::vector<std::string> mpirun_command(const fs::path& hostfile, std::size_t ranks,
                                        const std::string& list,
                                        const std::vector<std::string>& argv) {
  std::vector<std::string> args = in_ns(kSwitch, {"mpirun",
                                                  "--allow-run-as-root",
                                                  "--hostfile",
                                                  hostfile.string(),
                                                  "-np",
                                                  std::to_string(ranks),
                                                  "--map-by",
                                                  "slot",
                                                  "--bind-to",
                                                  "none",
                                                  "--mca",
                                                  "plm_rsh_agent",
                                                  std::string(kRunDir) + "/rsh",
                                                  "--mca",
                                                  "plm_rsh_no_tree_spawn",
                                                  "1",
                                                  "--mca",
                                                  "oob_tcp_if_include",
                                                  kSubnet,
                                                  "--mca",
                                                  "btl",
                                                  "self,vader,tcp",
                                                  "--mca",
                                                  "btl_tcp_if_include",
                                                  kSubnet,
                                                  "--mca",
                                                  "mpi_yield_when_idle",
                                                  "1",
                                                  "--mca",
                                                  "btl_tcp_eager_limit",
                                                  kTcpEagerBytes,
                                                  "--mca",
                                                  "btl_tcp_rndv_eager_limit",
                                                  kTcpEagerBytes,
                                                  "--mca",
                                                  "btl_tcp_max_send_size",
                                                  kTcpEagerBytes,
                                                  "--mca",
                                                  "coll_libnbc_iallreduce_algorithm",
                                                  kLibnbcRingAllReduce,
                                                  "-x",
                                                  "HEXISIM_TB_DEVICES=" + list,
                                                  "-x",
                                                  "HEXISIM_MPI_WAIT=sleep",
                                                  "-x",
                                                  "OPENBLAS_NUM_THREADS=1",
                                                  std::string(kRunDir) + "/rank"});
  for (const auto& a : argv) args.push_back(a);
  return args;
}

// The mpirun hostfile of `devices`: each machine with its ranks as slots.
std::string hostfile_text(const TestbedLayout& t, const std::vector<int>& devices) {
  std::vector<int> per_machine(t.machines.size(), 0);
  for (int d : devices) ++per_machine[t.ranks[d].machine];
  std::string hosts;
  for (std::size_t m = 0; m < t.machines.size(); ++m) {
    if (per_machine[m] > 0)
      hosts += t.machines[m].name + " slots=" + std::to_string(per_machine[m]) + "\n";
  }
  return hosts;
}

// Runs `args` and waits for it: its exit status (128 + the signal that ended it).
Result<int> spawn_and_wait(const std::vector<std::string>& args) {
  std::vector<char*> cargv;
  for (const auto& a : args) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, cargv[0], nullptr, nullptr, cargv.data(), environ);
  if (rc != 0) return failure(std::string("cannot run nsenter: ") + std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

Result<int> testbed_run(const TestbedLayout& t, const std::vector<int>& devices,
                        const std::vector<std::string>& argv) {
  if (testbed_current() != t.cluster) {
    const std::string up = testbed_current();
    return bad_input("the testbed of " + t.cluster + " is not up" +
                     (up.empty() ? std::string() : " (" + up + "'s is)") +
                     ": run hexisim testbed up " + t.cluster);
  }
  if (devices.empty()) return bad_input("no device to run on");
  std::string list;
  int last = -1;
  for (int d : devices) {
    if (d < 0 || d >= static_cast<int>(t.ranks.size()) || d <= last)
      return bad_input(format("device %d: expected increasing device ids of %s (0..%zu)", d,
                              t.cluster.c_str(), t.ranks.size() - 1));
    last = d;
    list += (list.empty() ? "" : ",") + std::to_string(d);
  }
  const fs::path hostfile = fs::path(kRunDir) / ("hosts-" + std::to_string(::getpid()));
  if (Status s = write_text(hostfile, hostfile_text(t, devices)); !s) return s.error();
  auto status = spawn_and_wait(mpirun_command(hostfile, devices.size(), list, argv));
  if (status) fs::remove(hostfile);
  return status;
}

namespace {

// iperf3 from a to b (bits/s; -1 where its server did not start): a one-off server in b's
// namespace, the client in a's.
double iperf_bps(const TestbedMachine& ma, const TestbedMachine& mb) {
  std::vector<std::string> server = in_ns(mb.ns, {"iperf3", "-s", "-1", "-p", "5299"});
  std::vector<char*> sargv;
  for (const auto& s : server) sargv.push_back(const_cast<char*>(s.c_str()));
  sargv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t spid = 0;
  const int src = posix_spawnp(&spid, sargv[0], &fa, nullptr, sargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  double measured_bps = -1;
  if (src == 0) {
    static const std::regex bits("\"bits_per_second\":\\s*([0-9.e+]+)");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::string out;
    run(in_ns(ma.ns, {"iperf3", "-c", mb.ip, "-p", "5299", "-t", "2", "-J"}), &out);
    // The last bits_per_second in the JSON is the receiver's sum.
    for (std::sregex_iterator it(out.begin(), out.end(), bits), end; it != end; ++it)
      measured_bps = std::stod((*it)[1].str());
    ::kill(spid, SIGTERM);
    int st = 0;
    ::waitpid(spid, &st, 0);
  }
  return measured_bps;
}

// One machine pair's link as measured: the one-way latency (half the least ping round trip)
// and iperf3's throughput from a to b, beside what the testbed set.
Json measure_link(const TestbedLayout& t, std::size_t a, std::size_t b) {
  static const std::regex rtt("= ([0-9.]+)/([0-9.]+)/([0-9.]+)");
  const TestbedMachine& ma = t.machines[a];
  const TestbedMachine& mb = t.machines[b];
  std::string out;
  run(in_ns(ma.ns, {"ping", "-c", "20", "-i", "0.02", "-q", mb.ip}), &out);
  std::smatch m;
  const double one_way_us =
      std::regex_search(out, m, rtt) ? std::stod(m[1].str()) * 1e3 / 2 : -1;  // min rtt / 2
  double expected_us = 0;
  for (const auto& f : t.flows) {
    if (f.from == static_cast<int>(a) && f.to == static_cast<int>(b)) expected_us = f.delay_us;
  }
  const double measured_bps = iperf_bps(ma, mb);
  const double expected_bps = std::min(ma.rate_bps, mb.rate_bps);
  return {{"from", ma.name},
          {"to", mb.name},
          {"latency_us", one_way_us},
          {"expected_latency_us", expected_us},
          {"throughput_Mbps", measured_bps / 1e6},
          {"expected_Mbps", expected_bps / 1e6}};
}

// GEMM rates: one unconstrained core, then every rank at once under its quota.
Json gemm_rates(const TestbedLayout& t, const std::string& hexisim, double& reference) {
  auto gemm = [&](const std::string& cgroup_dir, const std::string& out_file) {
    const std::string cmd =
        (cgroup_dir.empty() ? "" : "echo $$ > " + cgroup_dir + "/cgroup.procs && ") + "exec " +
        hexisim + " testbed gemm > " + out_file + " 2>&1";
    return std::vector<std::string>{"sh", "-c", cmd};
  };
  auto read_rate = [](const std::string& file) {
    std::ifstream in(file);
    double v = -1;
    in >> v;
    return v;
  };
  const std::string ref_file = std::string(kRunDir) + "/gemm-ref";
  run(gemm("", ref_file));
  reference = read_rate(ref_file);
  std::vector<pid_t> pids;
  for (const TestbedRank& r : t.ranks) {
    auto args = gemm((cgroup_root() / ("d" + std::to_string(r.device))).string(),
                     std::string(kRunDir) + "/gemm-" + std::to_string(r.device));
    std::vector<char*> cargv;
    for (const auto& a : args) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawnp(&pid, "sh", nullptr, nullptr, cargv.data(), environ) == 0) pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int st = 0;
    ::waitpid(pid, &st, 0);
  }
  Json ranks = Json::array();
  for (const TestbedRank& r : t.ranks) {
    const double rate = read_rate(std::string(kRunDir) + "/gemm-" + std::to_string(r.device));
    ranks.push_back({{"device", r.device},
                     {"type", r.gpu},
                     {"machine", t.machines[r.machine].name},
                     {"gflops", rate},
                     {"share", r.share},
                     {"measured_share", reference > 0 ? rate / reference : -1}});
  }
  return ranks;
}

}  // namespace

Result<Json> testbed_status(const TestbedLayout& t, const std::string& hexisim) {
  if (testbed_current() != t.cluster)
    return bad_input("the testbed of " + t.cluster + " is not up: run hexisim testbed up " +
                     t.cluster);
  Json links = Json::array();
  for (std::size_t a = 0; a < t.machines.size(); ++a) {
    for (std::size_t b = a + 1; b < t.machines.size(); ++b) links.push_back(measure_link(t, a, b));
  }
  double reference = -1;
  Json ranks = gemm_rates(t, hexisim, reference);
  return Json{
      {"cluster", t.cluster}, {"one_core_gflops", reference}, {"links", links}, {"ranks", ranks}};
}

}  // namespace hexi::validation
