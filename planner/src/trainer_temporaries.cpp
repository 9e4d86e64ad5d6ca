// The executor's temporaries, priced as workspace: buffers a rank holds only within one layer's
// forward or backward (activation gradients, attention scratch, the logits' gradient), reused
// from layer to layer, so a rank holds one layer's set whatever its layers or micro-batches.
// A profile's constant workspace cannot follow them because they grow with the shapes. The
// counts follow executor/src/gpt_stage.cpp and attention_core.cpp; docs/MEMORY.md lists them.
#include <algorithm>

#include "tessel/core/block_ops.hpp"
#include "tessel/planner/cost_model.hpp"

namespace tessel::planner {

double CostModel::trainer_temporaries_bytes(const ParallelConfig& p, bool last_stage) const {
  const TensorSplits split = tensor_splits(p);
  const double tokens = double(p.micro_batch) * seq_ / p.sp;
  const double h = model_.hidden, kv = model_.kv_dim();
  const double gated = model_.activation == Activation::swiglu ? 2.0 : 1.0;
  const double heads_split = split.gemm;
  double scores = 0;
  if (train_.kernels == Kernels::unfused) {
    const double count = 3.0 + (p.sp > 1 ? 2.0 / p.sp : 0.0) + (p.recompute == Recompute::selective ? 1.0 : 0.0);
    scores = count * model_.heads / heads_split * tokens * seq_;  // tokens: b s / sp
  }
  const double ffn = 2.0 * gated * tokens * model_.ffn_hidden / split.gemm;
  const double qkv = 2.0 * tokens * (h + 2.0 * kv) / split.gemm;
  const double per_head = 6.0 * tokens * h / split.gemm;
  const double residual = 6.0 * tokens * h / split.activation;
  const double logits = last_stage && p.tp > 1 ? tokens * model_.vocab / split.gemm : 0.0;
  return element_bytes_ * (scores + ffn + qkv + per_head + residual + logits);
}

double CostModel::reduction_scratch_bytes(const ParallelConfig& p, double stage_gradient_bytes) const {
  // CPU ranks' non-blocking in-place MPI all-reduces each get a library temporary of the
  // bucket's size, all in flight by the end of the backward: the stage's gradient bytes
  // once more. NCCL needs none, ZeRO 2-3 reduce-scatter into a shard, and ring
  // self-attention ranks alone (sp 2, dp 1) showed none, so the term follows dp
  // (docs/MEMORY.md, "MPI's all-reduce temporaries").
  if (!cpu_ranks_ || p.dp <= 1 || p.zero >= 2) return 0;
  return stage_gradient_bytes;
}

}  // namespace tessel::planner
