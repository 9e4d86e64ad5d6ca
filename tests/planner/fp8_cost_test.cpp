// fp8 training (core/fp8_model.hpp) in the analytic model: the linears' GEMMs priced from
// the profile's fp8 curve and everything else from bf16's, the casts at the streaming
// rate, and the memory terms by their formulas; fp8 refused where the device has no
// fp8 tensor cores and with a 2D/2.5D/3D tensor grid.
#include <gtest/gtest.h>

#include <algorithm>

#include "tessel/core/block_ops.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/fp8_model.hpp"
#include "tessel/core/op_names.hpp"
#include "tessel/planner/cost_model.hpp"
#include "tessel/profiles/profile.hpp"

using namespace tessel;
using namespace tessel::planner;

namespace {
CostModel model_on(const std::string& model, const std::string& cluster, Precision precision, int nodes = 1,
                   int global_batch = 64, bool fp8_parameters = false) {
  TrainSpec train;
  train.global_batch = global_batch;
  train.precision = precision;
  train.fp8_param_gather = fp8_parameters;
  const ClusterSpec spec = resolve_cluster(cluster);
  return CostModel(resolve_model(model), train, spec, nodes, spec.gpus_per_node, profiles::shipped_profile(spec.device));
}

ParallelConfig layout(int dp, int pp, int tp, bool sequence_parallel = false) {
  ParallelConfig p;
  p.dp = dp;
  p.pp = pp;
  p.tp = tp;
  p.tp_sequence_parallel = sequence_parallel;
  return p;
}

bool is_linear(std::string_view name) {
  for (const ops::LinearOps& linear : {ops::attn_qkv, ops::attn_proj, ops::mlp_fc1, ops::mlp_fc2}) {
    if (name == linear.gemm) return true;
  }
  return false;
}
}  // namespace

TEST(Fp8, TheFp8CurveIsTheProfilesFp8SamplesAndTwiceBf16sRateOnH100) {
  const profiles::Profile profile = profiles::shipped_profile("H100-SXM");
  const ClusterSpec cluster = resolve_cluster("dgx-h100");
  const profiles::CostLookup costs(profile, cluster, 1, cluster.gpus_per_node);
  int fp8_samples = 0;
  for (const profiles::KernelSample& s : profile.kernels) {
    if (s.op != profiles::KernelOp::gemm || s.precision != "fp8") continue;
    ++fp8_samples;
    EXPECT_NEAR(costs.gemm_time_s(s.m, s.n, s.k, Precision::fp8), s.seconds, 1e-12 * s.seconds) << s.m;
  }
  EXPECT_EQ(fp8_samples, 8);
  EXPECT_DOUBLE_EQ(profile.device.peak_flops_per_s(Precision::fp8), 1979e12);
  // The datasheet curve is bf16's efficiency at the fp8 peak: 1979 / 989.4 times faster.
  const double flops = 2.0 * 4096 * 4096 * 4096;
  EXPECT_NEAR(costs.gemm_seconds(flops, Precision::bf16) / costs.gemm_seconds(flops, Precision::fp8), 1979 / 989.4, 1e-3);
}

TEST(Fp8, LinearGemmsArePricedFromTheFp8CurveAndTheRestFromBf16s) {
  const CostModel fp8 = model_on("llama3-8b", "dgx-h100", Precision::fp8);
  const ParallelConfig p = layout(4, 1, 2, true);
  const BlockOpTable table = block_op_table(fp8.model(), fp8.seq_len(), p, Precision::fp8, Kernels::unfused);
  double linear_s = 0;
  int linears = 0, casts = 0;
  for (const BlockOp& op : table.block) {
    if (op.kind == OpKind::gemm) {
      EXPECT_EQ(op.precision, is_linear(op.name) ? Precision::fp8 : Precision::bf16) << op.name;
      linear_s += op.count * fp8.costs().gemm_time_s(op.m, op.n, op.k, Precision::fp8);
      ++linears;
    }
    if (op.kind == OpKind::attention) {
      EXPECT_EQ(op.precision, Precision::bf16);
    }
    casts += op.name.ends_with(".fp8_cast");
  }
  EXPECT_EQ(linears, 4);
  EXPECT_EQ(casts, 4);
  for (const BlockOp& op : table.head) {
    if (op.kind == OpKind::gemm) {
      EXPECT_EQ(op.precision, Precision::bf16) << "the LM head stays bf16";
    }
  }
  // The stage's forward GEMM time: its layers' fp8 linears and the bf16 head.
  const LayoutCost c = fp8.layout_cost(p);
  const BlockOp& head = *std::find_if(table.head.begin(), table.head.end(),
                                      [](const BlockOp& op) { return op.kind == OpKind::gemm; });
  const double head_s = fp8.costs().gemm_time_s(head.m, head.n, head.k, Precision::bf16);
  const std::size_t gemm = std::size_t(TimeKind::gemm), elementwise = std::size_t(TimeKind::elementwise);
  EXPECT_NEAR(c.dense.forward_s[gemm], linear_s, 1e-12 * linear_s);
  EXPECT_NEAR(c.head.forward_s[gemm], head_s, 1e-12 * head_s);
  // The same layout in bf16 spends more on GEMMs and none on casts.
  const CostModel bf16 = model_on("llama3-8b", "dgx-h100", Precision::bf16);
  const LayoutCost b = bf16.layout_cost(p);
  EXPECT_LT(c.dense.forward_s[gemm], b.dense.forward_s[gemm]);
  EXPECT_GT(c.dense.forward_s[elementwise], b.dense.forward_s[elementwise]);
}

