// selective-op recompute (torchtitan's op-level activation checkpointing): which work it
// replays, what it keeps, and where it is refused. The rule, from torchtitan's policy:
// every odd-numbered matmul of a block's forward (q, v, w1, w2 of q, k, v, o, w1, w3, w2;
// q, v, fc1 without a gate) and the attention kernel keep their outputs; the rest runs
// again in the backward.
#include <gtest/gtest.h>

#include "tessel/core/block_ops.hpp"
#include "tessel/core/error.hpp"
#include "tessel/planner/cost_model.hpp"
#include "tessel/profiles/profile.hpp"

using namespace tessel;
using namespace tessel::planner;

namespace {
CostModel fused_model(const std::string& model, int global_batch = 64) {
  TrainSpec train;
  train.global_batch = global_batch;
  train.kernels = Kernels::fused;
  const ClusterSpec cluster = resolve_cluster("dgx-h100");
  return CostModel(resolve_model(model), train, cluster, 1, cluster.gpus_per_node,
                   profiles::shipped_profile(cluster.device));
}

ParallelConfig fsdp(Recompute recompute, int tp = 1) {
  ParallelConfig p;
  p.dp = 8 / tp;
  p.tp = tp;
  p.zero = 3;
  p.recompute = recompute;
  return p;
}

// GEMM FLOPs the mode replays in one block, from the ops' replay shares.
double replayed_gemm_flops(const BlockOpTable& table, Recompute recompute) {
  double flops = 0;
  for (const BlockOp& op : table.block) {
    if (op.kind == OpKind::gemm) flops += op.replayed_share(recompute) * op.gemm_total_flops();
  }
  return flops;
}
}  // namespace

// Llama 3 8B (SwiGLU, 8 key-value heads): k (h x kv), o (h x h) and w3 (h x f) run
// again; a GPT block without a gate: k, o and fc2. Counted against the projections'
// shapes, not the ops' shares.
TEST(SelectiveOp, ReplaysTheEvenNumberedMatmulsOfEachBlock) {
  for (const char* name : {"llama3-8b", "gpt3-6.7b"}) {
    const ModelSpec model = resolve_model(name);
    const ParallelConfig p = fsdp(Recompute::selective_op);
    const BlockOpTable table = block_op_table(model, model.seq_len, p, Precision::bf16, Kernels::fused);
    const double tokens = table.tokens, h = model.hidden, kv = model.kv_dim(), f = model.ffn_hidden;
    const double expected = 2.0 * tokens * (h * kv + h * h + h * f);  // k, o, and w3 or fc2
    EXPECT_NEAR(replayed_gemm_flops(table, Recompute::selective_op), expected, 1e-9 * expected) << name;
    for (const BlockOp& op : table.block) {
      if (op.kind == OpKind::memory) {
        EXPECT_EQ(op.replayed_share(Recompute::selective_op), 1.0) << op.name;
      }
      if (op.kind == OpKind::attention) {
        EXPECT_EQ(op.replayed_share(Recompute::selective_op), 0.0) << op.name;
      }
    }
  }
}

// Its replay costs more than Megatron's selective (nothing, under fused attention) and
// less than full recompute (which also runs the attention kernel and the saved matmuls).
TEST(SelectiveOp, ItsReplayLiesBetweenSelectiveAndFull) {
  const CostModel model = fused_model("llama3-8b");
  auto replay_s = [&](Recompute recompute) {
    return model.layout_cost(fsdp(recompute)).backward_s[std::size_t(TimeKind::recompute)];
  };
  EXPECT_EQ(replay_s(Recompute::selective), 0.0);
  EXPECT_GT(replay_s(Recompute::selective_op), 0.25 * replay_s(Recompute::full));
  EXPECT_LT(replay_s(Recompute::selective_op), 0.75 * replay_s(Recompute::full));
}

// Under tensor parallelism the replayed ops read the forward's collectives again, as
// under full recompute; without a replay they run once.
TEST(SelectiveOp, TensorParallelCollectivesRunAgainAsUnderFullRecompute) {
  const CostModel model = fused_model("llama3-8b");
  auto tp_backward_s = [&](Recompute recompute) {
    return model.layout_cost(fsdp(recompute, 4)).backward_s[std::size_t(TimeKind::tp_comm)];
  };
  ASSERT_GT(tp_backward_s(Recompute::none), 0);
  EXPECT_DOUBLE_EQ(tp_backward_s(Recompute::selective_op), tp_backward_s(Recompute::full));
  EXPECT_GT(tp_backward_s(Recompute::selective_op), tp_backward_s(Recompute::none));
}

// It keeps the block input, q, v, w1's output, the gated MLP's output and the attention
// output with its statistics: fewer bytes than no recompute, more than full.
TEST(SelectiveOp, KeepsTheSavedMatmulOutputs) {
  const CostModel model = fused_model("llama3-8b");
  const ModelSpec& m = model.model();
  const ParallelConfig p = fsdp(Recompute::selective_op);
  const double tokens = double(p.micro_batch) * m.seq_len, h = m.hidden;
  const double per_sbh = 2 + 2 + 2 + 2.0 * m.kv_dim() / h + 2 + 2.0 * m.ffn_hidden / h;
  const double statistics = 4.0 * m.heads * tokens;
  EXPECT_DOUBLE_EQ(model.activation_bytes_per_layer(p), tokens * h * per_sbh + statistics);
  EXPECT_LT(model.activation_bytes_per_layer(p), model.activation_bytes_per_layer(fsdp(Recompute::none)));
  EXPECT_GT(model.activation_bytes_per_layer(p), model.activation_bytes_per_layer(fsdp(Recompute::full)));
}

// An MoE block's routed experts have no place in the rule: refused by name.
TEST(SelectiveOp, IsRefusedForMixtureOfExpertsModels) {
  Plan plan;
  plan.model = resolve_model("mixtral-8x7b");
  plan.cluster = resolve_cluster("dgx-h100");
  plan.nodes = 1;
  plan.train.global_batch = 8;
  plan.parallel.dp = 8;
  plan.parallel.recompute = Recompute::selective_op;
  EXPECT_EQ(check_layout(plan.model, plan.train, plan.parallel), Reject::moe_selective_op);
  try {
    plan.validate();
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("parallel.recompute: selective-op", 0), 0u) << e.what();
  }
}
