// The pipeline schedule runner: one step's passes in the order core's pipeline_schedule()
// gives (GPipe, 1F1B or interleaved; plain gradient accumulation with one stage), each a
// (chunk, micro-batch) forward or backward through this rank's layers, receiving
// activations and gradients from its pipeline neighbours and posting sends without
// blocking, each layer's gradients handed to its bucket as its backward ends.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "chunk_manager.hpp"
#include "gradient_buckets.hpp"
#include "stage_activations.hpp"
#include "tessel/core/plan.hpp"
#include "tessel/core/schedule.hpp"
#include "tessel/executor/gpt_stage.hpp"
#include "tessel/executor/process_grid.hpp"

namespace tessel::executor {

class PipelineRunner {
 public:
  // `chunks`: the chunk manager of an offload plan, nullptr otherwise.
  PipelineRunner(const Plan& plan, ProcessGrid& grid, GptStage& stage, GradientBuckets& buckets, ChunkManager* chunks,
                 const StageShape& shape, int micro_batches, kernels::Backend& backend, OpTimeline& timeline,
                 DType compute, DType storage);

  // Every step of the schedule over this rank's `tokens` and `targets` (backend memory):
  // the head adds its token losses into `loss_sum` and scales its gradient by `grad_scale`.
  void run(const std::int32_t* tokens, const std::int32_t* targets, float grad_scale, double* loss_sum);
  // The sends still reading a slot's activation or gradient, waited for.
  void wait_for_sends();
  // Bytes of layer activations held for backwards (all micro-batches in flight).
  std::size_t kept_activation_bytes() const { return activations_.kept_bytes(); }

 private:
  void forward(const PipelineStep& step);
  void backward(const PipelineStep& step);
  // Where this step's micro-batch starts in the tokens.
  std::size_t token_offset(int mb) const;
  std::size_t stage_position(int layer) const;  // the layer's index among this stage's layers
  // The chunk manager's fetches and evictions around a segment (none without offload).
  void before_segment(int segment, int mb, ops::Phase phase);
  void after_segment(int segment, ops::Phase phase);
  int layer_segment(int layer) const { return chunks_ ? chunks_->segment_of_layer(layer) : -1; }
  int embedding_segment() const { return chunks_ ? chunks_->embedding_segment() : -1; }
  int head_segment() const { return chunks_ ? chunks_->head_segment() : -1; }
  // A slot's boundary buffer: its own where there are neighbours, else the one for all.
  std::size_t boundary_of(std::size_t slot) const { return stages_ > 1 ? slot : 0; }
  // That buffer (x_ or dx_) once the send that last read it is done, sized for the stage.
  Buffer& free_boundary(std::vector<Buffer>& buffers, std::vector<std::unique_ptr<CommRequest>>& sends,
                        std::size_t boundary);

  const Plan& plan_;
  ProcessGrid& grid_;
  GptStage& stage_;
  GradientBuckets& buckets_;
  ChunkManager* chunks_;
  const StageShape& shape_;
  kernels::Backend& backend_;
  OpTimeline& timeline_;
  DType compute_, storage_;  // activations computed in, kept in
  int stage_index_ = 0, stages_ = 1, virtual_chunks_ = 1, micro_batches_ = 1;
  std::vector<PipelineStep> schedule_;
  StageActivations activations_;
  // The stage's running activation and its gradient: one per slot where a send to a
  // pipeline neighbour may still read them (the slot's next user waits for it), one for
  // all when there is no neighbour (each micro-batch's input stays in its kept
  // activations and head).
  std::vector<Buffer> x_, dx_;
  std::vector<std::unique_ptr<CommRequest>> x_sends_, dx_sends_;
  std::vector<int> backwards_done_;  // per chunk
  std::vector<std::size_t> position_of_layer_;  // model layer -> index among this stage's layers
  // This step's run().
  const std::int32_t* tokens_ = nullptr;
  const std::int32_t* targets_ = nullptr;
  float grad_scale_ = 1;
  double* loss_sum_ = nullptr;
};

}  // namespace tessel::executor
