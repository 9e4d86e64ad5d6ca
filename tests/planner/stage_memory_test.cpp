// The planner's memory stage by stage (what `tessel compare` sets against each rank):
// the busiest stage is the estimate's device total when the stage that keeps the most
// activations also holds the most weights, never more than it; without a pipeline it is
// the estimate itself; 1F1B keeps pp - s micro-batches in flight on stage s.
#include <gtest/gtest.h>

#include <algorithm>

#include "tessel/core/error.hpp"
#include "tessel/planner/stage_memory.hpp"
#include "tessel/planner/search_inputs.hpp"
#include "tessel/profiles/profile.hpp"

using namespace tessel;
using namespace tessel::planner;

namespace {
CostModel gpt3_on_a100(int nodes) {
  TrainSpec train;
  train.global_batch = 64;
  const ClusterSpec cluster = resolve_cluster("dgx-a100");
  return CostModel(resolve_model("gpt3-175b"), train, cluster, nodes, cluster.gpus_per_node,
                   profiles::shipped_profile(cluster.device));
}

ParallelConfig layout(int dp, int pp, int tp, Schedule schedule, int zero) {
  ParallelConfig p;
  p.dp = dp;
  p.pp = pp;
  p.tp = tp;
  p.schedule = schedule;
  p.zero = zero;
  p.micro_batch = 1;
  p.tp_sequence_parallel = tp > 1;
  p.recompute = Recompute::selective;
  return p;
}
}  // namespace

TEST(StageMemory, WithoutAPipelineItIsTheEstimate) {
  const CostModel model = gpt3_on_a100(16);
  const ParallelConfig p = layout(16, 1, 8, Schedule::one_f_one_b, 1);
  const MemoryBreakdown estimate = model.estimate(p).memory;
  const MemoryBreakdown stage = stage_memory(model, p, 0);
  EXPECT_DOUBLE_EQ(stage.parameters_bytes, estimate.parameters_bytes);
  EXPECT_DOUBLE_EQ(stage.gradients_bytes, estimate.gradients_bytes);
  EXPECT_DOUBLE_EQ(stage.optimizer_bytes, estimate.optimizer_bytes);
  EXPECT_DOUBLE_EQ(stage.activations_bytes, estimate.activations_bytes);
  EXPECT_DOUBLE_EQ(stage.device_total_bytes(), estimate.device_total_bytes());
}

TEST(StageMemory, TheBusiestStageIsTheEstimatesDevice) {
  const CostModel model = gpt3_on_a100(16);
  for (Schedule schedule : {Schedule::one_f_one_b, Schedule::gpipe}) {
    for (int zero : {0, 1, 3}) {
      const ParallelConfig p = layout(2, 8, 8, schedule, zero);
      const MemoryBreakdown estimate = model.estimate(p).memory;
      double busiest = 0;
      for (int s = 0; s < p.pp; ++s) busiest = std::max(busiest, stage_memory(model, p, s).device_total_bytes());
      // The estimate takes the larger stage's extra weights and the larger activations
      // apart: with 1F1B the first stage has both, with GPipe the last stage keeps as
      // many micro-batches and the logits while the first holds the position table.
      const int busiest_activations = schedule == Schedule::gpipe ? p.pp - 1 : 0;
      EXPECT_DOUBLE_EQ(stage_memory(model, p, busiest_activations).activations_bytes, estimate.activations_bytes);
      if (schedule == Schedule::one_f_one_b) {
        EXPECT_NEAR(busiest, estimate.device_total_bytes(), 1e-9 * busiest) << "zero " << zero;
      } else {
        EXPECT_LE(busiest, estimate.device_total_bytes()) << "zero " << zero;
        EXPECT_GT(busiest, 0.99 * estimate.device_total_bytes()) << "zero " << zero;
      }
    }
  }
  EXPECT_THROW(stage_memory(model, layout(2, 8, 8, Schedule::one_f_one_b, 0), 8), Error);
}

TEST(StageMemory, OneFOneBKeepsPipelineMinusStageInFlight) {
  ParallelConfig p = layout(1, 4, 1, Schedule::one_f_one_b, 0);
  for (int s = 0; s < 4; ++s) EXPECT_EQ(in_flight_micro_batches(p, s, 8), 4 - s);
  EXPECT_EQ(in_flight_micro_batches(p, 0, 2), 2);
  p.schedule = Schedule::gpipe;
  for (int s = 0; s < 4; ++s) EXPECT_EQ(in_flight_micro_batches(p, s, 8), 8);
}

// An uneven split (core/stage_layers.hpp): 94 layers over 8 stages hold 11 on the first
// and the last and 12 between. Under 1F1B the first stage keeps 8 micro-batches of 11
// layers and the second 7 of 12; the estimate's activations are the busiest stage's.
TEST(StageMemory, AnUnevenSplitsBusiestStageIsTheEstimatesDevice) {
  TrainSpec train;
  train.global_batch = 64;
  const ClusterSpec cluster = resolve_cluster("dgx-a100");
  ModelSpec spec = resolve_model("gpt3-175b");
  spec.layers = 94;
  const CostModel model(spec, train, cluster, 16, cluster.gpus_per_node, profiles::shipped_profile(cluster.device));
  for (Schedule schedule : {Schedule::one_f_one_b, Schedule::gpipe}) {
    const ParallelConfig p = layout(2, 8, 8, schedule, 1);
    const MemoryBreakdown estimate = model.estimate(p).memory;
    double busiest_activations = 0;
    for (int s = 0; s < p.pp; ++s) {
      busiest_activations = std::max(busiest_activations, stage_memory(model, p, s).activations_bytes);
    }
    EXPECT_NEAR(estimate.activations_bytes, busiest_activations, 1e-9 * busiest_activations)
        << (schedule == Schedule::gpipe ? "gpipe" : "1f1b");
  }
}

