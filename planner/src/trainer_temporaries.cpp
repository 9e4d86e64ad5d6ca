// The trainer's temporaries: buffers a rank holds only within one layer's forward or
// backward (gradients of activations, attention scratch, the logits' gradient). The
// trainer keeps their capacity from layer to layer, so a rank holds one layer's set at
// once, whatever its number of layers or micro-batches in flight. Counted as workspace,
// beside the profile's workspace_bytes (the runtime outside the trainer's tensors),
// because they grow with the shapes and a constant cannot follow them: on the CPU suite
// they are 1.7-27 MiB per rank against a runtime of about 170 MiB.
//
// The counts are those of tessel's executor (executor/src/gpt_stage.cpp,
// attention_core.cpp, layout_megatron.cpp), per rank, in elements of the training
// precision (the CPU backend computes bf16 plans in fp32, twice these bytes; the CPU
// suite trains in fp32):
//   3 x scores     b a s s / (sp split_heads): the materialised scores, the gradient of
//                  the probabilities and of the scores (+2/sp with ring self-attention:
//                  one key block's scores and their gradient; +1 under selective
//                  recompute: the probabilities rebuilt in the backward; 0 with fused
//                  attention, which keeps none)
//   2 x ffn        b s f / (sp split): fc1's output gradient and the activation's
//                  (SwiGLU: f doubled, its two halves)
//   2 x qkv        b s (h + 2 kv) / (sp split): the forward's fused QKV output and its
//                  gradient
//   6 x per-head   b s h / (sp split): heads out, key copy, dq, dk, dv, their sum
//   6 x residual   b s h / (sp activation split): norm, projection and MLP outputs and
//                  their gradients, the stage's running gradient
//   1 x logits     b s V / (sp split), last stage only: the logits' gradient (none
//                  with tp 1, where the fused loss writes it over the logits).
// And, on CPU ranks, the MPI library's temporaries of the gradient all-reduces
// (reduction_scratch_bytes below), in the same process memory.
// Megatron-LM's report has no term for them (it multiplies by 1.05 for "optimizer and
// miscellaneous temporaries" in one of its two formulas); they are a few per cent of
// a large model's activations, and a constant share of a small one's.
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
  // CPU ranks reduce gradients over MPI, each bucket with a non-blocking in-place
  // all-reduce started as its backward ends: the library gives each one a temporary of
  // the message's size, and by the end of the backward every bucket's is in flight, so
  // the process holds the stage's gradient bytes once more (measured: dp 2 runs hold
  // 0.92-0.96 x the gradient bytes more than the same model on one rank). GPU ranks
  // reduce with NCCL, which needs no such temporary in device memory; ZeRO 2 and 3
  // reduce-scatter into a separate shard instead. Measured only with data parallelism:
  // a gradient group of ring self-attention ranks alone (dp 1, sp 2) holds no more than
  // one rank does, so the term follows dp, not the whole gradient group.
  if (!cpu_ranks_ || p.dp <= 1 || p.zero >= 2) return 0;
  return stage_gradient_bytes;
}

}  // namespace tessel::planner
