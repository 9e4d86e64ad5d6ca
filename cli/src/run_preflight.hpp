// What `tessel run` checks before any rank starts, so a run fails in its first second rather than
// after its last step: output paths writable, the plan's ranks fit this machine's memory (the
// planner's estimate), --data reads and fits the model, a --resume checkpoint is complete, --init
// weights fit, and no other run writes the same --checkpoint folder (a lock held for the run).
#pragma once

#include <string>

#include "tessel/core/plan.hpp"
#include "tessel/executor/run_options.hpp"

namespace tessel::cli {

// --checkpoint (created if missing) and --trace can be written; throws tessel::Error.
void check_output_paths(const executor::RunOptions& args);

// Opens --data as the ranks will and checks it against the plan (one global batch of
// windows, every id inside the model's vocabulary; token_source.hpp). Returns the
// format it was read as (auto resolved), which the ranks are handed, and prints it with
// the ids' type and count (a file read as the wrong format is seen at once). Throws
// tessel::Error.
std::string check_run_data(const executor::RunOptions& args, const Plan& plan);

// The planner's per-rank memory for `plan` times the ranks that run on this machine,
// against `available_bytes` (this machine's MemAvailable when negative). Throws
// tessel::Error with both sizes when it does not fit.
void check_memory_fits(const Plan& plan, const std::string& db, int ranks_here, double available_bytes = -1);

// --init: the file is safetensors and holds every tensor of the plan's model with its
// shape and a float dtype (hf_gpt2.hpp's checks, the ones each rank repeats); not with
// --resume. Throws tessel::Error naming the tensor.
void check_init_weights(const executor::RunOptions& args, const Plan& plan);


// An exclusive lock on DIR/lock (flock), holding this process's pid, released when
// the object goes (or the process ends; with `across_exec`, the program this process
// execs holds it on). Throws tessel::Error naming the holder's pid when another run
// holds it.
class CheckpointLock {
 public:
  explicit CheckpointLock(const std::string& dir, bool across_exec = false);
  ~CheckpointLock();
  CheckpointLock(const CheckpointLock&) = delete;
  CheckpointLock& operator=(const CheckpointLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace tessel::cli
