#include "tessel/executor/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::executor {

void Trainer::check(const Plan& plan) {
  const ParallelConfig& p = plan.parallel;
  const ModelSpec& m = plan.model;
  if (p.tp > 1 && p.tp_mode != TpMode::d1) {
    const int q = p.tp_grid_side();
    const int blocks = p.tp_mode == TpMode::d3 ? q * q : q * (p.tp_mode == TpMode::d2_5 ? p.tp_depth : 1);
    const std::string mode(to_string(p.tp_mode));
    if (p.sp != 1) {
      throw Error(fmt::format("parallel.sp: tp_mode {} runs with sp 1 in the CPU executor, got {}", mode, p.sp));
    }
    if (p.micro_batch % blocks != 0) {
      throw Error(fmt::format("parallel.micro_batch: tp_mode {} gives each of its {} token blocks whole sequences; "
                              "micro_batch {} is not divisible by {}",
                              mode, blocks, p.micro_batch, blocks));
    }
    if (m.vocab % q != 0) {
      throw Error(fmt::format("model.vocab: {} is not divisible by the 2d grid side {}", m.vocab, q));
    }
  }
  if (p.offload != OffloadMode::none) {
    throw Error(fmt::format("parallel.offload: the CPU executor keeps everything in memory; offload must be none, got {}",
                            to_string(p.offload)));
  }
  if (!plan.cluster.ranks_fill_node()) {
    throw Error(fmt::format("cluster: CPU runs use cluster local-cpu, got {}", plan.cluster.name));
  }
  if (m.activation != Activation::gelu || m.norm != Norm::layernorm ||
      m.position_embedding != PositionEmbedding::learned || !m.tied_embeddings || m.kv_heads != m.heads || !m.bias) {
    throw Error(fmt::format("model {}: the executor trains GPT-2-shaped models (gelu, layernorm, learned positions, "
                            "tied embeddings, biases, kv_heads == heads)",
                            m.name));
  }
  if (plan.train.precision == Precision::fp16) {
    throw Error("train.precision: the CPU executor computes in fp32 and stores fp32 or bf16; got fp16");
  }
  if (m.vocab % p.tp != 0) {
    throw Error(fmt::format("model.vocab: {} is not divisible by parallel.tp {} (the embedding is vocab-parallel)",
                            m.vocab, p.tp));
  }
}

