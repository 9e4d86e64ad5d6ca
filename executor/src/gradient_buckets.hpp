// The stage's model states in gradient buckets (Megatron-Core's grad buffer and its
// buckets): the weights a layer computes with (gathered per use under ZeRO 3, in the
// compute type), each bucket's gradient sync over its data-parallel group, started as
// soon as its last backward ends (all-reduce, or reduce-scatter under ZeRO; every
// micro-batch under ZeRO 2-3), and the ZeRO 1-2 all-gather of updated weights.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gradient_bucket.hpp"
#include "tessel/core/plan.hpp"
#include "tessel/executor/op_timeline.hpp"
#include "tessel/executor/process_grid.hpp"
#include "tessel/executor/tensor_layout.hpp"

namespace tessel::executor {

class GradientBuckets {
 public:
  // The buckets of `layout`'s stage; model states draw from `model_memory` (the offload
  // pool; nullptr: the backend).
  GradientBuckets(const Plan& plan, ProcessGrid& grid, TensorLayout& layout, const StageShape& shape,
                  kernels::Backend& backend, DType compute, OpTimeline& timeline, BufferMemory* model_memory);

  std::size_t size() const { return buckets_.size(); }
  GradientBucket& operator[](std::size_t i) { return buckets_[i]; }
  const GradientBucket& operator[](std::size_t i) const { return buckets_[i]; }
  auto begin() { return buckets_.begin(); }
  auto end() { return buckets_.end(); }
  auto begin() const { return buckets_.begin(); }
  auto end() const { return buckets_.end(); }
  GradientBucket& of_layer(int layer) { return buckets_[std::size_t(bucket_of_layer_[std::size_t(layer)])]; }
  // An MoE block's experts; nullptr for a dense layer.
  GradientBucket* experts_of_layer(int layer);
  // The embedding, final norm and head (the first or last stage only).
  GradientBucket& rest() { return buckets_[std::size_t(rest_bucket_)]; }
  // ZeRO splits the optimizer's parts over the gradient group, so sums over them need it.
  bool optimizer_split_over_ranks() const { return zero_stage_ >= 1 && grid_.gradients().size() > 1; }
  // Whether this rank counts `t` in sums over the whole model (each element once).
  bool counts_tensor(const TensorSlot& t) const;
  // Where a bucket's part is staged for a collective (kept between uses).

  CRef compute_weights(GradientBucket& b);
  void refresh_compute_weights(GradientBucket& b);
  // A bucket's weights from its whole (padded) values: this rank's shard where ZeRO 3
  // splits them, else all of them and their compute copy.
  void upload_weights(GradientBucket& b, const std::vector<float>& whole_bucket);
  // The weights a layer's pass computes with: ZeRO 3 gathers them for this use.
  CRef layer_weights(GradientBucket& b, int mb, ops::Phase phase);

  // A step's backward: zeroed gradients, then each layer's micro-batch gradient (into
  // micro_batch_gradients(b)) done, then the rest of the stage and the waits.
  void zero_gradients();
  float* micro_batch_gradients(GradientBucket& b);
  // After a layer's backward of micro-batch `mb`: its ZeRO 2-3 reduce-scatter, or the
  // bucket's sync when it was the last micro-batch.
  void layer_gradients_done(GradientBucket& b, float* grads, int mb, bool last_backward_of_chunk);
  // The tied embedding's sum between the ends, the rest bucket's sync, every sync waited for.
  void finish_backward();

  // ZeRO 1-2: each bucket's updated shards all-gathered into its whole weights (those
  // marked in `gathered` already were: the offload update streams its chunks).
  void gather_updated_weights(const std::vector<bool>& gathered = {});
  void gather_bucket_weights(GradientBucket& b);

 private:
  void start_sync(GradientBucket& b);
  void wait_for_syncs();
  // The id a ZeRO-3 gather or reduce-scatter of bucket `b` runs under for micro-batch `mb`.
  std::string zero_op_id(const GradientBucket& b, int mb, ops::Phase phase, std::string_view op) const;

  const Plan& plan_;
  ProcessGrid& grid_;
  TensorLayout& layout_;
  const StageShape& shape_;
  kernels::Backend& backend_;
  DType compute_;
  OpTimeline& timeline_;
  int zero_stage_ = 0;
  std::vector<GradientBucket> buckets_;
  std::vector<int> bucket_of_layer_;         // -1 where another stage holds the layer
  std::vector<int> expert_bucket_of_layer_;  // an MoE block's experts; -1 elsewhere
  int rest_bucket_ = -1;
  Buffer gathered_weights_, gathered_compute_, layer_grads_, shard_scratch_;
  Buffer gathered_experts_, expert_grads_;  // ZeRO 3: an MoE block's experts, gathered per use
};

}  // namespace tessel::executor