TEST(Fp8, CastsStreamTheInputForwardAndTheOutputGradientBackward) {
  const CostModel fp8 = model_on("llama3-8b", "dgx-h100", Precision::fp8);
  const BlockOpTable table = block_op_table(fp8.model(), fp8.seq_len(), layout(8, 1, 1), Precision::fp8);
  for (std::size_t i = 0; i + 1 < table.block.size(); ++i) {
    const BlockOp& cast = table.block[i];
    if (!cast.name.ends_with(".fp8_cast")) continue;
    const BlockOp& gemm = table.block[i + 1];  // each cast comes right before its GEMM
    EXPECT_EQ(std::string(cast.name), std::string(gemm.name) + ".fp8_cast");
    EXPECT_EQ(cast.kind, OpKind::memory);
    EXPECT_TRUE(cast.library_kernel) << cast.name;
    EXPECT_FALSE(gemm.library_kernel);
    EXPECT_DOUBLE_EQ(cast.bytes, 4.0 * gemm.m * gemm.k);                  // bf16 in, fp8 and its transpose out
    EXPECT_DOUBLE_EQ(cast.bytes * cast.backward, 4.0 * gemm.m * gemm.n);  // the output gradient
  }
}

TEST(Fp8, WeightCopiesAddTwoBytesPerLinearWeightAndTheScalingState) {
  const CostModel fp8 = model_on("llama3-8b", "dgx-h100", Precision::fp8);
  const CostModel bf16 = model_on("llama3-8b", "dgx-h100", Precision::bf16);
  const ModelSpec& m = fp8.model();
  for (const ParallelConfig& p : {layout(8, 1, 1), layout(2, 2, 2, true), layout(1, 4, 2)}) {
    const Estimate a = fp8.estimate(p), b = bf16.estimate(p);
    // Local linear weights on the stage: qkv, proj, fc1 (SwiGLU: two halves), fc2, split by tp.
    const double h = m.hidden, kv = m.kv_dim(), f = m.ffn_hidden;
    const double per_layer = (h * (h + 2 * kv) + h * h + h * 2 * f + f * h) / p.tp;
    const double layers = double(m.layers) / p.pp;
    const double expected = layers * per_layer * fp8::kWeightCopyBytes + layers * 4 * fp8::kScalingStateBytesPerLinear;
    EXPECT_DOUBLE_EQ(a.memory.parameters_bytes - b.memory.parameters_bytes, expected) << p.summary();
    EXPECT_DOUBLE_EQ(a.memory.gradients_bytes, b.memory.gradients_bytes) << "fp32 main gradients either way";
    EXPECT_DOUBLE_EQ(a.memory.optimizer_bytes, b.memory.optimizer_bytes) << "master weights and moments unchanged";
    // The once-per-step weight cast: 4 bytes per local linear weight at the library's
    // streaming rate.
    EXPECT_NEAR(a.time(TimeKind::optimizer) - b.time(TimeKind::optimizer),
                fp8.costs().library_memory_time_s(layers * per_layer * fp8::kWeightCastBytesPerStep), 1e-12);
  }
}