Trainer::Trainer(const Plan& plan, ProcessGrid& grid, DataLoader loader, const TrainerOptions& options,
                 const kernels::KernelBackend& backend)
    : plan_(plan), grid_(grid), loader_(std::move(loader)), options_(options), k_(backend) {
  check(plan);
  const ParallelConfig& p = plan.parallel;
  const ModelSpec& model = plan.model;
  if (loader_.sequences_per_rank() % p.micro_batch != 0) {
    throw Error(fmt::format("parallel.micro_batch: {} does not divide the {} sequences of each rank", p.micro_batch,
                            loader_.sequences_per_rank()));
  }
  micro_batches_ = loader_.sequences_per_rank() / p.micro_batch;
  stages_ = p.pp;
  stage_index_ = grid.coordinates().pp;
  chunks_ = p.schedule == Schedule::interleaved ? p.virtual_stages : 1;
  layers_per_chunk_ = model.layers / (stages_ * chunks_);
  group_ = grid.gradients().size();
  group_rank_ = std::size_t(grid.gradients().rank());
  schedule_ = pipeline_schedule(p.schedule, stage_index_, stages_, micro_batches_, chunks_);

  shape_.tp = p.tp;
  shape_.tp_rank = grid.coordinates().tp;
  shape_.sequence_parallel = p.tp_sequence_parallel && p.tp > 1;
  shape_.grid = p.tp > 1 && (p.tp_mode == TpMode::d2 || p.tp_mode == TpMode::d2_5);
  shape_.q = p.tp_grid_side();
  shape_.grid_row = grid.coordinates().tp_row;
  shape_.grid_col = grid.coordinates().tp_col;
  shape_.depth = p.tp_mode == TpMode::d2_5 ? p.tp_depth : 1;
  shape_.cube = p.tp > 1 && p.tp_mode == TpMode::d3;
  shape_.grid_depth = grid.coordinates().tp_depth;
  shape_.sp = p.sp;
  shape_.sp_rank = grid.coordinates().sp;
  shape_.keep_all_keys = p.recompute == Recompute::selective;
  shape_.pad_to = std::size_t(group_);
  for (int chunk = 0; chunk < chunks_; ++chunk) {
    const int first = virtual_stage(stage_index_, chunk, stages_) * layers_per_chunk_;
    for (int l = first; l < first + layers_per_chunk_; ++l) shape_.layers.push_back(l);
  }
  std::sort(shape_.layers.begin(), shape_.layers.end());
  shape_.embedding = stage_index_ == 0;
  shape_.head = stage_index_ == stages_ - 1;
  stage_ = std::make_unique<GptStage>(model, shape_, p.micro_batch, plan.seq_len() / p.sp,
                                      StageComms{grid.tp(), grid.sp(), grid.tp_row(), grid.tp_col(), grid.tp_depth()},
                                      k_, timeline_);

  bucket_of_layer_.assign(std::size_t(model.layers), -1);
  for (Bucket& layout : stage_buckets(model, shape_)) {
    BucketState& b = buckets_.emplace_back();
    b.name = layout.layer >= 0 ? fmt::format("L{}", layout.layer) : "stage";
    if (layout.layer >= 0) bucket_of_layer_[std::size_t(layout.layer)] = int(buckets_.size() - 1);
    else rest_bucket_ = int(buckets_.size() - 1);
    b.layout = std::move(layout);
  }
  for (const TensorSlot& t : whole_model_tensors(model)) {
    whole_offsets_[t.name] = t.offset;
    whole_size_ = t.offset + t.size();
  }

  // Weights drawn whole per tensor, then cut: the same model whatever the layout.
  for (BucketState& b : buckets_) {
    FloatBuffer whole_bucket(b.layout.padded_size, 0.0f);
    for (const TensorSlot& t : b.layout.tensors) {
      const std::vector<float> whole = initial_tensor(model, options_.seed, t.name, t.rows, t.cols);
      for_each_shard_element(t,
                             [&](std::size_t w, std::size_t l) { whole_bucket[t.offset + l] = whole[w]; });
    }
    if (shards_weights(b)) {
      b.param_shard.assign(whole_bucket.begin() + long(group_rank_ * shard_size(b)),
                           whole_bucket.begin() + long((group_rank_ + 1) * shard_size(b)));
    } else {
      b.params = std::move(whole_bucket);
    }
    b.moment1.assign(owned_size(b), 0.0f);
    b.moment2.assign(plan.train.optimizer == Optimizer::adamw || plan.train.optimizer == Optimizer::lamb ? owned_size(b) : 0,
                     0.0f);
    if (shards_optimizer()) b.grad_shard.assign(shard_size(b), 0.0f);
  }
  const std::size_t layers_here = shape_.layers.size();
  // Activations live in slots, one per (chunk, micro-batch) in flight: as many as the
  // schedule ever has between a forward and its backward (1 with gradient accumulation,
  // pp - s on stage s with 1F1B, m with GPipe).
  std::size_t in_flight = 0, most = 0;
  for (const PipelineStep& step : schedule_) {
    in_flight += step.pass == Pass::forward ? 1 : std::size_t(-1);
    most = std::max(most, in_flight);
  }
  const std::size_t slots = std::max<std::size_t>(most, 1);
  slot_of_.assign(std::size_t(chunks_ * micro_batches_), 0);
  for (std::size_t slot = slots; slot-- > 0;) free_slots_.push_back(int(slot));
  kept_.assign(slots, std::vector<LayerActivations>(layers_here));
  bf16_storage_ = plan.train.precision == Precision::bf16;
  if (bf16_storage_) {
    packed_.assign(slots, std::vector<PackedActivations>(layers_here));
  } else if (p.recompute == Recompute::none) {
    kept_probs_.assign(slots, std::vector<FloatBuffer>(layers_here));
  }
  heads_.resize(shape_.head ? slots : 0);
  x_.assign(std::size_t(chunks_), std::vector<FloatBuffer>(std::size_t(micro_batches_)));
  dx_ = x_;
  // Every rank's timeline starts together.
  grid.world().barrier();
  timeline_.reset_origin();
}

std::size_t Trainer::resident_parameter_elements() const {
  std::size_t total = 0;
  for (const BucketState& b : buckets_) total += b.params.size() + b.param_shard.size();
  return total;
}

std::size_t Trainer::kept_activation_bytes() const {
  std::size_t bytes = 0;
  for (const auto& per_layer : kept_) {
    for (const LayerActivations& a : per_layer) {
      for (auto member : LayerActivations::kSaved) bytes += (a.*member).size() * sizeof(float);
      for (auto member : LayerActivations::kRowStatistics) bytes += (a.*member).size() * sizeof(float);
    }
  }
  for (const auto& per_layer : kept_probs_) {
    for (const FloatBuffer& probs : per_layer) bytes += probs.size() * sizeof(float);
  }
  for (const auto& per_layer : packed_) {
    for (const PackedActivations& p : per_layer) {
      for (const auto& tensor : p.saved) bytes += tensor.size() * sizeof(std::uint16_t);
      for (const FloatBuffer& stats : p.row_statistics) bytes += stats.size() * sizeof(float);
      bytes += p.probs.size() * sizeof(std::uint16_t);
    }
  }
  return bytes;
}

