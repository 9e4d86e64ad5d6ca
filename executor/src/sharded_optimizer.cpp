// The sharded optimizer (sharded_optimizer.hpp): the global gradient norm and clip
// factor, AdamW on owned parts, LAMB and LARS with trust ratios of whole tensors.
#include "sharded_optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "tessel/kernels/numeric.hpp"

namespace tessel::executor {

std::vector<kernels::Segment> ShardedOptimizer::counted_segments(GradientBucket& b) const {
  // The owned part of each tensor this rank counts: owned parts under ZeRO, one
  // data-parallel replica otherwise, replicated tensors on tensor rank 0, the tied
  // embedding on its first stage.
  std::vector<kernels::Segment> segments;
  if (!b.shards_optimizer() && b.group_rank() != 0) return segments;
  const std::size_t first = b.owned_offset(), size = b.owned_size();
  for (const TensorSlot& t : b.layout.tensors) {
    const std::size_t lo = std::max(first, t.offset), hi = std::min(first + size, t.offset + t.size());
    if (lo < hi && buckets_.counts_tensor(t)) segments.push_back({std::int64_t(lo - first), std::int64_t(hi - lo)});
  }
  return segments;
}

ShardedOptimizer::ShardedOptimizer(const Plan& plan, const TrainerOptions& options, ProcessGrid& grid,
                                   GradientBuckets& buckets, const StageShape& shape, kernels::Backend& backend)
    : plan_(plan), options_(options), grid_(grid), buckets_(buckets), shape_(shape), backend_(backend) {
  norm_sq_.bind(backend_, DType::f64);
  for (Buffer* b : {&clip_factor_, &piece_norms_}) b->bind(backend_, DType::f32);
}

void ShardedOptimizer::reduce_gradient_norm() {
  norm_sq_.assign(1, 0.0f);
  for (GradientBucket& b : buckets_) {
    const std::vector<kernels::Segment> segments = counted_segments(b);
    if (!segments.empty()) backend_.sum_of_squares(Stream::compute, b.owned_grads(), segments, norm_sq_.f64(), true);
  }
  grid_.all().all_reduce(norm_sq_);
  if (options_.clip_grad_norm > 0) {
    clip_factor_.resize(1);
    backend_.clip_factor(Stream::compute, norm_sq_.f64(), options_.clip_grad_norm, clip_factor_.f32());
  }
}

kernels::AdamWParams ShardedOptimizer::adamw_params(int step) const {
  kernels::AdamWParams p;
  p.lr = options_.lr;
  p.weight_decay = options_.weight_decay;
  p.eps = options_.adam_eps;
  p.step = step;
  return p;
}

void ShardedOptimizer::step(int step) {
  const float* grad_scale = options_.clip_grad_norm > 0 ? clip_factor_.f32() : nullptr;
  if (plan_.train.optimizer != Optimizer::adamw) {
    layerwise_step(step);
    return;
  }
  const kernels::AdamWParams p = adamw_params(step);
  for (GradientBucket& b : buckets_) {
    backend_.adamw_step(Stream::compute, b.owned_params(), b.owned_grads(), b.moment1.f32(), b.moment2.f32(),
                        std::int64_t(b.owned_size()), p, grad_scale);
  }
}

// LAMB and LARS: phase 1 computes each owned part's update; the squared norms of every
// tensor's weights and update are then summed over the ranks that hold its parts (the
// ZeRO group, then the tensor group for split tensors, where replicated tensors count
// on tensor rank 0 alone); phase 2 applies the update scaled by the trust ratio of the
// whole tensor.
void ShardedOptimizer::layerwise_step(int step) {
  const bool lamb = plan_.train.optimizer == Optimizer::lamb;
  const float* grad_scale = options_.clip_grad_norm > 0 ? clip_factor_.f32() : nullptr;
  kernels::LambParams lamb_params;
  lamb_params.lr = options_.lr;
  lamb_params.weight_decay = options_.weight_decay;
  lamb_params.step = step;
  kernels::LarsParams lars_params;
  lars_params.lr = options_.lr;
  lars_params.weight_decay = options_.weight_decay;
  pieces_.clear();
  std::vector<std::size_t> first_piece;  // per bucket
  for (GradientBucket& b : buckets_) {
    const std::size_t first = b.owned_offset(), size = b.owned_size();
    b.update.resize(size);
    if (lamb) {
      backend_.lamb_update(Stream::compute, b.owned_params(), b.owned_grads(), b.moment1.f32(), b.moment2.f32(),
                           b.update.f32(), std::int64_t(size), lamb_params, grad_scale);
    } else {
      backend_.lars_update(Stream::compute, b.owned_params(), b.owned_grads(), b.update.f32(), std::int64_t(size),
                           lars_params, grad_scale);
    }
    first_piece.push_back(pieces_.size());
    for (const TensorSlot& t : b.layout.tensors) {
      const std::size_t lo = std::max(first, t.offset), hi = std::min(first + size, t.offset + t.size());
      pieces_.push_back({&t, lo > first ? lo - first : 0, hi > first && lo < hi ? hi - first : 0});
    }
  }
  first_piece.push_back(pieces_.size());
  piece_norms_.assign(2 * pieces_.size(), 0.0f);
  // A copy of a replicated tensor adds nothing to the sums over the tensor group.
  const bool tensor_sum = shape_.tp > 1;
  for (std::size_t bucket = 0; bucket < buckets_.size(); ++bucket) {
    std::vector<kernels::Segment> counted;
    for (std::size_t i = first_piece[bucket]; i < first_piece[bucket + 1]; ++i) {
      const Piece& piece = pieces_[i];
      const bool counts = piece.lo < piece.hi && !(tensor_sum && piece.tensor->copy != 0);
      counted.push_back({std::int64_t(piece.lo), counts ? std::int64_t(piece.hi - piece.lo) : 0});
    }
    GradientBucket& b = buckets_[bucket];
    backend_.segment_norms(Stream::compute, b.owned_params(), b.update.f32(), counted,
                           piece_norms_.f32() + 2 * first_piece[bucket]);
  }
  if (buckets_.optimizer_split_over_ranks()) grid_.gradients().all_reduce(piece_norms_);
  if (tensor_sum) grid_.tp().all_reduce(piece_norms_);
  for (std::size_t bucket = 0; bucket < buckets_.size(); ++bucket) {
    std::vector<kernels::Segment> applied;
    for (std::size_t i = first_piece[bucket]; i < first_piece[bucket + 1]; ++i) {
      const Piece& piece = pieces_[i];
      applied.push_back({std::int64_t(piece.lo), piece.lo < piece.hi ? std::int64_t(piece.hi - piece.lo) : 0});
    }
    GradientBucket& b = buckets_[bucket];
    const float* norms = piece_norms_.f32() + 2 * first_piece[bucket];
    if (lamb) {
      backend_.lamb_apply(Stream::compute, b.owned_params(), b.update.f32(), applied, norms, lamb_params.lr);
    } else {
      backend_.lars_apply(Stream::compute, b.owned_params(), b.update.f32(), b.moment1.f32(), applied, norms,
                          lars_params);
    }
  }
}

std::map<std::string, float> ShardedOptimizer::trust_ratios() {
  std::map<std::string, float> out;
  if (pieces_.empty()) return out;
  const std::vector<float> norms = piece_norms_.download();
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    out[pieces_[i].tensor->name] =
        kernels::numeric::trust_ratio(std::sqrt(double(norms[2 * i])), std::sqrt(double(norms[2 * i + 1])));
  }
  return out;
}

}  // namespace tessel::executor
