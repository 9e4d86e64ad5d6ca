// The pipeline schedule runner (pipeline_runner.hpp): a (chunk, micro-batch) forward or
// backward through this rank's layers, with the activations its recompute mode keeps and
// its pipeline neighbours' messages.
#include "pipeline_runner.hpp"

#include <algorithm>

#include "tessel/core/stage_layers.hpp"

namespace tessel::executor {

namespace {
int message_tag(int mb, int virtual_stage, int virtual_stages, Pass pass) {
  return (mb * virtual_stages + virtual_stage) * 2 + (pass == Pass::backward ? 1 : 0);
}
}  // namespace

PipelineRunner::PipelineRunner(const Plan& plan, ProcessGrid& grid, GptStage& stage, GradientBuckets& buckets,
                               ChunkManager* chunks, const StageShape& shape, int micro_batches,
                               kernels::Backend& backend, OpTimeline& timeline, DType compute, DType storage)
    : plan_(plan),
      grid_(grid),
      stage_(stage),
      buckets_(buckets),
      chunks_(chunks),
      shape_(shape),
      backend_(backend),
      timeline_(timeline),
      compute_(compute),
      storage_(storage),
      stage_index_(grid.coordinates().pp),
      stages_(plan.parallel.pp),
      virtual_chunks_(plan.parallel.schedule == Schedule::interleaved ? plan.parallel.virtual_stages : 1),
      micro_batches_(micro_batches),
      schedule_(pipeline_schedule(plan.parallel.schedule, stage_index_, stages_, micro_batches_, virtual_chunks_)),
      activations_(schedule_, virtual_chunks_, micro_batches_, shape.layers.size(), shape.head, plan.parallel.recompute,
                   stage.attention_form(), backend, compute, storage) {
  const std::size_t boundary_buffers = stages_ > 1 ? activations_.slots() : 1;
  for (std::size_t i = 0; i < boundary_buffers; ++i) {
    x_.emplace_back(backend_, compute_).set_category(MemoryCategory::activations);
    dx_.emplace_back(backend_, compute_);
  }
  x_sends_.resize(boundary_buffers);
  dx_sends_.resize(boundary_buffers);
  position_of_layer_.assign(std::size_t(plan.model.layers), 0);
  for (std::size_t i = 0; i < shape.layers.size(); ++i) position_of_layer_[std::size_t(shape.layers[i])] = i;
}

void PipelineRunner::run(const std::int32_t* tokens, const std::int32_t* targets, float grad_scale, double* loss_sum) {
  tokens_ = tokens, targets_ = targets, grad_scale_ = grad_scale, loss_sum_ = loss_sum;
  backwards_done_.assign(std::size_t(virtual_chunks_), 0);
  for (const PipelineStep& step : schedule_) {
    if (step.pass == Pass::forward) forward(step);
    else backward(step);
  }
}

void PipelineRunner::wait_for_sends() {
  for (auto* sends : {&x_sends_, &dx_sends_}) {
    for (auto& request : *sends) {
      if (request) request->wait();
      request.reset();
    }
  }
}

std::size_t PipelineRunner::token_offset(int mb) const {
  return std::size_t(mb) * plan_.parallel.micro_batch * plan_.seq_len() / plan_.parallel.sp;
}

std::size_t PipelineRunner::stage_position(int layer) const { return position_of_layer_[std::size_t(layer)]; }

void PipelineRunner::before_segment(int segment, int mb, ops::Phase phase) {
  if (chunks_) chunks_->before_segment(segment, mb, phase);
}

void PipelineRunner::after_segment(int segment, ops::Phase phase) {
  if (chunks_) chunks_->after_segment(segment, phase);
}

Buffer& PipelineRunner::free_boundary(std::vector<Buffer>& buffers, std::vector<std::unique_ptr<CommRequest>>& sends,
                                      std::size_t boundary) {
  if (sends[boundary]) sends[boundary]->wait(), sends[boundary].reset();
  buffers[boundary].resize(stage_.activation_size());
  return buffers[boundary];
}

void PipelineRunner::forward(const PipelineStep& step) {
  StageActivations& act = activations_;
  const int mb = step.micro_batch, vs = virtual_stage(stage_index_, step.chunk, stages_);
  const int virtual_stages = stages_ * virtual_chunks_;
  const std::size_t at = token_offset(mb);
  const std::size_t slot = act.take_slot(step.chunk, mb);
  const std::size_t boundary = boundary_of(slot);
  Buffer& x = free_boundary(x_, x_sends_, boundary);
  Communicator& pp = grid_.pp();
  if (vs == 0) {
    GradientBucket& rest = buckets_.rest();
    before_segment(embedding_segment(), mb, ops::Phase::fwd);
    stage_.embed_forward(mb, tokens_ + at, rest.layout, buckets_.compute_weights(rest), x);
    after_segment(embedding_segment(), ops::Phase::fwd);
  } else {
    auto timed = timeline_.time(ops::transfer_op_id(mb, vs, ops::Phase::fwd, ops::pp_recv), pp.stream());
    pp.recv(x.data(), x.size(), compute_, (stage_index_ + stages_ - 1) % stages_,
            message_tag(mb, vs, virtual_stages, Pass::forward));
  }
  const Recompute recompute = plan_.parallel.recompute;
  const bool materialized = stage_.attention_form() == AttentionForm::materialized;
  const LayerSpan layers = virtual_stage_layers(plan_.model.layers, virtual_stages, vs);
  for (int l = layers.first; l < layers.end(); ++l) {
    GradientBucket& b = buckets_.of_layer(l);
    const std::size_t here = stage_position(l);
    before_segment(layer_segment(l), mb, ops::Phase::fwd);
    const CRef weights = buckets_.layer_weights(b, mb, ops::Phase::fwd);
    GradientBucket* eb = buckets_.experts_of_layer(l);
    const CRef experts = eb ? buckets_.layer_weights(*eb, mb, ops::Phase::fwd) : CRef{};
    // What the backward will need: everything (none), all but the probabilities
    // (selective), the input only (full); packed into the storage type when it differs.
    LayerActivations& kept = act.kept[slot][here];
    if (recompute == Recompute::full) {
      if (act.packs) {
        PackedActivations& packed = act.packed[slot][here];
        packed.saved.resize(1);
        packed.saved[0].bind(backend_, storage_,
                             MemoryCategory::activations);  // kept between steps: resize reuses its memory
        packed.saved[0].resize(x.size());
        backend_.convert(Stream::compute, packed.saved[0].ref(), x.cref(), std::int64_t(x.size()));
      } else {
        kept.x.copy_from(x);
      }
      stage_.layer_forward(mb, l, PassKind::forward, weights, act.recompute_scratch, act.probs_scratch, x, experts);
    } else if (act.packs) {
      stage_.layer_forward(mb, l, PassKind::forward, weights, act.recompute_scratch, act.probs_scratch, x, experts);
      act.pack(act.recompute_scratch, recompute == Recompute::none && materialized ? &act.probs_scratch : nullptr,
               act.packed[slot][here]);
    } else {
      Buffer& probs = recompute == Recompute::none && materialized ? act.kept_probs[slot][here] : act.probs_scratch;
      // qkv and att_heads are forward-only work: the layer borrows the trainer's one pair
      // rather than every slot and layer keeping its own (memory nothing reads again).
      swap(kept.qkv, act.forward_qkv), swap(kept.att_heads, act.forward_att_heads);
      stage_.layer_forward(mb, l, PassKind::forward, weights, kept, probs, x, experts);
      swap(kept.qkv, act.forward_qkv), swap(kept.att_heads, act.forward_att_heads);
    }
    after_segment(layer_segment(l), ops::Phase::fwd);
  }
  if (vs == virtual_stages - 1) {
    GradientBucket& rest = buckets_.rest();
    before_segment(head_segment(), mb, ops::Phase::fwd);
    stage_.head_forward(mb, targets_ + at, rest.layout, buckets_.compute_weights(rest), x, act.heads[slot], grad_scale_,
                        loss_sum_);
    after_segment(head_segment(), ops::Phase::fwd);
  } else {
    auto timed = timeline_.time(ops::transfer_op_id(mb, vs, ops::Phase::fwd, ops::pp_send), pp.stream());
    x_sends_[boundary] = pp.send_async(x.data(), x.size(), compute_, (stage_index_ + 1) % stages_,
                                       message_tag(mb, vs + 1, virtual_stages, Pass::forward));
  }
}

void PipelineRunner::backward(const PipelineStep& step) {
  StageActivations& act = activations_;
  const int mb = step.micro_batch, vs = virtual_stage(stage_index_, step.chunk, stages_);
  const int virtual_stages = stages_ * virtual_chunks_;
  const std::size_t at = token_offset(mb);
  const bool last_backward_of_chunk = ++backwards_done_[std::size_t(step.chunk)] == micro_batches_;
  const std::size_t slot = act.slot_of(step.chunk, mb);
  const std::size_t boundary = boundary_of(slot);
  Buffer& dx = free_boundary(dx_, dx_sends_, boundary);
  Communicator& pp = grid_.pp();
  if (vs == virtual_stages - 1) {
    GradientBucket& rest = buckets_.rest();
    before_segment(head_segment(), mb, ops::Phase::bwd);
    stage_.head_backward(mb, targets_ + at, rest.layout, buckets_.compute_weights(rest), rest.grads.f32(),
                         act.heads[slot], grad_scale_, dx);
    after_segment(head_segment(), ops::Phase::bwd);
  } else {
    auto timed = timeline_.time(ops::transfer_op_id(mb, vs, ops::Phase::bwd, ops::pp_recv), pp.stream());
    pp.recv(dx.data(), dx.size(), compute_, (stage_index_ + 1) % stages_,
            message_tag(mb, vs, virtual_stages, Pass::backward));
  }
  const Recompute recompute = plan_.parallel.recompute;
  const bool materialized = stage_.attention_form() == AttentionForm::materialized;
  const LayerSpan layers = virtual_stage_layers(plan_.model.layers, virtual_stages, vs);
  for (int l = layers.end() - 1; l >= layers.first; --l) {
    GradientBucket& b = buckets_.of_layer(l);
    const std::size_t here = stage_position(l);
    before_segment(layer_segment(l), mb, ops::Phase::bwd);
    const CRef weights = buckets_.layer_weights(b, mb, ops::Phase::bwd);
    float* grads = buckets_.micro_batch_gradients(b);
    // An MoE block's experts: their own bucket, weights and gradients.
    GradientBucket* eb = buckets_.experts_of_layer(l);
    const CRef experts = eb ? buckets_.layer_weights(*eb, mb, ops::Phase::bwd) : CRef{};
    float* expert_grads = eb ? buckets_.micro_batch_gradients(*eb) : nullptr;
    LayerActivations& kept = act.kept[slot][here];
    if (recompute == Recompute::full) {
      if (act.packs) {
        const Buffer& input = act.packed[slot][here].saved[0];
        act.recompute_out.resize(input.size());
        backend_.convert(Stream::compute, act.recompute_out.ref(), input.cref(), std::int64_t(input.size()));
      } else {
        act.recompute_out.copy_from(kept.x);
      }
      stage_.layer_forward(mb, l, PassKind::recompute, weights, act.recompute_scratch, act.probs_scratch,
                           act.recompute_out, experts);
      stage_.layer_backward(mb, l, weights, grads, act.recompute_scratch, act.probs_scratch, dx, experts, expert_grads);
    } else {
      // Packed: unpacked into the scratch set, the one place this backward reads from.
      LayerActivations& a = act.packs ? act.recompute_scratch : kept;
      if (act.packs) {
        act.unpack(act.packed[slot][here], a,
                   recompute == Recompute::none && materialized ? &act.probs_scratch : nullptr);
      }
      if (recompute == Recompute::selective && materialized)
        stage_.recompute_probabilities(mb, l, a, act.probs_scratch);
      const bool kept_probs = recompute == Recompute::none && materialized && !act.packs;
      stage_.layer_backward(mb, l, weights, grads, a, kept_probs ? act.kept_probs[slot][here] : act.probs_scratch, dx,
                            experts, expert_grads);
    }
    buckets_.layer_gradients_done(b, grads, mb, last_backward_of_chunk);
    if (eb) buckets_.layer_gradients_done(*eb, expert_grads, mb, last_backward_of_chunk);
    after_segment(layer_segment(l), ops::Phase::bwd);
  }
  act.give_back(slot);
  if (vs == 0) {
    GradientBucket& rest = buckets_.rest();
    before_segment(embedding_segment(), mb, ops::Phase::bwd);
    stage_.embed_backward(mb, tokens_ + at, rest.layout, rest.grads.f32(), dx);
    after_segment(embedding_segment(), ops::Phase::bwd);
  } else {
    auto timed = timeline_.time(ops::transfer_op_id(mb, vs, ops::Phase::bwd, ops::pp_send), pp.stream());
    dx_sends_[boundary] = pp.send_async(dx.data(), dx.size(), compute_, (stage_index_ + stages_ - 1) % stages_,
                                        message_tag(mb, vs - 1, virtual_stages, Pass::backward));
  }
}

}  // namespace tessel::executor
