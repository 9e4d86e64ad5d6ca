// Training a GPT on a plan's ranks with data, pipeline, tensor (1D, 2D, 2.5D, 3D), ring
// self-attention sequence and expert parallelism, ZeRO, offload and activation
// recompute, exact against the single-process run of the same seed and global batch, on
// any backend. Trainer composes the objects that do the work (executor/src: gradient
// buckets, sharded optimizer, pipeline runner, chunk manager, checkpoint I/O).
#pragma once

#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessel/core/plan.hpp"
#include "tessel/core/schedule.hpp"
#include "tessel/executor/checkpoint_weights.hpp"
#include "tessel/executor/data_loader.hpp"
#include "tessel/executor/gpt_stage.hpp"
#include "tessel/executor/memory_ledger.hpp"
#include "tessel/executor/offload_stats.hpp"
#include "tessel/executor/process_grid.hpp"
#include "tessel/executor/trainer_options.hpp"

namespace tessel::executor {

class GradientBuckets;
class ShardedOptimizer;
class PipelineRunner;
class ChunkManager;
class CheckpointIO;
class WholeModel;

struct StepStats {
  int step = 0;
  float loss = 0;  // mean cross-entropy over the global batch (without the MoE auxiliary loss)
  // MoE: the auxiliary load-balancing loss the step trained on besides `loss` (summed over
  // the MoE blocks, mean over the micro-batches of the global batch); 0 for dense models.
  float aux_loss = 0;
  double seconds = 0;
  double tokens_per_s = 0;
  float gradient_norm = 0;  // global, before clipping
};

class Trainer {
 public:
  // Collective over grid.world(). Throws tessel::Error naming the first field of the
  // plan this executor cannot run. The grid's communicators must reach `backend`'s memory.
  Trainer(const Plan& plan, ProcessGrid& grid, DataLoader loader, const TrainerOptions& options,
          kernels::Backend& backend = kernels::cpu_backend());
  static void check(const Plan& plan);
  // Offload plans: refuses (tessel::Error, one line naming the smallest budget that works
  // and the device_fraction that attains it) a device memory budget too small for this
  // plan's placement of some stage's model states plus that stage's non-model memory
  // (activations, trainer workspace: `non_model_bytes_by_stage`, the planner's prediction,
  // planner::stage_memory; empty: none) (0: the plan's device memory). The trainer checks
  // the model states before its first step; tessel run checks both before the ranks start.
  static void check_device_budget(const Plan& plan, std::size_t device_memory_bytes,
                                  const std::vector<double>& non_model_bytes_by_stage = {});

  StepStats step();
  int steps_done() const { return step_; }
  // The rows of the embedding and head tables (the model's vocabulary and its padding).
  int padded_vocab() const { return shape_.padded_vocab; }
  // The largest magnitude an element of the vocabulary padding holds in this rank's
  // weights, gradients and optimizer moments: 0, since nothing reads or trains it.
  float padding_magnitude();
  DataLoader& loader() { return loader_; }
  OpTimeline& timeline() { return timeline_; }
  OffloadStats offload_stats() const;
  ~Trainer();

  // Collective over the world. The whole model in the single-process layout
  // (whole_model_tensors order), identical on every rank: the weights now, and the
  // averaged gradients the last step's update used (before clipping).
  std::vector<float> whole_parameters();
  std::vector<float> whole_gradients();
  // Loads every rank's shards from a whole model (collective only in the sense that
  // every rank must call it with the same values).
  void set_whole_parameters(const std::vector<float>& whole);
  // The last LAMB or LARS step's trust ratio of each whole tensor this rank updates.
  std::map<std::string, float> trust_ratios();
  // Bytes of layer activations this rank holds for backwards (all micro-batches in
  // flight), counted from the buffers after a step: what recompute and bf16 storage save.
  std::size_t kept_activation_bytes() const;
  // MoE: the payload this rank's dispatch and combine all-to-alls sent so far (every
  // MoE block, forward and backward; moe_layer.hpp); zeros for a dense model.
  MoeTraffic moe_traffic() const { return stage_->moe() ? stage_->moe()->traffic() : MoeTraffic{}; }
  // Every byte of backend memory this trainer's buffers hold, by category, with the
  // peaks since construction (memory_ledger.hpp; core/memory_comparison.hpp says what
  // each category holds).
  const MemoryLedger& memory() const { return ledger_; }
  MemoryLedger& memory() { return ledger_; }

  // Checkpoints (checkpoint_files.hpp): every rank writes its weights and optimizer
  // state to dir/step-<N>/rank<r>.bin, fsynced; then rank 0 points dir/checkpoint.json at
  // that directory with each file's size and checksum (atomic rename), keeping the
  // previous checkpoint. Resuming verifies all of it (and refuses a step beyond
  // max_step) and restores it, so the following steps are bit-for-bit those of an
  // uninterrupted run. Both are collective over the world.
  void save(const std::string& dir);
  void load(const std::string& dir, int max_step = std::numeric_limits<int>::max());

 private:
  // The model shapes (GPT-2, LLaMA) and the layouts each runs in; part of check().
  static void check_model_shape(const Plan& plan);
  // MoE checks of check(): what the executor trains Mixture-of-Experts models in.
  static void check_moe(const Plan& plan);
  void build_stage(const ProcessGrid& grid);
  // Weights drawn whole per tensor, then cut: the same model whatever the layout.
  void initialise_weights();
  // This step's tokens and targets of this rank (its block of each sequence under
  // sequence parallelism), uploaded to backend memory.
  void load_batch();

  // First: every buffer below charges it and debits it when destroyed.
  MemoryLedger ledger_;
  Plan plan_;
  ProcessGrid& grid_;
  DataLoader loader_;
  TrainerOptions options_;
  kernels::Backend& backend_;
  DType compute_ = DType::f32, storage_ = DType::f32;  // activations computed in, kept in
  OpTimeline timeline_;
  StageShape shape_;
  int vocab_multiple_ = 1;  // the vocabulary padding's (TrainerOptions::vocab_multiple, resolved)
  int micro_batches_ = 1;
  int step_ = 0;
  std::unique_ptr<GptStage> stage_;
  std::unique_ptr<ChunkManager> chunk_manager_;  // offload plans only; its pool outlives the buckets
  std::unique_ptr<GradientBuckets> buckets_;
  std::unique_ptr<ShardedOptimizer> optimizer_;
  std::unique_ptr<PipelineRunner> pipeline_;
  std::unique_ptr<WholeModel> whole_model_;
  std::unique_ptr<CheckpointIO> checkpoints_;
  Buffer tokens_, targets_;  // this step's, in backend memory
  Buffer loss_sum_;          // in backend memory until the step ends
};

}  // namespace tessel::executor