bool Trainer::counts_tensor(const TensorSlot& t) const {
  if (t.copy != 0) return false;
  // The tied embedding's second copy, on the last stage.
  return !(t.name == "wte" && !shape_.embedding);
}

// ---- one step ----

StepStats Trainer::step() {
  const auto start = std::chrono::steady_clock::now();
  timeline_.set_step(step_ + 1);
  const double loss_sum = forward_backward();
  // The loss of the global batch: last-stage ranks hold the token losses of their
  // replica's share of the sequences (a block of each with sequence parallel).
  const int tokens_here = loader_.sequences_per_rank() * plan_.seq_len() / plan_.parallel.sp;
  float loss = shape_.head && stage_->reports_loss() ? float(loss_sum / tokens_here) : 0.0f;
  grid_.world().all_reduce(&loss, 1);
  StepStats stats;
  stats.loss = loss / float(plan_.parallel.dp * plan_.parallel.sp);
  update(stats);
  ++step_;
  stats.step = step_;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats.tokens_per_s = double(plan_.train.global_batch) * plan_.seq_len() / stats.seconds;
  return stats;
}

double Trainer::forward_backward() {
  std::vector<std::int32_t> tokens, targets;
  loader_.next(tokens, targets);
  if (shape_.sp > 1) {
    // This rank's block of every sequence.
    const std::size_t seq = std::size_t(plan_.seq_len()), block = seq / std::size_t(shape_.sp);
    const std::size_t first = std::size_t(shape_.sp_rank) * block, sequences = tokens.size() / seq;
    for (std::size_t s = 0; s < sequences; ++s) {
      std::copy_n(tokens.begin() + long(s * seq + first), block, tokens.begin() + long(s * block));
      std::copy_n(targets.begin() + long(s * seq + first), block, targets.begin() + long(s * block));
    }
    tokens.resize(sequences * block), targets.resize(sequences * block);
  }
  for (BucketState& b : buckets_) {
    if (shards_weights(b)) {
      std::fill(b.grad_shard.begin(), b.grad_shard.end(), 0.0f);
    } else {
      b.grads.assign(b.layout.padded_size, 0.0f);  // reallocated after ZeRO 2 released it
    }
  }
  backwards_done_.assign(std::size_t(chunks_), 0);
  // Each micro-batch's loss is a mean over its tokens; the gradient is of the mean over
  // the global batch, which the data-parallel sum completes.
  grad_scale_ = 1.0f / float(std::size_t(loader_.sequences_per_rank()) * std::size_t(plan_.seq_len()) *
                             std::size_t(plan_.parallel.dp));
  double loss = 0;
  for (const PipelineStep& step : schedule_) {
    if (step.pass == Pass::forward) run_forward(step, tokens.data(), targets.data(), loss);
    else run_backward(step, tokens.data(), targets.data());
  }
  if (rest_bucket_ >= 0) {
    BucketState& rest = buckets_[std::size_t(rest_bucket_)];
    // The tied embedding: the first and the last stage each hold a copy; their gradients sum.
    Communicator& ends = grid_.embedding();
    if (ends.size() > 1) {
      const TensorSlot& wte = rest.layout.tensor("wte");
      auto timed = timeline_.time("stage/embed/grad.all_reduce");
      ends.all_reduce(rest.grads.data() + wte.offset, wte.size());
    }
    bucket_gradients_done(rest);
  }
  for (BucketState& b : buckets_) {
    // ZeRO 3 layer gradients were reduce-scattered per micro-batch: their parts are
    // summed over the depth here, once.
    if (shards_weights(b)) sum_over_depth(b.grad_shard.data(), b.grad_shard.size());
  }
  for (BucketState& b : buckets_) {
    if (!b.sync) continue;
    b.sync->wait();
    b.sync.reset();
    timeline_.record(b.sync_op, b.sync_start_s, timeline_.now_s());
    if (plan_.parallel.zero == 2) b.grads = FloatBuffer();  // ZeRO 2 keeps only its part of the gradients
  }
  for (auto& request : sends_) request->wait();
  sends_.clear();
  return loss;
}

const float* Trainer::layer_weights(BucketState& b, int mb, std::string_view pass) {
  if (!shards_weights(b)) return b.params.data();
  auto timed = timeline_.time(fmt::format("mb{}/L{}/{}/zero.all_gather", mb, b.layout.layer, pass));
  gathered_weights_.resize(b.layout.padded_size);
  grid_.gradients().all_gather(b.param_shard.data(), gathered_weights_.data(), shard_size(b));
  return gathered_weights_.data();
}

