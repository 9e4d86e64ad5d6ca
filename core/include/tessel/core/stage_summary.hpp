// What one pipeline stage does in a training step, decided once from the plan: the blocks
// it runs (their ops are the block-op table's), what crosses to the neighbouring stages,
// what each bucket moves over which group and when, the optimizer and the host copies.
// The Program is generated from it (program.cpp) and the planner prices it
// (planner/src/stage_steps.cpp), so a feature above the block is written here once.
#pragma once

#include <string_view>
#include <vector>

#include "tessel/core/block_ops.hpp"
#include "tessel/core/model_spec.hpp"
#include "tessel/core/parallel_config.hpp"
#include "tessel/core/train_spec.hpp"
#include "tessel/core/stage_layers.hpp"

namespace tessel {

// When a bucket's transfer runs.
enum class Moment {
  fetch,             // every micro-batch, before the block's forward and again before its backward
  micro_batch_sync,  // every micro-batch, once the block's backward is done
  step_sync,         // once per step, after the block's (the stage's) last backward
  step_gather,       // once per step, after the optimizer
  stage_end,         // once per step, after the stage's own bucket (ZeRO 2-3's depth sums of their shards)
};

// One transfer of a bucket (a block's weights, its routed experts', the stage's other
// weights): a collective over a data-parallel group, a host copy, a sum over the tensor
// grid before the bucket's sync, or the compute that follows a gather (fp8's weight cast).
// work.name is the op's name in its id.
struct BucketOp {
  Moment moment = Moment::step_sync;
  bool experts = false;  // the routed experts' bucket (E{l}) rather than the block's (L{l})
  // Runs in the stage's chain of compute and tensor-parallel ops, which waits for it (the
  // grid sums, fp8's cast); else beside the chain, on the data-parallel or copy stream.
  bool in_chain = false;
  BlockOp work;
};

// What every block of one kind (dense, MoE) adds around its ops, in the order the Program
// issues them.
struct BlockTraffic {
  std::vector<BucketOp> ops;
  double parameters = 0;  // the block's weights on one rank (routed experts included)
};

// The step's optimizer: the update's state traffic on the device and in host memory, and
// the copies around a host update.
struct StepOptimizer {
  double device_bytes = 0, host_bytes = 0;  // streamed by the update
  double gradients_down_bytes = 0;          // before a host update (offload.grads_d2h)
  double parameters_up_bytes = 0;           // after it (offload.params_h2d)
  // offload optimizer: the whole update on the host, named step/optimizer; chunked by
  // fractions: step/optimizer on the device, step/optimizer.host on the host.
  bool host_only = false;
};

struct StageSummary {
  int stage = 0;
  std::vector<LayerSpan> chunks;  // the stage's blocks per model chunk (one unless interleaved)
  int blocks = 0, moe_blocks = 0;
  bool first = false, last = false;  // holds the embedding, the head
  double transfer_bytes = 0;         // each pipeline send and receive
  BlockTraffic dense, moe;
  // The stage's own buckets: the tied embedding's sum with the other end of the pipeline,
  // the sync and gather of its embedding, final norm and head.
  std::vector<BucketOp> stage_ops;
  StepOptimizer optimizer;
  double fp8_step_cast_bytes = 0;  // fp8 weights cast once per step, after the update
  // Offload of dense models: the chunk plan (chunk_plan.hpp) places the states, fetches
  // the host-resident chunks and runs the update; `optimizer` is then empty.
  bool chunk_planned = false;

  const BlockTraffic& traffic_of(bool moe_block) const { return moe_block ? moe : dense; }
};

// The summary of pipeline stage `stage` of a validated plan's model, step and layout;
// `table` is their block_op_table().
StageSummary summarize_stage(const ModelSpec& model, const TrainSpec& train, const ParallelConfig& parallel,
                             const BlockOpTable& table, int stage);

}  // namespace tessel
