// The trainer's checks of a plan, its construction (which objects this rank's stage
// needs) and its step, which reads top to bottom: the batch, the pipeline's forward and
// backward passes with their gradient syncs, the optimizer, the step's scalars.
#include "tessel/executor/trainer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "checkpoint_io.hpp"
#include "chunk_manager.hpp"
#include "gradient_buckets.hpp"
#include "pipeline_runner.hpp"
#include "sharded_optimizer.hpp"
#include "tessel/core/error.hpp"
#include "tessel/executor/checkpoint_weights.hpp"
#include "whole_model.hpp"

namespace tessel::executor {

void Trainer::check(const Plan& plan) {
  const ParallelConfig& p = plan.parallel;
  // Numerics that do not change the cost but do change the model: run only what is computed.
  if (!plan.model.rope_scaling.empty()) {
    throw Error(
        fmt::format("model.rope_scaling: {} RoPE scaling is not computed by the executor (it rotates by "
                    "rope_theta alone); plan and estimate price the model, run refuses it",
                    plan.model.rope_scaling));
  }
  if (plan.model.rotary_fraction != 1.0) {
    throw Error(fmt::format("model.rotary_fraction: {} of each head's channels rotated is not computed by the "
                            "executor (it rotates them all); plan and estimate price the model, run refuses it",
                            plan.model.rotary_fraction));
  }
  // Refused rather than run exposed: the executor's tensor-parallel collectives (MPI on
  // CPU ranks, NCCL on GPUs) run between its GEMMs, never pipelined with them, so a run
  // would measure another plan than the one it names, and `tessel compare` and
  // calibration would set that measurement against the overlapped prediction. The same
  // plan with tp_comm_overlap false computes the same math and is measured as predicted.
  if (p.tp_comm_overlap) {
    throw Error(
        "parallel.tp_comm_overlap: the executor runs its tensor-parallel collectives between its GEMMs, "
        "not pipelined with them; run the plan with tp_comm_overlap false (the same math)");
  }
  // Quantizing the gathered weights changes the numbers each rank computes with; the
  // executor gathers them exactly.
  if (p.zero_quantized_weights) {
    throw Error(
        "parallel.zero_quantized_weights: the executor gathers ZeRO-3's weights exactly, not as int8 blocks; "
        "plan and estimate price it, run the plan with zero_quantized_weights false");
  }
  // selective-op is torchtitan's policy, priced so that its published runs can be read;
  // the executor checkpoints whole layers or the attention core.
  if (p.recompute == Recompute::selective_op) {
    throw Error(
        "parallel.recompute: the executor runs none, selective and full; selective-op (torchtitan's op-level "
        "policy) is priced by the planner and the simulator only");
  }
  if (p.tp > 1 && p.tp_mode != TpMode::d1) {
    const int q = p.tp_grid_side();
    const int blocks = p.tp_mode == TpMode::d3 ? q * q : q * (p.tp_mode == TpMode::d2_5 ? p.tp_depth : 1);
    const std::string mode(to_string(p.tp_mode));
    if (p.sp != 1) {
      throw Error(fmt::format("parallel.sp: tp_mode {} runs with sp 1 in the executor, got {}", mode, p.sp));
    }
    if (p.micro_batch % blocks != 0) {
      throw Error(
          fmt::format("parallel.micro_batch: tp_mode {} gives each of its {} token blocks whole sequences; "
                      "micro_batch {} is not divisible by {}",
                      mode, blocks, p.micro_batch, blocks));
    }
  }
  if (p.offload != OffloadMode::none && plan.model.moe.enabled()) {
    throw Error(
        fmt::format("parallel.offload: the chunk manager does not hold Mixture-of-Experts experts' buckets; "
                    "offload must be none for model {} (moe)",
                    plan.model.name));
  }
  if (p.offload != OffloadMode::none && plan.train.optimizer != Optimizer::adamw) {
    throw Error(fmt::format("train.optimizer: with parallel.offload {} the host optimizer runs adamw only, got {}",
                            to_string(p.offload), to_string(plan.train.optimizer)));
  }
  check_model_shape(plan);
  if (plan.train.precision == Precision::fp16) {
    throw Error("train.precision: the executor trains in fp32 or bf16 (fp32 master weights); got fp16");
  }
}

// The executor trains two shapes: GPT-2 (gelu, layernorm, learned positions, tied
// embeddings, biases, kv_heads == heads) and LLaMA (swiglu, rmsnorm, rope, kv_heads
// dividing heads, untied embeddings, no biases), each in every layout. Anything between
// the two is refused. The key and value heads are split like the query heads: over tp
// in 1D, over the grid side in 2D, 2.5D and 3D.
void Trainer::check_model_shape(const Plan& plan) {
  const ParallelConfig& p = plan.parallel;
  const ModelSpec& m = plan.model;
  const bool gpt2 = m.activation == Activation::gelu && m.norm == Norm::layernorm &&
                    m.position_embedding == PositionEmbedding::learned && m.tied_embeddings && m.kv_heads == m.heads &&
                    m.bias;
  const bool llama = m.activation == Activation::swiglu && m.norm == Norm::rmsnorm &&
                     m.position_embedding == PositionEmbedding::rope && !m.tied_embeddings && !m.bias;
  if (m.moe.enabled()) check_moe(plan);
  if (m.activation == Activation::squared_relu) {
    throw Error(fmt::format("model.activation: {} is planned and simulated but not run; the executor's kernels "
                            "train gelu and swiglu",
                            to_string(m.activation)));
  }
  if (!gpt2 && !llama) {
    throw Error(
        fmt::format("model {}: the executor trains GPT-2-shaped models (gelu, layernorm, learned positions, "
                    "tied embeddings, biases, kv_heads == heads) or LLaMA-shaped ones (swiglu, rmsnorm, rope, "
                    "untied embeddings, no biases)",
                    m.name));
  }
  if (p.tp > 1 && p.tp_mode != TpMode::d1 && m.kv_heads % p.tp_grid_side() != 0) {
    throw Error(
        fmt::format("model.kv_heads: {} is not divisible by the {} grid side {} (the key and value heads are "
                    "split over the grid columns)",
                    m.kv_heads, to_string(p.tp_mode), p.tp_grid_side()));
  }
  if (p.tp > 1 && p.tp_mode == TpMode::d1 && m.kv_heads % p.tp != 0) {
    throw Error(
        fmt::format("model.kv_heads: {} is not divisible by parallel.tp {} (1d tensor parallelism splits the "
                    "key and value heads)",
                    m.kv_heads, p.tp));
  }
}

// Mixture-of-Experts models train in 1D tensor parallelism (with or without sequence
// parallel), data, pipeline and expert parallelism, ZeRO 0-3, recompute, fp32, AdamW:
// the planner refuses the tensor grids with MoE too; the rest is refused by name.
void Trainer::check_moe(const Plan& plan) {
  const ParallelConfig& p = plan.parallel;
  const ModelSpec& m = plan.model;
  if (p.tp > 1 && p.tp_mode != TpMode::d1) {
    throw Error(
        fmt::format("parallel.tp_mode: the executor runs Mixture-of-Experts models in 1d tensor parallelism "
                    "only (the planner refuses the grids with MoE too), got {}",
                    to_string(p.tp_mode)));
  }
  if (p.sp != 1) {
    throw Error(
        fmt::format("parallel.sp: the executor does not run ring self-attention with Mixture-of-Experts "
                    "models (each rank would route a block of every sequence), got sp {}",
                    p.sp));
  }
  if (plan.train.precision != Precision::fp32) {
    throw Error(fmt::format("train.precision: the executor trains Mixture-of-Experts models in fp32, got {}",
                            to_string(plan.train.precision)));
  }
  if (plan.train.optimizer != Optimizer::adamw) {
    throw Error(fmt::format("train.optimizer: the executor trains Mixture-of-Experts models with adamw, got {}",
                            to_string(plan.train.optimizer)));
  }
  if (p.ep < 1 || p.dp % p.ep != 0 || m.moe.experts % p.ep != 0) {
    throw Error(fmt::format("parallel.ep: {} must divide dp {} and the model's {} experts", p.ep, p.dp, m.moe.experts));
  }
  if (m.moe.expert_ffn_hidden % p.tp != 0) {
    throw Error(fmt::format("parallel.tp: model moe.expert_ffn_hidden {} is not divisible by tp {}",
                            m.moe.expert_ffn_hidden, p.tp));
  }
}

Trainer::Trainer(const Plan& plan, ProcessGrid& grid, DataLoader loader, const TrainerOptions& options,
                 kernels::Backend& backend)
    : plan_(plan), grid_(grid), loader_(std::move(loader)), options_(options), backend_(backend), timeline_(backend) {
  check(plan);
  const MemoryLedger::Scope counted(ledger_);
  const ParallelConfig& p = plan.parallel;
  if (loader_.sequences_per_rank() % p.micro_batch != 0) {
    throw Error(fmt::format("parallel.micro_batch: {} does not divide the {} sequences of each rank", p.micro_batch,
                            loader_.sequences_per_rank()));
  }
  const bool bf16 = plan.train.precision == Precision::bf16;
  compute_ = options.compute.value_or(backend.default_compute_type(bf16));
  storage_ = bf16 ? DType::bf16 : DType::f32;
  if (compute_ == DType::bf16) storage_ = DType::bf16;
  micro_batches_ = loader_.sequences_per_rank() / p.micro_batch;
  build_stage(grid);
  if (p.offload != OffloadMode::none) {
    chunk_manager_ = std::make_unique<ChunkManager>(plan_, grid.coordinates().pp, shape_.padded_vocab,
                                                    options.device_memory_bytes, grid_, backend_, timeline_);
  }
  buckets_ = std::make_unique<GradientBuckets>(plan_, grid_, stage_->layout(), shape_, backend_, compute_, timeline_,
                                               chunk_manager_ ? chunk_manager_->model_memory() : nullptr);
  if (chunk_manager_) chunk_manager_->place(*buckets_);
  initialise_weights();
  if (chunk_manager_) chunk_manager_->start_enforcing();  // every bucket drawn: the budget holds from here on
  optimizer_ = std::make_unique<ShardedOptimizer>(plan_, options_, grid_, *buckets_, shape_, backend_);
  pipeline_ = std::make_unique<PipelineRunner>(plan_, grid_, *stage_, *buckets_, chunk_manager_.get(), shape_,
                                               micro_batches_, backend_, timeline_, compute_, storage_);
  whole_model_ = std::make_unique<WholeModel>(plan_, grid_, *buckets_, chunk_manager_.get(), backend_);
  checkpoints_ = std::make_unique<CheckpointIO>(plan_, grid_, *buckets_, chunk_manager_.get(), vocab_multiple_,
                                                shape_.padded_vocab);
  for (Buffer* b : {&tokens_, &targets_}) b->bind(backend_, DType::i32, MemoryCategory::activations);
  loss_sum_.bind(backend_, DType::f64);
  // Every rank's timeline starts together.
  backend_.synchronize();
  grid.world().barrier();
  timeline_.reset_origin();
}

// The members go in reverse order: the buckets give their memory back to the chunk
// manager's pool before it goes.
Trainer::~Trainer() = default;

void Trainer::build_stage(const ProcessGrid& grid) {
  const ParallelConfig& p = plan_.parallel;
  // The gather of checkpoints reads the same shape (with the checkpoint's vocab_multiple).
  vocab_multiple_ = options_.vocab_multiple > 0 ? options_.vocab_multiple : backend_.gemm_width_multiple();
  shape_ = stage_shape_of(plan_, grid.coordinates(), vocab_multiple_);
  LayoutContext context{
      plan_.model,
      shape_,
      p.micro_batch,
      plan_.seq_len() / p.sp,
      StageComms{grid_.tp(), grid_.sp(), grid_.tp_row(), grid_.tp_col(), grid_.tp_depth(), &grid_.expert_parallel()},
      backend_,
      timeline_,
      compute_};
  stage_ = std::make_unique<GptStage>(
      std::move(context), plan_.train.kernels == Kernels::fused ? AttentionForm::fused : AttentionForm::materialized,
      options_.moe_aux_coefficient);
}

// Weights drawn whole per tensor, then cut: the same model whatever the layout. Under
// offload each bucket's host part goes to host memory as soon as it is drawn, so the
// device never holds more than the resident states and one bucket.
void Trainer::initialise_weights() {
  const ModelSpec& model = plan_.model;
  for (std::size_t i = 0; i < buckets_->size(); ++i) {
    GradientBucket& b = (*buckets_)[i];
    std::vector<float> whole_bucket(b.layout.padded_size, 0.0f);
    for (const TensorSlot& t : b.layout.tensors) {
      const std::vector<float> whole = initial_tensor(model, options_.seed, t.name, t.rows, t.cols);
      for_each_shard_element(t, [&](std::size_t w, std::size_t l) { whole_bucket[t.offset + l] = whole[w]; });
    }
    buckets_->upload_weights(b, whole_bucket);
    // Host-optimized buckets keep their moments in host memory only (zeroed there).
    if (!chunk_manager_ || chunk_manager_->optimizes_on_device(int(i))) {
      b.moment1.assign(b.owned_size(), 0.0f);
      const bool second_moment = plan_.train.optimizer == Optimizer::adamw || plan_.train.optimizer == Optimizer::lamb;
      b.moment2.assign(second_moment ? b.owned_size() : 0, 0.0f);
    }
    if (b.shards_optimizer()) b.grad_shard.assign(b.shard_size(), 0.0f);
    if (chunk_manager_) chunk_manager_->bucket_drawn(int(i));
  }
}

// ---- one step ----

StepStats Trainer::step() {
  const auto start = std::chrono::steady_clock::now();
  const MemoryLedger::Scope counted(ledger_);
  timeline_.set_step(step_ + 1);
  if (chunk_manager_) chunk_manager_->step_started(step_);
  loss_sum_.assign(1, 0.0f);
  load_batch();
  buckets_->zero_gradients();
  // Each micro-batch's loss is a mean over its tokens; the gradient is of the mean over
  // the global batch, which the data-parallel sum completes. The auxiliary loss is a mean
  // over the global batch's micro-batches.
  const float grad_scale = 1.0f / float(std::size_t(loader_.sequences_per_rank()) * std::size_t(plan_.seq_len()) *
                                        std::size_t(plan_.parallel.dp));
  stage_->set_aux_loss_scale(1.0f / float(micro_batches_ * plan_.parallel.dp));
  pipeline_->run(tokens_.i32(), targets_.i32(), grad_scale, loss_sum_.f64());
  buckets_->finish_backward();
  pipeline_->wait_for_sends();
  optimizer_->reduce_gradient_norm();
  if (chunk_manager_) {
    chunk_manager_->update(optimizer_->adamw_params(step_ + 1), optimizer_->clip_factor());
  } else {
    {
      auto timed = timeline_.time(ops::step_op_id(ops::optimizer));
      optimizer_->step(step_ + 1);
    }
    buckets_->gather_updated_weights();
  }
  // The step's scalars come back once its work is done.
  double loss_sum = 0, norm_sq = 0;
  backend_.download(Stream::compute, &loss_sum, loss_sum_.data(), sizeof loss_sum);
  backend_.download(Stream::compute, &norm_sq, optimizer_->gradient_norm_sq().data(), sizeof norm_sq);
  backend_.synchronize();
  // The loss of the global batch: last-stage ranks hold the token losses of their
  // replica's share of the sequences (a block of each with sequence parallel).
  const int tokens_here = loader_.sequences_per_rank() * plan_.seq_len() / plan_.parallel.sp;
  const float loss = shape_.head && stage_->reports_loss() ? float(loss_sum / tokens_here) : 0.0f;
  // MoE: each micro-batch's auxiliary losses, counted on tensor rank 0 (every tensor rank
  // routes the same tokens), averaged over the global batch's micro-batches.
  const double aux_sum = stage_->take_aux_loss_sum();
  const double aux_here = shape_.tp_rank == 0 ? aux_sum / micro_batches_ : 0.0;
  float scalars[2] = {loss, float(aux_here)};
  grid_.world().all_reduce(scalars, 2);
  StepStats stats;
  stats.loss = scalars[0] / float(plan_.parallel.dp * plan_.parallel.sp);
  stats.aux_loss = scalars[1] / float(plan_.parallel.dp);
  stats.gradient_norm = float(std::sqrt(norm_sq));
  if (chunk_manager_) chunk_manager_->step_finished();
  timeline_.resolve();
  ++step_;
  stats.step = step_;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats.tokens_per_s = double(plan_.train.global_batch) * plan_.seq_len() / stats.seconds;
  return stats;
}

void Trainer::load_batch() {
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
  tokens_.upload(tokens);
  targets_.upload(targets);
}

// ---- the state outside a step ----

void Trainer::check_device_budget(const Plan& plan, std::size_t device_memory_bytes,
                                  const std::vector<double>& non_model_bytes_by_stage) {
  ChunkManager::check_device_budget(plan, device_memory_bytes, non_model_bytes_by_stage);
}

OffloadStats Trainer::offload_stats() const { return chunk_manager_ ? chunk_manager_->stats() : OffloadStats{}; }

std::size_t Trainer::kept_activation_bytes() const { return pipeline_->kept_activation_bytes(); }

std::map<std::string, float> Trainer::trust_ratios() {
  const MemoryLedger::Scope counted(ledger_);
  return optimizer_->trust_ratios();
}

std::vector<float> Trainer::whole_parameters() {
  const MemoryLedger::Scope counted(ledger_);
  return whole_model_->gather(false);
}

std::vector<float> Trainer::whole_gradients() {
  const MemoryLedger::Scope counted(ledger_);
  return whole_model_->gather(true);
}

void Trainer::set_whole_parameters(const std::vector<float>& whole) {
  const MemoryLedger::Scope counted(ledger_);
  whole_model_->scatter(whole);
}

float Trainer::padding_magnitude() {
  const MemoryLedger::Scope counted(ledger_);
  return whole_model_->padding_magnitude();
}

void Trainer::save(const std::string& dir) {
  const MemoryLedger::Scope counted(ledger_);
  checkpoints_->save(dir, step_, loader_.position());
}

void Trainer::load(const std::string& dir, int max_step) {
  const MemoryLedger::Scope counted(ledger_);
  const CheckpointMeta meta = checkpoints_->load(dir, max_step);
  step_ = meta.step;
  loader_.seek(meta.loader_position);
}

}  // namespace tessel::executor
