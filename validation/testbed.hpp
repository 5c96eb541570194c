#pragma once
// The heterogeneous CPU testbed (`hexisim testbed up|down|status|run CLUSTER`): a cluster
// file realised on this one Linux machine, so that the engine runs plans on hardware whose
// links and device speeds differ as the file says.
//
//   machine  = a network namespace hxtb-<machine>, its eth0 a veth pair to the switch
//              namespace hxtb-sw (a bridge, 10.77.0.254/24; machine i is 10.77.0.(10+i));
//   NIC rate = HTB on both ends of the veth at the machine's nic_GBps;
//   latency  = the cluster's path latency between two machines, held per (source,
//              destination) address pair by hexisim-nfdelay (a user-space NFQUEUE delayer,
//              SCHED_FIFO, in the switch namespace: the kernel here has no sch_netem);
//   device   = one MPI rank, in its machine's namespace, in a CPU cgroup
//              hexisim-testbed/d<device> whose quota is its type's share of one core:
//              device types "cpu-NN" get NN % (cgroup v1 cpu.cfs_quota_us, or v2 cpu.max)
//              of a 5 ms period (1 ms, the kernel's least quota, for cpu-20). A rank runs at
//              full speed until its quota is spent, then is paused for the rest of the
//              period, its messages included: bursts and pauses of milliseconds, which the
//              simulator replays on its quota clock (sim/quota_clock.hpp). Sleeping
//              after each op instead (the rank at its share at every moment) was tried and
//              validated worse here: this VM's two vCPUs slow each other's GEMMs (two at
//              once run at 0.5-0.65 of one alone), which inflates the CPU time it scales;
//   launch   = mpirun as the head node in the switch namespace, an rsh agent that enters a
//              machine's namespace (nsenter --net, which keeps /sys/fs/cgroup visible,
//              unshare --uts for its host name), btl tcp on the testbed subnet, and a rank
//              wrapper that joins the device's cgroup before it execs the program. Ranks
//              wait for messages sleeping, not spinning (HEXISIM_MPI_WAIT=sleep,
//              engine/comm_mpi.cpp): a spinning rank would spend its quota on waiting.
// Everything it makes is named (hxtb-* namespaces, the hexisim-testbed cgroup folder,
// /run/hexisim-testbed), so `down` finds and removes it also after a crash.

#include <functional>
#include <string>
#include <vector>

#include "topologies/cluster.hpp"
#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi::validation {

struct TestbedMachine {
  std::string name;  // the cluster's machine name (host name of its ranks)
  std::string ns;    // network namespace
  std::string port;  // the veth end in the switch namespace
  std::string ip;
  double rate_bps = 0;  // HTB rate, bits/s
  std::vector<int> devices;
};

struct TestbedRank {
  int device = 0;
  int machine = 0;
  double share = 0;   // of one core (its type's quota in the catalog)
  int period_us = 0;  // of its CFS quota
  std::string gpu;    // device type
};

struct TestbedFlow {
  int from = 0, to = 0;  // machines
  double delay_us = 0;   // one-way
};

struct TestbedLayout {
  std::string cluster;
  std::vector<TestbedMachine> machines;
  std::vector<TestbedRank> ranks;  // by device id
  std::vector<TestbedFlow> flows;
  double cores = 0;  // the quotas' sum
};

inline constexpr double kTestbedMaxCores = 1.6;  // of this 2-core machine: 0.4 for the rest

// Runs argv (argv[0] looked up on PATH) with stdout and stderr into the file `log`; its exit
// status (128 + signal when killed). Failure when it cannot be started.
Result<int> run_logged(const std::vector<std::string>& args, const std::string& log);

// The testbed of a cluster; bad input when it cannot be built here: a device type that is
// not "cpu-NN", quotas over kTestbedMaxCores, a machine name unfit for a namespace.
Result<TestbedLayout> testbed_layout(const Cluster& cluster);

// The commands `up` runs, in order (also what a user can read with --dry-run).
std::vector<std::vector<std::string>> testbed_up_commands(const TestbedLayout& t,
                                                          const std::string& nfdelay);

// Why a testbed cannot be built on this machine (not root, a tool or cgroup missing), or
// empty when it can.
std::string testbed_unavailable();

// Builds the testbed (after removing any earlier one: `up` is idempotent).
Status testbed_up(const TestbedLayout& t, const std::string& nfdelay,
                  const std::function<void(const std::string&)>& log);
// Removes every testbed object this program makes, whatever cluster made it.
Status testbed_down(const std::function<void(const std::string&)>& log);
// The cluster whose testbed is up ("" when none).
std::string testbed_current();

// Runs argv as an MPI job on the testbed: rank r = the r-th of `devices` (increasing ids),
// in its machine's namespace and its cgroup. The program's exit status.
Result<int> testbed_run(const TestbedLayout& t, const std::vector<int>& devices,
                        const std::vector<std::string>& argv);

// Measures what was built: per machine pair one-way latency (ping) and throughput (iperf3),
// per rank the GEMM rate under its quota (all ranks at once) against one unconstrained core.
Result<Json> testbed_status(const TestbedLayout& t, const std::string& hexisim);

}  // namespace hexi::validation
