// Data-parallel training of the GPT on CPU ranks: each rank holds the whole model, runs
// its share of the global batch as micro-batches (gradient accumulation), and averages
// gradients over the data-parallel group in buckets, one per layer, each all-reduce
// started (non-blocking) as soon as that layer's backward of the last micro-batch ends.
// AdamW, LAMB or LARS then step the replicated weights. Layouts with pipeline, tensor or
// sequence parallelism, ZeRO, offload or recompute are refused with the field named:
// they come with the executor's other parallel modes.
#pragma once

#include <memory>

#include "tessel/core/plan.hpp"
#include "tessel/executor/data_loader.hpp"
#include "tessel/executor/gpt.hpp"
#include "tessel/executor/process_grid.hpp"

namespace tessel::executor {

struct TrainerOptions {
  std::uint64_t seed = 1;
  float lr = 1e-3f;
  float weight_decay = 0.0f;
};

struct StepStats {
  int step = 0;
  float loss = 0;  // mean over the global batch
  double seconds = 0;
  double tokens_per_s = 0;
};

class DataParallelTrainer {
 public:
  DataParallelTrainer(const Plan& plan, ProcessGrid& grid, DataLoader loader, const TrainerOptions& options);
  // Throws tessel::Error naming the first field this trainer cannot run (before any rank starts).
  static void check(const Plan& plan);
  StepStats step();
  Gpt& model() { return model_; }
  int steps_done() const { return step_; }

  // Checkpoints: every rank writes its weights and optimizer state to
  // dir/rank<r>.bin (through a temporary file and a rename), then rank 0 writes
  // dir/checkpoint.json (step, loader position, plan), whose presence marks the
  // checkpoint complete. Resuming restores all of it, so the following steps are
  // bit-for-bit those of an uninterrupted run.
  void save(const std::string& dir);
  void load(const std::string& dir);

 private:
  void optimizer_step();

  Plan plan_;
  ProcessGrid& grid_;
  DataLoader loader_;
  TrainerOptions options_;
  Gpt model_;
  int micro_batches_ = 1;
  int step_ = 0;
  kernels::FloatBuffer moment1_, moment2_, update_;
};

}  // namespace tessel::executor
