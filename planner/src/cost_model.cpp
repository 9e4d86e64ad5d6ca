#include "tessel/planner/cost_model.hpp"

#include "cost_parts.hpp"
#include "stage_steps.hpp"

#include <algorithm>
#include <cmath>

#include "tessel/core/block_ops.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/fp8_model.hpp"
#include "tessel/core/chunk_plan.hpp"
#include "tessel/core/model_states.hpp"
#include "tessel/core/rank_layout.hpp"
#include "tessel/profiles/profile_store.hpp"

namespace tessel::planner {

std::string_view to_string(TimeKind kind) {
  static constexpr std::array<std::string_view, K(TimeKind::count)> kNames{
      "gemm", "attention", "elementwise", "recompute", "tp_comm", "sp_comm", "ep_comm",
      "pp_p2p", "pp_bubble", "dp_comm", "optimizer", "offload"};
  return kNames[K(kind)];
}

CostModel::CostModel(ModelSpec model, TrainSpec train, ClusterSpec cluster, int nodes, int gpus_per_node,
                     const profiles::Profile& profile)
    : model_(std::move(model)),
      train_(std::move(train)),
      cluster_(std::move(cluster)),
      nodes_(nodes),
      gpus_per_node_(gpus_per_node),
      costs_(profile, cluster_, nodes, gpus_per_node),
      seq_(effective_seq_len(model_, train_)),
      steps_cache_(std::make_shared<StepsCache>()),
      chunk_shapes_(std::make_shared<ChunkShapeCache>()) {
  costs_.device().check_precision(train_.precision);
  costs_.set_plan_kind(train_.framework, train_.kernels);
  if (train_.gradient_precision) {
    const std::string problem = gradient_precision_problem(train_.precision, *train_.gradient_precision);
    if (!problem.empty()) throw Error("train.gradient_precision: " + problem);
  }
  element_bytes_ = element_bytes(storage_precision(train_.precision));
  cpu_ranks_ = costs_.device().kind == "cpu";
  const ModelStateBytes states = model_state_bytes(train_.precision, train_.optimizer, train_.effective_gradient_precision());
  param_bytes_ = states.parameter;
  grad_bytes_ = states.gradient;
  optimizer_bytes_ = states.optimizer;
  optimizer_traffic_bytes_ = states.optimizer_traffic;
  chunk_states_ = chunk_state_bytes(train_);

  const double h = model_.hidden, kv = model_.kv_dim(), f = model_.ffn_hidden;
  const double mlp_out = model_.activation == Activation::swiglu ? 2 * f : f;
  // The four linears of a block as (in, out) features.
  const std::array<std::pair<double, double>, 4> linears{{{h, h + 2 * kv}, {h, h}, {h, mlp_out}, {f, h}}};
  double per_layer = 0;
  for (auto [in, out] : linears) per_layer += 2 * in * out;
  double layer_gemm_flops = model_.layers * per_layer;
  if (model_.moe.enabled()) {
    // An MoE block's MLP per token: the router, top_k routed experts and the shared ones.
    const MoeSpec& moe = model_.moe;
    const double fe = moe.expert_ffn_hidden, gated = model_.activation == Activation::swiglu ? 2.0 : 1.0;
    const double dense_mlp = 2 * h * mlp_out + 2 * f * h;
    const double moe_mlp = 2 * h * moe.experts + double(moe.top_k + moe.shared_experts) * (2 * h * gated * fe + 2 * fe * h);
    layer_gemm_flops += model_.moe_layers() * (moe_mlp - dense_mlp);
  }
  forward_gemm_flops_per_token_ = layer_gemm_flops + 2 * h * model_.vocab;
  forward_attention_flops_per_token_ = model_.layers * 4.0 * seq_ * h;
  model_flops_per_step_ = 3.0 * (forward_gemm_flops_per_token_ + forward_attention_flops_per_token_) *
                          double(train_.global_batch) * seq_;
}

CostModel CostModel::for_plan(const Plan& plan, const std::string& db_path) {
  return CostModel(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(),
                   profiles::resolve_profile(plan.cluster.device, db_path));
}

namespace {
// Per s*b*h, what selective-op keeps that no recompute does not: a gated MLP's w2 output,
// before its reduction a partial sum of the whole width on every 1D tensor rank, and
// under 1D sequence parallel the two reduce-scatter outputs.
double kept_only_by_selective_op_per_sbh(const ModelSpec& model, const ParallelConfig& p, const TensorSplits& split) {
  const bool one_d = p.tp_mode == TpMode::d1;
  const double w2_output = model.activation == Activation::swiglu ? 2.0 / (one_d ? 1.0 : split.activation) : 0.0;
  const double scattered = one_d && p.tp_sequence_parallel && p.tp > 1 ? 2.0 * 2.0 / p.tp : 0.0;
  return w2_output + scattered;
}
}  // namespace

double CostModel::activation_bytes_per_layer(const ParallelConfig& p, bool moe_block) const {
  return activation_bytes_per_layer(p, p.recompute, moe_block);
}

double CostModel::activation_bytes_per_layer(const ParallelConfig& p, Recompute recompute, bool moe_block) const {
  const TensorSplits split = tensor_splits(p);
  const double h = model_.hidden;
  const double tokens = double(p.micro_batch) * seq_ / p.sp;
  // Korthikanti et al. 2022, per s*b*h: replicated under 1D TP (norm inputs 4, QKV input
  // 2, fc1 input 2, two dropout masks 2) and split (Q 2, K and V 4*kv/h, projection input
  // 2, MLP intermediate 4f/h for GELU or 8f/h for SwiGLU), plus the score term 5as/h
  // (softmax output 2, dropout mask 1, dropout output 2), which fused (flash-style)
  // attention never stores: it keeps one fp32 log-sum-exp per row and head instead.
  const bool fused = train_.kernels == Kernels::fused;
  const double gated_widths = model_.activation == Activation::swiglu ? 8.0 : 4.0;
  double mlp = gated_widths * model_.ffn_hidden / h;
  // An MoE block keeps, instead of the dense MLP's intermediate, its top_k routed copies
  // of every token (dispatched input and combined output, 2 + 2, whole on every 1D tensor
  // rank: counted once per tensor rank, so multiplied back by the split below), the
  // experts' intermediates at the busiest rank's load, and the shared experts'.
  double moe_whole = 0;
  // fp8 training keeps a linear's input saved for its wgrad in fp8 (core/fp8_model.hpp):
  // 1 byte less per element of the QKV and fc1 inputs (replicated), of the projection
  // and fc2 inputs (split), and of an MoE block's dispatched expert inputs; the router
  // reads an MoE block's norm output in bf16, so that one stays.
  const double saved = train_.precision == Precision::fp8 ? fp8::kSavedInputSavingBytes : 0.0;
  double fp8_replicated = 2 * saved, fp8_split = saved * (1.0 + model_.ffn_hidden / h), fp8_whole = 0;
  if (moe_block) {
    const MoeSpec& moe = model_.moe;
    const double load = costs_.moe_load_factor(moe.capacity_factor);
    const double expert_widths = moe.expert_ffn_hidden / h * (moe.top_k * load + moe.shared_experts);
    mlp = gated_widths * expert_widths;
    moe_whole = 4.0 * moe.top_k * load;
    fp8_replicated = saved;
    fp8_split = saved * (1.0 + expert_widths);
    fp8_whole = saved * moe.top_k * load;
  }
  // Without dropout (train.dropout false) its two masks (1 byte per s*b*h each) and, of
  // the scores, the mask (1) and the dropped copy the value GEMM reads (2) are not kept:
  // that GEMM reads the softmax output itself.
  const double dropout_masks = train_.dropout ? 2.0 : 0.0;
  const double replicated = 8.0 + dropout_masks - fp8_replicated;
  moe_whole -= fp8_whole;
  const double split_part = 2.0 + 4.0 * model_.kv_dim() / h + 2.0 + mlp - fp8_split;
  const double score_bytes_per_element = train_.dropout ? 5.0 : 2.0;
  const double scores = fused ? 0.0 : score_bytes_per_element * model_.heads * seq_ / h;
  double replicated_split = split.activation, partitioned_split = split.activation;
  if (p.tp_mode == TpMode::d1 && !p.tp_sequence_parallel) partitioned_split = p.tp;
  const double statistics_bytes = fused ? 4.0 * model_.heads * tokens / partitioned_split : 0.0;
  double per_sbh = 0;
  switch (recompute) {
    case Recompute::none:
      per_sbh = replicated / replicated_split + (split_part + scores) / partitioned_split + moe_whole;
      break;
    case Recompute::selective:
      per_sbh = replicated / replicated_split + split_part / partitioned_split + moe_whole;
      break;
    case Recompute::full:
      return (element_bytes_ / 2.0) * tokens * h * 2.0 / replicated_split;  // only the block input is kept
    case Recompute::selective_op: {
      // What the policy saves (16-bit whatever the linears' precision): the block input;
      // q, v and w1's output (fc1's without a gate), split like the heads; the fused
      // attention kernel's output (materialised attention's products are no matmuls it
      // saves); and what no recompute keeps not (kept_only_by_selective_op_per_sbh).
      const double attention_output = fused ? 2.0 : 0.0;
      per_sbh = 2.0 / replicated_split + kept_only_by_selective_op_per_sbh(model_, p, split) +
                (2.0 + 2.0 * model_.kv_dim() / h + attention_output + 2.0 * model_.ffn_hidden / h) / partitioned_split;
      break;
    }
  }
  return (element_bytes_ / 2.0) * tokens * h * per_sbh + statistics_bytes;
}

double CostModel::rematerialised_bytes(const ParallelConfig& p, bool moe_block) const {
  if (p.recompute != Recompute::full && p.recompute != Recompute::selective_op) return 0;
  // The layer being recomputed rebuilds everything its backward reads, as without
  // recompute, less what it kept that no recompute keeps too (already counted among the
  // stored activations); selective-op's own kept tensors (w2's partial sum, the
  // reduce-scatter outputs) are no part of what no recompute holds, so they do not count
  // against the rebuilt layer.
  double shared = activation_bytes_per_layer(p, p.recompute, moe_block);
  if (p.recompute == Recompute::selective_op) {
    const double tokens = double(p.micro_batch) * seq_ / p.sp;
    shared -= (element_bytes_ / 2.0) * tokens * model_.hidden *
              kept_only_by_selective_op_per_sbh(model_, p, tensor_splits(p));
  }
  return std::max(0.0, activation_bytes_per_layer(p, Recompute::none, moe_block) - shared);
}

Estimate CostModel::estimate(const ParallelConfig& parallel) const {
  Estimate out;
  if (parallel.world_size() != gpus()) {
    out.parallel = parallel;
    out.reject = Reject::world_size;
    return out;
  }
  finish(parallel, layout_cost(parallel), out);
  out.cost_flags = costs_.flags();
  return out;
}

}  // namespace tessel::planner
