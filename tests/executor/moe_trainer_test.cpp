// Mixture-of-Experts models inside the trainer, under mpirun: every MoE layout equals one
// process, measures exactly its Program's op ids, sends the all-to-all bytes the Program
// counts, resumes from checkpoints bit-identically and never touches device memory from
// the host. Apart from parallel_test.cpp so the MoE suites run (and fail) on their own.
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
  EXPECT_TRUE(exits_0_and_prints(run_check(4, TESSEL_PARALLEL_CHECK_BINARY, "moe"),
                                 {{"  ok\n", 16}, {" ep2", 14}, {"capacity 0.5 losses", 2}, {"tokens dropped", 2},
                                  {"ok rank", 4}}));
}

TEST(MoeTrainer, MoeLayoutsMeasureExactlyTheProgramsOps) {
  EXPECT_TRUE(exits_0_and_prints(run_check(8, TESSEL_COVERAGE_CHECK_BINARY, "moe"), {{"  ok\n", 8}, {"ok rank", 8}}));
}

TEST(MoeTrainer, AllToAllBytesEqualTheProgramsAndCheckpointsResumeBitIdentically) {
  EXPECT_TRUE(exits_0_and_prints(run_check(4, TESSEL_MOE_TRAINER_CHECK_BINARY, ""),
                                 {{"  exact\n", 5}, {"gathered from the files exact", 3}, {"DIFFER", 0},
                                  {"bit-identical", 2 * 4 + 4},  // ranks of the three layouts
                                  {"ok rank", 4}}));
}

// The trainer never touches backend memory from the host with MoE blocks either: dp 2 ep 2
// and tp 2 (sequence parallel) dp 2 ep 2 ZeRO 3 on the fake device of device_check equal
// the CPU backend bit for bit.
TEST(MoeTrainer, MoeModelsOnAFakeDeviceEqualTheCpuBackend) {
  for (int ranks : {2, 4}) {
    EXPECT_TRUE(exits_0_and_prints(run_check(ranks, TESSEL_DEVICE_CHECK_BINARY, "moe"),
                                   {{"bit-identical", ranks}, {"DIFFER", 0}})) << ranks << " ranks";
  }
}
