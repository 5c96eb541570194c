// fuzz_seeds OUT_DIR: writes the seed inputs that exist in no shipped file, built from
// shipped ones so that they follow the formats as they change: a program lowered from a
// tiny shipped scenario and plan (layer and stage granularity), a trace of it written by
// the one trace writer (synthetic times), a device profile, mix specs, and checkpoint
// headers, manifests and manifest entries. scripts/fuzz.sh puts them in the corpora next
// to the shipped files. Files are OUT_DIR/<target>/<name>.

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/checkpoint.hpp"
#include "scenarios/scenario.hpp"
#include "scheduler/plan/plan.hpp"
#include "scheduler/program/lower.hpp"
#include "scheduler/program/trace_schema.hpp"
#include "topologies/paths.hpp"
#include "topologies/profile.hpp"

namespace fs = std::filesystem;
using namespace hexi;

namespace {

template <class T>
T must(Result<T> result) {
  if (!result) {
    std::fprintf(stderr, "fuzz_seeds: %s\n", result.error().message.c_str());
    std::exit(1);
  }
  return std::move(*result);
}

void write(const fs::path& dir, const std::string& target, const std::string& name,
           const std::string& text) {
  fs::create_directories(dir / target);
  std::ofstream(dir / target / name, std::ios::binary) << text;
}

// The program's ops, one after another on each device, 10 us each, with the optional
// fields the simulator writes (posted_us, folded_us, a link counter track).
std::string synthetic_trace(const Program& program, const Cluster& cluster) {
  TraceWriter writer;
  for (const DeviceLayout& l : program.devices) {
    writer.device(program, l.device, cluster.gpu(l.device).name);
  }
  for (int id = 0; id < program.num_ops(); ++id) {
    const Op& op = program.ops[id];
    const double start = 10.0 * (id - program.layout(op.device)->op_begin);
    TraceOp e{.op = id, .device = op.device, .start_us = start, .end_us = start + 10};
    if (op.kind != OpKind::kCompute) e.bytes = op.bytes;
    if (op.stream == Stream::kP2p) e.posted_us = start - 1;
    if (op.folded >= 0) e.folded_us = 2.5;
    writer.op(program, e);
  }
  writer.raw(R"({"name": "process_name", "ph": "M", "pid": 1000000, "args": {"name": "links"}})");
  writer.raw(R"({"name": "leaf0", "ph": "C", "pid": 1000000, "ts": 1.000, "args": {"flows": 1}})");
  return trace_document({writer.lines()}, Json{{"scenario", program.scenario}});
}

void program_seeds(const fs::path& out) {
  const auto gpus = must(GpuCatalog::load_shipped());
  const auto models = must(ModelCatalog::load_shipped());
  const Scenario s = must(load_scenario("tiny-llama-cpu", gpus, models));
  // Small programs (tens of KB at most): libFuzzer mutates inputs up to the largest seed.
  for (const char* plan_name : {"tiny-single", "tiny-pp2-tp2-tp1"}) {
    const Plan plan =
        must(load_plan(data_root() / "scenarios/plans" / (std::string(plan_name) + ".json")));
    for (Granularity g : {Granularity::kStage, Granularity::kLayer}) {
      if (g == Granularity::kLayer && plan.num_devices() > 1) continue;
      const LowerOptions options{g, s.name};
      const Program program =
          must(lower_plan(plan, s.cluster, s.model, s.training, options, plan_name));
      const std::string name = std::string(plan_name) + "-" + std::string(to_string(g)) + ".json";
      write(out, "program", name, program_text(program));
      write(out, "trace", name, synthetic_trace(program, s.cluster));
    }
  }
}

void other_seeds(const fs::path& out) {
  Profile profile;
  profile.set_device("A100-SXM-80GB", DeviceProfile::constant(0.7, 0.5, 0.85, 5e-6));
  write(out, "profile", "profile.json", dump_json(profile.to_json(), 2));
  write(out, "mix", "two-types.txt", "A100:4x8,RTX4090:8x8");
  write(out, "mix", "four-types.txt", "H100:16x8,A100:16x8,RTX4090:32x8,A800:2x8");
  const engine::CheckpointHeader header{3, 6, "0123456789abcdef", 91234, 45617};
  write(out, "checkpoint_header", "header.txt", engine::to_text(header));
  engine::CheckpointManifest manifest{6, 2, {}};
  for (int d = 0; d < 2; ++d) {
    manifest.files.push_back({d, "device-" + std::to_string(d) + ".step-6.0123456789abcdef.ckpt",
                              91234, "0123456789abcdef"});
  }
  write(out, "checkpoint_manifest", "manifest.json", engine::to_text(manifest));
  write(out, "checkpoint_manifest", "entry.json", engine::to_text(manifest.files[0]));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds OUT_DIR\n");
    return 2;
  }
  program_seeds(argv[1]);
  other_seeds(argv[1]);
  return 0;
}
