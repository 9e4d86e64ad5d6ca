// Every parallel layout of the CPU executor equals the single-process run
// (tests/executor/parallel_check.cpp, under mpirun with 8 ranks).
#include <gtest/gtest.h>

#include <string>

#include "fixtures.hpp"

namespace {
using tessel_executor_test::count_of;
// One suite of parallel_check on `ranks` processes.
std::string run_suite(const std::string& suite, int& status, int ranks = 8) {
  return tessel_executor_test::run_under_mpirun(ranks, TESSEL_PARALLEL_CHECK_BINARY, suite, status);
}
}  // namespace

// dp {1,2} x pp {1,2} x tp {1,2} x zero {0..3} x recompute {none, full}: 64 layouts.
TEST(Parallel, EveryLayoutOfTheMatrixEqualsOneProcess) {
  int status = -1;
  const std::string output = run_suite("matrix", status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(count_of(output, "  ok\n"), 64) << output;
  EXPECT_EQ(count_of(output, "ok rank"), 8) << output;
}

// GPipe, 1F1B and interleaved with tensor or data parallelism; uneven splits (one chunk
// per stage and interleaved); selective recompute;
// Megatron sequence parallel with ZeRO 1 and 3; bf16 activation storage under each
// recompute mode.
TEST(Parallel, EverySchedulePlusSelectiveRecomputeAndSequenceParallelEqualOneProcess) {
  int status = -1;
  const std::string output = run_suite("schedules", status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(count_of(output, "  ok\n"), 15) << output;
  EXPECT_EQ(count_of(output, " bf16 "), 3) << output;
  EXPECT_EQ(count_of(output, " gpipe "), 3) << output;
  EXPECT_EQ(count_of(output, " pp3 "), 2) << output;  // the uneven split (4 layers over 3 stages)
  EXPECT_EQ(count_of(output, " interleaved "), 3) << output;
  EXPECT_EQ(count_of(output, " layers6"), 1) << output;  // the uneven interleaved split
  EXPECT_EQ(count_of(output, "+sp"), 2) << output;
}

// LAMB and LARS with gradient clipping under ZeRO 1 and 3 with tp = pp = dp = 2 equal
// the unsharded run, and their trust ratios equal a direct computation.
TEST(Parallel, ShardedLambAndLarsEqualUnshardedWithTrustRatiosOfWholeTensors) {
  int status = -1;
  const std::string output = run_suite("optimizers", status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(count_of(output, "  ok\n"), 4) << output;
  EXPECT_EQ(count_of(output, "trust ratio"), 16) << output;
}

// Stop after step 2 and resume: steps 3..5 and the weights are bit-identical to an
// uninterrupted run on every rank, for dp = pp = 2, and for dp = pp = tp = 2 with ZeRO 3;
// and the whole model gathered from the checkpoint's files (tessel export-weights) is the
// trainer's own whole view bit for bit, for both and for 2D (dp 2, ZeRO 3), 2.5D and 3D.
TEST(Parallel, ResumedStepsAreBitIdenticalPerRank) {
  int status = -1;
  const std::string output = run_suite("checkpoint", status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(count_of(output, "bit-identical"), 4 + 8 + 5) << output;
  EXPECT_EQ(count_of(output, "gathered from the files bit-identical"), 5) << output;
  EXPECT_EQ(count_of(output, "DIFFER"), 0) << output;
}

// Ring self-attention: sp 2 and 4, alone and with 1d tp 2, and with dp, pp, ZeRO 1 and
// 3, selective and full recompute and Megatron's token split, equal one process.
TEST(Parallel, RingSelfAttentionLayoutsEqualOneProcess) {
  int status = -1;
  const std::string output = run_suite("sequence", status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(count_of(output, "  ok\n"), 8) << output;
  EXPECT_EQ(count_of(output, " sp4 "), 2) << output;
}

// The bytes and messages a rank sends per step through the ring, the tensor group, the
// gradient group and the pipeline equal the planner's prediction exactly: sp 2 and 4,
// with 1d tp, full recompute and pp; 1d tp with Megatron sequence parallel and ZeRO 1, 3;
// 2d with q = 2, with full recompute and with dp 2 and ZeRO 1 or 3; 2.5d with q = 2,
// depth 2; 3d with q = 2, with full recompute; Megatron sequence parallel with ZeRO 3
// (partial sums per micro-batch).
TEST(Parallel, TrafficEqualsThePlannersPrediction) {
  int status = -1;
  const std::string output = run_suite("traffic", status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(count_of(output, "  exact\n"), 16) << output;
  EXPECT_EQ(count_of(output, "DIFFER"), 0) << output;
}

// 2D (SUMMA) tensor parallelism with q = 2, alone, with dp 2 and ZeRO 1 or 3, with pp 2
// (1f1b with full recompute, gpipe), 2.5D with q = 2, depth 2, and 3D with q = 2 equal
// one process; kept activations per rank and token fall as 1/P (2D, 2.5D) and between
// 1/P and 1/P^(2/3) (3D) of the single process's (measured), where 1D on the same 4
// ranks keeps more.
TEST(Parallel, GridTensorParallelModesEqualOneProcess) {
  int status = -1;
  const std::string output = run_suite("grid", status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(count_of(output, "  ok\n"), 10) << output;
  EXPECT_EQ(count_of(output, " 2d "), 5) << output;
  EXPECT_EQ(count_of(output, " 2.5d "), 2) << output;
  EXPECT_EQ(count_of(output, " 3d "), 2) << output;
  EXPECT_EQ(count_of(output, "kept activations"), 5) << output;
}

// 2.5D (q = 2, depth 2) and 3D (q = 2) with dp 2 and ZeRO 1, and with pp 2, on 16 ranks.
TEST(Parallel, GridModesWithDataOrPipelineParallelEqualOneProcess) {
  int status = -1;
  const std::string output = run_suite("grid16", status, 16);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(count_of(output, "  ok\n"), 4) << output;
  EXPECT_EQ(count_of(output, " 3d "), 2) << output;
  EXPECT_EQ(count_of(output, "ok rank"), 16) << output;
}

// For every layout the executor runs (data, the three schedules, 1D with and without
// sequence parallel, 2D, 2.5D, 3D, ring self-attention, ZeRO 0-3, each recompute mode,
// bf16 storage, fused kernels), one step measures exactly the op ids of its Program.
TEST(Parallel, EveryLayoutMeasuresExactlyTheProgramsOps) {
  int status = -1;
  const std::string output = tessel_executor_test::run_under_mpirun(8, TESSEL_COVERAGE_CHECK_BINARY, "", status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(count_of(output, "  ok\n"), 20) << output;
  EXPECT_EQ(count_of(output, "ok rank"), 8) << output;
}

// Fused (flash-style) attention in every layout that touches attention: ring
// self-attention, tensor parallel modes, pipeline, recompute, bf16 storage, each equal to
// the single-process run with fused kernels.
TEST(Parallel, FusedKernelsInEveryLayoutEqualOneProcess) {
  int status = -1;
  const std::string output = run_suite("fused", status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(count_of(output, "  ok\n"), 9) << output;
  EXPECT_EQ(count_of(output, "ok rank"), 8) << output;
}

// A LLaMA-shaped model (RMSNorm, RoPE, 4 heads on 2 kv heads, SwiGLU, untied LM head, no
// biases) equals one process in the GPT's 64-layout matrix (dp x pp x tp x ZeRO 0-3 x
// recompute none / full), under GPipe and interleaved schedules, selective recompute,
// Megatron sequence parallel, ring self-attention (sp 2 and 4, with tp, dp, pp), fused
// kernels, bf16 storage, sharded LAMB, and 2D (alone, with dp 2 and ZeRO 3, with pp 2),
// 2.5D and 3D with q = 2.
TEST(Parallel, LlamaShapedModelInEveryLayoutEqualsOneProcess) {
  int status = -1;
  const std::string output = run_suite("llama", status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(count_of(output, "  ok\n"), 64 + 13 + 7) << output;
  EXPECT_EQ(count_of(output, "llama dp"), 64 + 13 + 7) << output;
  EXPECT_EQ(count_of(output, " 2d "), 3) << output;
  EXPECT_EQ(count_of(output, " 2.5d "), 2) << output;
  EXPECT_EQ(count_of(output, " 3d "), 2) << output;
  EXPECT_EQ(count_of(output, " sp4 "), 1) << output;
  EXPECT_EQ(count_of(output, "+sp"), 3) << output;
  EXPECT_EQ(count_of(output, " fused"), 3) << output;
  EXPECT_EQ(count_of(output, "ok rank"), 8) << output;
}

// The LLaMA-shaped model in 2.5D (q = 2, depth 2) with dp 2 and ZeRO 1, and in 3D (q = 2)
// with pp 2, on 16 ranks.
TEST(Parallel, LlamaShapedGridModesWithDataOrPipelineParallelEqualOneProcess) {
  int status = -1;
  const std::string output = run_suite("llama16", status, 16);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(count_of(output, "  ok\n"), 2) << output;
  EXPECT_EQ(count_of(output, "llama dp"), 2) << output;
  EXPECT_EQ(count_of(output, "ok rank"), 16) << output;
}

// The LLaMA-shaped model measures exactly its Program's op ids in each kind of layout:
// data with ZeRO 3, interleaved pipeline, Megatron sequence parallel, ring
// self-attention with tp and pp, selective recompute, fused kernels, bf16 storage, 2D,
// 2.5D, 3D.
TEST(Parallel, LlamaLayoutsMeasureExactlyTheProgramsOps) {
  int status = -1;
  const std::string output = tessel_executor_test::run_under_mpirun(8, TESSEL_COVERAGE_CHECK_BINARY, "llama", status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(count_of(output, "  ok\n"), 10) << output;
  EXPECT_EQ(count_of(output, "llama dp"), 10) << output;
  EXPECT_EQ(count_of(output, "ok rank"), 8) << output;
}

// The LLaMA-shaped model sends what the planner counts in the traffic suite's layouts:
// the ring carries k and v on the kv heads, RMSNorm over split rows sums one statistic
// each way, and there is no tied-embedding sum.
TEST(Parallel, LlamaTrafficEqualsThePlannersPrediction) {
  int status = -1;
  const std::string output = run_suite("llama_traffic", status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(count_of(output, "  exact\n"), 16) << output;
  EXPECT_EQ(count_of(output, "traffic llama "), 16) << output;
  EXPECT_EQ(count_of(output, "DIFFER"), 0) << output;
}
