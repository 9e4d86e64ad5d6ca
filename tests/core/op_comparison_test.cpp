// Predicted against measured per op kind: kinds from ids, per-rank-per-step totals on
// each side, the median and spread over the measured steps, and the order by excess.
#include <gtest/gtest.h>

#include "tessel/core/op_comparison.hpp"

using namespace tessel;

TEST(OpComparison, OpKindsKeepThePhaseAndTheOp) {
  EXPECT_EQ(op_kind("mb3/L12/fwd/mlp.fc1"), "fwd mlp.fc1");
  EXPECT_EQ(op_kind("mb0/L0/recompute/attn.core"), "recompute attn.core");
  EXPECT_EQ(op_kind("step/optimizer"), "step optimizer");
  EXPECT_EQ(op_kind("optimizer"), "optimizer");
}

TEST(OpComparison, SpreadIsTheQuartiles) {
  const Spread s = spread_of({5, 1, 3, 2, 4});
  EXPECT_DOUBLE_EQ(s.minimum, 1);
  EXPECT_DOUBLE_EQ(s.lower_quartile, 2);
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.upper_quartile, 4);
  EXPECT_DOUBLE_EQ(s.maximum, 5);
  EXPECT_DOUBLE_EQ(spread_of({1, 2}).median, 1.5);
  EXPECT_DOUBLE_EQ(spread_of({}).maximum, 0);
}

TEST(OpComparison, KindsArePerRankPerStepAndSortedByExcess) {
  // Predicted: one rank (a folded simulation), fc1 in two micro-batches, 1 ms each; the
  // all-reduce 0.5 ms.
  const std::vector<TimedOp> predicted = {
      {0, Stream::compute, "mb0/L0/fwd/mlp.fc1", 0.000, 0.001},
      {0, Stream::compute, "mb1/L0/fwd/mlp.fc1", 0.001, 0.002},
      {0, Stream::dp_comm, "L0/dp/grad.all_reduce", 0.002, 0.0025},
  };
  // Measured: two ranks, three steps. fc1 totals per rank 2, 2.2 and 3 ms; the all-reduce
  // 4 ms on both ranks in every step; an op the simulator does not have.
  auto step = [](double fc1_rank0_s, double fc1_rank1_s) {
    return std::vector<TimedOp>{{0, Stream::compute, "mb0/L0/fwd/mlp.fc1", 0, fc1_rank0_s},
                                {1, Stream::compute, "mb0/L0/fwd/mlp.fc1", 0, fc1_rank1_s},
                                {0, Stream::dp_comm, "L0/dp/grad.all_reduce", 0, 0.004},
                                {1, Stream::dp_comm, "L0/dp/grad.all_reduce", 0, 0.004},
                                {0, Stream::copy, "step/extra", 0, 0.0002}};
  };
  const std::vector<OpKindComparison> kinds =
      compare_op_kinds(predicted, {step(0.002, 0.002), step(0.0022, 0.0022), step(0.002, 0.004)});
  ASSERT_EQ(kinds.size(), 3u);
  // The all-reduce exceeds most (3.5 ms), then fc1 (0.2 ms median), then the extra op.
  EXPECT_EQ(kinds[0].kind, "dp grad.all_reduce");
  EXPECT_EQ(kinds[0].stream, Stream::dp_comm);
  EXPECT_NEAR(kinds[0].predicted_s, 0.0005, 1e-12);
  EXPECT_NEAR(kinds[0].measured_s, 0.004, 1e-12);
  EXPECT_NEAR(kinds[0].ratio.median, 8.0, 1e-9);
  EXPECT_EQ(kinds[1].kind, "fwd mlp.fc1");
  EXPECT_EQ(kinds[1].op, "mlp.fc1");
  EXPECT_NEAR(kinds[1].predicted_s, 0.002, 1e-12);
  EXPECT_NEAR(kinds[1].measured_s, 0.0022, 1e-12);  // per rank: 2, 2.2, 3 ms
  EXPECT_NEAR(kinds[1].ratio.minimum, 1.0, 1e-9);
  EXPECT_NEAR(kinds[1].ratio.maximum, 1.5, 1e-9);
  EXPECT_EQ(kinds[2].kind, "step extra");
  EXPECT_EQ(kinds[2].predicted_s, 0.0);
  EXPECT_NEAR(kinds[2].measured_s, 0.0001, 1e-12);  // 0.2 ms on one of two ranks
  EXPECT_EQ(kinds[2].ratio.maximum, 0.0);           // nothing predicted: no ratio
}
