// Every parallel layout of the CPU executor equals the single-process run
// (tests/executor/parallel_check.cpp, under mpirun with 8 ranks).
#include <gtest/gtest.h>

#include <string>

#include "fixtures.hpp"

namespace {
using namespace tessel_executor_test;
// One suite of parallel_check on `ranks` processes.
CheckRun run_suite(const std::string& suite, int ranks = 8) {
  return run_check(ranks, TESSEL_PARALLEL_CHECK_BINARY, suite);
}
}  // namespace

// dp {1,2} x pp {1,2} x tp {1,2} x zero {0..3} x recompute {none, full}: 64 layouts.
TEST(Parallel, EveryLayoutOfTheMatrixEqualsOneProcess) {
  EXPECT_TRUE(exits_0_and_prints(run_suite("matrix"), {{"  ok\n", 64}, {"ok rank", 8}}));
}

// GPipe, 1F1B and interleaved with tensor or data parallelism; uneven splits (one chunk
// per stage and interleaved); selective recompute;
// Megatron sequence parallel with ZeRO 1 and 3; bf16 activation storage under each
// recompute mode.
TEST(Parallel, EverySchedulePlusSelectiveRecomputeAndSequenceParallelEqualOneProcess) {
  // " pp3 ": the uneven split (4 layers over 3 stages); " layers6": the uneven interleaved one.
  EXPECT_TRUE(exits_0_and_prints(run_suite("schedules"), {{"  ok\n", 15}, {" bf16 ", 3}, {" gpipe ", 3}, {" pp3 ", 2},
                                                          {" interleaved ", 3}, {" layers6", 1}, {"+sp", 2}}));
}

// LAMB and LARS with gradient clipping under ZeRO 1 and 3 with tp = pp = dp = 2 equal
// the unsharded run, and their trust ratios equal a direct computation.
TEST(Parallel, ShardedLambAndLarsEqualUnshardedWithTrustRatiosOfWholeTensors) {
  EXPECT_TRUE(exits_0_and_prints(run_suite("optimizers"), {{"  ok\n", 4}, {"trust ratio", 16}}));
}

// Stop after step 2 and resume: steps 3..5 and the weights are bit-identical to an
// uninterrupted run on every rank, for dp = pp = 2, and for dp = pp = tp = 2 with ZeRO 3;
// and the whole model gathered from the checkpoint's files (tessel export-weights) is the
// trainer's own whole view bit for bit, for both and for 2D (dp 2, ZeRO 3), 2.5D and 3D.
TEST(Parallel, ResumedStepsAreBitIdenticalPerRank) {
  EXPECT_TRUE(exits_0_and_prints(run_suite("checkpoint"),
                                 {{"bit-identical", 4 + 8 + 5}, {"gathered from the files bit-identical", 5},
                                  {"DIFFER", 0}}));
}

// Ring self-attention: sp 2 and 4, alone and with 1d tp 2, and with dp, pp, ZeRO 1 and
// 3, selective and full recompute and Megatron's token split, equal one process.
TEST(Parallel, RingSelfAttentionLayoutsEqualOneProcess) {
  EXPECT_TRUE(exits_0_and_prints(run_suite("sequence"), {{"  ok\n", 8}, {" sp4 ", 2}}));
}

// The bytes and messages a rank sends per step through the ring, the tensor group, the
// gradient group and the pipeline equal the planner's prediction exactly: sp 2 and 4,
// with 1d tp, full recompute and pp; 1d tp with Megatron sequence parallel and ZeRO 1, 3;
// 2d with q = 2, with full recompute and with dp 2 and ZeRO 1 or 3; 2.5d with q = 2,
// depth 2; 3d with q = 2, with full recompute; Megatron sequence parallel with ZeRO 3
// (partial sums per micro-batch).
TEST(Parallel, TrafficEqualsThePlannersPrediction) {
  EXPECT_TRUE(exits_0_and_prints(run_suite("traffic"), {{"  exact\n", 16}, {"DIFFER", 0}}));
}

// 2D (SUMMA) tensor parallelism with q = 2, alone, with dp 2 and ZeRO 1 or 3, with pp 2
// (1f1b with full recompute, gpipe), 2.5D with q = 2, depth 2, and 3D with q = 2 equal
// one process; kept activations per rank and token fall as 1/P (2D, 2.5D) and between
// 1/P and 1/P^(2/3) (3D) of the single process's (measured), where 1D on the same 4
// ranks keeps more.
TEST(Parallel, GridTensorParallelModesEqualOneProcess) {
  EXPECT_TRUE(exits_0_and_prints(run_suite("grid"),
                                 {{"  ok\n", 10}, {" 2d ", 5}, {" 2.5d ", 2}, {" 3d ", 2}, {"kept activations", 5}}));
}