// Transformer Engine's casts are the same kernels under every framework: a calibrated
// memory scale (the framework's own elementwise ops) moves the rest of the streaming
// time, not theirs.
TEST(Fp8, TheCastsKeepTheLibraryRateUnderACalibratedMemoryScale) {
  CostModel fp8 = model_on("llama3-8b", "dgx-h100", Precision::fp8);
  CostModel bf16 = model_on("llama3-8b", "dgx-h100", Precision::bf16);
  const ParallelConfig p = layout(8, 1, 1);
  auto cast_s = [&] {
    return fp8.estimate(p).time(TimeKind::elementwise) - bf16.estimate(p).time(TimeKind::elementwise);
  };
  const double datasheet_s = cast_s();
  const double framework_ops_s = bf16.estimate(p).time(TimeKind::elementwise);
  ASSERT_GT(datasheet_s, 0) << "the casts are elementwise time of their own";
  profiles::Calibration slow_memory;
  slow_memory.memory_efficiency_scale = 0.5;
  fp8.set_calibration(slow_memory);
  bf16.set_calibration(slow_memory);
  EXPECT_NEAR(bf16.estimate(p).time(TimeKind::elementwise), 2 * framework_ops_s, 1e-9 * framework_ops_s)
      << "the framework's own ops slow down";
  EXPECT_NEAR(cast_s(), datasheet_s, 1e-9 * datasheet_s);
}

TEST(Fp8, UnderZero3OnlyTheGatheredLayersHoldFp8CopiesCastAfterEveryGather) {
  const CostModel fp8 = model_on("llama3-8b", "dgx-h100", Precision::fp8);
  const CostModel bf16 = model_on("llama3-8b", "dgx-h100", Precision::bf16);
  const ModelSpec& m = fp8.model();
  ParallelConfig p = layout(8, 1, 1);
  p.zero = 3;
  const Estimate a = fp8.estimate(p), b = bf16.estimate(p);
  const double h = m.hidden, kv = m.kv_dim(), f = m.ffn_hidden;
  const double per_layer = h * (h + 2 * kv) + h * h + h * 2 * f + f * h;
  EXPECT_DOUBLE_EQ(a.memory.parameters_bytes - b.memory.parameters_bytes,
                   2 * per_layer * fp8::kWeightCopyBytes + m.layers * 4 * fp8::kScalingStateBytesPerLinear);
  EXPECT_NEAR(a.time(TimeKind::optimizer), b.time(TimeKind::optimizer), 1e-12) << "no once-per-step cast";
  // Elementwise: the activation casts, and the weights' cast in every forward and backward.
  const double weight_casts = a.micro_batches * 2 * fp8.costs().memory_time_s(m.layers * per_layer * 4.0);
  // One micro-batch of the stage's elementwise work: its blocks', the head's and the embedding's.
  auto stage_elementwise_s = [&](const CostModel& model) {
    const LayoutCost c = model.layout_cost(p);
    const std::size_t k = std::size_t(TimeKind::elementwise);
    double out = 0;
    for (const auto& [pass, count] : {std::pair{&c.dense, double(m.layers)}, std::pair{&c.head, 1.0},
                                      std::pair{&c.embedding, 1.0}}) {
      out += count * (pass->forward_s[k] + pass->backward_s[k]);
    }
    return out;
  };
  const double activation_casts = (stage_elementwise_s(fp8) - stage_elementwise_s(bf16)) * a.micro_batches;
  EXPECT_NEAR(a.time(TimeKind::elementwise) - b.time(TimeKind::elementwise), weight_casts + activation_casts,
              1e-9 * a.time(TimeKind::elementwise));
}

TEST(Fp8, SavedLinearInputsAreKeptInFp8) {
  const CostModel fp8 = model_on("gpt3-6.7b", "dgx-h100", Precision::fp8);
  const CostModel bf16 = model_on("gpt3-6.7b", "dgx-h100", Precision::bf16);
  const double h = fp8.model().hidden, f = fp8.model().ffn_hidden, s = fp8.seq_len();
  for (int tp : {1, 2}) {
    for (bool sequence_parallel : {false, true}) {
      if (sequence_parallel && tp == 1) continue;
      ParallelConfig p = layout(8 / tp, 1, tp, sequence_parallel);
      for (Recompute recompute : {Recompute::none, Recompute::selective}) {
        p.recompute = recompute;
        // One byte less per element of the QKV and fc1 inputs (replicated) and of the
        // projection and fc2 inputs (split by tp).
        const double replicated_split = sequence_parallel ? tp : 1;
        const double saved = s * h * (2.0 / replicated_split + (1.0 + f / h) / tp);
        EXPECT_DOUBLE_EQ(bf16.activation_bytes_per_layer(p) - fp8.activation_bytes_per_layer(p), saved)
            << p.summary();
      }
      p.recompute = Recompute::full;
      EXPECT_DOUBLE_EQ(bf16.activation_bytes_per_layer(p), fp8.activation_bytes_per_layer(p)) << "block inputs: bf16";
    }
  }
}

