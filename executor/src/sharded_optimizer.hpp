// The optimizer step over the gradient buckets (Megatron-Core's distributed optimizer):
// the global gradient norm (each element once over the world), clipping by a factor that
// stays in backend memory, AdamW on the part of each bucket this rank owns (ZeRO's shard),
// LAMB and LARS in two phases with trust ratios of whole tensors. Offload plans step their
// host-optimized chunks through the chunk manager with the same AdamW settings.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "gradient_buckets.hpp"
#include "tessel/core/plan.hpp"
#include "tessel/executor/process_grid.hpp"
#include "tessel/executor/tensor_layout.hpp"
#include "tessel/executor/trainer_options.hpp"

namespace tessel::executor {

class ShardedOptimizer {
 public:
  ShardedOptimizer(const Plan& plan, const TrainerOptions& options, ProcessGrid& grid, GradientBuckets& buckets,
                   const StageShape& shape, kernels::Backend& backend);

  // The squared norm of every gradient, summed over the world, then the clip factor.
  void reduce_gradient_norm();
  const Buffer& gradient_norm_sq() const { return norm_sq_; }
  // The factor the gradients are scaled by (backend memory); nullptr without clipping.
  const Buffer* clip_factor() const { return options_.clip_grad_norm > 0 ? &clip_factor_ : nullptr; }
  // AdamW's settings for the update of step `step` (1-based).
  kernels::AdamWParams adamw_params(int step) const;
  // Every owned part of every bucket stepped on the device.
  void step(int step);
  // The last LAMB or LARS step's trust ratio of each whole tensor this rank updates.
  std::map<std::string, float> trust_ratios();

 private:
  // One tensor's piece of a bucket's owned range, for the layer-wise optimizers.
  struct Piece {
    const TensorSlot* tensor;
    std::size_t lo, hi;  // in the owned range
  };
  void layerwise_step(int step);
  // The norm segments of a bucket's owned range that count each whole tensor once.
  std::vector<kernels::Segment> counted_segments(GradientBucket& b) const;

  const Plan& plan_;
  const TrainerOptions& options_;
  ProcessGrid& grid_;
  GradientBuckets& buckets_;
  const StageShape& shape_;
  kernels::Backend& backend_;
  Buffer norm_sq_, clip_factor_;  // scalars in backend memory
  Buffer piece_norms_;            // LAMB/LARS: [weight, update] squared norms per piece
  std::vector<Piece> pieces_;
};

}  // namespace tessel::executor
