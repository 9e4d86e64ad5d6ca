// Folding against the full run: data-parallel replicas and tensor-parallel ranks folded into
// the ones that stand for them must give the step of every rank simulated. Each simulation
// runs in a child process (SimGrid: one engine per process).
#include <gtest/gtest.h>

#include <cmath>

#include "in_child.hpp"
#include "tessel/profiles/profile.hpp"
#include "tessel/simulator/simulation.hpp"

using namespace tessel;

namespace {
struct Outcome {
  double step_s = -1;
  int simulated_ranks = 0;
  int platform_nodes = 0;
};

Outcome simulate_in_child(const Plan& plan, const simulator::SimulationOptions& options) {
  return test::in_child(
      [&] {
        const auto result = simulator::simulate(Program::lower(plan), profiles::shipped_profile(plan.cluster.device), options);
        return Outcome{result.step_time_s, result.simulated_ranks, result.platform_nodes};
      },
      Outcome{});
}

Plan plan_of(const char* json) { return Plan::from_json(Json::parse(json), ""); }

// Folded and aggregated step time over the unfolded, unaggregated one (or -1).
double folding_ratio(const Plan& plan) {
  simulator::SimulationOptions full;
  full.fold = full.aggregate = false;
  const double folded = simulate_in_child(plan, {}).step_s;
  const double unfolded = simulate_in_child(plan, full).step_s;
  return folded > 0 && unfolded > 0 ? folded / unfolded : -1;
}

// Tensor folding on against off, all else alike: the steps agree to 0.1 % and the folded
// run simulates `fold` times fewer ranks.
::testing::AssertionResult tensor_folding_exact(const Plan& plan, int fold, simulator::SimulationOptions options = {}) {
  options.fold_tensor = true;
  const Outcome folded = simulate_in_child(plan, options);
  options.fold_tensor = false;
  const Outcome unfolded = simulate_in_child(plan, options);
  if (!(folded.step_s > 0) || !(unfolded.step_s > 0)) {
    return ::testing::AssertionFailure() << "a simulation failed: folded " << folded.step_s << " s, unfolded "
                                         << unfolded.step_s << " s";
  }
  if (std::abs(folded.step_s / unfolded.step_s - 1.0) > 1e-3) {
    return ::testing::AssertionFailure() << "folded step " << folded.step_s << " s against " << unfolded.step_s << " s";
  }
  if (folded.simulated_ranks * fold != unfolded.simulated_ranks) {
    return ::testing::AssertionFailure() << folded.simulated_ranks << " ranks folded, " << unfolded.simulated_ranks
                                         << " unfolded, expected " << fold << "x fewer";
  }
  return ::testing::AssertionSuccess();
}
}  // namespace