TEST(Fp8, IsRefusedByOneLineOnDevicesWithoutFp8TensorCores) {
  for (const char* cluster : {"dgx-a100", "local-cpu"}) {
    try {
      model_on("gpt2-124m", cluster, Precision::fp8);
      ADD_FAILURE() << cluster << ": fp8 was priced";
    } catch (const Error& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("train.precision: fp8 needs fp8 tensor cores"), std::string::npos) << message;
      EXPECT_NE(message.find(resolve_cluster(cluster).device), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
}

TEST(Fp8, GridTensorModesAreRejectedAndOneDimensionalOnesPriced) {
  const CostModel fp8 = model_on("gpt3-6.7b", "dgx-h100", Precision::fp8);
  ParallelConfig grid = layout(2, 1, 4);
  grid.tp_mode = TpMode::d2;
  EXPECT_EQ(fp8.estimate(grid).reject, Reject::fp8_tensor_mode);
  const Estimate one_d = fp8.estimate(layout(2, 1, 4));
  EXPECT_EQ(one_d.reject, Reject::none);
  EXPECT_GT(one_d.mfu, 0);
  // MFU is measured against the peak of the precision the GEMMs run at (fp8's).
  EXPECT_NEAR(one_d.mfu * one_d.step_time_s * 8 * 1979e12, fp8.model_flops_per_step(), 1e-6 * fp8.model_flops_per_step());
}

// fp8 parameters (train.fp8_param_gather): each linear weight is held in fp8 (one byte less
// than bf16, sharded as the parameters are) beside its cached transpose only (one byte less
// than the fp8 copy and transpose), its once-per-step cast is the transpose (2 bytes per
// element, not 4), and ZeRO-1 gathers it in one byte.
TEST(Fp8, Fp8ParametersHoldGatherAndCastTheLinearWeightsInOneByte) {
  const CostModel plain = model_on("llama3-8b", "dgx-h100", Precision::fp8);
  const CostModel fp8_parameters = model_on("llama3-8b", "dgx-h100", Precision::fp8, 1, 64, true);
  const ModelSpec& m = plain.model();
  const double h = m.hidden, kv = m.kv_dim(), f = m.ffn_hidden;
  for (const int zero : {0, 1}) {
    ParallelConfig p = layout(4, 1, 2, true);
    p.zero = zero;
    const Estimate a = fp8_parameters.estimate(p), b = plain.estimate(p);
    const double linear_weights = m.layers * (h * (h + 2 * kv) + h * h + h * 2 * f + f * h) / p.tp;
    EXPECT_DOUBLE_EQ(b.memory.parameters_bytes - a.memory.parameters_bytes,
                     linear_weights * (fp8::kWeightCopyBytes - fp8::kTransposeCopyBytes) +
                         linear_weights * (2 - fp8::kParameterBytes))
        << p.summary();
    EXPECT_NEAR(b.time(TimeKind::optimizer) - a.time(TimeKind::optimizer),
                plain.costs().library_memory_time_s(linear_weights *
                                                    (fp8::kWeightCastBytesPerStep - fp8::kTransposeBytesPerStep)),
                1e-12);
    if (zero == 0) {
      EXPECT_DOUBLE_EQ(a.comm.dp_bytes, b.comm.dp_bytes) << "no gather without ZeRO";
    } else {
      // ZeRO-1 moves fp32 gradients (4 bytes) out and bf16 weights (2 bytes) back, each as
      // a share of the stage's parameters; the linear weights come back in one byte.
      const double stage_parameters = plain.layout_cost(p).stage_parameters;
      EXPECT_NEAR((b.comm.dp_bytes - a.comm.dp_bytes) / b.comm.dp_bytes, linear_weights / (6 * stage_parameters), 1e-9);
    }
  }
}
