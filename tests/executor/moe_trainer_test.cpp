// Mixture-of-Experts models inside the trainer, under mpirun: every MoE layout equals one
// process (parallel_check moe), measures exactly its Program's op ids (coverage_check
// moe), sends the all-to-all bytes the Program counts and resumes from checkpoints
// bit-identically (moe_trainer_check) and never touches device memory from the host
// (device_check moe). Apart from parallel_test.cpp so that the MoE
// suites run (and fail) on their own.
#include <gtest/gtest.h>

#include <string>

#include "fixtures.hpp"

using namespace tessel_executor_test;

// GELU and SwiGLU (with a shared expert) MoE models: dp 2 ep 2, dp 4 ep 2 ZeRO 1, pp 2 ep 2,
// tp 2 ep 2 (dp 2; with sequence parallel and ZeRO 3), ep 1 with ZeRO 2, ep 4, full and
// selective recompute, fused attention, the interleaved schedule: losses within 1e-5 of one process over 5 steps, gradients within 1e-4. Then
// capacity 0.5, where tokens are dropped (the reference's losses change), with dp 2 ep 2
// and dp 4 ep 2: each rank routes its own micro-batches under ceil(0.5 x tokens x top_k /
// experts) per expert, as the single process does for the same micro-batches.
TEST(MoeTrainer, EveryMoeLayoutEqualsOneProcessAlsoWhenTokensAreDropped) {
  int status = -1;
  const std::string output = run_under_mpirun(4, TESSEL_PARALLEL_CHECK_BINARY, "moe", status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(count_of(output, "  ok\n"), 16) << output;
  EXPECT_EQ(count_of(output, " ep2"), 14) << output;
  EXPECT_EQ(count_of(output, "capacity 0.5 losses"), 2) << output;
  EXPECT_EQ(count_of(output, "tokens dropped"), 2) << output;
  EXPECT_EQ(count_of(output, "ok rank"), 4) << output;
}

TEST(MoeTrainer, MoeLayoutsMeasureExactlyTheProgramsOps) {
  int status = -1;
  const std::string output = run_under_mpirun(8, TESSEL_COVERAGE_CHECK_BINARY, "moe", status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(count_of(output, "  ok\n"), 8) << output;
  EXPECT_EQ(count_of(output, "ok rank"), 8) << output;
}

TEST(MoeTrainer, AllToAllBytesEqualTheProgramsAndCheckpointsResumeBitIdentically) {
  int status = -1;
  const std::string output = run_under_mpirun(4, TESSEL_MOE_TRAINER_CHECK_BINARY, "", status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(count_of(output, "  exact\n"), 5) << output;
  EXPECT_EQ(count_of(output, "gathered from the files exact"), 3) << output;
  EXPECT_EQ(count_of(output, "DIFFER"), 0) << output;
  EXPECT_EQ(count_of(output, "bit-identical"), 2 * 4 + 4) << output;  // ranks of the three layouts
  EXPECT_EQ(count_of(output, "ok rank"), 4) << output;
}

// The trainer never touches backend memory from the host with MoE blocks either: dp 2 ep 2
// and tp 2 (sequence parallel) dp 2 ep 2 ZeRO 3 on the fake device of device_check equal
// the CPU backend bit for bit.
TEST(MoeTrainer, MoeModelsOnAFakeDeviceEqualTheCpuBackend) {
  for (int ranks : {2, 4}) {
    int status = -1;
    const std::string output = run_under_mpirun(ranks, TESSEL_DEVICE_CHECK_BINARY, "moe", status);
    EXPECT_EQ(status, 0) << output;
    EXPECT_EQ(count_of(output, "bit-identical"), ranks) << ranks << " ranks\n" << output;
    EXPECT_EQ(count_of(output, "DIFFER"), 0) << output;
  }
}