namespace {
int message_tag(int mb, int virtual_stage, int virtual_stages, Pass pass) {
  return (mb * virtual_stages + virtual_stage) * 2 + (pass == Pass::backward ? 1 : 0);
}
}  // namespace

void Trainer::run_forward(const PipelineStep& step, const std::int32_t* tokens, const std::int32_t* targets,
                          double& loss) {
  const int mb = step.micro_batch, vs = virtual_stage(stage_index_, step.chunk, stages_);
  const int virtual_stages = stages_ * chunks_;
  const std::size_t at = std::size_t(mb) * plan_.parallel.micro_batch * plan_.seq_len() / plan_.parallel.sp;
  FloatBuffer& x = x_[std::size_t(step.chunk)][std::size_t(mb)];
  x.resize(stage_->activation_size());
  Communicator& pp = grid_.pp();
  if (vs == 0) {
    stage_->embed_forward(mb, tokens + at, buckets_[std::size_t(rest_bucket_)].layout,
                          buckets_[std::size_t(rest_bucket_)].params.data(), x);
  } else {
    auto timed = timeline_.time(fmt::format("mb{}/V{}/fwd/pp.recv", mb, vs));
    pp.recv(x.data(), x.size(), (stage_index_ + stages_ - 1) % stages_, message_tag(mb, vs, virtual_stages, Pass::forward));
  }
  const Recompute recompute = plan_.parallel.recompute;
  const std::size_t slot = std::size_t(free_slots_.back());
  free_slots_.pop_back();
  slot_of_[std::size_t(step.chunk * micro_batches_ + mb)] = int(slot);
  for (int l = vs * layers_per_chunk_; l < (vs + 1) * layers_per_chunk_; ++l) {
    BucketState& b = buckets_[std::size_t(bucket_of_layer_[std::size_t(l)])];
    const std::size_t here = std::size_t(std::find(shape_.layers.begin(), shape_.layers.end(), l) - shape_.layers.begin());
    const float* weights = layer_weights(b, mb, "fwd");
    // What the backward will need: everything (none), all but the probabilities
    // (selective), the input only (full); in bf16 when the plan says so.
    LayerActivations& kept = kept_[slot][here];
    if (recompute == Recompute::full) {
      if (bf16_storage_) {
        PackedActivations& packed = packed_[slot][here];
        packed.saved.assign(1, std::vector<std::uint16_t>(x.size()));
        k_.to_bf16(x.data(), packed.saved[0].data(), std::int64_t(x.size()));
      } else {
        kept.x = x;
      }
      stage_->layer_forward(mb, l, PassKind::forward, weights, recompute_scratch_, probs_scratch_, x);
    } else if (bf16_storage_) {
      stage_->layer_forward(mb, l, PassKind::forward, weights, recompute_scratch_, probs_scratch_, x);
      pack(recompute_scratch_, recompute == Recompute::none ? &probs_scratch_ : nullptr, packed_[slot][here]);
    } else {
      FloatBuffer& probs = recompute == Recompute::none ? kept_probs_[slot][here] : probs_scratch_;
      stage_->layer_forward(mb, l, PassKind::forward, weights, kept, probs, x);
    }
  }
  if (vs == virtual_stages - 1) {
    BucketState& rest = buckets_[std::size_t(rest_bucket_)];
    loss += stage_->head_forward(mb, targets + at, rest.layout, rest.params.data(), x, heads_[slot]);
  } else {
    auto timed = timeline_.time(fmt::format("mb{}/V{}/fwd/pp.send", mb, vs));
    sends_.push_back(pp.send_async(x.data(), x.size(), (stage_index_ + 1) % stages_,
                                   message_tag(mb, vs + 1, virtual_stages, Pass::forward)));
  }
}

