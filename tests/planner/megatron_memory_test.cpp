// tessel's memory beside the two references it follows, for GPT-3 175B on 1024 A100s at
// tp8 pp8 dp16, micro-batch 1: Korthikanti et al. 2022's activation formulas (Table 2,
// section 4) and Megatron-LM's theoretical memory report (theoretical_memory_usage.py).
// Prints the table docs/MEMORY.md shows and asserts each difference the doc explains:
// build/bin/planner_test --gtest_filter='MegatronMemory.*'.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>

#include "tessel/planner/cost_model.hpp"
#include "tessel/profiles/profile.hpp"

using namespace tessel;
using namespace tessel::planner;

namespace {
constexpr double kGiB = double(1 << 30);

struct Setting {
  const char* name;
  Recompute recompute;
  bool sequence_parallel;
  int zero;  // 0: Megatron without, 1: with the distributed optimizer
  Kernels kernels = Kernels::unfused;
  std::optional<Precision> gradient_precision;  // unset: fp32, the engines' default for bf16
};

// GPT-3 175B as Megatron-LM runs it: vocabulary padded to a multiple of 128 x tp.
constexpr double s = 2048, h = 12288, a = 96, L = 96, f = 4 * 12288, b = 1, t = 8, pp = 8, dp = 16;
constexpr double padded_vocab = 51200;

// Megatron-LM's theoretical report, written out from its formulas (not its code).
double megatron_weights_and_optimizer_bytes(int zero) {
  const double layer = 2 * h * (f + 2) + 4 * h * h;  // MLP and norms, attention (no linear biases)
  const double most_loaded_shard = ((L * layer + 2 * h) / pp + h * padded_vocab) / t;
  return most_loaded_shard * (zero == 0 ? 18.0 : 6.0 + 12.0 / dp);
}
double megatron_activation_bytes_per_layer(const Setting& setting) {
  if (setting.sequence_parallel && setting.recompute == Recompute::selective) return s * b * h * (18 + 4 * f / h) / t;
  return s * b * h * (10 + 24 / t);  // its "without SP" branch, used for every other setting
}
double megatron_first_stage_activation_bytes(const Setting& setting, double micro_batches) {
  const double embedding = 8 * s * b * pp + s * b * h * pp;  // token ids, embedding dropout
  const double in_flight = std::min(1.0, micro_batches / pp);
  const double total =
      (megatron_activation_bytes_per_layer(setting) * L +
       embedding * (setting.sequence_parallel && setting.recompute == Recompute::selective ? 1.0 / t : 1.0)) *
      in_flight;
  return setting.sequence_parallel && setting.recompute == Recompute::selective ? total : 1.05 * total;
}

// Korthikanti et al. 2022, bytes per layer for one micro-batch (16-bit activations). The
// paper predates flash attention: fused kernels store what its selective recompute keeps.
double korthikanti_bytes_per_layer(const Setting& setting) {
  const Recompute recompute = setting.kernels == Kernels::fused && setting.recompute == Recompute::none
                                  ? Recompute::selective
                                  : setting.recompute;
  switch (recompute) {
    case Recompute::none:
      return setting.sequence_parallel ? s * b * h / t * (34 + 5 * a * s / h)
                                       : s * b * h * (10 + 24 / t + 5 * a * s / (h * t));
    case Recompute::selective:
      return setting.sequence_parallel ? s * b * h * 34 / t : s * b * h * (10 + 24 / t);
    case Recompute::full:
      return 2 * s * b * h / (setting.sequence_parallel ? t : 1);
    case Recompute::selective_op:
      break;  // torchtitan's policy: no formula in the paper
  }
  return 0;
}

CostModel gpt3_175b(const Setting& setting) {
  TrainSpec train;
  train.global_batch = 1536;
  train.kernels = setting.kernels;
  train.gradient_precision = setting.gradient_precision;
  const ClusterSpec cluster = resolve_cluster("dgx-a100");
  return CostModel(resolve_model("gpt3-175b"), train, cluster, 128, 8, profiles::shipped_profile(cluster.device));
}
}  // namespace

