// `tessel run`: train a plan on CPU or GPU ranks. It checks the plan (run_preflight.hpp), then
// launches the tessel-rank worker with mpirun or srun, or becomes it (exec) inside a launcher, as
// executor/launch.hpp and rank_placement.hpp decide; the worker holds the MPI code because this
// binary links SimGrid's SMPI. While ranks run it holds the --checkpoint lock and forwards
// signals (run_supervisor.hpp); a bad end is recorded as failed or interrupted.
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>

#include <fmt/format.h>

#include "commands.hpp"
#include "rank_watch.hpp"
#include "run_preflight.hpp"
#include "run_supervisor.hpp"
#include "tessel/core/error.hpp"
#include "tessel/executor/checkpoint_files.hpp"
#include "tessel/executor/launch.hpp"
#include "tessel/executor/rank_placement.hpp"
#include "tessel/executor/run_options.hpp"
#include "tessel/executor/trainer.hpp"
#include "tessel/planner/stage_memory.hpp"
#include "tessel/profiles/run_store.hpp"

namespace tessel::cli {

namespace {

// Offload plans: each stage's activations, trainer workspace (temporaries, reduction
// scratch) and ZeRO's whole-layer buffers as the planner predicts them
// (planner::stage_memory, MemoryBreakdown::non_model_bytes), known before any rank
// starts, for the budget's refusal. The device's own workspace is left out: it is the
// math library's reserve outside the budgeted pool (on CPU ranks the profile's runtime
// would refuse budgets that run).
std::vector<double> predicted_non_model_bytes(const Plan& plan) {
  std::vector<double> out;
  if (plan.parallel.offload == OffloadMode::none) return out;
  const planner::CostModel model = planner::CostModel::for_plan(plan);
  for (int s = 0; s < plan.parallel.pp; ++s) {
    const planner::MemoryBreakdown memory = planner::stage_memory(model, plan.parallel, s);
    out.push_back(memory.non_model_bytes());
  }
  return out;
}
using RunArgs = executor::RunOptions;

std::string worker_path() {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  const auto worker = self.parent_path() / "tessel-rank";
  if (error || !std::filesystem::exists(worker)) throw Error("run: tessel-rank is missing next to the tessel binary");
  return worker.string();
}

// Seconds the ranks get to stop (and write a final checkpoint) after a forwarded signal.
constexpr unsigned kStopGraceSeconds = 20;

// Why the ranks ended, when not by a signal tessel forwarded: the watch's verdict, the
// launcher killed, or a rank's exit status (a signal's name for a status above 128).
std::string why_the_ranks_ended(const SupervisedExit& exit, const std::string& launcher) {
  if (!exit.watch_reason.empty()) return exit.watch_reason;
  if (exit.killed_by != 0) {
    return fmt::format("{} was killed by SIG{}{}", launcher, sigabbrev_np(exit.killed_by),
                       exit.ranks_outlived > 0 ? fmt::format(" (its {} ranks were waited for)", exit.ranks_outlived) : "");
  }
  return fmt::format("the ranks ended with {}", describe_exit_status(exit.status));
}

int launch(executor::Launcher launcher, RunArgs args, const Plan& plan) {
  executor::LaunchRequest request;
  request.world_size = plan.parallel.world_size();
  request.ranks_per_node = plan.gpus_per_node();
  request.hostfile = args.hostfile;
  request.worker = worker_path();
  // Ranks on this machine beat a heartbeat the launch watches (rank_watch.hpp); ranks
  // on other nodes (a hostfile, srun) are the launcher's to watch.
  std::optional<RankWatch> watch;
  if (launcher == executor::Launcher::mpirun && args.hostfile.empty()) {
    watch.emplace(request.world_size, executor::to_string(launcher));
    args.heartbeat_dir = watch->folder();
  }
  request.worker_arguments = args.to_arguments();
  const SupervisedExit exit =
      run_supervised(executor::launch_command(launcher, request), kStopGraceSeconds, watch ? &*watch : nullptr);
  const std::string why = why_the_ranks_ended(exit, executor::to_string(launcher));
  if (exit.status != 0) {
    // Ranks killed before they could record how the run ended: say it for them.
    const std::string db = args.db.empty() ? profiles::ProfileStore::default_path() : args.db;
    try {
      if (std::filesystem::exists(db)) {
        profiles::ProfileStore store(db);
        profiles::RunStore runs(store);
        if (exit.forwarded != 0) {
          runs.finish_left_running(args.launch_key, "interrupted", fmt::format("stopped by SIG{}", sigabbrev_np(exit.forwarded)));
        } else {
          runs.finish_left_running(args.launch_key, "failed", why);
        }
      }
    } catch (const std::exception& error) {
      std::fprintf(stderr, "tessel: warning: could not record how the run ended in %s: %s\n", db.c_str(), error.what());
    }
  }
  if (exit.forwarded != 0) {
    std::fprintf(stderr, "tessel: run stopped by SIG%s\n", sigabbrev_np(exit.forwarded));
  } else if (!exit.watch_reason.empty() || exit.killed_by != 0 || exit.status > 128) {
    // A rank's own error is its line; these the ranks could not say.
    std::fprintf(stderr, "tessel: error: run: %s\n", why.c_str());
  }
  return exit.status;
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
  if (!(args.lr > 0) || !std::isfinite(args.lr)) {
    throw Error(fmt::format("--lr: must be a positive finite number, got {}", args.lr));
  }
  if (!(args.clip_grad_norm >= 0) || !std::isfinite(args.clip_grad_norm)) {
    throw Error(fmt::format("--clip-grad-norm: must be 0 (off) or a positive finite number, got {}", args.clip_grad_norm));
  }
  const Plan plan = Plan::load(args.plan_file);
  // fp8 training is planned and simulated only: the executor's kernels train in fp32,
  // bf16 or fp16 (core/fp8_model.hpp says what an fp8 step would do).
  if (plan.train.precision == Precision::fp8) {
    throw Error(fmt::format("{}: train.precision: fp8 is planned and simulated but not run; tessel run trains fp32, "
                            "bf16 or fp16 (set train.precision bf16)",
                            args.plan_file));
  }
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
  const executor::BackendChoice backend = executor::resolve_backend(executor::parse_backend(args.backend), plan, machine);
  executor::Trainer::check(plan);
  if (args.device_memory_bytes > 0 && plan.parallel.offload == OffloadMode::none) {
    throw Error("--device-memory-bytes: the budget of the offload chunk manager; this plan's parallel.offload is none");
  }
  executor::Trainer::check_device_budget(plan, std::size_t(args.device_memory_bytes), predicted_non_model_bytes(plan));
  if (!args.resume.empty()) executor::read_checkpoint_meta(args.resume, args.steps);
  check_init_weights(args, plan);
  if (args.checkpoint_every < 0) throw Error(fmt::format("--checkpoint-every: must be 0 or more, got {}", args.checkpoint_every));
  std::string data_format = args.data_format;
  if (!args.data_file.empty()) data_format = check_run_data(args, plan);
  else if (args.data_format != "auto" || !args.data_dtype.empty()) {
    throw Error("--data-format, --data-dtype: give --data FILE too (without it the run trains on a synthetic text)");
  }
  // CPU ranks of this machine share its memory; GPU ranks check their device's.
  if (ranks_here && backend == executor::BackendChoice::cpu) {
    check_memory_fits(plan, args.db, launcher == executor::Launcher::none ? 1 : plan.parallel.world_size());
  }
  std::error_code missing;
  const bool checkpoint_folder_is_new = !args.checkpoint.empty() && !std::filesystem::exists(args.checkpoint, missing);
  check_output_paths(args);
  RunArgs worker_args = args;
  worker_args.data_format = data_format;
  worker_args.progress = isatty(STDERR_FILENO) != 0;
  if (launcher == executor::Launcher::none) {
    const executor::LaunchedRank launched = executor::read_launched_rank(environment);
    if (!launched.inside_launcher() && plan.parallel.world_size() > 1) {
      throw Error(fmt::format("--launcher none: no rank in the environment (OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE, "
                              "SLURM_PROCID/NTASKS or RANK/WORLD_SIZE) and the plan has {} ranks",
                              plan.parallel.world_size()));
    }
    // Rank 0 holds the folder's lock on into the worker it becomes.
    static std::optional<CheckpointLock> held_into_the_worker;
    if (!args.checkpoint.empty() && launched.rank.value_or(0) == 0) held_into_the_worker.emplace(args.checkpoint, true);
    become_worker(worker_args);
  }
  std::optional<CheckpointLock> lock;
  if (!args.checkpoint.empty()) lock.emplace(args.checkpoint);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  worker_args.launch_key = fmt::format("running under tessel run {} on {}", getpid(), host);
  const int status = launch(launcher, worker_args, plan);
  // A run that failed before its first checkpoint leaves no folder it created behind.
  if (status != 0 && checkpoint_folder_is_new &&
      !std::filesystem::exists(std::filesystem::path(args.checkpoint) / "checkpoint.json", missing)) {
    std::filesystem::remove_all(args.checkpoint, missing);
  }
  return status;
}
}  // namespace

Command add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  // Read signed, so that a negative budget is refused rather than wrapped to a huge one.
  auto device_memory_bytes = std::make_shared<std::optional<std::int64_t>>();
  CLI::App* cmd = app.add_subcommand("run", "Train a plan on CPU or GPU ranks (launches mpirun or srun itself)");
  cmd->add_option("--plan,-p", args->plan_file, "Plan JSON file (local-cpu, or a GPU cluster)")->required();
  cmd->add_option("--steps,-s", args->steps, "Training steps")->capture_default_str();
  cmd->add_option("--data", args->data_file,
                  "Data to train on: a text file (byte-level), a Megatron dataset (PREFIX, PREFIX.bin or .idx), a "
                  "nanoGPT .bin or an llm.c shard (default: a synthetic text)");
  cmd->add_option("--data-format", args->data_format,
                  "text|megatron|nanogpt|llmc|auto: auto reads a .bin with a .idx beside it as Megatron's, one "
                  "with llm.c's magic as llm.c's, any other .bin as nanoGPT's, anything else as text")
      ->capture_default_str();
  cmd->add_option("--data-dtype", args->data_dtype, "uint16|uint32: the ids of a headerless nanoGPT file (default uint16)");
  cmd->add_option("--seed", args->seed, "Initialisation and synthetic-data seed")->capture_default_str();
  cmd->add_option("--lr", args->lr, "Learning rate")->capture_default_str();
  cmd->add_option("--db", args->db, "Database to record the run in (default: the profiles database)");
  cmd->add_option("--checkpoint", args->checkpoint, "Write a checkpoint to this folder at the end (and every --checkpoint-every steps)");
  cmd->add_option("--checkpoint-every", args->checkpoint_every, "Also checkpoint every N steps");
  cmd->add_option("--resume", args->resume, "Resume from this checkpoint folder (--steps counts from step 0)");
  cmd->add_option("--init", args->init_file,
                  "Start from these weights (safetensors with Hugging Face GPT-2 or LLaMA names, as tessel export-weights "
                  "writes) instead of the seed's");
  cmd->add_option("--trace", args->trace_file,
                  "Write the measured per-op events as Chrome trace JSON (the simulator's format, same op ids)");
  cmd->add_option("--clip-grad-norm", args->clip_grad_norm,
                  "Clip the global gradient norm to this value (0: no clipping)")
      ->capture_default_str();
  cmd->add_option("--device-memory-bytes", *device_memory_bytes,
                  "Offload plans: the device memory budget of the chunk manager (default: the plan's device memory)");
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
              "none|selective|full, and offload (optimizer, or chunked by device_fraction: the chunk manager keeps\n"
              "host-resident chunks in host memory within --device-memory-bytes; AdamW only). Per-op events go to the\n"
              "runs database. GPU ranks use device = local rank modulo the devices seen, NCCL between them; ranks\n"
              "that share a GPU (more ranks per node than devices) talk over MPI with host staging.");
  return [args, device_memory_bytes] {
    if (device_memory_bytes->has_value()) {
      if (**device_memory_bytes <= 0) {
        throw Error(fmt::format("--device-memory-bytes: must be a positive number of bytes, got {} (leave it out for "
                                "the plan's device memory)",
                                **device_memory_bytes));
      }
      args->device_memory_bytes = std::uint64_t(**device_memory_bytes);
    }
    return run_run(*args);
  };
}

}  // namespace tessel::cli
