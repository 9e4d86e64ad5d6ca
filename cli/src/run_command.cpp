// `tessel run`: train a plan on CPU or GPU ranks. It checks the plan, then launches the
// tessel-rank worker next to it with mpirun (one machine, or many through a hostfile)
// or srun; started inside a launcher already (mpirun, srun, or ranks the user or the
// cluster started), each process becomes that worker (exec). The decisions are the
// pure functions of executor/launch.hpp and rank_placement.hpp. The worker holds the
// MPI code: this binary links SimGrid, whose SMPI exports the MPI symbols too.
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "commands.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/subprocess.hpp"
#include "tessel/executor/launch.hpp"
#include "tessel/executor/rank_placement.hpp"
#include "tessel/executor/run_options.hpp"
#include "tessel/executor/trainer.hpp"

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

int launch(executor::Launcher launcher, const RunArgs& args, const Plan& plan) {
  executor::LaunchRequest request;
  request.world_size = plan.parallel.world_size();
  request.ranks_per_node = plan.gpus_per_node();
  request.hostfile = args.hostfile;
  request.worker = worker_path();
  request.worker_arguments = args.to_arguments();
  std::string command;
  for (const std::string& arg : executor::launch_command(launcher, request)) {
    command += (command.empty() ? "" : " ") + shell_quote(arg);
  }
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
  const executor::Environment environment = executor::process_environment();
  const executor::Launcher launcher = executor::resolve_launcher(executor::parse_launcher(args.launcher), environment);
  if (!args.hostfile.empty() && !std::filesystem::is_regular_file(args.hostfile)) {
    throw Error(fmt::format("--hostfile: {}: cannot open file", args.hostfile));
  }
  if (!args.hostfile.empty() && launcher != executor::Launcher::mpirun) {
    throw Error(fmt::format("--hostfile: only mpirun reads a hostfile; the launcher is {}", executor::to_string(launcher)));
  }
  // Ranks that run here need their devices here; ranks on other nodes (a hostfile, srun)
  // look for theirs when they start.
  executor::MachineFacts machine = executor::this_machine();
  const bool ranks_here = launcher == executor::Launcher::none || args.hostfile.empty();
  if (!ranks_here || launcher == executor::Launcher::srun) machine.cuda_devices = std::max(machine.cuda_devices, 1);
  executor::resolve_backend(executor::parse_backend(args.backend), plan, machine);
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
  if (launcher == executor::Launcher::none) {
    const executor::LaunchedRank launched = executor::read_launched_rank(environment);
    if (!launched.inside_launcher() && plan.parallel.world_size() > 1) {
      throw Error(fmt::format("--launcher none: no rank in the environment (OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE, "
                              "SLURM_PROCID/NTASKS or RANK/WORLD_SIZE) and the plan has {} ranks",
                              plan.parallel.world_size()));
    }
    become_worker(worker_args);
  }
  return launch(launcher, worker_args, plan);
}
}  // namespace

Command add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Train a plan on CPU or GPU ranks (launches mpirun or srun itself)");
  cmd->add_option("--plan,-p", args->plan_file, "Plan JSON file (local-cpu, or a GPU cluster)")->required();
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
  cmd->add_option("--backend", args->backend,
                  "auto|cpu|cuda: auto runs GPU clusters on CUDA and local-cpu on the CPU; cpu runs a GPU plan's "
                  "layout on CPU ranks (to test it on a machine without GPUs)")
      ->capture_default_str();
  cmd->add_option("--launcher", args->launcher,
                  "auto|mpirun|srun|none: auto becomes a rank inside a launcher's environment, uses srun inside a "
                  "Slurm job, mpirun otherwise; none: the ranks were started already (mpirun -np N tessel run ...)")
      ->capture_default_str();
  cmd->add_option("--hostfile", args->hostfile,
                  "mpirun hostfile for many nodes (one line per node: HOST slots=GPUS_PER_NODE)");
  cmd->footer("Runs data, pipeline (gpipe, 1f1b, interleaved), tensor (tp_mode 1d with tp_sequence_parallel,\n"
              "2d, 2.5d, 3d) and ring self-attention sequence parallelism (sp), ZeRO 0-3 and recompute\n"
              "none|selective|full. Offload is refused by name before any rank starts. Per-op events go to the\n"
              "runs database. GPU ranks use device = local rank modulo the devices seen, NCCL between them; ranks\n"
              "that share a GPU (more ranks per node than devices) talk over MPI with host staging.");
  return [args] { return run_run(*args); };
}

}  // namespace tessel::cli
