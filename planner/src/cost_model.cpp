#include "tessel/planner/cost_model.hpp"

#include "cost_parts.hpp"

#include <algorithm>
#include <cmath>

#include "tessel/core/block_ops.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/model_states.hpp"
#include "tessel/core/rank_layout.hpp"
#include "tessel/profiles/profile_store.hpp"

namespace tessel::planner {

std::string_view to_string(TimeKind kind) {
  static constexpr std::array<std::string_view, K(TimeKind::count)> kNames{
      "gemm", "attention", "elementwise", "recompute", "tp_comm", "sp_comm",
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
      seq_(effective_seq_len(model_, train_)) {
  if (train_.gradient_precision) {
    const std::string problem = gradient_precision_problem(train_.precision, *train_.gradient_precision);
    if (!problem.empty()) throw Error("train.gradient_precision: " + problem);
  }
  element_bytes_ = element_bytes(train_.precision);
  const ModelStateBytes states = model_state_bytes(train_.precision, train_.optimizer, train_.effective_gradient_precision());
  param_bytes_ = states.parameter;
  grad_bytes_ = states.gradient;
  optimizer_bytes_ = states.optimizer;
  optimizer_traffic_bytes_ = states.optimizer_traffic;

  const double h = model_.hidden, kv = model_.kv_dim(), f = model_.ffn_hidden;
  const double mlp_out = model_.activation == Activation::swiglu ? 2 * f : f;
  linears_ = {{{h, h + 2 * kv}, {h, h}, {h, mlp_out}, {f, h}}};
  double per_layer = 0;
  for (auto [in, out] : linears_) per_layer += 2 * in * out;
  forward_gemm_flops_per_token_ = model_.layers * per_layer + 2 * h * model_.vocab;
  forward_attention_flops_per_token_ = model_.layers * 4.0 * seq_ * h;
  model_flops_per_step_ = 3.0 * (forward_gemm_flops_per_token_ + forward_attention_flops_per_token_) *
                          double(train_.global_batch) * seq_;
}

CostModel CostModel::for_plan(const Plan& plan, const std::string& db_path) {
  return CostModel(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(),
                   profiles::resolve_profile(plan.cluster.device, db_path));
}

double CostModel::activation_bytes_per_layer(const ParallelConfig& p) const {
  return activation_bytes_per_layer(p, p.recompute);
}

double CostModel::activation_bytes_per_layer(const ParallelConfig& p, Recompute recompute) const {
  const TensorSplits split = tensor_splits(p);
  const double h = model_.hidden;
  const double tokens = double(p.micro_batch) * seq_ / p.sp;
  // Korthikanti et al. 2022, per s*b*h: replicated under 1D TP (norm inputs 4, QKV input
  // 2, fc1 input 2, two dropout masks 2) and split (Q 2, K and V 4*kv/h, projection input
  // 2, MLP intermediate 4f/h for GELU or 8f/h for SwiGLU), plus the score term 5as/h
  // (softmax output 2, dropout mask 1, dropout output 2), which fused (flash-style)
  // attention never stores: it keeps one fp32 log-sum-exp per row and head instead.
  const bool fused = train_.kernels == Kernels::fused;
  const double replicated = 10.0;
  const double mlp = (model_.activation == Activation::swiglu ? 8.0 : 4.0) * model_.ffn_hidden / h;
  const double split_part = 2.0 + 4.0 * model_.kv_dim() / h + 2.0 + mlp;
  const double scores = fused ? 0.0 : 5.0 * model_.heads * seq_ / h;
  double replicated_split = split.activation, partitioned_split = split.activation;
  if (p.tp_mode == TpMode::d1 && !p.tp_sequence_parallel) partitioned_split = p.tp;
  const double statistics_bytes = fused ? 4.0 * model_.heads * tokens / partitioned_split : 0.0;
  double per_sbh = 0;
  switch (recompute) {
    case Recompute::none:
      per_sbh = replicated / replicated_split + (split_part + scores) / partitioned_split;
      break;
    case Recompute::selective:
      per_sbh = replicated / replicated_split + split_part / partitioned_split;
      break;
    case Recompute::full:
      return (element_bytes_ / 2.0) * tokens * h * 2.0 / replicated_split;  // only the block input is kept
  }
  return (element_bytes_ / 2.0) * tokens * h * per_sbh + statistics_bytes;
}

double CostModel::rematerialised_bytes(const ParallelConfig& p) const {
  if (p.recompute != Recompute::full) return 0;
  // The layer being recomputed rebuilds everything its backward reads, as without
  // recompute; its input is already counted among the stored block inputs.
  return activation_bytes_per_layer(p, Recompute::none) - activation_bytes_per_layer(p, Recompute::full);
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
