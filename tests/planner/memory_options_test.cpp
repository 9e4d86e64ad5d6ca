// The three memory choices that decide "fits" for real runs, each checked to change the
// prediction by exactly its formula's amount: gradient buffers in fp32 or the training
// precision (memory, ZeRO sharding, reduction bytes), attention scores stored only by
// unfused kernels, and full recompute's one rematerialised layer.
#include <gtest/gtest.h>

#include "tessel/core/error.hpp"
#include "tessel/planner/cost_model.hpp"
#include "tessel/planner/search_inputs.hpp"
#include "tessel/profiles/profile.hpp"

using namespace tessel;
using namespace tessel::planner;

namespace {
CostModel gpt3_on_a100(std::optional<Precision> gradient_precision, Kernels kernels = Kernels::unfused,
                       int nodes = 16) {
  TrainSpec train;
  train.global_batch = 64;
  train.gradient_precision = gradient_precision;
  train.kernels = kernels;
  const ClusterSpec cluster = resolve_cluster("dgx-a100");
  return CostModel(resolve_model("gpt3-175b"), train, cluster, nodes, cluster.gpus_per_node,
                   profiles::shipped_profile(cluster.device));
}

ParallelConfig megatron_layout(int dp, int pp, int tp, Recompute recompute) {
  return ParallelConfig{.dp = dp, .pp = pp, .tp = tp, .tp_sequence_parallel = true, .recompute = recompute};
}

double gib(double bytes) { return bytes / double(1 << 30); }
}  // namespace

// fp32 gradients add exactly 2 bytes per local parameter, divided by the gradient group
// from ZeRO 2 on, as the bf16 gradients themselves are.
TEST(GradientPrecision, Fp32AddsTwoBytesPerLocalParameterShardedAsGradients) {
  const CostModel bf16 = gpt3_on_a100(Precision::bf16), fp32 = gpt3_on_a100(Precision::fp32);
  const CostModel engine_default = gpt3_on_a100(std::nullopt);
  EXPECT_EQ(bf16.gradient_bytes(), 2);
  EXPECT_EQ(fp32.gradient_bytes(), 4);
  EXPECT_EQ(engine_default.gradient_bytes(), 4);
  for (int zero = 0; zero <= 3; ++zero) {
    ParallelConfig p = megatron_layout(2, 8, 8, Recompute::selective);
    p.zero = zero;
    const Estimate low = bf16.estimate(p), high = fp32.estimate(p);
    ASSERT_EQ(low.reject, Reject::none) << zero;
    const LayoutCost c = bf16.layout_cost(p);
    const double local_parameters = c.stage_parameters;
    const double shard = zero >= 2 ? p.gradient_group() : 1;
    // ZeRO 2 and 3 also hold one layer's whole gradient before its reduce-scatter and the
    // embedding and head whole beside their shard: in the gradient precision too.
    const double whole = zero >= 2 ? c.layer_parameters + (local_parameters - c.layers_on_stage * c.layer_parameters) : 0;
    EXPECT_NEAR(high.memory.gradients_bytes - low.memory.gradients_bytes, 2 * (local_parameters / shard + whole),
                1e-6 * local_parameters)
        << zero;
    EXPECT_DOUBLE_EQ(high.memory.parameters_bytes, low.memory.parameters_bytes) << zero;
    EXPECT_DOUBLE_EQ(high.memory.optimizer_bytes, low.memory.optimizer_bytes) << zero;
    EXPECT_DOUBLE_EQ(high.memory.activations_bytes, low.memory.activations_bytes) << zero;
    EXPECT_EQ(engine_default.estimate(p).memory.gradients_bytes, high.memory.gradients_bytes) << zero;
  }
  // The figure: GPT-3 175B at tp8 pp8 holds about 5 GiB more with fp32 gradients.
  const ParallelConfig p = megatron_layout(2, 8, 8, Recompute::selective);
  const double extra_gib = gib(fp32.estimate(p).memory.gradients_bytes - bf16.estimate(p).memory.gradients_bytes);
  EXPECT_GT(extra_gib, 4.9);
  EXPECT_LT(extra_gib, 5.4);
}