void Trainer::run_backward(const PipelineStep& step, const std::int32_t* tokens, const std::int32_t* targets) {
  const int mb = step.micro_batch, vs = virtual_stage(stage_index_, step.chunk, stages_);
  const int virtual_stages = stages_ * chunks_;
  const std::size_t at = std::size_t(mb) * plan_.parallel.micro_batch * plan_.seq_len() / plan_.parallel.sp;
  const bool last_backward_of_chunk = ++backwards_done_[std::size_t(step.chunk)] == micro_batches_;
  FloatBuffer& dx = dx_[std::size_t(step.chunk)][std::size_t(mb)];
  dx.resize(stage_->activation_size());
  const std::size_t slot = std::size_t(slot_of_[std::size_t(step.chunk * micro_batches_ + mb)]);
  Communicator& pp = grid_.pp();
  if (vs == virtual_stages - 1) {
    BucketState& rest = buckets_[std::size_t(rest_bucket_)];
    stage_->head_backward(mb, targets + at, rest.layout, rest.params.data(), rest.grads.data(), heads_[slot],
                          grad_scale_, dx);
  } else {
    auto timed = timeline_.time(fmt::format("mb{}/V{}/bwd/pp.recv", mb, vs));
    pp.recv(dx.data(), dx.size(), (stage_index_ + 1) % stages_, message_tag(mb, vs, virtual_stages, Pass::backward));
  }
  const Recompute recompute = plan_.parallel.recompute;
  for (int l = (vs + 1) * layers_per_chunk_ - 1; l >= vs * layers_per_chunk_; --l) {
    BucketState& b = buckets_[std::size_t(bucket_of_layer_[std::size_t(l)])];
    const std::size_t here = std::size_t(std::find(shape_.layers.begin(), shape_.layers.end(), l) - shape_.layers.begin());
    const float* weights = layer_weights(b, mb, "bwd");
    float* grads = b.grads.data();
    if (shards_weights(b)) {
      layer_grads_.assign(b.layout.padded_size, 0.0f);
      grads = layer_grads_.data();
    }
    LayerActivations& kept = kept_[slot][here];
    if (recompute == Recompute::full) {
      if (bf16_storage_) {
        const std::vector<std::uint16_t>& input = packed_[slot][here].saved[0];
        recompute_out_.resize(input.size());
        k_.from_bf16(input.data(), recompute_out_.data(), std::int64_t(input.size()));
      } else {
        recompute_out_ = kept.x;
      }
      stage_->layer_forward(mb, l, PassKind::recompute, weights, recompute_scratch_, probs_scratch_, recompute_out_);
      stage_->layer_backward(mb, l, weights, grads, recompute_scratch_, probs_scratch_, dx);
    } else {
      // bf16: unpacked into the scratch set, the one place this backward reads from.
      LayerActivations& a = bf16_storage_ ? recompute_scratch_ : kept;
      if (bf16_storage_) {
        unpack(packed_[slot][here], a, recompute == Recompute::none ? &probs_scratch_ : nullptr);
      }
      if (recompute == Recompute::selective) stage_->recompute_probabilities(mb, l, a, probs_scratch_);
      const bool kept_probs = recompute == Recompute::none && !bf16_storage_;
      stage_->layer_backward(mb, l, weights, grads, a, kept_probs ? kept_probs_[slot][here] : probs_scratch_, dx);
    }
    if (shards_weights(b)) {
      // ZeRO 3: this micro-batch's layer gradient goes to its owners at once.
      sum_sequence_partials(b, grads);
      auto timed = timeline_.time(fmt::format("mb{}/L{}/bwd/zero.reduce_scatter", mb, l));
      shard_scratch_.resize(shard_size(b));
      grid_.gradients().reduce_scatter(grads, shard_scratch_.data(), shard_size(b));
      for (std::size_t i = 0; i < shard_scratch_.size(); ++i) b.grad_shard[i] += shard_scratch_[i];
    } else if (last_backward_of_chunk) {
      bucket_gradients_done(b);
    }
  }
  free_slots_.push_back(int(slot));
  if (vs == 0) {
    BucketState& rest = buckets_[std::size_t(rest_bucket_)];
    stage_->embed_backward(mb, tokens + at, rest.layout, rest.grads.data(), dx);
  } else {
    auto timed = timeline_.time(fmt::format("mb{}/V{}/bwd/pp.send", mb, vs));
    sends_.push_back(pp.send_async(dx.data(), dx.size(), (stage_index_ + stages_ - 1) % stages_,
                                   message_tag(mb, vs - 1, virtual_stages, Pass::backward)));
  }
}

void Trainer::pack(const LayerActivations& a, const FloatBuffer* probs, PackedActivations& packed) {
  constexpr std::size_t saved = std::size(LayerActivations::kSaved);
  packed.saved.resize(saved);
  for (std::size_t i = 0; i < saved; ++i) {
    const FloatBuffer& from = a.*LayerActivations::kSaved[i];
    packed.saved[i].resize(from.size());
    k_.to_bf16(from.data(), packed.saved[i].data(), std::int64_t(from.size()));
  }
  packed.row_statistics.clear();
  for (auto member : LayerActivations::kRowStatistics) packed.row_statistics.push_back(a.*member);
  packed.probs.resize(probs ? probs->size() : 0);
  if (probs) k_.to_bf16(probs->data(), packed.probs.data(), std::int64_t(probs->size()));
}

