// fuzz_seeds OUT_DIR: writes the seed inputs that exist in no shipped file, built from
// shipped ones so that they follow the formats as they change: a program lowered from a
// tiny shipped scenario and plan (layer and stage granularity), a trace of it written by
// the one trace writer (synthetic times), a device profile, mix specs, checkpoint headers,
// manifests and manifest entries, small sequence problems (seq_problem.hpp), traces as
// measured of the fixed runs of fuzz_measured, a sweep's results.jsonl (rows of the shipped
// tiny sweep, whole and torn) and the shipped validation suites. scripts/fuzz.sh puts them in
// the corpora next to the shipped files. Files are OUT_DIR/<target>/<name>.

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "engine/checkpoint.hpp"
#include "scenarios/scenario.hpp"
#include "scheduler/plan/plan.hpp"
#include "scheduler/program/lower.hpp"
#include "scheduler/program/trace_schema.hpp"
#include "studies/sweep_run.hpp"
#include "tests/fuzz/measured_runs.hpp"
#include "tests/fuzz/seq_problem.hpp"
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
  // A mixture of experts' program: whole experts per device, its expert ranges.
  const Scenario moe = must(load_scenario("tiny-moe-cpu", gpus, models));
  const Plan plan = must(load_plan(data_root() / "scenarios/plans/tiny-moe-experts-3-1.json"));
  const Program program = must(lower_plan(plan, moe.cluster, moe.model, moe.training,
                                          LowerOptions{Granularity::kStage, moe.name}, "moe"));
  write(out, "program", "tiny-moe-experts-3-1-stage.json", program_text(program));
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

// Problems of 1-8 GPUs, each for every fuzzed scheduler: mixed types with fewer tokens than
// two per device, a mesh of four types, one GPU, and a model that fits only under ZeRO-3.
void seq_seeds(const fs::path& out) {
  const auto gpus = must(GpuCatalog::load_shipped());
  const auto models = must(ModelCatalog::load_shipped());
  auto model = [&](const char* name) {
    for (std::size_t i = 0; i < models.models().size(); ++i) {
      if (models.models()[i].name == name) return static_cast<int>(i);
    }
    std::fprintf(stderr, "fuzz_seeds: no model %s\n", name);
    std::exit(1);
  };
  auto gpu = [&](const char* name) { return gpus.index_of(name); };
  struct Named {
    std::string name;
    fuzz::SeqProblem p;
  };
  std::vector<Named> problems;
  for (int seq : {2, 4, 6}) {
    fuzz::SeqProblem p;
    p.model = model("llama2-7b");
    p.seq_len = seq;
    p.zero_stage = 3;
    p.recompute = 2;
    p.machines = {{gpu("A100-SXM-80GB"), 2, 1}, {gpu("H100-SXM"), 2, 1}};
    problems.push_back({"a100-h100-seq" + std::to_string(seq), p});
  }
  fuzz::SeqProblem four;
  four.model = model("tiny-llama-seq");
  four.seq_len = 64;
  four.machines = {{gpu("H100-SXM"), 2, 1},
                   {gpu("A100-SXM-80GB"), 2, 1},
                   {gpu("L40S"), 2, 1},
                   {gpu("RTX4090"), 1, 2}};
  problems.push_back({"four-types-tiny", four});
  fuzz::SeqProblem one;
  one.model = model("small-llama");
  one.seq_len = 128;
  one.machines = {{gpu("A10"), 1, 1}};
  problems.push_back({"one-gpu", one});
  fuzz::SeqProblem zero3;
  zero3.model = model("llama3-8b");
  zero3.seq_len = 4096;
  zero3.zero_stage = 3;
  zero3.recompute = 2;
  zero3.nic = 1;
  zero3.machines = {{gpu("H100-SXM"), 4, 1}, {gpu("A100-SXM-80GB"), 2, 2}};
  problems.push_back({"llama3-8b-zero3", zero3});
  for (Named& n : problems) {
    for (std::size_t s = 0; s < fuzz::seq_schedulers().size(); ++s) {
      n.p.scheduler = static_cast<int>(s);
      write(out, "seq", n.name + "-" + fuzz::seq_schedulers()[s]->name + ".bin",
            fuzz::encode_seq_problem(n.p));
    }
  }
}

// Traces of the fixed runs as `hexisim train --trace` writes them: the simulated iteration
// repeated for `steps` steps (1 ms apart), every op with its step and a CPU time, otherData
// naming the scenario and plan files.
std::string measured_trace(const fuzz::FixedRun& f, int steps) {
  const Program& program = f.run.program;
  const Cluster& cluster = f.run.scenario.cluster;
  TraceWriter writer;
  for (const DeviceLayout& l : program.devices) {
    writer.device(program, l.device, cluster.gpu(l.device).name);
  }
  double offset = 0;
  for (int step = 0; step < steps; ++step) {
    double end = 0;
    for (TraceOp e : f.simulated.ops) {
      e.step = step;
      e.start_us += offset;
      e.end_us += offset;
      e.posted_us = e.folded_us = -1;
      e.cpu_us = 0.8 * (e.end_us - e.start_us);
      end = std::max(end, e.end_us);
      writer.op(program, e);
    }
    offset = end + 1000;
  }
  const Json other = {{"scenario", f.run.scenario.name},
                      {"scenario_file", f.run.scenario.file.string()},
                      {"plan_file", f.run.plan_file}};
  return trace_document({writer.lines()}, other);
}

void measured_seeds(const fs::path& out) {
  const auto gpus = must(GpuCatalog::load_shipped());
  const auto models = must(ModelCatalog::load_shipped());
  for (const fuzz::FixedRun& f : fuzz::fixed_runs(gpus, models)) {
    const std::string stem = fs::path(f.run.plan_file).stem().string();
    for (int steps : {1, 3}) {
      write(out, "measured", stem + "-" + std::to_string(steps) + "-steps.json",
            measured_trace(f, steps));
    }
    write(out, "measured", stem + "-simulated.json", f.simulated_json);
  }
}

// Rows of the shipped tiny sweep: two computed points and one failed, whole; then the same
// with a torn last line, and a row of a point of no sweep.
void sweep_store_seeds(const fs::path& out) {
  const SweepContext ctx =
      must(load_sweep_context((data_root() / "scenarios/sweeps/tiny.json").string()));
  std::string rows;
  for (int i : {0, 1}) rows += run_point(ctx, ctx.sweep.points[i]) + "\n";
  rows += error_row(ctx, ctx.sweep.points[2], bad_input("a point that failed"), 0.25) + "\n";
  write(out, "sweep_store", "rows.jsonl", rows);
  write(out, "sweep_store", "torn.jsonl", rows + rows.substr(0, rows.find('\n') / 2));
  write(out, "sweep_store", "foreign.jsonl",
        R"({"version": 1, "index": 0, "key": "cluster=none", "error": {"kind": "bad_input"}})"
        "\n");
}

// The shipped validation suites as they are (fuzz_suite links their folders next to its input).
void suite_seeds(const fs::path& out) {
  for (const auto& entry : fs::directory_iterator(data_root() / "validation/suites")) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    write(out, "suite", entry.path().filename().string(), text);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds OUT_DIR\n");
    return 2;
  }
  program_seeds(argv[1]);
  other_seeds(argv[1]);
  seq_seeds(argv[1]);
  measured_seeds(argv[1]);
  sweep_store_seeds(argv[1]);
  suite_seeds(argv[1]);
  return 0;
}
