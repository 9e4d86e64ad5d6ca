// The checks of run_preflight.hpp. Writability is probed with access(2) on the nearest
// existing folder rather than by writing a file, so a refused run leaves nothing behind.
#include "run_preflight.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "format.hpp"
#include "tessel/profiles/profile_store.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/process_memory.hpp"
#include "tessel/executor/token_source.hpp"
#include "tessel/executor/hf_export.hpp"
#include "tessel/planner/cost_model.hpp"

namespace tessel::cli {

namespace fs = std::filesystem;

namespace {
// The folder that must be writable for `path` to be created: its nearest existing
// ancestor, which must be a folder.
void check_creatable(const char* option, const fs::path& path) {
  fs::path ancestor = fs::absolute(path).parent_path();
  std::error_code error;
  while (!fs::exists(ancestor, error) && ancestor.has_parent_path() && ancestor != ancestor.parent_path()) {
    ancestor = ancestor.parent_path();
  }
  if (!fs::is_directory(ancestor, error)) {
    throw Error(fmt::format("{}: {}: cannot be created: {} is not a folder", option, path.string(), ancestor.string()));
  }
  if (access(ancestor.c_str(), W_OK | X_OK) != 0) {
    throw Error(fmt::format("{}: {}: cannot be written: {} ({})", option, path.string(), ancestor.string(),
                            std::strerror(errno)));
  }
}
}  // namespace

void check_output_paths(const executor::RunOptions& args) {
  std::error_code error;
  if (!args.checkpoint.empty()) {
    const fs::path dir = args.checkpoint;
    if (fs::exists(dir, error) && !fs::is_directory(dir, error)) {
      throw Error(fmt::format("--checkpoint: {}: exists and is not a folder", args.checkpoint));
    }
    if (!fs::exists(dir, error)) check_creatable("--checkpoint", dir);
    fs::create_directories(dir, error);
    if (error || access(dir.c_str(), W_OK | X_OK) != 0) {
      throw Error(fmt::format("--checkpoint: {}: cannot be written ({})", args.checkpoint,
                              error ? error.message() : std::strerror(errno)));
    }
  }
  if (!args.trace_file.empty()) {
    const fs::path trace = args.trace_file;
    if (fs::is_directory(trace, error)) throw Error(fmt::format("--trace: {}: is a folder; name a file", args.trace_file));
    if (fs::exists(trace, error)) {
      if (access(trace.c_str(), W_OK) != 0) {
        throw Error(fmt::format("--trace: {}: cannot be written ({})", args.trace_file, std::strerror(errno)));
      }
    } else {
      // The trace is written at the end, through a temporary file beside it.
      const fs::path folder = fs::absolute(trace).parent_path();
      if (!fs::is_directory(folder, error)) {
        throw Error(fmt::format("--trace: {}: the folder {} does not exist", args.trace_file, folder.string()));
      }
      check_creatable("--trace", trace);
    }
  }
}

void check_init_weights(const executor::RunOptions& args, const Plan& plan) {
  if (args.init_file.empty()) return;
  if (!args.resume.empty()) {
    throw Error("--init: a run starts from --init weights or resumes a --resume checkpoint, not both");
  }
  executor::whole_model_from_hf(executor::SafetensorsFile::read(args.init_file, "--init"), plan.model);
}

std::string check_run_data(const executor::RunOptions& args, const Plan& plan) {
  const executor::TokenSource tokens = executor::open_token_source(args.data_file, args.data_format, args.data_dtype);
  executor::check_token_data(tokens, plan.model.vocab, plan.train.global_batch, plan.seq_len());
  std::cout << fmt::format("data: {} read as {} ({} tokens of {})\n", args.data_file, executor::to_string(tokens.format()),
                           tokens.count(), executor::to_string(tokens.dtype()))
            << std::flush;
  return executor::to_string(tokens.format());
}

void check_memory_fits(const Plan& plan, const std::string& db, int ranks_here, double available_bytes) {
  if (available_bytes < 0) available_bytes = available_memory_bytes();
  if (available_bytes <= 0 || ranks_here <= 0) return;  // nothing known to compare with
  // The run's database (--db, else the default one) prices the plan when it exists; the
  // run creates it later, and until then the shipped profile prices the plan.
  std::error_code error;
  const std::string path = db.empty() ? profiles::ProfileStore::default_path() : db;
  const planner::CostModel model =
      fs::exists(path, error) ? planner::CostModel::for_plan(plan, path)
                              : planner::CostModel(plan.model, plan.train, plan.cluster, plan.nodes,
                                                   plan.gpus_per_node(), profiles::shipped_profile(plan.cluster.device));
  const auto memory = model.estimate(plan.parallel).memory;
  // A GPU plan's layout run on CPU ranks (--backend cpu) holds no GPU workspace (CUDA
  // context, library workspaces): count what the ranks themselves keep.
  const bool gpu_plan_on_cpu_ranks = !plan.cluster.ranks_fill_node();
  const double per_rank_bytes = memory.device_total_bytes() - (gpu_plan_on_cpu_ranks ? memory.workspace_bytes : 0.0);
  const double needed_bytes = per_rank_bytes * ranks_here;
  if (needed_bytes > available_bytes) {
    throw Error(fmt::format("memory: the plan needs {} per rank, {} for the {} ranks on this machine, but {} is "
                            "available (tessel estimate shows the parts; a smaller model, batch or more ranks with "
                            "ZeRO would fit)",
                            format_bytes(per_rank_bytes), format_bytes(needed_bytes), ranks_here,
                            format_bytes(available_bytes)));
  }
}

CheckpointLock::CheckpointLock(const std::string& dir, bool across_exec) {
  const std::string path = (fs::path(dir) / "lock").string();
  fd_ = open(path.c_str(), O_RDWR | O_CREAT | (across_exec ? 0 : O_CLOEXEC), 0644);
  if (fd_ < 0) throw Error(fmt::format("--checkpoint: {}: cannot create ({})", path, std::strerror(errno)));
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char holder[32] = {};
    const ssize_t got = pread(fd_, holder, sizeof(holder) - 1, 0);
    close(fd_);
    fd_ = -1;
    std::string pid = got > 0 ? std::string(holder, std::size_t(got)) : "unknown";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    throw Error(fmt::format("--checkpoint: {}: another run (pid {}) is writing this folder; give each run its own",
                            dir, pid));
  }
  const std::string mine = std::to_string(getpid()) + "\n";
  if (ftruncate(fd_, 0) != 0 || pwrite(fd_, mine.data(), mine.size(), 0) != ssize_t(mine.size())) {
    // The lock holds without the pid; only the message of a refused run loses it.
  }
}

CheckpointLock::~CheckpointLock() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace tessel::cli
