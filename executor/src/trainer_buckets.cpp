// The trainer's weight buckets over the data-parallel (gradient) group: the weights a
// layer computes with (gathered per use under ZeRO 3, in the compute type), the
// gradient sync a bucket starts when its last backward ends (all-reduce, or
// reduce-scatter under ZeRO), and the ZeRO 1-2 all-gather of updated weights.
#include "tessel/executor/trainer.hpp"

namespace tessel::executor {

CRef Trainer::compute_weights(BucketState& b) {
  return compute_ == DType::f32 ? b.params.cref() : b.params_compute.cref();
}

void Trainer::refresh_compute_weights(BucketState& b) {
  if (compute_ == DType::f32 || b.params.empty()) return;
  b.params_compute.resize(b.params.size());
  backend_.convert(Stream::compute, b.params_compute.ref(), b.params.cref(), std::int64_t(b.params.size()));
}

std::string Trainer::zero_op_id(const BucketState& b, int mb, ops::Phase phase, std::string_view op) const {
  return b.layout.experts ? ops::expert_op_id(mb, b.layout.layer, phase, op)
                          : ops::block_op_id(mb, b.layout.layer, phase, op);
}

CRef Trainer::layer_weights(BucketState& b, int mb, ops::Phase phase) {
  if (!shards_weights(b)) return compute_weights(b);
  Communicator& group = *b.group;
  auto timed = timeline_.time(zero_op_id(b, mb, phase, ops::zero_all_gather), group.stream());
  // An MoE block's experts have a buffer of their own (MoE computes in fp32).
  Buffer& gathered = b.layout.experts ? gathered_experts_ : gathered_weights_;
  gathered.resize(b.layout.padded_size);
  group.all_gather(b.param_shard.data(), gathered.data(), shard_size(b), DType::f32);
  if (compute_ == DType::f32 || b.layout.experts) return gathered.cref();
  gathered_compute_.resize(gathered_weights_.size());
  backend_.convert(Stream::compute, gathered_compute_.ref(), gathered_weights_.cref(), std::int64_t(gathered_weights_.size()));
  return gathered_compute_.cref();
}

void Trainer::bucket_gradients_done(BucketState& b) {
  TensorLayout& layout = stage_->layout();
  layout.sum_partial_gradients(b.layout, b.grads.f32());
  layout.sum_depth_gradients(b.grads.f32(), b.layout.size);
  if (group_size(b) == 1) return;
  Communicator& group = *b.group;
  backend_.wait_for(group.stream(), Stream::compute);  // the sync starts when the bucket's gradients are ready
  b.sync_start = timeline_.mark(group.stream());
  if (shards_optimizer(b)) {
    b.sync_op = ops::bucket_sync_id(b.name, ops::grad_reduce_scatter);
    b.sync = group.reduce_scatter_async(b.grads.data(), b.grad_shard.data(), shard_size(b), DType::f32);
  } else {
    b.sync_op = ops::bucket_sync_id(b.name, ops::grad_all_reduce);
    b.sync = group.all_reduce_async(b.grads.data(), b.grads.size(), DType::f32);
  }
}

void Trainer::wait_for_syncs() {
  // Timed from their start to the end of their wait: on a GPU the end mark is on the
  // sync's stream, after the collective.
  Stream stream = grid_.gradients().stream();
  for (BucketState& b : buckets_) {
    if (!b.sync) continue;
    b.sync->wait();
    b.sync.reset();
    timeline_.record(b.sync_op, b.sync_start, timeline_.mark(stream));
    if (plan_.parallel.zero == 2) b.grads.release();  // ZeRO 2 keeps only its part of the gradients
  }
}

void Trainer::gather_bucket_weights(BucketState& b) {
  if (plan_.parallel.zero < 1 || !shards_optimizer(b) || shards_weights(b)) return;  // ZeRO 3 gathers layers when they run
  Communicator& group = *b.group;
  auto timed = timeline_.time(ops::bucket_gather_id(b.name), group.stream());
  shard_scratch_.resize(shard_size(b));
  backend_.copy(Stream::compute, shard_scratch_.data(), owned_params(b), shard_scratch_.bytes());
  group.all_gather(shard_scratch_.data(), b.params.data(), shard_size(b), DType::f32);
}

void Trainer::gather_updated_weights(const std::vector<bool>& gathered) {
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    if (i >= gathered.size() || !gathered[i]) gather_bucket_weights(buckets_[i]);
  }
  for (BucketState& b : buckets_) refresh_compute_weights(b);
}

}  // namespace tessel::executor
