// The cost model of Mixture-of-Experts plans: the all-to-all bytes the Program carries
// equal the planner's count, so do the tensor-parallel bytes with the backward's gate-
// gradient all-reduce, expert states shrink with ep, the profile's load imbalance
// slows the expert GEMMs, and the search ranks plans with ep > 1 for Mixtral.
#include <gtest/gtest.h>

#include "tessel/core/program.hpp"
#include "tessel/planner/cost_model.hpp"
#include "tessel/planner/search.hpp"
#include "tessel/profiles/collectives.hpp"
#include "tessel/profiles/profile.hpp"

using namespace tessel;
using namespace tessel::planner;

namespace {
Plan mixtral_plan(int dp, int ep, int tp, int zero) {
  Plan plan;
  plan.model = resolve_model("mixtral-8x7b");
  plan.model.layers = 4;  // small Program, same blocks
  plan.cluster = resolve_cluster("dgx-h100");
  plan.nodes = dp * tp / 8;
  plan.train.global_batch = 2 * dp;
  plan.parallel.dp = dp;
  plan.parallel.tp = tp;
  plan.parallel.ep = ep;
  plan.parallel.zero = zero;
  plan.parallel.micro_batch = 1;
  return plan;
}
}  // namespace

TEST(MoeCost, AllToAllBytesOfTheProgramEqualThePlannersCount) {
  for (auto [dp, ep, tp] : {std::array{8, 2, 1}, std::array{16, 8, 2}, std::array{8, 8, 1}}) {
    const Plan plan = mixtral_plan(dp, ep, tp, 1);
    const Program program = Program::lower(plan);
    double program_bytes = 0;
    for (const ProgramOp& op : program.stage(0).ops) {
      if (op.work.kind == OpKind::collective && op.work.group == CommGroup::ep) {
        program_bytes += op.work.count * op.work.bytes * profiles::bus_bandwidth_factor(op.work.collective, ep);
      }
    }
    const Estimate estimate = CostModel::for_plan(plan).estimate(plan.parallel);
    // tokens x top_k x hidden x 2 bytes, (ep-1)/ep of it leaving, 4 all-to-alls per block.
    const double expected = 2.0 * 4096 * 2 * 4096 * 2 * (ep - 1.0) / ep * 4 * 4;
    EXPECT_DOUBLE_EQ(program_bytes, expected) << dp << " " << ep << " " << tp;
    EXPECT_DOUBLE_EQ(estimate.comm.ep_bytes, expected) << dp << " " << ep << " " << tp;
    EXPECT_GT(estimate.time(TimeKind::ep_comm), 0);
  }
}

TEST(MoeCost, TheGateGradientAllReduceIsTensorTrafficTheProgramCarriesToo) {
  for (bool sequence_parallel : {false, true}) {
    Plan plan = mixtral_plan(16, 8, 2, 1);
    plan.parallel.tp_sequence_parallel = sequence_parallel;
    const Program program = Program::lower(plan);
    double program_tp_bytes = 0, gate_bytes = 0;
    for (const ProgramOp& op : program.stage(0).ops) {
      if (op.work.kind != OpKind::collective || op.work.group != CommGroup::tp) continue;
      const double bytes = op.work.count * op.work.bytes * profiles::bus_bandwidth_factor(op.work.collective, 2);
      program_tp_bytes += bytes;
      if (op.id.find("/bwd/moe.gate_grad") != std::string::npos) gate_bytes += bytes;
    }
    // 2 micro-batches x 4 MoE blocks, each 4096 tokens x top_k 2 f32 gate gradients,
    // all-reduced over tp 2 (bus factor 2 (tp-1)/tp = 1).
    EXPECT_DOUBLE_EQ(gate_bytes, 2.0 * 4 * 4096 * 2 * 4) << sequence_parallel;
    const Estimate estimate = CostModel::for_plan(plan).estimate(plan.parallel);
    // Under sequence parallel the planner adds the norms' partial-gradient sums once per
    // step, which the Program does not lower: only the per-micro-batch traffic compares.
    if (!sequence_parallel) {
      EXPECT_DOUBLE_EQ(estimate.comm.tp_bytes, program_tp_bytes);
    }
    EXPECT_GE(estimate.comm.tp_bytes, program_tp_bytes);
  }
}

TEST(MoeCost, ExpertStatesShrinkWithEpAndZeroOverWhatRemainsOfDp) {
  const Plan plan = mixtral_plan(16, 1, 1, 0);
  const CostModel model = CostModel::for_plan(plan);
  ParallelConfig p = plan.parallel;
  const ModelSpec& m = plan.model;
  const double experts = 4.0 * m.moe.experts * double(m.expert_parameters());
  const double others = double(m.parameter_count()) - experts;
  const double per_parameter = model.optimizer_bytes_per_parameter();
  EXPECT_DOUBLE_EQ(model.estimate(p).memory.optimizer_bytes, per_parameter * (others + experts));
  // ep 8: one expert of each block per rank.
  p.ep = 8;
  EXPECT_DOUBLE_EQ(model.estimate(p).memory.optimizer_bytes, per_parameter * (others + experts / 8));
  // ZeRO 1 shards the experts over dp / ep = 2 ranks, the rest over all 16.
  p.zero = 1;
  EXPECT_DOUBLE_EQ(model.estimate(p).memory.optimizer_bytes, per_parameter * (others / 16 + experts / 8 / 2));
}

TEST(MoeCost, TheProfilesLoadImbalanceSlowsTheExpertsAndTheCapacityCapsIt) {
  const Plan plan = mixtral_plan(8, 8, 1, 1);
  TrainSpec train = plan.train;
  profiles::Profile profile = profiles::shipped_profile("H100-SXM");
  const CostModel balanced(plan.model, train, plan.cluster, plan.nodes, 8, profile);
  profile.device.moe_load_imbalance = 1.5;
  const CostModel skewed(plan.model, train, plan.cluster, plan.nodes, 8, profile);
  const double gemm_balanced = balanced.estimate(plan.parallel).time(TimeKind::gemm);
  const double gemm_skewed = skewed.estimate(plan.parallel).time(TimeKind::gemm);
  EXPECT_GT(gemm_skewed, 1.3 * gemm_balanced);
  ModelSpec capped = plan.model;
  capped.moe.capacity_factor = 1.0;  // tokens past the capacity are dropped
  const CostModel dropping(capped, train, plan.cluster, plan.nodes, 8, profile);
  EXPECT_DOUBLE_EQ(dropping.estimate(plan.parallel).time(TimeKind::gemm), gemm_balanced);
}

TEST(MoeCost, TheSearchCoversEpAndRanksExpertParallelPlans) {
  TrainSpec train;
  train.global_batch = 256;
  const ClusterSpec cluster = resolve_cluster("dgx-h100");
  const CostModel model(resolve_model("mixtral-8x7b"), train, cluster, 8, 8, profiles::shipped_profile(cluster.device));
  SearchOptions options;
  options.top_k = 10;
  const SearchResult result = search(model, options);
  ASSERT_FALSE(result.best.empty());
  int expert_parallel = 0;
  for (const Estimate& e : result.best) expert_parallel += e.parallel.ep > 1 ? 1 : 0;
  EXPECT_GT(expert_parallel, 0);
  EXPECT_GT(result.best.front().time(TimeKind::ep_comm), 0);
}
