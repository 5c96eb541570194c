// hexisim train SCENARIO --plan FILE --backend cpu|cuda --steps N [--trace FILE] [--json]:
// real execution of a plan, one MPI rank per plan device (run under mpirun).

#include "cli/commands.hpp"
#include "engine/train.hpp"

namespace hexi::cli {

void add_train_command(CLI::App& app, Runner& run) {
  auto opt = std::make_shared<engine::TrainOptions>();
  auto* cmd = app.add_subcommand(
      "train",
      "Train for real under mpirun, one rank per plan device (e.g. mpirun -np 3 hexisim train "
      "tiny-llama-cpu --plan scenarios/plans/tiny-pp2-tp2-tp1.json --steps 20)");
  cmd->add_option("SCENARIO", opt->scenario, "Scenario file, or the name of a shipped scenario")
      ->required();
  cmd->add_option("--plan", opt->plan, "Plan file (default: the scenario's \"plan\")");
  cmd->add_option("--backend", opt->backend,
                  "cpu (OpenBLAS or Eigen GEMMs + MPI) or cuda (cuBLAS + NCCL)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--steps", opt->steps, "Training steps (iterations) to run")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  cmd->add_option("--trace", opt->trace,
                  "Write every executed op, timed, as a Chrome trace (Perfetto)");
  cmd->add_flag("--json", opt->json,
                "Print one JSON object (losses, times, op classes) instead of tables");
  cmd->add_option("--corpus", opt->corpus,
                  "Byte-level training text (default: engine/corpus/gpl-3.0.txt)");
  cmd->add_option("--data-seed", opt->data_seed,
                  "Seed of the corpus sampling (default: the scenario's seed)")
      ->check(unsigned_64());
  cmd->add_option("--init-seed", opt->init_seed, "Seed of the parameter initialisation")
      ->check(unsigned_64())
      ->capture_default_str();
  cmd->add_option("--lr", opt->adamw.lr, "AdamW learning rate")
      ->check(finite_in(0, 1e3))
      ->capture_default_str();
  cmd->add_option("--beta1", opt->adamw.beta1, "AdamW beta1")
      ->check(finite_in(0, 0.999999))
      ->capture_default_str();
  cmd->add_option("--beta2", opt->adamw.beta2, "AdamW beta2")
      ->check(finite_in(0, 0.999999))
      ->capture_default_str();
  cmd->add_option("--eps", opt->adamw.eps, "AdamW epsilon")
      ->check(finite_positive())
      ->capture_default_str();
  cmd->add_option("--weight-decay", opt->adamw.weight_decay, "AdamW weight decay (matrices only)")
      ->check(finite_in(0, 1e3))
      ->capture_default_str();
  cmd->add_option(
      "--save", opt->save,
      "Write a checkpoint to this folder at the end (one file per device and a manifest)");
  cmd->add_option("--resume", opt->resume,
                  "Resume from a checkpoint folder written with the same plan");
  cmd->add_option("--watchdog", opt->watchdog_s,
                  "Abort the job when a rank makes no progress for this many seconds (0: off)")
      ->check(finite_in(0, 1e7))
      ->capture_default_str();
  cmd->callback([&run, opt] { run = [opt] { return engine::run_train(*opt); }; });
}

}  // namespace hexi::cli