TEST(MegatronMemory, TesselNextToKorthikantiAndMegatronsReport) {
  const Setting settings[] = {
      {"sp selective", Recompute::selective, true, 0, Kernels::unfused, {}},
      {"sp selective distopt", Recompute::selective, true, 1, Kernels::unfused, {}},
      {"no-sp selective", Recompute::selective, false, 0, Kernels::unfused, {}},
      {"no-sp none", Recompute::none, false, 0, Kernels::unfused, {}},
      {"sp none", Recompute::none, true, 0, Kernels::unfused, {}},
      {"sp none fused", Recompute::none, true, 0, Kernels::fused, {}},
      {"sp selective bf16grad", Recompute::selective, true, 0, Kernels::unfused, Precision::bf16},
      {"sp full", Recompute::full, true, 0, Kernels::unfused, {}}};
  std::printf("GPT-3 175B, 128 x dgx-a100, global batch 1536, tp8 pp8 dp16 mb1 1f1b; GiB per GPU, first stage\n");
  std::printf("%-22s %-24s %10s %12s %10s\n", "setting", "quantity", "tessel", "Korthikanti", "Megatron");
  std::printf("(position table whole on each tensor rank: %.2f GiB at 18 bytes per parameter)\n", s * h * 18 / kGiB);
  for (const Setting& setting : settings) {
    const CostModel model = gpt3_175b(setting);
    ParallelConfig p;
    p.dp = int(dp);
    p.pp = int(pp);
    p.tp = int(t);
    p.tp_sequence_parallel = setting.sequence_parallel;
    p.recompute = setting.recompute;
    p.zero = setting.zero;
    const Estimate e = model.estimate(p);
    ASSERT_TRUE(e.reject == Reject::none || e.reject == Reject::out_of_device_memory) << setting.name;
    const double states = e.memory.parameters_bytes + e.memory.gradients_bytes + e.memory.optimizer_bytes;
    const double megatron_states = megatron_weights_and_optimizer_bytes(setting.zero);
    const double per_layer = model.activation_bytes_per_layer(p);
    const double in_flight = std::min(double(e.micro_batches), pp);
    const double korthikanti_stage = korthikanti_bytes_per_layer(setting) * L / pp * in_flight;
    std::printf("%-22s %-24s %10.2f %12s %10.2f\n", setting.name, "weights+grads+optimizer", states / kGiB, "-",
                megatron_states / kGiB);
    std::printf("%-22s %-24s %10.3f %12.3f %10.3f\n", setting.name, "activations, one layer", per_layer / kGiB,
                korthikanti_bytes_per_layer(setting) / kGiB, megatron_activation_bytes_per_layer(setting) / kGiB);
    std::printf("%-22s %-24s %10.2f %12.2f %10.2f\n", setting.name, "activations, stage",
                e.memory.activations_bytes / kGiB, korthikanti_stage / kGiB,
                megatron_first_stage_activation_bytes(setting, e.micro_batches) / kGiB);
    std::printf("%-22s %-24s %10.2f %12s %10s\n", setting.name,
                e.fits ? "device total (fits)" : "device total (too big)", e.memory.device_total_bytes() / kGiB, "",
                "");
    // tessel's per-layer terms are Korthikanti's formulas; fused attention adds its
    // fp32 log-sum-exp per row and head (none, selective).
    const bool statistics_kept = setting.kernels == Kernels::fused && setting.recompute != Recompute::full;
    const double statistics = statistics_kept ? 4 * a * s * b / t : 0.0;
    EXPECT_NEAR(per_layer, korthikanti_bytes_per_layer(setting) + statistics, 1e-3) << setting.name;
    // The stage holds in-flight micro-batches of its layers, plus under full recompute the
    // one layer being rebuilt.
    EXPECT_NEAR(e.memory.activations_bytes,
                korthikanti_stage + statistics * L / pp * in_flight + model.rematerialised_bytes(p), 1.0)
        << setting.name;
    // Weights, fp32 gradients and optimizer: the report leaves out the learned position
    // table (s x h, whole on every tensor rank) and the linears' biases, and pads the
    // vocabulary; the position table is nearly all of the difference.
    const double bytes_per_parameter = setting.zero == 0 ? 18.0 : 6.0 + 12.0 / dp;
    const double positions = s * h * bytes_per_parameter;
    const double bf16_gradients =
        setting.gradient_precision == Precision::bf16 ? 2.0 * model.layout_cost(p).stage_parameters : 0.0;
    EXPECT_NEAR(states + bf16_gradients - megatron_states, positions, 0.1 * positions) << setting.name;
    if (setting.sequence_parallel && setting.recompute == Recompute::selective) {
      // The report's SP formula is Korthikanti's plus the first stage's token ids and
      // embedding dropout output, which tessel does not count.
      const double embedding = (8 * s * b * pp + s * b * h * pp) / t;
      EXPECT_NEAR(megatron_first_stage_activation_bytes(setting, e.micro_batches) - e.memory.activations_bytes,
                  embedding, 1.0);
    }
  }
}
