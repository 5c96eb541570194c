#include "engine/train.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <span>

#include "engine/check.hpp"
#include "engine/checkpoint_files.hpp"
#include "engine/comm_fake.hpp"
#include "engine/comm_mpi.hpp"
#ifdef HEXISIM_HAVE_CUDA
#include "engine/comm_nccl.hpp"
#endif
#include "engine/data.hpp"
#include "engine/preflight.hpp"
#include "engine/runtime.hpp"
#include "engine/trace.hpp"
#include "engine/watchdog.hpp"
#include "scenarios/scenario.hpp"
#include "scheduler/program/lower.hpp"
#include "scheduler/program/lower_sequence.hpp"
#include "topologies/json_input.hpp"
#include "topologies/paths.hpp"

namespace hexi::engine {

namespace {

// Everything a rank loads before any collective work.
struct Job {
  Scenario scenario;
  std::string plan_path;
  Program program;
  std::unique_ptr<DataSource> data;
  std::unique_ptr<Backend> backend;
  Fault fault;
  CheckpointLock save_lock, resume_lock;  // rank 0's, for the whole job
};

void print_error(const std::string& message) {
  std::fprintf(stderr, "hexisim: error: %s\n", message.c_str());
  std::fflush(stderr);
}

int local_rank(int world_rank) {
  const char* env = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  return env != nullptr ? std::atoi(env) : world_rank;
}

// The devices whose ranks run on this host: every device when the launcher put all ranks
// here (OpenMPI says how many it did), else only this rank's (the others' hosts are not
// known before any communication). Rank r runs the r-th device in increasing id.
std::span<const DeviceLayout> devices_on_this_host(const Program& p, int world_size,
                                                   int world_rank) {
  const char* env = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int local = env != nullptr ? std::atoi(env) : world_size;
  if (local == world_size) return p.devices;
  return std::span<const DeviceLayout>(p.devices).subspan(world_rank, 1);
}

// Outputs that cannot be written: refused before hours of training, not after. Every rank
// writes its checkpoint file; only rank 0 writes the trace, which may not replace an input.
// Rank 0 holds the checkpoint folders for the whole job: the one it saves to alone, the one
// it resumes from shared (CheckpointLock).
Status check_outputs(const TrainOptions& o, Job& job, int world_rank) {
  if (!o.save.empty()) HEXI_TRY(check_output_folder("--save", o.save));
  if (world_rank != 0) return {};
  if (!o.save.empty()) {
    auto lock = CheckpointLock::take("--save", o.save, true);
    HEXI_TRY(lock);
    job.save_lock = std::move(*lock);
  }
  std::error_code ec;
  if (!o.resume.empty() && (o.save.empty() || !std::filesystem::equivalent(o.resume, o.save, ec))) {
    auto lock = CheckpointLock::take("--resume", o.resume, false);
    HEXI_TRY(lock);
    job.resume_lock = std::move(*lock);
  }
  if (o.trace.empty()) return {};
  std::vector<std::filesystem::path> inputs = job.scenario.inputs;
  inputs.emplace_back(job.plan_path);
  if (!o.corpus.empty()) inputs.emplace_back(o.corpus);
  return check_output_file("--trace", o.trace, inputs);
}

// A plan that cannot fit: refused before allocating it.
Status check_memory(const TrainOptions& o, const Job& job, int world_size, int world_rank) {
  HEXI_TRY(check_device_memory(job.program, job.scenario, job.plan_path));
  if (o.backend != "cpu") return {};
  return check_host_memory(job.program, job.scenario,
                           devices_on_this_host(job.program, world_size, world_rank),
                           job.plan_path);
}

Status check_ranks(const std::string& plan_path, int devices, int world_size) {
  if (devices == world_size) return {};
  return bad_input(plan_path + ": the plan uses " + std::to_string(devices) +
                   " devices but the job has " + std::to_string(world_size) +
                   (world_size == 1 ? " rank" : " MPI ranks") +
                   "; the engine runs one rank per device: mpirun -np " + std::to_string(devices) +
                   " hexisim train ...");
}

// The program of the plan file: a pipeline plan (lower_plan), or a sequence mesh (an object
// with a "sequence" layout, as `hexisim seq --out` writes it: lower_sequence, which checks
// the layout against the model and the training config, e.g. that the groups' tokens sum to
// its seq_len, the length of the corpus' sequences).
Result<Program> load_program(const Job& job, int world_size) {
  const Scenario& sc = job.scenario;
  auto file = read_plan_file(job.plan_path);
  HEXI_TRY(file);
  HEXI_TRY(check_ranks(job.plan_path, file->num_devices(), world_size));
  LowerOptions lo;
  lo.scenario = sc.name;
  return lower_plan_file(*file, sc.cluster, sc.model, sc.training, lo, job.plan_path);
}

Result<Job> load_job(const TrainOptions& o, int world_size, int world_rank) {
  Job job;
  if (o.steps < 1) return bad_input("--steps: expected at least 1, got " + std::to_string(o.steps));
  auto gpus = GpuCatalog::load_shipped();
  HEXI_TRY(gpus);
  auto models = ModelCatalog::load_shipped();
  HEXI_TRY(models);
  auto sc = load_scenario(o.scenario, *gpus, *models);
  HEXI_TRY(sc);
  job.scenario = std::move(*sc);
  if (job.scenario.training.precision == "fp16") {
    return bad_input("scenario " + job.scenario.name +
                     ": training.precision \"fp16\" is not trained by the engine (fp16 needs "
                     "dynamic loss scaling, which it does not implement); use \"bf16\" (the "
                     "same 2-byte traffic and memory) or \"fp32\"");
  }
  if (!o.plan.empty()) {
    job.plan_path = o.plan;
  } else if (job.scenario.plan) {
    job.plan_path = job.scenario.plan->string();
  } else {
    return bad_input("scenario " + job.scenario.name + " names no plan: give --plan FILE");
  }
  HEXI_TRY(check_outputs(o, job, world_rank));
  auto program = load_program(job, world_size);
  HEXI_TRY(program);
  job.program = std::move(*program);
  if (job.scenario.training.sequence_parallel) {
    for (const Group& g : job.program.groups) {
      if (g.kind == GroupKind::kTp && g.devices.size() > 1) {
        return bad_input("scenario " + job.scenario.name +
                         ": training.sequence_parallel with tensor parallelism is simulated "
                         "(reduce-scatters and all-gathers, norms on token shards) but not run "
                         "by the engine, which all-reduces its TP blocks; set it false to "
                         "train this plan");
      }
    }
  }
  HEXI_TRY(llama_dims(job.scenario.model));
  HEXI_TRY(check_trainable(job.scenario.model, job.program.bytes_per_element, o.backend));
  HEXI_TRY(check_memory(o, job, world_size, world_rank));
  auto corpus =
      CorpusSource::load(o.corpus.empty() ? default_corpus() : std::filesystem::path(o.corpus),
                         job.scenario.training.seq_len, o.data_seed.value_or(job.scenario.seed));
  HEXI_TRY(corpus);
  job.data = std::make_unique<CorpusSource>(std::move(*corpus));
  const char* fault = std::getenv("HEXISIM_FAULT");
  auto f = Fault::parse(fault != nullptr ? fault : "");
  HEXI_TRY(f);
  job.fault = *f;
  auto backend = make_backend(o.backend, local_rank(world_rank));
  HEXI_TRY(backend);
  job.backend = std::move(*backend);
  return job;
}

// All ranks learn whether every rank succeeded; the lowest failing rank reports.
// Returns the exit code (0 when all succeeded).
int agree(Communicator& world, const Status& mine) {
  std::int32_t code = mine.ok() ? 0 : exit_code(mine.error());
  std::int32_t first = mine.ok() ? INT32_MAX : world.rank();
  if (!world.all_reduce(&code, 1, DType::kI32, ReduceOp::kMax).ok()) return 1;
  std::int32_t neg = -first;  // min via max of the negation
  if (!world.all_reduce(&neg, 1, DType::kI32, ReduceOp::kMax).ok()) return 1;
  if (code != 0 && -neg == world.rank()) print_error(mine.error().message);
  return code;
}

[[noreturn]] void abort_job(int rank, const Error& e) {
  print_error("rank " + std::to_string(rank) + ": " + e.message);
  MpiSession::abort(exit_code(e));
}

void print_header(const Job& job, int first_step) {
  const Program& p = job.program;
  std::printf("hexisim train: %s, plan %s: %zu devices, %s, %s, backend %s, %d ops per step%s\n",
              job.scenario.name.c_str(), job.plan_path.c_str(), p.devices.size(),
              std::string(to_string(p.schedule)).c_str(),
              p.bytes_per_element == 2 ? "bf16 mixed precision" : "fp32",
              job.backend->describe().c_str(), p.num_ops(),
              first_step > 0 ? (", resumed at step " + std::to_string(first_step)).c_str() : "");
  std::printf("  %6s  %10s  %10s  %10s\n", "step", "loss", "time s", "tokens/s");
  std::printf("  %6s  %10s  %10s  %10s\n", "------", "----------", "----------", "----------");
  std::fflush(stdout);
}

void print_classes(const OpClasses& classes, double total_seconds) {
  std::printf("\n  op class (all ranks)          count    time s   share    GFLOP/s\n");
  std::printf("  ----------------------------  -------  -------  -------  -------\n");
  for (const auto& [name, c] : classes) {
    std::string gf = c.flops > 0 && c.seconds > 0 ? std::to_string(c.flops / c.seconds / 1e9) : "-";
    if (gf != "-") gf = gf.substr(0, gf.find('.') + 2);
    std::printf("  %-28s  %7d  %7.4f  %6.1f%%  %7s\n", name.c_str(), c.count, c.seconds,
                100.0 * c.seconds / std::max(total_seconds, 1e-12), gf.c_str());
  }
}

// Rank 0 gathers the per-class statistics of every rank.
Result<OpClasses> gather_classes(Communicator& world, const OpClasses& mine) {
  auto all = gather_strings(world, dump_json(to_json(mine)));
  HEXI_TRY(all);
  OpClasses total;
  for (const auto& s : *all) merge(total, op_classes_from_json(Json::parse(s)));
  return total;
}

Status write_trace(Communicator& world, const TrainOptions& o, const Job& job, int device,
                   const std::vector<StepStats>& steps, double t0) {
  const std::string events =
      trace_events(job.program, device, job.scenario.cluster.gpu(device).name, steps, t0);
  auto all = gather_strings(world, events);
  HEXI_TRY(all);
  if (world.rank() != 0) return {};
  // The files the run read, as absolute paths: `hexisim calibrate` lowers the same program.
  Json other = {{"source", "hexisim train"},
                {"scenario", job.scenario.name},
                {"scenario_file", std::filesystem::absolute(job.scenario.file).string()},
                {"plan", job.plan_path},
                {"plan_file", std::filesystem::absolute(job.plan_path).string()},
                {"backend", job.backend->describe()},
                {"steps", steps.size()},
                {"measured", true}};
  return write_file_atomically(o.trace, trace_document(*all, other));
}

// Rank 0's manifest of the device files every rank wrote (their entries, in rank order).
Status publish(const TrainOptions& o, int steps, const std::vector<std::string>& entries,
               SavePoints& points) {
  CheckpointManifest manifest{steps, static_cast<int>(entries.size()), {}};
  for (std::size_t r = 0; r < entries.size(); ++r) {
    auto file = parse_manifest_file(entries[r], "checkpoint entry of rank " + std::to_string(r));
    HEXI_TRY(file);
    manifest.files.push_back(*file);
  }
  return publish_manifest(o.save, manifest, points);
}

// Crash-safe save (engine/checkpoint_files.hpp): every rank makes its file durable under a
// new name; only once all have, rank 0 publishes the manifest naming them, which switches
// the folder from the previous checkpoint to this one in one rename.
int save_checkpoint(const TrainOptions& o, Communicator& world, const RankRuntime& rt,
                    const Fault& fault, Progress& progress) {
  const int rank = world.rank();
  SavePoints points(fault.save_kill_point(rank), [&progress] {
    progress.enter([] { return std::string("writing the checkpoint"); }, false);
  });
  auto mine = rt.save(o.save, points);
  if (int code = agree(world, mine.ok() ? Status{} : Status{mine.error()}); code != 0) return code;
  auto entries = gather_strings(world, to_text(*mine));
  if (!entries.ok()) abort_job(rank, entries.error());
  return agree(world, rank == 0 ? publish(o, rt.steps_done(), *entries, points) : Status{});
}

// The communicator the program's ops use: NCCL for cuda, else an MPI communicator of its
// own (so that its messages never mix with the launcher's).
std::unique_ptr<Communicator> device_world(Communicator& world, Backend& backend) {
#ifdef HEXISIM_HAVE_CUDA
  if (backend.name() == "cuda") {
    auto w = make_nccl_world(world, backend);
    if (!w.ok()) abort_job(world.rank(), w.error());
    return std::move(*w);
  }
#endif
  (void)backend;
  std::vector<int> all(world.size());
  std::iota(all.begin(), all.end(), 0);
  auto w = world.subgroup(all);
  if (!w.ok()) abort_job(world.rank(), w.error());
  return std::move(*w);
}

// The steps of this run: per step the global mean loss, the slowest rank's time, and this
// rank's op timings; t0 = the earliest first op's start over the ranks (time zero of the
// trace: ranks on one host share the monotonic clock, so their events line up).
struct Run {
  std::vector<double> losses, times;
  std::vector<StepStats> steps;
  double t0 = 0;
};

Run run_steps(const TrainOptions& o, const Job& job, RankRuntime& rt, Communicator& world,
              Progress& progress) {
  const int rank = world.rank();
  const double tokens = job.scenario.training.tokens_per_iteration();
  Run run;
  for (int k = 0; k < o.steps; ++k) {
    auto st = rt.step();
    if (!st.ok()) abort_job(rank, st.error());
    if (k == 0) {
      // The minimum as the maximum of the negatives (ReduceOp has sum and max).
      double minus_t0 = st->ops.empty() ? -1e300 : -st->ops.front().start_s;
      if (!world.all_reduce(&minus_t0, 1, DType::kF64, ReduceOp::kMax).ok()) {
        abort_job(rank, failure("trace time zero reduction failed"));
      }
      run.t0 = -minus_t0;
    }
    double sums[2] = {st->loss_sum, st->loss_tokens};
    double seconds = st->seconds;
    progress.enter([] { return std::string("reducing the step's loss"); }, true);
    if (!world.all_reduce(sums, 2, DType::kF64, ReduceOp::kSum).ok() ||
        !world.all_reduce(&seconds, 1, DType::kF64, ReduceOp::kMax).ok()) {
      abort_job(rank, failure("loss reduction failed"));
    }
    run.losses.push_back(sums[0] / sums[1]);
    run.times.push_back(seconds);
    if (rank == 0 && !o.json) {
      std::printf("  %6d  %10.6f  %10.5f  %10.0f\n", st->step, run.losses.back(), seconds,
                  tokens / seconds);
      std::fflush(stdout);
    }
    run.steps.push_back(std::move(*st));
  }
  return run;
}

// Steady-state iteration time: the mean without the first step (warm-up) when possible.
double iteration_time(const Run& run) {
  const std::size_t skip = run.times.size() > 1 ? 1 : 0;
  return std::accumulate(run.times.begin() + skip, run.times.end(), 0.0) /
         static_cast<double>(run.times.size() - skip);
}

Json summary_json(const TrainOptions& o, const Job& job, const Run& run, const OpClasses& classes,
                  int first_step) {
  Json steps = Json::array();
  for (std::size_t k = 0; k < run.steps.size(); ++k) {
    steps.push_back(
        {{"step", run.steps[k].step}, {"loss", run.losses[k]}, {"time_s", run.times[k]}});
  }
  const double iteration = iteration_time(run);
  return {{"scenario", job.scenario.name},
          {"plan", job.plan_path},
          {"backend", job.backend->name()},
          {"backend_description", job.backend->describe()},
          {"precision", job.scenario.training.precision},
          {"devices", job.program.devices.size()},
          {"ops_per_step", job.program.num_ops()},
          {"first_step", first_step},
          {"losses", run.losses},
          {"step_times_s", run.times},
          {"steps", steps},
          {"iteration_time_s", iteration},
          {"tokens_per_s", job.scenario.training.tokens_per_iteration() / iteration},
          {"op_classes", to_json(classes)},
          {"trace", o.trace.empty() ? Json(nullptr) : Json(o.trace)},
          {"checkpoint", o.save.empty() ? Json(nullptr) : Json(o.save)}};
}

void print_summary(const TrainOptions& o, const Job& job, const Run& run,
                   const OpClasses& classes) {
  const double iteration = iteration_time(run);
  std::printf("\n  iteration time %.5f s (mean of steps after the first), %.0f tokens/s\n",
              iteration, job.scenario.training.tokens_per_iteration() / iteration);
  double class_seconds = 0;
  for (const auto& [name, c] : classes) class_seconds += c.seconds;
  print_classes(classes, class_seconds);
  if (!o.trace.empty()) std::printf("\n  trace: %s\n", o.trace.c_str());
  if (!o.save.empty()) std::printf("  checkpoint: %s\n", o.save.c_str());
}

int train_rank(const TrainOptions& o, Communicator& world, Progress& progress) {
  const int rank = world.rank();
  progress.enter([] { return std::string("set-up: loading the scenario, plan and corpus"); },
                 false);
  auto job = load_job(o, world.size(), rank);
  if (int code = agree(world, job.ok() ? Status{} : Status{job.error()}); code != 0) return code;
  // From here on a failure on one rank may leave others inside collectives: abort.
  auto program_world = device_world(world, *job->backend);
  RuntimeOptions ro;
  ro.adamw = o.adamw;
  ro.init.seed = o.init_seed;
  ro.fault = job->fault;
  auto rt = RankRuntime::create(job->program, job->scenario.model, *program_world, *job->backend,
                                *job->data, ro, progress);
  if (!rt.ok()) abort_job(rank, rt.error());
  if (!o.resume.empty()) {
    if (int code = agree(world, (*rt)->load(o.resume)); code != 0) return code;
  }
  const int first_step = (*rt)->steps_done();
  if (rank == 0 && !o.json) print_header(*job, first_step);
  if (!world.barrier().ok()) abort_job(rank, failure("barrier before the first step failed"));
  const Run run = run_steps(o, *job, **rt, world, progress);
  if (!o.save.empty()) {
    if (int code = save_checkpoint(o, world, **rt, job->fault, progress); code != 0) return code;
  }
  const std::size_t skip = run.steps.size() > 1 ? 1 : 0;
  auto classes =
      gather_classes(world, op_classes(job->program, {run.steps.begin() + skip, run.steps.end()}));
  if (!classes.ok()) abort_job(rank, classes.error());
  if (!o.trace.empty()) {
    Status written = write_trace(world, o, *job, (*rt)->device(), run.steps, run.t0);
    if (int code = agree(world, written); code != 0) return code;
  }
  if (rank != 0) return 0;
  if (o.json) {
    std::cout << dump_json(summary_json(o, *job, run, *classes, first_step), 2) << "\n";
  } else {
    print_summary(o, *job, run, *classes);
  }
  std::fflush(stdout);
  return 0;
}

// Whether an MPI launcher (mpirun, srun, mpiexec) started this process: each sets one of these.
bool under_mpi_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

// This rank's part of the job under its watchdog, which aborts the job when the rank stops
// making progress.
int train_watched(const TrainOptions& o, Communicator& world) {
  const int rank = world.rank();
  Progress progress;
  Watchdog watchdog(progress, o.watchdog_s, 3.0, [rank](const std::string& message) {
    print_error("rank " + std::to_string(rank) + ": " + message + "; aborting the job");
    MpiSession::abort(1);
  });
  return train_rank(o, world, progress);
}

}  // namespace

int run_train(const TrainOptions& o) {
  if (!under_mpi_launcher()) {
    // Started without mpirun: the job is this one rank, its world in memory (no MPI at all,
    // so a one-device plan needs no MPI installation; a larger plan is refused by
    // check_ranks, which names the mpirun command).
    int code = 0;
    run_fake_world(1, [&](Communicator& world) -> Status {
      code = train_watched(o, world);
      return {};
    });
    return code;
  }
  auto session = MpiSession::init(nullptr, nullptr);
  if (!session.ok()) {
    print_error(session.error().message);
    return 1;
  }
  auto world = (*session)->world();
  if (!world.ok()) {
    print_error(world.error().message);
    return 1;
  }
  return train_watched(o, **world);
}

}  // namespace hexi::engine
