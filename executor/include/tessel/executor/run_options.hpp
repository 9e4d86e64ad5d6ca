// What `tessel run` asks of its ranks, and the command line that carries it to the
// tessel-rank worker: one definition for both ends. The launcher and the hostfile stay
// with `tessel run` (the worker never launches); the backend travels to every rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::executor {

struct RunOptions {
  std::string plan_file, data_file, db, checkpoint, resume, trace_file;
  // How --data is read (token_source.hpp): text|megatron|nanogpt|llmc|auto, and the id
  // type of headerless nanogpt files (empty: uint16). tessel run resolves auto before
  // the ranks start, so they are handed the format it found.
  std::string data_format = "auto", data_dtype;
  std::string init_file;  // --init: start from these weights (safetensors, Hugging Face GPT-2 or LLaMA names)
  int steps = 10;
  int checkpoint_every = 0;
  std::uint64_t seed = 1;
  float lr = 1e-3f;
  float clip_grad_norm = 0.0f;
  // Offload plans: the device memory budget of the chunk manager (0: the plan's device's).
  std::uint64_t device_memory_bytes = 0;
  bool progress = false;  // draw a progress bar (tessel run asks when its stderr is a terminal)
  std::string backend = "auto";   // auto|cpu|cuda (rank_placement.hpp)
  std::string launcher = "auto";  // auto|mpirun|srun|none (launch.hpp); tessel run only
  std::string hostfile;           // mpirun's nodes and slots; tessel run only
  // Set by tessel run for its workers: rank 0 marks its run with it while running, so that
  // the launcher can record the run failed or interrupted when the ranks could not.
  std::string launch_key;
  // Set by tessel run when every rank runs on its machine: the folder each rank beats its
  // heartbeat file in (rank_heartbeat.hpp), which the launcher watches.
  std::string heartbeat_dir;

  std::vector<std::string> to_arguments() const;
  // Throws tessel::Error on an unknown option or a missing value.
  static RunOptions from_arguments(int argc, const char* const* argv);
};

}  // namespace tessel::executor
