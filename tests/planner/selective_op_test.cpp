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

ParallelConfig fsdp(Recompute recompute, int tp = 1, bool sequence_parallel = false) {
  ParallelConfig p;
  p.dp = 8 / tp;
  p.tp = tp;
  p.tp_sequence_parallel = sequence_parallel;
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
    return model.layout_cost(fsdp(recompute)).dense.backward_s[std::size_t(TimeKind::recompute)];
  };
  EXPECT_EQ(replay_s(Recompute::selective), 0.0);
  EXPECT_GT(replay_s(Recompute::selective_op), 0.25 * replay_s(Recompute::full));
  EXPECT_LT(replay_s(Recompute::selective_op), 0.75 * replay_s(Recompute::full));
}

// The replayed ops read the forward's tensor-parallel collectives again: both all-reduces
// of a 1D block, as under full recompute; with sequence parallel the two all-gathers but
// not the two reduce-scatters, whose outputs the policy saves (equal sizes: half of full
// recompute's replayed traffic).
TEST(SelectiveOp, ReplaysTheTensorParallelCollectivesItDoesNotSave) {
  const CostModel model = fused_model("llama3-8b");
  auto tp_backward_s = [&](Recompute recompute, bool sequence_parallel) {
    return model.layout_cost(fsdp(recompute, 4, sequence_parallel)).dense.backward_s[std::size_t(TimeKind::tp_comm)];
  };
  ASSERT_GT(tp_backward_s(Recompute::none, false), 0);
  EXPECT_DOUBLE_EQ(tp_backward_s(Recompute::selective_op, false), tp_backward_s(Recompute::full, false));
  const double none_s = tp_backward_s(Recompute::none, true), full_s = tp_backward_s(Recompute::full, true);
  EXPECT_NEAR(tp_backward_s(Recompute::selective_op, true) - none_s, 0.5 * (full_s - none_s), 1e-9 * full_s);
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
  // 1D tp 4 with sequence parallel: the input and the two reduce-scatter outputs split by
  // tp, the w2 output a whole-width partial sum on every rank, the rest split by tp.
  const ParallelConfig sp = fsdp(Recompute::selective_op, 4, true);
  const double split_per_sbh = 2.0 / 4 + 2 + 2 * 2.0 / 4 + (2 + 2.0 * m.kv_dim() / h + 2 + 2.0 * m.ffn_hidden / h) / 4;
  EXPECT_DOUBLE_EQ(model.activation_bytes_per_layer(sp), tokens * h * split_per_sbh + statistics / 4);
  // The layer being replayed holds, in its backward, what no recompute keeps beyond the
  // tensors both keep (not w2's partial sum and the reduce-scatter outputs: 2 + 4/4).
  const double shared = model.activation_bytes_per_layer(sp) - tokens * h * (2 + 2 * 2.0 / 4);
  EXPECT_DOUBLE_EQ(model.layout_cost(sp).rematerialised_bytes,
                   model.activation_bytes_per_layer(fsdp(Recompute::none, 4, true)) - shared);
}

// An MoE block's routed experts have no place in the rule, nor has a partly replayed
// GEMM's pipelined collective (tp_comm_overlap): both refused by name.
TEST(SelectiveOp, IsRefusedWithMixtureOfExpertsOrTpCommOverlap) {
  ParallelConfig overlapped = fsdp(Recompute::selective_op, 4, true);
  overlapped.tp_comm_overlap = true;
  const ModelSpec llama = resolve_model("llama3-8b");
  TrainSpec train;
  train.global_batch = 64;
  EXPECT_EQ(check_layout(llama, train, overlapped), Reject::selective_op_scope);
  overlapped.recompute = Recompute::full;
  EXPECT_EQ(check_layout(llama, train, overlapped), Reject::none);

  Plan plan;
  plan.model = resolve_model("mixtral-8x7b");
  plan.cluster = resolve_cluster("dgx-h100");
  plan.nodes = 1;
  plan.train.global_batch = 8;
  plan.parallel.dp = 8;
  plan.parallel.recompute = Recompute::selective_op;
  EXPECT_EQ(check_layout(plan.model, plan.train, plan.parallel), Reject::selective_op_scope);
  try {
    plan.validate();
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("parallel.recompute: selective-op", 0), 0u) << e.what();
  }
}