void Trainer::unpack(const PackedActivations& packed, LayerActivations& a, FloatBuffer* probs) {
  for (std::size_t i = 0; i < packed.saved.size(); ++i) {
    FloatBuffer& to = a.*LayerActivations::kSaved[i];
    to.resize(packed.saved[i].size());
    k_.from_bf16(packed.saved[i].data(), to.data(), std::int64_t(to.size()));
  }
  for (std::size_t i = 0; i < packed.row_statistics.size(); ++i) {
    a.*LayerActivations::kRowStatistics[i] = packed.row_statistics[i];
  }
  if (probs) {
    probs->resize(packed.probs.size());
    k_.from_bf16(packed.probs.data(), probs->data(), std::int64_t(probs->size()));
  }
}

void Trainer::sum_sequence_partials(BucketState& b, float* grads) {
  const Bucket& layout = b.layout;
  if (layout.partial_prefix == 0) return;
  if (shape_.cube) {
    // Both kinds of vectors down the column; then those with features on the depth axis
    // along the row, those with features on the columns along the depth.
    grid_.tp_col().all_reduce(grads, layout.partial_prefix);
    grid_.tp_row().all_reduce(grads, layout.partial_first);
    if (layout.partial_prefix > layout.partial_first) {
      grid_.tp_depth().all_reduce(grads + layout.partial_first, layout.partial_prefix - layout.partial_first);
    }
    return;
  }
  // 1D sequence parallel: over the tensor group; 2D: down the grid column.
  (shape_.grid ? grid_.tp_col() : grid_.tp()).all_reduce(grads, layout.partial_prefix);
}

void Trainer::sum_over_depth(float* grads, std::size_t count) {
  // 2.5D: every depth layer holds the same weights and saw its own tokens.
  if (shape_.depth > 1) grid_.tp_depth().all_reduce(grads, count);
}

void Trainer::bucket_gradients_done(BucketState& b) {
  sum_sequence_partials(b, b.grads.data());
  sum_over_depth(b.grads.data(), b.layout.size);
  if (group_ == 1) return;
  Communicator& group = grid_.gradients();
  b.sync_start_s = timeline_.now_s();
  if (shards_optimizer()) {
    b.sync_op = b.name + "/dp/grad.reduce_scatter";
    b.sync = group.reduce_scatter_async(b.grads.data(), b.grad_shard.data(), shard_size(b));
  } else {
    b.sync_op = b.name + "/dp/grad.all_reduce";
    b.sync = group.all_reduce_async(b.grads.data(), b.grads.size());
  }
}

// ---- the update ----

float Trainer::global_gradient_norm() {
  // Each element once: owned parts under ZeRO, one data-parallel replica otherwise,
  // replicated tensors on tensor rank 0, the tied embedding on its first stage.
  double sum = 0;
  const bool one_replica_counts = shards_optimizer() || group_rank_ == 0;
  if (one_replica_counts) {
    for (BucketState& b : buckets_) {
      const std::size_t first = owned_offset(b), size = owned_size(b);
      const float* grads = owned_grads(b);
      for (const TensorSlot& t : b.layout.tensors) {
        const std::size_t lo = std::max(first, t.offset), hi = std::min(first + size, t.offset + t.size());
        if (lo < hi && counts_tensor(t)) sum += k_.sum_of_squares(grads + (lo - first), std::int64_t(hi - lo));
      }
    }
  }
  float total = float(sum);
  grid_.world().all_reduce(&total, 1);
  return std::sqrt(total);
}

void Trainer::update(StepStats& stats) {
  last_gradient_norm_ = global_gradient_norm();
  stats.gradient_norm = last_gradient_norm_;
  float scale = 1.0f;
  if (options_.clip_grad_norm > 0 && last_gradient_norm_ > options_.clip_grad_norm) {
    scale = options_.clip_grad_norm / (last_gradient_norm_ + 1e-6f);
  }
  {
    auto timed = timeline_.time("step/optimizer");
    optimizer_step(scale);
  }
  gather_updated_weights();
}

