// The gradient buckets (gradient_buckets.hpp): built from the stage's layout, their
// weights per use, their gradient syncs and the ZeRO 1-2 gather of updated weights.
#include "gradient_buckets.hpp"

namespace tessel::executor {

GradientBuckets::GradientBuckets(const Plan& plan, ProcessGrid& grid, TensorLayout& layout, const StageShape& shape,
                                 kernels::Backend& backend, DType compute, OpTimeline& timeline,
                                 BufferMemory* model_memory)
    : plan_(plan),
      grid_(grid),
      layout_(layout),
      shape_(shape),
      backend_(backend),
      compute_(compute),
      timeline_(timeline),
      zero_stage_(plan.parallel.zero) {
  bucket_of_layer_.assign(std::size_t(plan.model.layers), -1);
  expert_bucket_of_layer_.assign(std::size_t(plan.model.layers), -1);
  for (Bucket& bucket_layout : layout.buckets(shape.layers, shape.embedding, shape.head, shape.pad_to)) {
    GradientBucket& b = buckets_.emplace_back();
    b.group = bucket_layout.experts ? &grid.expert_data() : &grid.gradients();
    b.zero_stage = zero_stage_;
    if (bucket_layout.experts) {
      b.name = ops::expert_bucket_name(bucket_layout.layer);
      expert_bucket_of_layer_[std::size_t(bucket_layout.layer)] = int(buckets_.size() - 1);
    } else if (bucket_layout.layer >= 0) {
      b.name = ops::layer_bucket_name(bucket_layout.layer);
      bucket_of_layer_[std::size_t(bucket_layout.layer)] = int(buckets_.size() - 1);
    } else {
      b.name = std::string(ops::kStageBucket);
      rest_bucket_ = int(buckets_.size() - 1);
    }
    b.layout = std::move(bucket_layout);
    // Model states: from the budgeted pool under offload, counted by category.
    auto bind_state = [&](Buffer& buffer, DType type, MemoryCategory category) {
      buffer.bind(backend_, type, model_memory);
      buffer.set_category(category);
    };
    for (Buffer* buffer : {&b.params, &b.param_shard}) bind_state(*buffer, DType::f32, MemoryCategory::parameters);
    for (Buffer* buffer : {&b.grads, &b.grad_shard}) bind_state(*buffer, DType::f32, MemoryCategory::gradients);
    for (Buffer* buffer : {&b.moment1, &b.moment2}) bind_state(*buffer, DType::f32, MemoryCategory::optimizer);
    bind_state(b.update, DType::f32, MemoryCategory::workspace);  // LAMB/LARS: one step's update
    bind_state(b.params_compute, compute_, MemoryCategory::parameters);
  }
  for (Buffer* b : {&gathered_weights_, &layer_grads_, &shard_scratch_, &gathered_experts_, &expert_grads_}) {
    b->bind(backend_, DType::f32);
  }
  gathered_compute_.bind(backend_, compute_);
  // ZeRO 3's gathered layer is weights on the device; its whole-layer gradient, gradients.
  for (Buffer* b : {&gathered_weights_, &gathered_compute_}) b->set_category(MemoryCategory::parameters);
  layer_grads_.set_category(MemoryCategory::gradients);
}

GradientBucket* GradientBuckets::experts_of_layer(int layer) {
  const int index = expert_bucket_of_layer_[std::size_t(layer)];
  return index >= 0 ? &buckets_[std::size_t(index)] : nullptr;
}

bool GradientBuckets::counts_tensor(const TensorSlot& t) const {
  if (t.copy != 0) return false;
  // The tied embedding's second copy, on the last stage.
  return !(t.name == "wte" && !shape_.embedding);
}

CRef GradientBuckets::compute_weights(GradientBucket& b) {
  return compute_ == DType::f32 ? b.params.cref() : b.params_compute.cref();
}

void GradientBuckets::refresh_compute_weights(GradientBucket& b) {
  if (compute_ == DType::f32 || b.params.empty()) return;
  b.params_compute.resize(b.params.size());
  backend_.convert(Stream::compute, b.params_compute.ref(), b.params.cref(), std::int64_t(b.params.size()));
}

void GradientBuckets::upload_weights(GradientBucket& b, const std::vector<float>& whole_bucket) {
  if (b.shards_weights()) {
    const auto first = whole_bucket.begin() + long(b.group_rank() * b.shard_size());
    b.param_shard.upload(std::vector<float>(first, first + long(b.shard_size())));
  } else {
    b.params.upload(whole_bucket);
    refresh_compute_weights(b);
  }
}

std::string GradientBuckets::zero_op_id(const GradientBucket& b, int mb, ops::Phase phase, std::string_view op) const {
  return b.layout.experts ? ops::expert_op_id(mb, b.layout.layer, phase, op)
                          : ops::block_op_id(mb, b.layout.layer, phase, op);
}

CRef GradientBuckets::layer_weights(GradientBucket& b, int mb, ops::Phase phase) {
  if (!b.shards_weights()) return compute_weights(b);
  Communicator& group = *b.group;
  auto timed = timeline_.time(zero_op_id(b, mb, phase, ops::zero_all_gather), group.stream());
  // An MoE block's experts have a buffer of their own (MoE computes in fp32).
  Buffer& gathered = b.layout.experts ? gathered_experts_ : gathered_weights_;
  gathered.resize(b.layout.padded_size);
  group.all_gather(b.param_shard.data(), gathered.data(), b.shard_size(), DType::f32);
  if (compute_ == DType::f32 || b.layout.experts) return gathered.cref();
  gathered_compute_.resize(gathered_weights_.size());
  backend_.convert(Stream::compute, gathered_compute_.ref(), gathered_weights_.cref(),
                   std::int64_t(gathered_weights_.size()));
  return gathered_compute_.cref();
}

void GradientBuckets::zero_gradients() {
  for (GradientBucket& b : buckets_) {
    if (b.reduces_every_micro_batch()) b.grad_shard.assign(b.grad_shard.size(), 0.0f);
    else b.grads.assign(b.layout.padded_size, 0.0f);  // reallocated after ZeRO 2 released it
  }
}

float* GradientBuckets::micro_batch_gradients(GradientBucket& b) {
  if (!b.reduces_every_micro_batch()) return b.grads.f32();
  Buffer& grads = b.layout.experts ? expert_grads_ : layer_grads_;
  grads.assign(b.layout.padded_size, 0.0f);
  return grads.f32();
}

void GradientBuckets::layer_gradients_done(GradientBucket& b, float* grads, int mb, bool last_backward_of_chunk) {
  if (b.reduces_every_micro_batch()) {
    // ZeRO 2 and 3: this micro-batch's layer gradient goes to its owners at once.
    layout_.sum_partial_gradients(b.layout, grads);
    Communicator& group = *b.group;
    auto timed = timeline_.time(zero_op_id(b, mb, ops::Phase::bwd, ops::zero_reduce_scatter), group.stream());
    shard_scratch_.resize(b.shard_size());
    group.reduce_scatter(grads, shard_scratch_.data(), b.shard_size(), DType::f32);
    backend_.add(Stream::compute, b.grad_shard.ref(), b.grad_shard.cref(), shard_scratch_.cref(),
                 std::int64_t(shard_scratch_.size()));
  } else if (last_backward_of_chunk) {
    start_sync(b);
  }
}

void GradientBuckets::start_sync(GradientBucket& b) {
  layout_.sum_partial_gradients(b.layout, b.grads.f32());
  layout_.sum_depth_gradients(b.grads.f32(), b.layout.size);
  if (b.group_size() == 1) return;
  Communicator& group = *b.group;
  backend_.wait_for(group.stream(), Stream::compute);  // the sync starts when the bucket's gradients are ready
  b.sync_start = timeline_.mark(group.stream());
  if (b.shards_optimizer()) {
    b.sync_op = ops::bucket_sync_id(b.name, ops::grad_reduce_scatter);
    b.sync = group.reduce_scatter_async(b.grads.data(), b.grad_shard.data(), b.shard_size(), DType::f32);
  } else {
    b.sync_op = ops::bucket_sync_id(b.name, ops::grad_all_reduce);
    b.sync = group.all_reduce_async(b.grads.data(), b.grads.size(), DType::f32);
  }
}

void GradientBuckets::finish_backward() {
  if (rest_bucket_ >= 0) {
    GradientBucket& rest = buckets_[std::size_t(rest_bucket_)];
    // The tied embedding: the first and the last stage each hold a copy; their gradients sum.
    Communicator& ends = grid_.embedding();
    if (ends.size() > 1 && plan_.model.tied_embeddings) {
      const TensorSlot& wte = rest.layout.tensor("wte");
      auto timed = timeline_.time(std::string(ops::kTiedEmbeddingSync), ends.stream());
      ends.all_reduce(rest.grads.f32() + wte.offset, wte.size());
    }
    start_sync(rest);
  }
  for (GradientBucket& b : buckets_) {
    // ZeRO 2 and 3 layer gradients were reduce-scattered per micro-batch: their parts are
    // summed over the depth here, once.
    if (b.reduces_every_micro_batch()) layout_.sum_depth_gradients(b.grad_shard.f32(), b.grad_shard.size());
  }
  wait_for_syncs();
}

void GradientBuckets::wait_for_syncs() {
  // Timed from their start to the end of their wait: on a GPU the end mark is on the
  // sync's stream, after the collective.
  Stream stream = grid_.gradients().stream();
  for (GradientBucket& b : buckets_) {
    if (!b.sync) continue;
    b.sync->wait();
    b.sync.reset();
    timeline_.record(b.sync_op, b.sync_start, timeline_.mark(stream));
    if (zero_stage_ == 2) b.grads.release();  // ZeRO 2 keeps only its part of the gradients
  }
}

void GradientBuckets::gather_bucket_weights(GradientBucket& b) {
  if (zero_stage_ < 1 || !b.shards_optimizer() || b.shards_weights()) return;  // ZeRO 3 gathers layers when they run
  Communicator& group = *b.group;
  auto timed = timeline_.time(ops::bucket_gather_id(b.name), group.stream());
  shard_scratch_.resize(b.shard_size());
  backend_.copy(Stream::compute, shard_scratch_.data(), b.owned_params(), shard_scratch_.bytes());
  group.all_gather(shard_scratch_.data(), b.params.data(), b.shard_size(), DType::f32);
}

void GradientBuckets::gather_updated_weights(const std::vector<bool>& gathered) {
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    if (i >= gathered.size() || !gathered[i]) gather_bucket_weights(buckets_[i]);
  }
  for (GradientBucket& b : buckets_) refresh_compute_weights(b);
}

}  // namespace tessel::executor