// A cost model built in code refuses what a plan file would: bf16 gradients of fp16 training.
TEST(GradientPrecision, CostModelRefusesAPrecisionNeitherFp32NorTheTrainings) {
  TrainSpec train;
  train.global_batch = 64;
  train.precision = Precision::fp16;
  train.gradient_precision = Precision::bf16;
  const ClusterSpec cluster = resolve_cluster("dgx-a100");
  try {
    CostModel(resolve_model("gpt2-124m"), train, cluster, 1, 8, profiles::shipped_profile(cluster.device));
    FAIL() << "accepted bf16 gradients for fp16 training";
  } catch (const Error& error) {
    EXPECT_STREQ(error.what(), "train.gradient_precision: must be fp32 or the training precision (fp16), got bf16");
  }
}

// The search's inputs (CLI and GUI) take the same choice; empty keeps the engines' default.
TEST(GradientPrecision, SearchInputsTakeItOrTheDefault) {
  SearchInputs inputs;
  inputs.model = "gpt2-124m";
  inputs.cluster = "dgx-a100";
  inputs.global_batch = 64;
  EXPECT_FALSE(inputs.to_plan().train.gradient_precision.has_value());
  inputs.gradient_precision = "bf16";
  EXPECT_EQ(inputs.to_plan().train.gradient_precision, Precision::bf16);
  inputs.precision = "fp16";
  try {
    inputs.to_plan();
    FAIL() << "accepted bf16 gradients for fp16 training";
  } catch (const Error& error) {
    EXPECT_STREQ(error.what(), "--gradient-precision: must be fp32 or the training precision (fp16), got bf16");
  }
  inputs.gradient_precision = "fp8";
  EXPECT_THROW(inputs.to_plan(), Error);
}

// The gradient reduction runs in the buffer's precision: without ZeRO every data-parallel
// byte is a gradient byte and doubles; the optimizer reads 2 more bytes per parameter.
TEST(GradientPrecision, ReductionBytesAndOptimizerTrafficFollowIt) {
  const CostModel bf16 = gpt3_on_a100(Precision::bf16), fp32 = gpt3_on_a100(Precision::fp32);
  const ParallelConfig p = megatron_layout(2, 8, 8, Recompute::selective);
  const Estimate low = bf16.estimate(p), high = fp32.estimate(p);
  ASSERT_GT(low.comm.dp_bytes, 0);
  EXPECT_DOUBLE_EQ(high.comm.dp_bytes, 2 * low.comm.dp_bytes);
  EXPECT_GT(high.time(TimeKind::optimizer), low.time(TimeKind::optimizer));
  // ZeRO 1: the reduce-scatter doubles, the weights' all-gather stays in bf16.
  ParallelConfig zero1 = p;
  zero1.zero = 1;
  const double low_bytes = bf16.estimate(zero1).comm.dp_bytes, high_bytes = fp32.estimate(zero1).comm.dp_bytes;
  EXPECT_GT(high_bytes, low_bytes);
  EXPECT_LT(high_bytes, 2 * low_bytes);
}