void Trainer::optimizer_step(float gradient_scale) {
  const Optimizer optimizer = plan_.train.optimizer;
  if (gradient_scale != 1.0f) {
    for (BucketState& b : buckets_) k_.scale(owned_grads(b), std::int64_t(owned_size(b)), gradient_scale);
  }
  if (optimizer == Optimizer::adamw) {
    kernels::AdamWParams p;
    p.lr = options_.lr;
    p.weight_decay = options_.weight_decay;
    p.eps = options_.adam_eps;
    p.step = step_ + 1;
    for (BucketState& b : buckets_) {
      k_.adamw_step(owned_params(b), owned_grads(b), b.moment1.data(), b.moment2.data(), std::int64_t(owned_size(b)), p);
    }
    return;
  }
  // LAMB and LARS: phase 1 computes each owned part's update; the squared norms of every
  // tensor's weights and update are then summed over the ranks that hold its parts (the
  // ZeRO group, then the tensor group for split tensors); phase 2 applies the update
  // scaled by the trust ratio of the whole tensor.
  kernels::LambParams lamb;
  lamb.lr = options_.lr;
  lamb.weight_decay = options_.weight_decay;
  lamb.step = step_ + 1;
  kernels::LarsParams lars;
  lars.lr = options_.lr;
  lars.weight_decay = options_.weight_decay;
  struct Piece {
    BucketState* bucket;
    const TensorSlot* tensor;
    std::size_t lo, hi;  // in the owned range
  };
  std::vector<Piece> pieces;
  for (BucketState& b : buckets_) {
    const std::size_t first = owned_offset(b), size = owned_size(b);
    b.update.resize(size);
    float* w = owned_params(b);
    const float* g = owned_grads(b);
    if (optimizer == Optimizer::lamb) {
      k_.lamb_update(w, g, b.moment1.data(), b.moment2.data(), b.update.data(), std::int64_t(size), lamb);
    } else {
      k_.lars_update(w, g, b.update.data(), std::int64_t(size), lars);
    }
    for (const TensorSlot& t : b.layout.tensors) {
      const std::size_t lo = std::max(first, t.offset), hi = std::min(first + size, t.offset + t.size());
      pieces.push_back({&b, &t, lo > first ? lo - first : 0, hi > first && lo < hi ? hi - first : 0});
    }
  }
  std::vector<float> norms(2 * pieces.size(), 0.0f);  // weight, update squared norms
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const Piece& piece = pieces[i];
    if (piece.lo >= piece.hi) continue;
    const auto n = std::int64_t(piece.hi - piece.lo);
    norms[2 * i] = float(k_.sum_of_squares(owned_params(*piece.bucket) + piece.lo, n));
    norms[2 * i + 1] = float(k_.sum_of_squares(piece.bucket->update.data() + piece.lo, n));
  }
  if (shards_optimizer()) grid_.gradients().all_reduce(norms.data(), norms.size());
  if (shape_.tp > 1) {
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      if (pieces[i].tensor->copy != 0) norms[2 * i] = norms[2 * i + 1] = 0;
    }
    grid_.tp().all_reduce(norms.data(), norms.size());
  }
  trust_ratios_.clear();
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const Piece& piece = pieces[i];
    const float trust = kernels::trust_ratio(std::sqrt(double(norms[2 * i])), std::sqrt(double(norms[2 * i + 1])));
    trust_ratios_[piece.tensor->name] = trust;
    if (piece.lo >= piece.hi) continue;
    const auto n = std::int64_t(piece.hi - piece.lo);
    float* w = owned_params(*piece.bucket) + piece.lo;
    const float* u = piece.bucket->update.data() + piece.lo;
    if (optimizer == Optimizer::lamb) k_.apply_update(w, u, n, lamb.lr * trust);
    else k_.lars_apply(w, u, piece.bucket->moment1.data() + piece.lo, n, lars, trust);
  }
}

void Trainer::gather_updated_weights() {
  if (!shards_optimizer()) return;
  for (BucketState& b : buckets_) {
    if (shards_weights(b)) continue;  // ZeRO 3 gathers layers when they run
    auto timed = timeline_.time(b.name + "/step/zero.all_gather");
    shard_scratch_.assign(owned_params(b), owned_params(b) + shard_size(b));
    grid_.gradients().all_gather(shard_scratch_.data(), b.params.data(), shard_size(b));
  }
}

// ---- whole-model views ----

std::vector<float> Trainer::whole_from_buckets(bool gradients) {
  std::vector<float> whole(whole_size_, 0.0f);
  const bool contributes = grid_.coordinates().dp == 0 && grid_.coordinates().sp == 0;
  FloatBuffer bucket_values;
  for (BucketState& b : buckets_) {
    // The bucket whole on this rank: gather the parts where ZeRO split it.
    const bool split = gradients ? shards_optimizer() : shards_weights(b);
    if (split) {
      bucket_values.resize(b.layout.padded_size);
      shard_scratch_.assign(gradients ? b.grad_shard.begin() : b.param_shard.begin(),
                            gradients ? b.grad_shard.end() : b.param_shard.end());
      grid_.gradients().all_gather(shard_scratch_.data(), bucket_values.data(), shard_size(b));
    } else {
      bucket_values = gradients ? b.grads : b.params;
    }
    if (!contributes) continue;
    for (const TensorSlot& t : b.layout.tensors) {
      if (!counts_tensor(t)) continue;
      const std::size_t base = whole_offsets_.find(t.name)->second;
      for_each_shard_element(t,
                             [&](std::size_t w, std::size_t l) { whole[base + w] = bucket_values[t.offset + l]; });
    }
  }
  grid_.world().all_reduce(whole.data(), whole.size());
  return whole;
}

