// hexisim cluster show | gen: summarise or generate cluster files.

#include <iostream>
#include <map>

#include "cli/commands.hpp"
#include "scheduler/cost/cost_model.hpp"
#include "topologies/cluster_gen.hpp"

namespace hexi::cli {
namespace {

Json cluster_summary(const Cluster& c) {
  Json types = Json::object();
  for (const auto& d : c.devices()) {
    const std::string& name = c.gpu_types()[d.gpu_type].name;
    types[name] = types.value(name, 0) + 1;
  }
  Json machines = Json::array();
  for (const auto& m : c.machines()) {
    machines.push_back({{"name", m.name},
                        {"gpu", c.gpu_types()[m.gpu_type].name},
                        {"gpus", m.num_gpus},
                        {"first_device", m.first_device},
                        {"intra", to_string(m.intra_kind)},
                        {"intra_GBps", m.intra_Bps / 1e9},
                        {"nic_GBps", m.nic_Bps / 1e9},
                        {"leaf", c.leaves()[m.leaf].name}});
  }
  // Connected parts: the count, and the machines of each part only when there are several.
  const auto parts = c.connected_parts();
  Json part_names = Json::array();
  if (parts.size() > 1) {
    for (const auto& part : parts) {
      Json names = Json::array();
      for (int m : part) names.push_back(c.machines()[m].name);
      part_names.push_back(names);
    }
  }
  return {{"name", c.name()},
          {"description", c.description()},
          {"num_gpus", c.num_devices()},
          {"gpu_types", types},
          {"peak_pflops", c.peak_flops() / 1e15},
          {"memory_gib", c.memory_bytes() / kGiB},
          {"num_machines", c.machines().size()},
          {"num_leaves", c.leaves().size()},
          {"transport", to_string(c.network_transport())},
          {"transport_named", c.network_transport_named()},
          {"connected_parts", parts.size()},
          {"disconnected_parts", part_names},
          {"machines", machines}};
}

// Bandwidth range per link class, sampled over all pairs (or a stride for big clusters).
void print_link_classes(const Cluster& c) {
  std::map<std::string, std::pair<double, double>> range;
  std::map<std::string, Transport> transport;
  const int n = c.num_devices();
  const int stride = n > 2048 ? n / 2048 + 1 : 1;
  for (int a = 0; a < n; a += stride) {
    for (int b = a + 1; b < n; ++b) {
      auto cls = std::string(to_string(c.link_class(a, b)));
      double bw = c.bandwidth(a, b) / 1e9;
      auto it = range.find(cls);
      if (it == range.end()) {
        range[cls] = {bw, bw};
        transport[cls] = c.transport(a, b);
      } else {
        it->second.first = std::min(it->second.first, bw);
        it->second.second = std::max(it->second.second, bw);
      }
    }
  }
  Table t({"link class", "transport", "min GB/s", "max GB/s"});
  for (const auto& [cls, r] : range) {
    t.add({cls, std::string(to_string(transport.at(cls))), fmt(r.first, 1), fmt(r.second, 1)});
  }
  t.print(std::cout);
}

void print_cluster(const Cluster& c) {
  std::cout << "cluster " << c.name() << ": " << c.num_devices() << " GPUs, " << c.machines().size()
            << " machines, " << c.leaves().size() << " leaf switch(es)\n";
  if (!c.description().empty()) std::cout << "  " << c.description() << "\n";
  if (c.machines().size() > 1) {
    const Transport t = c.network_transport();
    std::cout << "  network: " << to_string(t) << " ("
              << (t == Transport::kTcp     ? "Ethernet without RDMA: NCCL over sockets"
                  : t == Transport::kTcpxo ? "GPUDirect-TCPX/TCPXO: NCCL's GPU-direct TCP plugin"
                  : t == Transport::kEfa   ? "AWS Elastic Fabric Adapter"
                                           : "InfiniBand or RoCE")
              << (c.network_transport_named() ? "" : "; the default: the file names none") << ")\n";
  }
  std::map<std::string, int> types;
  for (const auto& d : c.devices()) ++types[c.gpu_types()[d.gpu_type].name];
  std::cout << "  peak " << fmt(c.peak_flops() / 1e15, 3) << " PFLOP/s (dense bf16/fp16), memory "
            << fmt(c.memory_bytes() / kGiB, 0) << " GiB\n\n";
  Table t({"GPU type", "count", "TFLOP/s each", "PFLOP/s total", "GiB each"});
  for (const auto& g : c.gpu_types()) {
    int n = types[g.name];
    t.add({g.name, std::to_string(n), fmt(g.tflops, g.tflops < 1 ? 3 : 1),
           fmt(n * g.tflops / 1e3, 3), fmt(g.memory_gib, 0)});
  }
  t.print(std::cout);
  std::cout << "\n";
  Table mt({"machine", "GPU", "GPUs", "devices", "intra", "intra GB/s", "NIC GB/s", "leaf"});
  const std::size_t shown = std::min<std::size_t>(c.machines().size(), 32);
  for (std::size_t i = 0; i < shown; ++i) {
    const Machine& m = c.machines()[i];
    mt.add({m.name, c.gpu_types()[m.gpu_type].name, std::to_string(m.num_gpus),
            std::to_string(m.first_device) + "-" + std::to_string(m.first_device + m.num_gpus - 1),
            std::string(to_string(m.intra_kind)), format("%.4g", m.intra_Bps / 1e9),
            format("%.4g", m.nic_Bps / 1e9), c.leaves()[m.leaf].name});
  }
  mt.print(std::cout);
  if (shown < c.machines().size())
    std::cout << "  ... " << c.machines().size() - shown << " more machines\n";
  std::cout << "\n";
  print_link_classes(c);
  auto parts = c.connected_parts();
  if (parts.size() > 1) {
    std::cout << "\n  WARNING: the cluster has " << parts.size()
              << " disconnected parts (no route between them)\n";
  }
}

struct ShowOptions {
  std::string file;
  bool json = false;
};

int run_show(const ShowOptions& opt) {
  auto catalogs = load_shipped_catalogs();
  if (!catalogs) return report(catalogs.error());
  auto cluster = load_cluster(opt.file, catalogs->gpus);
  if (!cluster) return report(cluster.error());
  note_unnamed_transport(*cluster);
  if (opt.json) {
    print_json(cluster_summary(*cluster));
  } else {
    print_cluster(*cluster);
  }
  return 0;
}

struct GenOptions {
  std::string mix;
  std::string out;
  FabricOptions fabric;
  bool json = false;
};

int run_gen(const GenOptions& opt) {
  if (auto st = check_output_file("--out", opt.out, {}); !st) return report(st.error());
  auto catalogs = load_shipped_catalogs();
  if (!catalogs) return report(catalogs.error());
  auto mix = parse_mix(opt.mix, catalogs->gpus);
  if (!mix) return report(mix.error());
  Json json = generate_cluster_json(*mix, opt.fabric);
  auto cluster = Cluster::from_json(json, opt.out, catalogs->gpus);
  if (!cluster) return report(cluster.error());
  if (auto st = write_file(opt.out, dump_json(json, 2) + "\n"); !st) return report(st.error());
  if (opt.json) {
    print_json(cluster_summary(*cluster));
  } else {
    std::cout << "wrote " << opt.out << "\n";
    print_cluster(*cluster);
  }
  return 0;
}

}  // namespace

void add_cluster_commands(CLI::App& app, Runner& run) {
  auto* cluster = app.add_subcommand("cluster", "Show or generate cluster files");
  cluster->require_subcommand(1);

  auto show = std::make_shared<ShowOptions>();
  auto* s = cluster->add_subcommand(
      "show", "Summarise a cluster: GPU counts, peak PFLOP/s, memory, machines, links");
  s->add_option("FILE", show->file, "Cluster file, or the name of a shipped cluster")->required();
  s->add_flag("--json", show->json, "Print one JSON object instead of tables");
  s->callback([&run, show] { run = [show] { return run_show(*show); }; });

  auto gen = std::make_shared<GenOptions>();
  gen->fabric.transport = "rdma";  // a written file names its transport
  auto* g = cluster->add_subcommand("gen", "Generate a cluster file from a GPU mix");
  g->add_option("--mix", gen->mix, "TYPE:MACHINESxGPUS[,...], e.g. A100:4x8,RTX4090:8x8")
      ->required();
  g->add_option("--out", gen->out, "Cluster file to write")->required();
  g->add_option("--name", gen->fabric.name, "Cluster name (default: derived from the mix)")
      ->check(utf8_text());
  g->add_option("--nic-GBps", gen->fabric.nic_GBps,
                "NIC bandwidth per machine, GB/s, all NICs together")
      ->default_val(gen->fabric.nic_GBps)
      ->check(finite_positive());
  g->add_option("--nics", gen->fabric.nics_per_machine, "NICs per machine")
      ->default_val(gen->fabric.nics_per_machine)
      ->check(CLI::Range(1, 64));
  g->add_option("--machines-per-leaf", gen->fabric.machines_per_leaf,
                "Machines per leaf switch (0: one switch)")
      ->default_val(gen->fabric.machines_per_leaf)
      ->check(CLI::Range(0, 1 << 20));
  g->add_option("--oversubscription", gen->fabric.oversubscription,
                "Leaf downlink:uplink ratio (>= 1)")
      ->default_val(gen->fabric.oversubscription)
      ->check(finite_in(1, 1024));
  g->add_option("--transport", gen->fabric.transport,
                "The network's transport: rdma (InfiniBand/RoCE), efa, tcp (Ethernet without "
                "RDMA: NCCL over sockets) or tcpxo (GPUDirect-TCPX/TCPXO)")
      ->default_val(gen->fabric.transport)
      ->check(CLI::IsMember({"rdma", "efa", "tcp", "tcpxo"}));
  g->add_flag("--json", gen->json, "Print the summary as one JSON object");
  g->callback([&run, gen] { run = [gen] { return run_gen(*gen); }; });
}

}  // namespace hexi::cli