// 2.5D (q = 2, depth 2) and 3D (q = 2) with dp 2 and ZeRO 1, and with pp 2, on 16 ranks.
TEST(Parallel, GridModesWithDataOrPipelineParallelEqualOneProcess) {
  EXPECT_TRUE(exits_0_and_prints(run_suite("grid16", 16), {{"  ok\n", 4}, {" 3d ", 2}, {"ok rank", 16}}));
}

// For every layout the executor runs (data, the three schedules, 1D with and without
// sequence parallel, 2D, 2.5D, 3D, ring self-attention, ZeRO 0-3, each recompute mode,
// bf16 storage, fused kernels), one step measures exactly the op ids of its Program.
TEST(Parallel, EveryLayoutMeasuresExactlyTheProgramsOps) {
  EXPECT_TRUE(exits_0_and_prints(run_check(8, TESSEL_COVERAGE_CHECK_BINARY, ""), {{"  ok\n", 20}, {"ok rank", 8}}));
}

// Fused (flash-style) attention in every layout that touches attention: ring
// self-attention, tensor parallel modes, pipeline, recompute, bf16 storage, each equal to
// the single-process run with fused kernels.
TEST(Parallel, FusedKernelsInEveryLayoutEqualOneProcess) {
  EXPECT_TRUE(exits_0_and_prints(run_suite("fused"), {{"  ok\n", 9}, {"ok rank", 8}}));
}

// A LLaMA-shaped model (RMSNorm, RoPE, 4 heads on 2 kv heads, SwiGLU, untied LM head, no
// biases) equals one process in the GPT's 64-layout matrix (dp x pp x tp x ZeRO 0-3 x
// recompute none / full), under GPipe and interleaved schedules, selective recompute,
// Megatron sequence parallel, ring self-attention (sp 2 and 4, with tp, dp, pp), fused
// kernels, bf16 storage, sharded LAMB, and 2D (alone, with dp 2 and ZeRO 3, with pp 2),
// 2.5D and 3D with q = 2.
TEST(Parallel, LlamaShapedModelInEveryLayoutEqualsOneProcess) {
  EXPECT_TRUE(exits_0_and_prints(run_suite("llama"),
                                 {{"  ok\n", 64 + 13 + 7}, {"llama dp", 64 + 13 + 7}, {" 2d ", 3}, {" 2.5d ", 2},
                                  {" 3d ", 2}, {" sp4 ", 1}, {"+sp", 3}, {" fused", 3}, {"ok rank", 8}}));
}

// The LLaMA-shaped model in 2.5D (q = 2, depth 2) with dp 2 and ZeRO 1, and in 3D (q = 2)
// with pp 2, on 16 ranks.
TEST(Parallel, LlamaShapedGridModesWithDataOrPipelineParallelEqualOneProcess) {
  EXPECT_TRUE(exits_0_and_prints(run_suite("llama16", 16), {{"  ok\n", 2}, {"llama dp", 2}, {"ok rank", 16}}));
}

// The LLaMA-shaped model measures exactly its Program's op ids in each kind of layout:
// data with ZeRO 3, interleaved pipeline, Megatron sequence parallel, ring
// self-attention with tp and pp, selective recompute, fused kernels, bf16 storage, 2D,
// 2.5D, 3D.
TEST(Parallel, LlamaLayoutsMeasureExactlyTheProgramsOps) {
  EXPECT_TRUE(exits_0_and_prints(run_check(8, TESSEL_COVERAGE_CHECK_BINARY, "llama"),
                                 {{"  ok\n", 10}, {"llama dp", 10}, {"ok rank", 8}}));
}

// The LLaMA-shaped model sends what the planner counts in the traffic suite's layouts:
// the ring carries k and v on the kv heads, RMSNorm over split rows sums one statistic
// each way, and there is no tied-embedding sum.
TEST(Parallel, LlamaTrafficEqualsThePlannersPrediction) {
  EXPECT_TRUE(exits_0_and_prints(run_suite("llama_traffic"),
                                 {{"  exact\n", 16}, {"traffic llama ", 16}, {"DIFFER", 0}}));
}
