// One pipeline step of the trainer: a (chunk, micro-batch) forward or backward through
// this rank's layers, with the activations its recompute mode keeps (packed into the
// storage type when it differs from the compute type), the pipeline neighbours'
// messages, and the gradient syncs a layer's last backward starts.
#include <algorithm>

#include <fmt/format.h>

#include "tessel/executor/trainer.hpp"
#include "tessel/core/stage_layers.hpp"
#include "chunk_manager.hpp"
#include "gradient_buckets.hpp"

namespace tessel::executor {

namespace {
int message_tag(int mb, int virtual_stage, int virtual_stages, Pass pass) {
  return (mb * virtual_stages + virtual_stage) * 2 + (pass == Pass::backward ? 1 : 0);
}
}  // namespace

void Trainer::run_forward(const PipelineStep& step, const std::int32_t* tokens, const std::int32_t* targets) {
  const int mb = step.micro_batch, vs = virtual_stage(stage_index_, step.chunk, stages_);
  const int virtual_stages = stages_ * chunks_;
  const std::size_t at = std::size_t(mb) * plan_.parallel.micro_batch * plan_.seq_len() / plan_.parallel.sp;
  const std::size_t slot = std::size_t(free_slots_.back());
  free_slots_.pop_back();
  slot_of_[std::size_t(step.chunk * micro_batches_ + mb)] = int(slot);
  const std::size_t boundary = stages_ > 1 ? slot : 0;
  Buffer& x = x_[boundary];
  if (x_sends_[boundary]) x_sends_[boundary]->wait(), x_sends_[boundary].reset();
  x.resize(stage_->activation_size());
  Communicator& pp = grid_.pp();
  if (vs == 0) {
    GradientBucket& rest = buckets_->rest();
    if (chunk_manager_) chunk_manager_->before_segment(chunk_manager_->embedding_segment(), mb, ops::Phase::fwd);
    stage_->embed_forward(mb, tokens + at, rest.layout, buckets_->compute_weights(rest), x);
    if (chunk_manager_) chunk_manager_->after_segment(chunk_manager_->embedding_segment(), ops::Phase::fwd);
  } else {
    auto timed = timeline_.time(ops::transfer_op_id(mb, vs, ops::Phase::fwd, ops::pp_recv), pp.stream());
    pp.recv(x.data(), x.size(), compute_, (stage_index_ + stages_ - 1) % stages_,
            message_tag(mb, vs, virtual_stages, Pass::forward));
  }
  const Recompute recompute = plan_.parallel.recompute;
  const bool materialized = stage_->attention_form() == AttentionForm::materialized;
  const LayerSpan layers = virtual_stage_layers(plan_.model.layers, virtual_stages, vs);
  for (int l = layers.first; l < layers.end(); ++l) {
    GradientBucket& b = buckets_->of_layer(l);
    const std::size_t here = std::size_t(std::find(shape_.layers.begin(), shape_.layers.end(), l) - shape_.layers.begin());
    if (chunk_manager_) chunk_manager_->before_segment(chunk_manager_->segment_of_layer(l), mb, ops::Phase::fwd);
    const CRef weights = buckets_->layer_weights(b, mb, ops::Phase::fwd);
    GradientBucket* eb = buckets_->experts_of_layer(l);
    const CRef experts = eb ? buckets_->layer_weights(*eb, mb, ops::Phase::fwd) : CRef{};
    // What the backward will need: everything (none), all but the probabilities
    // (selective), the input only (full); packed into the storage type when it differs.
    LayerActivations& kept = kept_[slot][here];
    if (recompute == Recompute::full) {
      if (packs_activations_) {
        PackedActivations& packed = packed_[slot][here];
        packed.saved.resize(1);
        packed.saved[0].bind(backend_, storage_, MemoryCategory::activations);  // kept between steps: resize reuses its memory
        packed.saved[0].resize(x.size());
        backend_.convert(Stream::compute, packed.saved[0].ref(), x.cref(), std::int64_t(x.size()));
      } else {
        kept.x.copy_from(x);
      }
      stage_->layer_forward(mb, l, PassKind::forward, weights, recompute_scratch_, probs_scratch_, x, experts);
    } else if (packs_activations_) {
      stage_->layer_forward(mb, l, PassKind::forward, weights, recompute_scratch_, probs_scratch_, x, experts);
      pack(recompute_scratch_, recompute == Recompute::none && materialized ? &probs_scratch_ : nullptr,
           packed_[slot][here]);
    } else {
      Buffer& probs = recompute == Recompute::none && materialized ? kept_probs_[slot][here] : probs_scratch_;
      // qkv and att_heads are forward-only work: the layer borrows the trainer's one pair
      // rather than every slot and layer keeping its own (memory nothing reads again).
      swap(kept.qkv, forward_qkv_), swap(kept.att_heads, forward_att_heads_);
      stage_->layer_forward(mb, l, PassKind::forward, weights, kept, probs, x, experts);
      swap(kept.qkv, forward_qkv_), swap(kept.att_heads, forward_att_heads_);
    }
    if (chunk_manager_) chunk_manager_->after_segment(chunk_manager_->segment_of_layer(l), ops::Phase::fwd);
  }
  if (vs == virtual_stages - 1) {
    GradientBucket& rest = buckets_->rest();
    if (chunk_manager_) chunk_manager_->before_segment(chunk_manager_->head_segment(), mb, ops::Phase::fwd);
    stage_->head_forward(mb, targets + at, rest.layout, buckets_->compute_weights(rest), x, heads_[slot], grad_scale_,
                         loss_sum_.f64());
    if (chunk_manager_) chunk_manager_->after_segment(chunk_manager_->head_segment(), ops::Phase::fwd);
  } else {
    auto timed = timeline_.time(ops::transfer_op_id(mb, vs, ops::Phase::fwd, ops::pp_send), pp.stream());
    x_sends_[boundary] = pp.send_async(x.data(), x.size(), compute_, (stage_index_ + 1) % stages_,
                                       message_tag(mb, vs + 1, virtual_stages, Pass::forward));
  }
}

void Trainer::run_backward(const PipelineStep& step, const std::int32_t* tokens, const std::int32_t* targets) {
  const int mb = step.micro_batch, vs = virtual_stage(stage_index_, step.chunk, stages_);
  const int virtual_stages = stages_ * chunks_;
  const std::size_t at = std::size_t(mb) * plan_.parallel.micro_batch * plan_.seq_len() / plan_.parallel.sp;
  const bool last_backward_of_chunk = ++backwards_done_[std::size_t(step.chunk)] == micro_batches_;
  const std::size_t slot = std::size_t(slot_of_[std::size_t(step.chunk * micro_batches_ + mb)]);
  const std::size_t boundary = stages_ > 1 ? slot : 0;
  Buffer& dx = dx_[boundary];
  if (dx_sends_[boundary]) dx_sends_[boundary]->wait(), dx_sends_[boundary].reset();
  dx.resize(stage_->activation_size());
  Communicator& pp = grid_.pp();
  if (vs == virtual_stages - 1) {
    GradientBucket& rest = buckets_->rest();
    if (chunk_manager_) chunk_manager_->before_segment(chunk_manager_->head_segment(), mb, ops::Phase::bwd);
    stage_->head_backward(mb, targets + at, rest.layout, buckets_->compute_weights(rest), rest.grads.f32(), heads_[slot],
                          grad_scale_, dx);
    if (chunk_manager_) chunk_manager_->after_segment(chunk_manager_->head_segment(), ops::Phase::bwd);
  } else {
    auto timed = timeline_.time(ops::transfer_op_id(mb, vs, ops::Phase::bwd, ops::pp_recv), pp.stream());
    pp.recv(dx.data(), dx.size(), compute_, (stage_index_ + 1) % stages_,
            message_tag(mb, vs, virtual_stages, Pass::backward));
  }
  const Recompute recompute = plan_.parallel.recompute;
  const bool materialized = stage_->attention_form() == AttentionForm::materialized;
  const LayerSpan layers = virtual_stage_layers(plan_.model.layers, virtual_stages, vs);
  for (int l = layers.end() - 1; l >= layers.first; --l) {
    GradientBucket& b = buckets_->of_layer(l);
    const std::size_t here = std::size_t(std::find(shape_.layers.begin(), shape_.layers.end(), l) - shape_.layers.begin());
    if (chunk_manager_) chunk_manager_->before_segment(chunk_manager_->segment_of_layer(l), mb, ops::Phase::bwd);
    const CRef weights = buckets_->layer_weights(b, mb, ops::Phase::bwd);
    float* grads = buckets_->micro_batch_gradients(b);
    // An MoE block's experts: their own bucket, weights and gradients.
    GradientBucket* eb = buckets_->experts_of_layer(l);
    const CRef experts = eb ? buckets_->layer_weights(*eb, mb, ops::Phase::bwd) : CRef{};
    float* expert_grads = eb ? buckets_->micro_batch_gradients(*eb) : nullptr;
    LayerActivations& kept = kept_[slot][here];
    if (recompute == Recompute::full) {
      if (packs_activations_) {
        const Buffer& input = packed_[slot][here].saved[0];
        recompute_out_.resize(input.size());
        backend_.convert(Stream::compute, recompute_out_.ref(), input.cref(), std::int64_t(input.size()));
      } else {
        recompute_out_.copy_from(kept.x);
      }
      stage_->layer_forward(mb, l, PassKind::recompute, weights, recompute_scratch_, probs_scratch_, recompute_out_,
                            experts);
      stage_->layer_backward(mb, l, weights, grads, recompute_scratch_, probs_scratch_, dx, experts, expert_grads);
    } else {
      // Packed: unpacked into the scratch set, the one place this backward reads from.
      LayerActivations& a = packs_activations_ ? recompute_scratch_ : kept;
      if (packs_activations_) {
        unpack(packed_[slot][here], a, recompute == Recompute::none && materialized ? &probs_scratch_ : nullptr);
      }
      if (recompute == Recompute::selective && materialized) stage_->recompute_probabilities(mb, l, a, probs_scratch_);
      const bool kept_probs = recompute == Recompute::none && materialized && !packs_activations_;
      stage_->layer_backward(mb, l, weights, grads, a, kept_probs ? kept_probs_[slot][here] : probs_scratch_, dx,
                             experts, expert_grads);
    }
    buckets_->layer_gradients_done(b, grads, mb, last_backward_of_chunk);
    if (eb) buckets_->layer_gradients_done(*eb, expert_grads, mb, last_backward_of_chunk);
    if (chunk_manager_) chunk_manager_->after_segment(chunk_manager_->segment_of_layer(l), ops::Phase::bwd);
  }
  free_slots_.push_back(int(slot));
  if (vs == 0) {
    GradientBucket& rest = buckets_->rest();
    if (chunk_manager_) chunk_manager_->before_segment(chunk_manager_->embedding_segment(), mb, ops::Phase::bwd);
    stage_->embed_backward(mb, tokens + at, rest.layout, rest.grads.f32(), dx);
    if (chunk_manager_) chunk_manager_->after_segment(chunk_manager_->embedding_segment(), ops::Phase::bwd);
  } else {
    auto timed = timeline_.time(ops::transfer_op_id(mb, vs, ops::Phase::bwd, ops::pp_send), pp.stream());
    dx_sends_[boundary] = pp.send_async(dx.data(), dx.size(), compute_, (stage_index_ + stages_ - 1) % stages_,
                                        message_tag(mb, vs - 1, virtual_stages, Pass::backward));
  }
}

void Trainer::pack(const LayerActivations& a, const Buffer* probs, PackedActivations& packed) {
  constexpr std::size_t saved = std::size(LayerActivations::kSaved);
  if (packed.saved.size() != saved) {
    packed.saved.clear();
    for (std::size_t i = 0; i < saved; ++i) {
      packed.saved.emplace_back(backend_, storage_).set_category(MemoryCategory::activations);
    }
    packed.row_statistics.clear();
    for (std::size_t i = 0; i < std::size(LayerActivations::kRowStatistics); ++i) {
      packed.row_statistics.emplace_back(backend_, DType::f32).set_category(MemoryCategory::activations);
    }
    packed.probs = Buffer(backend_, storage_);
    packed.probs.set_category(MemoryCategory::activations);
  }
  for (std::size_t i = 0; i < saved; ++i) {
    const Buffer& from = a.*LayerActivations::kSaved[i];
    packed.saved[i].resize(from.size());
    backend_.convert(Stream::compute, packed.saved[i].ref(), from.cref(), std::int64_t(from.size()));
  }
  for (std::size_t i = 0; i < std::size(LayerActivations::kRowStatistics); ++i) {
    packed.row_statistics[i].copy_from(a.*LayerActivations::kRowStatistics[i]);
  }
  packed.probs.resize(probs ? probs->size() : 0);
  if (probs) backend_.convert(Stream::compute, packed.probs.ref(), probs->cref(), std::int64_t(probs->size()));
}

void Trainer::unpack(const PackedActivations& packed, LayerActivations& a, Buffer* probs) {
  for (std::size_t i = 0; i < packed.saved.size(); ++i) {
    Buffer& to = a.*LayerActivations::kSaved[i];
    to.resize(packed.saved[i].size());
    backend_.convert(Stream::compute, to.ref(), packed.saved[i].cref(), std::int64_t(to.size()));
  }
  for (std::size_t i = 0; i < packed.row_statistics.size(); ++i) {
    (a.*LayerActivations::kRowStatistics[i]).copy_from(packed.row_statistics[i]);
  }
  if (probs) {
    probs->resize(packed.probs.size());
    backend_.convert(Stream::compute, probs->ref(), packed.probs.cref(), std::int64_t(probs->size()));
  }
}

}  // namespace tessel::executor
