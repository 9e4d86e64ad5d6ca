// `tessel run`: train a plan on CPU ranks over MPI. It checks the plan, then launches
// `mpirun -np <world>` on the tessel-rank worker next to it; started under mpirun
// itself, each process becomes that worker (exec). The worker holds the MPI code: this
// binary links SimGrid, whose SMPI exports the MPI symbols too.
#include <unistd.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "commands.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/subprocess.hpp"
#include "tessel/executor/trainer.hpp"
#include "tessel/executor/run_options.hpp"

namespace tessel::cli {

namespace {
using RunArgs = executor::RunOptions;

std::string worker_path() {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  const auto worker = self.parent_path() / "tessel-rank";
  if (error || !std::filesystem::exists(worker)) throw Error("run: tessel-rank is missing next to the tessel binary");
  return worker.string();
}

int launch_under_mpirun(const RunArgs& args, int world) {
  std::string command = fmt::format("mpirun --allow-run-as-root --oversubscribe -np {} {}", world, shell_quote(worker_path()));
  for (const auto& arg : args.to_arguments()) command += " " + shell_quote(arg);
  const int raw = std::system(command.c_str());
  return WIFEXITED(raw) ? WEXITSTATUS(raw) : 1;
}

// Already a rank of an mpirun job: become the worker.
[[noreturn]] void become_worker(const RunArgs& args) {
  const std::string worker = worker_path();
  std::vector<std::string> arguments = args.to_arguments();
  std::vector<char*> argv{const_cast<char*>(worker.c_str())};
  for (auto& arg : arguments) argv.push_back(arg.data());
  argv.push_back(nullptr);
  execv(worker.c_str(), argv.data());
  throw Error(fmt::format("run: cannot start {}", worker));
}

int run_run(const RunArgs& args) {
  if (args.steps <= 0) throw Error(fmt::format("--steps: must be a positive integer, got {}", args.steps));
  if (!(args.lr > 0)) throw Error(fmt::format("--lr: must be positive, got {}", args.lr));
  if (!(args.clip_grad_norm >= 0)) {
    throw Error(fmt::format("--clip-grad-norm: must be 0 (off) or positive, got {}", args.clip_grad_norm));
  }
  const Plan plan = Plan::load(args.plan_file);
  if (!plan.cluster.ranks_fill_node()) {
    // A GPU cluster's plan needs its GPUs here.
    const int devices = kernels::cuda_device_count();
    if (devices == 0) {
      throw Error(fmt::format("cluster {}: the plan runs on {} GPUs ({} per node) and {}", plan.cluster.name,
                              plan.cluster.device, plan.gpus_per_node(),
                              kernels::cuda_backend_built() ? "this machine has no CUDA device"
                                                            : "this build of tessel has no CUDA backend"));
    }
  }
  executor::Trainer::check(plan);
  if (!args.resume.empty() && !std::filesystem::exists(std::filesystem::path(args.resume) / "checkpoint.json")) {
    throw Error(fmt::format("--resume: {}: no complete checkpoint (checkpoint.json missing)", args.resume));
  }
  if (args.checkpoint_every < 0) throw Error(fmt::format("--checkpoint-every: must be 0 or more, got {}", args.checkpoint_every));
  if (!args.data_file.empty() && !std::filesystem::is_regular_file(args.data_file)) {
    throw Error(fmt::format("--data: {}: cannot open file", args.data_file));
  }
  RunArgs worker_args = args;
  worker_args.progress = isatty(STDERR_FILENO) != 0;
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) become_worker(worker_args);
  return launch_under_mpirun(worker_args, plan.parallel.world_size());
}
}  // namespace

Command add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Train a plan on CPU ranks over MPI (launches mpirun itself)");
  cmd->add_option("--plan,-p", args->plan_file, "Plan JSON file (cluster local-cpu)")->required();
  cmd->add_option("--steps,-s", args->steps, "Training steps")->capture_default_str();
  cmd->add_option("--data", args->data_file, "Text file to train on, byte-level (default: a synthetic corpus)");
  cmd->add_option("--seed", args->seed, "Initialisation and synthetic-data seed")->capture_default_str();
  cmd->add_option("--lr", args->lr, "Learning rate")->capture_default_str();
  cmd->add_option("--db", args->db, "Database to record the run in (default: the profiles database)");
  cmd->add_option("--checkpoint", args->checkpoint, "Write a checkpoint to this folder at the end (and every --checkpoint-every steps)");
  cmd->add_option("--checkpoint-every", args->checkpoint_every, "Also checkpoint every N steps");
  cmd->add_option("--resume", args->resume, "Resume from this checkpoint folder (--steps counts from step 0)");
  cmd->add_option("--trace", args->trace_file,
                  "Write the measured per-op events as Chrome trace JSON (the simulator's format, same op ids)");
  cmd->add_option("--clip-grad-norm", args->clip_grad_norm,
                  "Clip the global gradient norm to this value (0: no clipping)")
      ->capture_default_str();
  cmd->footer("Runs data, pipeline (gpipe, 1f1b, interleaved), tensor (tp_mode 1d with tp_sequence_parallel,\n"
              "2d, 2.5d, 3d) and ring self-attention sequence parallelism (sp), ZeRO 0-3 and recompute\n"
              "none|selective|full. Offload is refused by name before any rank starts. Per-op events go to the\n"
              "runs database.");
  return [args] { return run_run(*args); };
}

}  // namespace tessel::cli
