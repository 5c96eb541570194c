// hexisim testbed up|down|status|run|gemm: a cluster file realised on this machine
// (validation/testbed.hpp).

#include <chrono>
#include <iostream>

#include "cli/commands.hpp"
#include "scheduler/program/lower_sequence.hpp"
#include "topologies/eigen.hpp"
#include "topologies/text.hpp"
#include "validation/testbed.hpp"

namespace hexi::cli {
namespace {

namespace fs = std::filesystem;

struct TestbedOptions {
  std::string cluster;
  bool json = false;
  bool dry_run = false;
  std::string plan;               // run: the plan whose devices run
  std::vector<int> devices;       // run: or the devices
  std::vector<std::string> argv;  // run: the program
  double seconds = 1.5;           // gemm
};

std::string nfdelay_path() {
  return (fs::path(this_executable()).parent_path() / "hexisim-nfdelay").string();
}

Result<validation::TestbedLayout> layout(const std::string& cluster) {
  auto catalogs = load_shipped_catalogs();
  if (!catalogs) return catalogs.error();
  auto c = load_cluster(cluster, catalogs->gpus);
  if (!c) return c.error();
  return validation::testbed_layout(*c);
}

void say(const std::string& line) {
  std::cerr << line << "\n";
}

int run_up(const TestbedOptions& o) {
  auto t = layout(o.cluster);
  if (!t) return report(t.error());
  if (o.dry_run) {
    for (const auto& c : validation::testbed_up_commands(*t, nfdelay_path())) {
      std::string line;
      for (const auto& a : c) line += (line.empty() ? "" : " ") + a;
      std::cout << line << "\n";
    }
    return 0;
  }
  if (Status s = validation::testbed_up(*t, nfdelay_path(), say); !s) return report(s.error());
  return 0;
}

int run_down() {
  if (Status s = validation::testbed_down(say); !s) return report(s.error());
  return 0;
}

int run_status(const TestbedOptions& o) {
  auto t = layout(o.cluster);
  if (!t) return report(t.error());
  auto st = validation::testbed_status(*t, this_executable());
  if (!st) return report(st.error());
  if (o.json) {
    print_json(*st);
    return 0;
  }
  std::cout << "links (ping: min rtt / 2; iperf3 TCP, 2 s):\n";
  Table links({"from", "to", "latency us", "expected", "error", "Mbit/s", "expected", "error"});
  for (const auto& l : (*st)["links"]) {
    const double lat = l["latency_us"], elat = l["expected_latency_us"];
    const double bw = l["throughput_Mbps"], ebw = l["expected_Mbps"];
    links.add({l["from"], l["to"], fmt(lat, 0), fmt(elat, 0),
               elat > 0 ? fmt(100 * (lat / elat - 1), 1) + " %" : "-", fmt(bw, 1), fmt(ebw, 1),
               fmt(100 * (bw / ebw - 1), 1) + " %"});
  }
  links.print(std::cout);
  std::cout << "\nranks (Eigen float GEMM, all at once under their quotas; one free core: "
            << fmt((*st)["one_core_gflops"], 1) << " GFLOP/s):\n";
  Table ranks({"device", "type", "machine", "GFLOP/s", "share", "measured share", "error"});
  for (const auto& r : (*st)["ranks"]) {
    const double share = r["share"], got = r["measured_share"];
    ranks.add({std::to_string(r["device"].get<int>()), r["type"], r["machine"], fmt(r["gflops"], 2),
               fmt(share, 2), fmt(got, 3), fmt(100 * (got / share - 1), 1) + " %"});
  }
  ranks.print(std::cout);
  return 0;
}

int run_run(const TestbedOptions& o) {
  auto t = layout(o.cluster);
  if (!t) return report(t.error());
  std::vector<int> devices = o.devices;
  if (!o.plan.empty()) {
    auto file = read_plan_file(o.plan);
    if (!file) return report(file.error());
    devices = file->plan ? file->plan->devices() : file->layout->devices();
    std::sort(devices.begin(), devices.end());
  }
  if (devices.empty()) {
    for (const auto& r : t->ranks) devices.push_back(r.device);
  }
  auto rc = validation::testbed_run(*t, devices, o.argv);
  if (!rc) return report(rc.error());
  return *rc;
}

// GFLOP/s of a 512 x 512 x 512 float GEMM loop on one thread (about 2 ms a GEMM on a core,
// an op of the engine's size): the testbed's per-rank probe.
int run_gemm(const TestbedOptions& o) {
  Eigen::setNbThreads(1);
  const int n = 512;
  Eigen::MatrixXf a = Eigen::MatrixXf::Constant(n, n, 0.5f), b = a, c(n, n);
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  long reps = 0;
  while (elapsed < o.seconds) {
    c.noalias() = a * b;
    ++reps;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::cout << format("%.3f", 2.0 * n * n * n * static_cast<double>(reps) / elapsed / 1e9)
            << " GFLOP/s\n";
  return c(0, 0) > 0 ? 0 : 1;
}

}  // namespace

void add_testbed_command(CLI::App& app, Runner& run) {
  auto opt = std::make_shared<TestbedOptions>();
  auto* cmd = app.add_subcommand(
      "testbed",
      "A cluster of cpu-NN devices realised on this machine: network namespaces, shaped "
      "links, CPU quotas (needs root)");
  cmd->require_subcommand(1);
  auto cluster_arg = [&](CLI::App* sub) {
    sub->add_option("CLUSTER", opt->cluster, "Cluster file or shipped cluster name")->required();
  };
  auto* up = cmd->add_subcommand("up", "Build the testbed of a cluster (idempotent)");
  cluster_arg(up);
  up->add_flag("--dry-run", opt->dry_run, "Print the commands instead of running them");

  up->callback([&run, opt] { run = [opt] { return run_up(*opt); }; });
  auto* down = cmd->add_subcommand("down", "Remove every testbed object (also after a crash)");
  down->callback([&run] { run = [] { return run_down(); }; });
  auto* status = cmd->add_subcommand(
      "status", "Measure the testbed against its cluster file (latency, throughput, CPU shares)");
  cluster_arg(status);
  status->add_flag("--json", opt->json, "Print one JSON object");
  status->callback([&run, opt] { run = [opt] { return run_status(*opt); }; });
  auto* r = cmd->add_subcommand(
      "run", "Run an MPI program on the testbed: rank r = the r-th device (increasing ids)");
  cluster_arg(r);
  r->add_option("--plan", opt->plan, "Run on this plan's devices")->check(CLI::ExistingFile);
  r->add_option("--devices", opt->devices, "Run on these devices (default: all)")->delimiter(',');
  r->add_option("PROGRAM", opt->argv, "The program and its arguments (after --)")->required();
  r->callback([&run, opt] { run = [opt] { return run_run(*opt); }; });
  auto* g = cmd->add_subcommand("gemm", "Print this process's float GEMM rate (GFLOP/s)");
  g->add_option("--seconds", opt->seconds, "How long to measure")->check(CLI::Range(0.1, 60.0));
  g->callback([&run, opt] { run = [opt] { return run_gemm(*opt); }; });
}

}  // namespace hexi::cli
