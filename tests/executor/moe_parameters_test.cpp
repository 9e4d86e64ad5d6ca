// The parameters of a biased MoE model (bias true, as GPT's default is) as the executor
// holds them: its experts and shared experts have no biases and an MoE block has no
// mlp.* biases, so core's counts (ModelSpec, the Program's per-rank table) and the
// planner's memory must come out to the executor's tensors exactly, on one rank and on
// each tensor-parallel rank.
#include <gtest/gtest.h>

#include <numeric>

#include <fmt/format.h>

#include "fixtures.hpp"
#include "tessel/core/block_ops.hpp"
#include "tessel/core/stage_summary.hpp"
#include "tessel/executor/stage_weights.hpp"
#include "tessel/planner/stage_memory.hpp"
#include "tessel/profiles/collectives.hpp"

using namespace tessel;
using namespace tessel::executor;
using namespace tessel_executor_test;

namespace {
// A GPT (LayerNorm, GELU, biases) with an MoE MLP in every 2nd block: 4 experts of
// width 32 and one shared expert; with tp > 1, Megatron sequence parallel.
Plan biased_moe_plan(int tp = 1) {
  return Plan::from_json(Json::parse(fmt::format(R"({{"model": {{"name": "biased-moe", "layers": 2, "hidden": 32,
      "heads": 4, "vocab": 256, "seq_len": 16, "bias": true, "moe": {{"experts": 4, "top_k": 2,
      "expert_ffn_hidden": 32, "every": 2, "shared_experts": 1}}}}, "cluster": "local-cpu",
      "train": {{"global_batch": 4, "precision": "fp32", "optimizer": "adamw"}},
      "parallel": {{"micro_batch": 2, "tp": {}, "tp_sequence_parallel": {}}}}})",
                                                 tp, tp > 1)),
                         "");
}

std::size_t elements(const std::vector<TensorSlot>& tensors) {
  return std::accumulate(tensors.begin(), tensors.end(), std::size_t(0),
                         [](std::size_t sum, const TensorSlot& t) { return sum + t.size(); });
}
}  // namespace

TEST(MoeParameters, ABiasedMoeModelCountsTheExecutorsTensorsOnOneRank) {
  const Plan plan = biased_moe_plan();
  ASSERT_TRUE(plan.model.bias);
  const std::int64_t count = plan.model.parameter_count();
  EXPECT_EQ(elements(whole_model_tensors(plan.model)), std::size_t(count));
  OneRank run(plan, synthetic_corpus(4096, 1), 7);
  EXPECT_EQ(run.trainer.whole_parameters().size(), std::size_t(count));
  run.trainer.step();
  // fp32 weights and gradients, AdamW's two moments: measured and predicted to the byte.
  EXPECT_EQ(run.trainer.memory().peaks()[MemoryCategory::parameters], 4 * count);
  EXPECT_EQ(run.trainer.memory().peaks()[MemoryCategory::optimizer], 8 * count);
  const planner::CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(),
                                 profiles::shipped_profile("local-cpu"));
  const planner::MemoryBreakdown predicted = planner::stage_memory(model, plan.parallel, 0);
  EXPECT_DOUBLE_EQ(predicted.parameters_bytes, double(4 * count));
  EXPECT_DOUBLE_EQ(predicted.optimizer_bytes, double(8 * count));
}

// Tensor rank r of tp 2 holds the MoE block's bucket and its experts' bucket as the
// Megatron layout cuts them (attn.proj bias, norms and router whole; weights split);
// the Program's per-rank table says the same sizes, and under sequence parallel the
// same partial-gradient prefix (norms and late biases) the layout sums over the group.
TEST(MoeParameters, EachTensorRankHoldsWhatTheProgramsTableSays) {
  const int tp = 2, dense_layer = 0, moe_layer = 1;
  const Plan plan = biased_moe_plan(tp);
  ASSERT_TRUE(plan.model.moe.is_moe_layer(moe_layer));
  const BlockOpTable table = block_op_table(plan.model, plan.seq_len(), plan.parallel, plan.train.precision);
  ASSERT_EQ(table.partial_syncs.size(), 1u);
  const BlockOpTable::PartialSync& partial = table.partial_syncs.front();
  for (int r = 0; r < tp; ++r) {
    const Cut whole{1, 0, 1, 0, r}, by_columns{1, 0, tp, r, 0}, by_rows{tp, r, 1, 0, 0};
    const LayerCuts cuts{whole, by_columns, by_columns, by_rows};
    Bucket dense, block, experts;
    const std::size_t dense_partial = place_layer(dense, plan.model, dense_layer, cuts).first;
    const std::size_t moe_partial = place_layer(block, plan.model, moe_layer, cuts).first;
    place_experts(experts, plan.model, moe_layer, 0, plan.model.moe.experts, cuts);
    EXPECT_DOUBLE_EQ(table.layer_parameters, double(dense.size)) << "tensor rank " << r;
    EXPECT_DOUBLE_EQ(table.moe_layer_parameters, double(block.size)) << "tensor rank " << r;
    EXPECT_DOUBLE_EQ(table.expert_parameters, double(experts.size)) << "tensor rank " << r;
    EXPECT_DOUBLE_EQ(partial.layer_elements, double(dense_partial)) << "tensor rank " << r;
    EXPECT_DOUBLE_EQ(partial.moe_layer_elements, double(moe_partial)) << "tensor rank " << r;
  }
}

// Under sequence parallel the planner prices one all-reduce per block of what the
// layout sums: the dense block's partial prefix and the MoE block's (one bias fewer).
TEST(MoeParameters, ThePlannerPricesEachBlocksPartialGradientSumAsTheLayoutHoldsIt) {
  const int tp = 2;
  const Plan plan = biased_moe_plan(tp);
  const LayerCuts cuts{Cut{1, 0, 1, 0, 0}, Cut{1, 0, tp, 0, 0}, Cut{1, 0, tp, 0, 0}, Cut{tp, 0, 1, 0, 0}};
  Bucket dense, block;
  const double partial_elements =
      double(place_layer(dense, plan.model, 0, cuts).first + place_layer(block, plan.model, 1, cuts).first);
  const planner::CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(),
                                 profiles::shipped_profile("local-cpu"));
  // The planner prices the stage summary's grid sums (planner/src/stage_steps.cpp).
  const BlockOpTable table = block_op_table(plan.model, plan.seq_len(), plan.parallel, plan.train.precision);
  const StageSummary summary = summarize_stage(plan.model, plan.train, plan.parallel, table, 0);
  auto grid_sum_bytes = [](const BlockTraffic& traffic) {
    double bytes = 0;
    for (const BucketOp& op : traffic.ops) {
      if (op.in_chain && op.work.kind == OpKind::collective) bytes += op.work.bytes;
    }
    return bytes;
  };
  EXPECT_DOUBLE_EQ(grid_sum_bytes(summary.dense) + grid_sum_bytes(summary.moe), partial_elements * model.gradient_bytes());
}
