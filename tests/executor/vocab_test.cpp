// The padded vocabulary inside the executor (tests/executor/vocab_check.cpp under mpirun
// with 8 ranks): GPT-2's 50,257 tokens train in every tensor layout and equal one process,
// a GPU's padding changes no loss or real gradient, and padded checkpoints resume exactly.
#include <gtest/gtest.h>

#include <string>

#include "fixtures.hpp"

namespace {
using namespace tessel_executor_test;
CheckRun run_suite(const std::string& suite) { return run_check(8, TESSEL_VOCAB_CHECK_BINARY, suite); }
}  // namespace

// tp 2 (1D), 1D with sequence parallel, dp and ZeRO 1, 2D (q = 2), 3D (q = 2) and LLaMA's
// untied head with pp 2, on tables padded to 50,258 rows; then the GPU's padding (every
// vocabulary block a multiple of 128 rows) in one process, in tp 2 with ZeRO 2 and for
// LLaMA in tp 2: each within 1e-5 (losses) and 1e-4 (gradients) of one process without
// any padding, and every padding element of every rank still 0 after 5 steps.
TEST(Vocabulary, Gpt2VocabularyTrainsInEveryLayoutAndPaddingChangesNothing) {
  // 50304 rows: the GPU's padding in one process, 393 x 128.
  EXPECT_TRUE(exits_0_and_prints(run_suite("layouts"),
                                 {{"  ok\n", 8}, {"padded to 50258 ", 5}, {"padded to 50304 ", 1}, {"ok rank", 8}}));
}

// LAMB with tp 2, dp 2 and ZeRO 3 (padded to 50,258), tp 2 x pp 2 x dp 2 with ZeRO 1 and
// LLaMA in 2D under the GPU's padding: resumed steps and weights bit for bit per rank,
// the checkpoint gathered from its files equal to the trainer's whole model, and a resume
// under another padding refused with the field named.
TEST(Vocabulary, PaddedCheckpointsResumeExactlyAndGatherWhole) {
  EXPECT_TRUE(exits_0_and_prints(run_suite("checkpoint"),
                                 {{"gathered from the files bit-identical", 3},
                                  {"weights bit-identical, other padding refused", 4 + 8 + 4}, {"DIFFER", 0}}));
}
