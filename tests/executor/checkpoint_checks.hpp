// What the MPI checks (parallel, vocab, MoE trainer, device) do alike to test checkpoints:
// a folder the ranks of a layout share, an uninterrupted run, a run saved after step 2,
// and a run resumed from it that must end bit for bit where the uninterrupted one did.
#pragma once

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tessel/executor/trainer.hpp"

namespace tessel::executor::checks {

// A folder all ranks of `group` name alike (rank 0's process id after `prefix`).
inline std::string shared_folder(Communicator& group, const std::string& prefix) {
  float pid = float(::getpid() % 1000000);
  group.broadcast(&pid, 1, DType::f32, 0);
  return (std::filesystem::temp_directory_path() / fmt::format("{}_{}", prefix, int(pid))).string();
}

inline bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct UninterruptedRun {
  std::vector<StepStats> steps;
  std::vector<float> weights;  // after the last step
};

// `steps` steps of the trainer `make()` returns (a unique_ptr).
template <class Make>
UninterruptedRun train_uninterrupted(Make make, int steps = 5) {
  UninterruptedRun run;
  auto trainer = make();
  for (int step = 0; step < steps; ++step) run.steps.push_back(trainer->step());
  run.weights = trainer->whole_parameters();
  return run;
}

// Two steps of the trainer `make()` returns, saved to `dir`: its weights then.
template <class Make>
std::vector<float> save_after_two_steps(Make make, const std::string& dir) {
  auto trainer = make();
  trainer->step();
  trainer->step();
  trainer->save(dir);
  return trainer->whole_parameters();
}

// Whether `resumed`, loaded from the checkpoint of step 2, trains the remaining steps of
// `want` to the same losses (and MoE auxiliary losses) and weights, bit for bit. Every
// rank steps and gathers the weights whatever it finds, so that no collective is skipped.
inline bool resumes_bit_identically(Trainer& resumed, const UninterruptedRun& want) {
  bool same = resumed.steps_done() == 2;
  for (std::size_t step = 2; step < want.steps.size(); ++step) {
    const StepStats got = resumed.step();
    same = same && std::memcmp(&got.loss, &want.steps[step].loss, sizeof(float)) == 0 &&
           std::memcmp(&got.aux_loss, &want.steps[step].aux_loss, sizeof(float)) == 0;
  }
  const std::vector<float> weights = resumed.whole_parameters();
  return same && bit_identical(weights, want.weights);
}

}  // namespace tessel::executor::checks