std::vector<float> Trainer::whole_parameters() { return whole_from_buckets(false); }

std::vector<float> Trainer::whole_gradients() {
  if (plan_.parallel.zero == 2) {
    for (BucketState& b : buckets_) {
      if (b.grads.empty()) b.grads.assign(b.layout.padded_size, 0.0f);  // released; the parts hold them
    }
  }
  return whole_from_buckets(true);
}

void Trainer::set_whole_parameters(const std::vector<float>& whole) {
  for (BucketState& b : buckets_) {
    FloatBuffer values(b.layout.padded_size, 0.0f);
    for (const TensorSlot& t : b.layout.tensors) {
      const std::size_t base = whole_offsets_.find(t.name)->second;
      for_each_shard_element(t,
                             [&](std::size_t w, std::size_t l) { values[t.offset + l] = whole[base + w]; });
    }
    if (shards_weights(b)) {
      std::copy(values.begin() + long(group_rank_ * shard_size(b)),
                values.begin() + long((group_rank_ + 1) * shard_size(b)), b.param_shard.begin());
    } else {
      b.params = std::move(values);
    }
  }
}

// ---- checkpoints ----

namespace {
void write_floats(std::ofstream& out, const FloatBuffer& values) {
  out.write(reinterpret_cast<const char*>(values.data()), std::streamsize(values.size() * sizeof(float)));
}
void read_floats(std::ifstream& in, FloatBuffer& values, const std::string& file) {
  in.read(reinterpret_cast<char*>(values.data()), std::streamsize(values.size() * sizeof(float)));
  if (!in) throw Error(fmt::format("--resume: {}: truncated checkpoint", file));
}
}  // namespace

void Trainer::save(const std::string& dir) {
  namespace fs = std::filesystem;
  Communicator& world = grid_.world();
  std::error_code error;
  fs::create_directories(dir, error);
  const fs::path file = fs::path(dir) / fmt::format("rank{}.bin", world.rank());
  const fs::path temporary = file.string() + ".tmp";
  std::size_t elements = 0;
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(fmt::format("--checkpoint: {}: cannot write", temporary.string()));
    for (BucketState& b : buckets_) {
      for (const FloatBuffer* values : {&b.params, &b.param_shard, &b.moment1, &b.moment2}) {
        write_floats(out, *values);
        elements += values->size();
      }
    }
    if (!out) throw Error(fmt::format("--checkpoint: {}: write failed", temporary.string()));
  }
  fs::rename(temporary, file);
  float total = float(elements);
  world.all_reduce(&total, 1);
  if (world.rank() == 0) {
    const Json meta{{"format", "tessel-checkpoint"},       {"version", 2},          {"step", step_},
                    {"loader_position", loader_.position()}, {"ranks", world.size()}, {"plan", plan_.to_json()},
                    {"elements", std::size_t(total)}};
    write_text_file_atomically((fs::path(dir) / "checkpoint.json").string(), meta.dump(1) + "\n");
  }
  world.barrier();
}

void Trainer::load(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string meta_file = (fs::path(dir) / "checkpoint.json").string();
  if (!fs::exists(meta_file)) throw Error(fmt::format("--resume: {}: no complete checkpoint (checkpoint.json missing)", dir));
  const Json meta = read_json_file(meta_file);
  if (meta.value("format", "") != "tessel-checkpoint" || meta.value("version", 0) != 2) {
    throw Error(fmt::format("--resume: {}: not a tessel checkpoint of this version", meta_file));
  }
  const Json& saved = meta.at("plan");
  const Json plan = plan_.to_json();
  if (meta.value("ranks", 0) != grid_.world().size() || saved.value("model", Json()) != plan.at("model") ||
      saved.value("parallel", Json()) != plan.at("parallel")) {
    throw Error(fmt::format("--resume: {}: written by {} ranks for another model or layout; this run is {} on {} ranks",
                            meta_file, meta.value("ranks", 0), plan_.parallel.summary(), grid_.world().size()));
  }
  const std::string file = (fs::path(dir) / fmt::format("rank{}.bin", grid_.world().rank())).string();
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(fmt::format("--resume: {}: cannot open", file));
  for (BucketState& b : buckets_) {
    for (FloatBuffer* values : {&b.params, &b.param_shard, &b.moment1, &b.moment2}) read_floats(in, *values, file);
  }
  step_ = meta.at("step").get<int>();
  loader_.seek(meta.at("loader_position").get<std::uint64_t>());
}

}  // namespace tessel::executor