// Unfused kernels store the s x s term 5as/h (per s*b*h, split with the heads); fused
// ones store 4 bytes per row and head instead. Nothing else changes.
TEST(AttentionScores, UnfusedStoresExactlyTheScoreTermMore) {
  const CostModel unfused = gpt3_on_a100(std::nullopt, Kernels::unfused);
  const CostModel fused = gpt3_on_a100(std::nullopt, Kernels::fused);
  const ModelSpec& m = unfused.model();
  const double s = m.seq_len, h = m.hidden, a = m.heads, b = 1;
  for (bool sequence_parallel : {false, true}) {
    ParallelConfig p = megatron_layout(2, 8, 8, Recompute::none);
    p.tp_sequence_parallel = sequence_parallel;
    const double t = p.tp;
    const double scores = s * b * h * 5 * a * s / h / t, statistics = 4 * a * s * b / t;
    EXPECT_DOUBLE_EQ(unfused.activation_bytes_per_layer(p) - fused.activation_bytes_per_layer(p), scores - statistics);
    const Estimate stored = unfused.estimate(p), streamed = fused.estimate(p);
    const double layers_on_stage = double(m.layers) / p.pp;
    const double in_flight = std::min(stored.micro_batches, p.pp);  // 1F1B, first stage
    EXPECT_NEAR(stored.memory.activations_bytes - streamed.memory.activations_bytes,
                in_flight * layers_on_stage * (scores - statistics), 1.0);
    // Selective recompute drops the scores either way: the two agree but for the statistics.
    p.recompute = Recompute::selective;
    EXPECT_DOUBLE_EQ(fused.activation_bytes_per_layer(p) - unfused.activation_bytes_per_layer(p), statistics);
  }
}

// The time of the attention core follows the same choice: unfused kernels pay a softmax
// over the scores (and selective recompute replays it); fused ones do not.
TEST(AttentionScores, TimeFollowsTheSameChoice) {
  const CostModel unfused = gpt3_on_a100(std::nullopt, Kernels::unfused);
  const CostModel fused = gpt3_on_a100(std::nullopt, Kernels::fused);
  const ParallelConfig p = megatron_layout(2, 8, 8, Recompute::selective);
  const Estimate stored = unfused.estimate(p), streamed = fused.estimate(p);
  EXPECT_LT(streamed.time(TimeKind::elementwise), stored.time(TimeKind::elementwise));
  EXPECT_LT(streamed.time(TimeKind::recompute), stored.time(TimeKind::recompute));
  EXPECT_DOUBLE_EQ(streamed.time(TimeKind::gemm), stored.time(TimeKind::gemm));
}

// Full recompute keeps each layer's input (2sbh/t) and, during the backward, the one layer
// being recomputed: its activations as without recompute, less the input already kept.
TEST(FullRecompute, PeakHoldsOneRematerialisedLayer) {
  for (Kernels kernels : {Kernels::unfused, Kernels::fused}) {
    const CostModel model = gpt3_on_a100(std::nullopt, kernels);
    ParallelConfig p = megatron_layout(2, 8, 8, Recompute::full);
    const ModelSpec& m = model.model();
    const double sbh = double(m.seq_len) * m.hidden;
    const double input = 2 * sbh / p.tp;
    EXPECT_DOUBLE_EQ(model.activation_bytes_per_layer(p), input);
    const double one_layer = model.activation_bytes_per_layer(p, Recompute::none);
    EXPECT_DOUBLE_EQ(model.rematerialised_bytes(p), one_layer - input);
    const Estimate full = model.estimate(p);
    p.recompute = Recompute::none;
    const Estimate none = model.estimate(p);
    EXPECT_DOUBLE_EQ(model.rematerialised_bytes(p), 0);
    // Same stage, same in-flight micro-batches: the difference is the stored layers' and
    // the one rematerialised layer.
    const double layers_on_stage = double(m.layers) / p.pp;
    const double in_flight = std::min(full.micro_batches, p.pp);
    EXPECT_NEAR(none.memory.activations_bytes - full.memory.activations_bytes,
                in_flight * layers_on_stage * (one_layer - input) - (one_layer - input), 1.0);
  }
  // With pp 1 and the Korthikanti closed form: sbh/t * (34 + 5as/h) - 2sbh/t, unfused.
  const CostModel model = gpt3_on_a100(std::nullopt, Kernels::unfused, 1);
  const ModelSpec& m = model.model();
  const double s = m.seq_len, h = m.hidden, a = m.heads, t = 8;
  EXPECT_NEAR(model.rematerialised_bytes(megatron_layout(1, 1, 8, Recompute::full)),
              s * h / t * (34 + 5 * a * s / h) - 2 * s * h / t, 1e-3);
}