// Folded replicas and aggregated ring steps against every rank and every step simulated.
TEST(Folding, SixtyFourGpusMatchTheUnfoldedUnaggregatedRun) {
  EXPECT_NEAR(folding_ratio(plan_of(R"({"model": "gpt2-774m", "cluster": "dgx-h100", "nodes": 8,
      "train": {"global_batch": 256}, "parallel": {"dp": 16, "pp": 2, "tp": 2, "micro_batch": 2, "zero": 1}})")), 1.0, 0.01);
}

TEST(Folding, TwoHundredFiftySixGpusMatchTheUnfoldedUnaggregatedRun) {
  EXPECT_NEAR(folding_ratio(plan_of(R"({"model": "gpt3-6.7b", "cluster": "dgx-a100", "nodes": 32,
      "train": {"global_batch": 64}, "parallel": {"dp": 8, "pp": 4, "tp": 8, "micro_batch": 1, "zero": 1}})")), 1.0, 0.01);
}

// Four two-rank tensor groups share a node's uplink with their data-parallel rings.
TEST(Folding, TensorPairsSharingANodeMatchEveryTensorRank) {
  EXPECT_TRUE(tensor_folding_exact(plan_of(R"({"model": "gpt2-774m", "cluster": "dgx-h100", "nodes": 8,
      "train": {"global_batch": 256}, "parallel": {"dp": 16, "pp": 2, "tp": 2, "micro_batch": 2, "zero": 1}})"), 2));
}

// A node-wide group with Megatron's sequence parallelism, ZeRO-1 and pipeline sends
// between nodes, as in the 1024-GPU speed target.
TEST(Folding, NodeWideTensorGroupsMatchEveryTensorRank) {
  EXPECT_TRUE(tensor_folding_exact(plan_of(R"({"model": "gpt3-6.7b", "cluster": "dgx-a100", "nodes": 8,
      "train": {"global_batch": 64}, "parallel": {"dp": 2, "pp": 4, "tp": 8, "tp_sequence_parallel": true,
      "zero": 1, "recompute": "selective", "micro_batch": 1}})"), 8));
}

// Ring self-attention across nodes (tp4 x sp4 spans two nodes), interleaved, without
// overlap and without contention.
TEST(Folding, TensorRanksBesideASequenceRingMatchEveryTensorRank) {
  const Plan plan = plan_of(R"({"model": "gpt3-6.7b", "cluster": "dgx-h100", "nodes": 8,
      "train": {"global_batch": 32}, "parallel": {"dp": 2, "pp": 2, "tp": 4, "tp_sequence_parallel": true, "sp": 4,
      "zero": 1, "micro_batch": 1, "schedule": "interleaved", "virtual_stages": 2}})");
  EXPECT_TRUE(tensor_folding_exact(plan, 4));
  simulator::SimulationOptions sequential;
  sequential.overlap = false;
  EXPECT_TRUE(tensor_folding_exact(plan, 4, sequential));
  simulator::SimulationOptions free;
  free.contention_free = true;
  EXPECT_TRUE(tensor_folding_exact(plan, 4, free));
}

// ZeRO's per-micro-batch collectives beside the tensor rings: ZeRO-2's reduce-scatters over a
// sequence ring that spans two nodes, and ZeRO-3's gathers over data-parallel rings across
// eight nodes, interleaved.
TEST(Folding, ZeroShardedPlansMatchEveryTensorRank) {
  EXPECT_TRUE(tensor_folding_exact(plan_of(R"({"model": "gpt3-6.7b", "cluster": "dgx-h100", "nodes": 4,
      "train": {"global_batch": 32}, "parallel": {"dp": 1, "pp": 2, "tp": 4, "sp": 4, "zero": 2, "micro_batch": 1}})"), 4));
  EXPECT_TRUE(tensor_folding_exact(plan_of(R"({"model": "gpt3-6.7b", "cluster": "dgx-h100", "nodes": 8,
      "train": {"global_batch": 32}, "parallel": {"dp": 8, "pp": 2, "tp": 4, "tp_sequence_parallel": true, "zero": 3,
      "micro_batch": 1, "schedule": "interleaved", "virtual_stages": 2}})"), 4));
}

// Offload copies share one host-memory link per node: every tensor rank is kept.
TEST(Folding, OffloadKeepsEveryTensorRank) {
  EXPECT_TRUE(tensor_folding_exact(plan_of(R"({"model": "gpt2-774m", "cluster": "dgx-h100", "nodes": 1,
      "train": {"global_batch": 16}, "parallel": {"dp": 2, "pp": 1, "tp": 4, "zero": 1, "offload": "optimizer",
      "micro_batch": 1}})"), 1));
}

// Only the nodes that hold a simulated rank or receive one of its flows are built; the step
// is the one of the platform with every node. gpt2-774m dp16 pp2 tp2 on 8 nodes folds to
// the replicas of node 0 (stage 0) and node 4 (stage 1), whose data-parallel rings send to
// nodes 1 and 5.
TEST(Folding, APrunedPlatformGivesTheStepOfEveryNode) {
  const Plan plan = plan_of(R"({"model": "gpt2-774m", "cluster": "dgx-h100", "nodes": 8,
      "train": {"global_batch": 256}, "parallel": {"dp": 16, "pp": 2, "tp": 2, "micro_batch": 2, "zero": 1}})");
  simulator::SimulationOptions whole;
  whole.prune_platform = false;
  const Outcome pruned = simulate_in_child(plan, {});
  const Outcome every = simulate_in_child(plan, whole);
  EXPECT_EQ(pruned.platform_nodes, 4);
  EXPECT_EQ(every.platform_nodes, 8);
  ASSERT_GT(every.step_s, 0);
  EXPECT_NEAR(pruned.step_s / every.step_s, 1.0, 1e-9);
}

// 16,384 data-parallel ranks over 2048 nodes fold into node 0, whose rings reach node 1:
// two nodes built instead of 2048.
TEST(Folding, TwoThousandNodesBuildOnlyTheTwoThatFlowsReach) {
  const Outcome outcome = simulate_in_child(plan_of(R"({"model": "gpt2-124m", "cluster": "dgx-h100", "nodes": 2048,
      "train": {"global_batch": 16384}, "parallel": {"dp": 16384, "zero": 1, "micro_batch": 1}})"), {});
  EXPECT_GT(outcome.step_s, 0);
  EXPECT_EQ(outcome.platform_nodes, 2);
}
