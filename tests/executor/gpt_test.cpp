// The GPT on one rank through the trainer: deterministic initialisation, a backward that
// matches the derivative of its forward tensor by tensor, a model that learns, and
// training that repeats bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/executor/comm/single_rank_communicator.hpp"
#include "tessel/executor/trainer.hpp"
#include "fixtures.hpp"
#include "one_rank_checks.hpp"

using namespace tessel;
using namespace tessel::executor;
using namespace tessel_executor_test;

namespace {
Plan one_rank_plan(int layers, int hidden, int heads, int seq, int global_batch, int micro_batch) {
  return Plan::from_json(Json::parse(fmt::format(
                             R"({{"model": {{"name": "tiny", "layers": {}, "hidden": {}, "heads": {}, "vocab": 256,
                                 "seq_len": {}}}, "cluster": "local-cpu", "train": {{"global_batch": {},
                                 "precision": "fp32"}}, "parallel": {{"micro_batch": {}}}}})",
                             layers, hidden, heads, seq, global_batch, micro_batch)),
                         "");
}

// Trainer::check refuses `plan` in one line that starts with `field`.
::testing::AssertionResult refused_in_one_line(const Plan& plan, const std::string& field) {
  try {
    Trainer::check(plan);
  } catch (const Error& e) {
    const std::string message = e.what();
    if (message.rfind(field, 0) != 0 || message.find('\n') != std::string::npos) {
      return ::testing::AssertionFailure() << "refused, but not in one line naming " << field << ": " << message;
    }
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "accepted";
}
}  // namespace

TEST(Gpt, SameSeedSameModel) {
  const Plan plan = one_rank_plan(2, 16, 2, 8, 2, 2);
  const std::string text = synthetic_corpus(4096, 1);
  const auto a = OneRank(plan, text, 7).trainer.whole_parameters();
  EXPECT_EQ(a, OneRank(plan, text, 7).trainer.whole_parameters());
  EXPECT_NE(a, OneRank(plan, text, 8).trainer.whole_parameters());
  EXPECT_EQ(a.size(), std::size_t(plan.model.parameter_count()));
  // Tensors are seeded by name: a deeper model shares its first layers' initial weights.
  const auto deep = OneRank(one_rank_plan(3, 16, 2, 8, 2, 2), text, 7).trainer.whole_parameters();
  const auto tensors = whole_model_tensors(plan.model);
  const TensorSlot& qkv = tensors[4];
  ASSERT_EQ(qkv.name, "L0.attn.qkv.weight");
  EXPECT_TRUE(std::equal(a.begin() + long(qkv.offset), a.begin() + long(qkv.offset + qkv.size()),
                         deep.begin() + long(qkv.offset)));
}

TEST(Gpt, BackwardMatchesTheDerivativeOfTheForwardPerTensor) {
  // A learning rate of 0 makes step() a forward and backward that leaves the weights.
  const Plan plan = one_rank_plan(2, 16, 2, 8, 2, 1);
  OneRank run(plan, synthetic_corpus(4096, 11), 3, 0.0f);
  for (const DirectionalDerivative& d : directional_derivatives(run.trainer, plan.model)) {
    EXPECT_NEAR(d.analytic, d.numeric, 2e-2 * std::abs(d.numeric) + 2e-4) << d.tensor;
  }
}

TEST(Gpt, LossHalvesWithin200StepsOnTheSyntheticCorpus) {
  const Plan plan = one_rank_plan(2, 64, 4, 32, 8, 8);
  OneRank run(plan, synthetic_corpus(1 << 16, 5), 1, 3e-3f);
  const auto [first, last] = train_steps(run.trainer, 200);
  EXPECT_NEAR(first, std::log(256.0f), 0.1f);  // an untrained model guesses uniformly
  EXPECT_LT(last, first / 2) << "first " << first << " last " << last;
}

TEST(Gpt, TrainingIsBitForBitRepeatable) {
  // Two runs from the same seed on the same batches, with buffers allocated at different
  // addresses (64-byte aligned), end with identical weights.
  const Plan plan = one_rank_plan(2, 64, 4, 32, 4, 2);
  const std::string text = synthetic_corpus(1 << 14, 5);
  auto train = [&](int warm_up_allocations) {
    std::vector<std::vector<char>> noise;  // shifts where later buffers land
    for (int i = 0; i < warm_up_allocations; ++i) noise.emplace_back(std::size_t(97 * (i + 1)));
    OneRank run(plan, text, 1);
    for (int step = 1; step <= 3; ++step) run.trainer.step();
    return run.trainer.whole_parameters();
  };
  const auto first = train(0), second = train(7);
  ASSERT_EQ(first.size(), second.size());
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0);
}

// Fused (flash-style) attention computes the same model as the materialised form: the
// losses of 5 steps agree to 1e-5, the first step's gradients to 1e-5 in each tensor's
// 2-norm, and the fused form keeps no probabilities (fewer activation bytes).
TEST(Gpt, FusedAttentionTrainsLikeTheMaterialisedForm) {
  const Plan unfused = one_rank_plan(2, 32, 4, 16, 4, 2);
  Plan fused = unfused;
  fused.train.kernels = Kernels::fused;
  const std::string text = synthetic_corpus(1 << 14, 5);
  OneRank a(unfused, text, 4), b(fused, text, 4);
  for (int step = 1; step <= 5; ++step) {
    const float want = a.trainer.step().loss, got = b.trainer.step().loss;
    EXPECT_NEAR(got, want, 1e-5 * std::abs(want)) << "step " << step;
    if (step > 1) continue;
    const std::vector<float> gw = a.trainer.whole_gradients(), gg = b.trainer.whole_gradients();
    for (const TensorSlot& t : whole_model_tensors(unfused.model)) {
      double error = 0, norm = 1e-30;
      for (std::size_t i = t.offset; i < t.offset + t.size(); ++i) {
        error += (double(gg[i]) - gw[i]) * (double(gg[i]) - gw[i]);
        norm += double(gw[i]) * gw[i];
      }
      EXPECT_LT(std::sqrt(error / norm), 1e-5) << t.name;
    }
  }
  EXPECT_LT(b.trainer.kept_activation_bytes(), a.trainer.kept_activation_bytes());
}

// On one rank (Megatron's layout, whole rows) the attention half's residual add runs
// inside the MLP norm's fused kernel: the kernel's time is split between the two op ids,
// the residual's share first and the norm's right after it, in the cost model's 3 : 2
// proportion; the backward's residual (the bias gradient) still has its own events.
TEST(Gpt, OneRankFusesTheAttentionResidualIntoTheMlpNorm) {
  const Plan plan = one_rank_plan(2, 32, 4, 16, 4, 2);
  OneRank run(plan, synthetic_corpus(1 << 12, 3), 2);
  run.trainer.step();
  std::map<std::string, OpEvent> residual_fwd, norm_fwd;  // by "mbM/Ll"
  int residual_bwd = 0;
  for (const OpEvent& e : run.trainer.timeline().take()) {
    const std::string scope = e.op.substr(0, e.op.find("/", e.op.find("/") + 1));
    if (e.op.ends_with("/bwd/attn.residual")) ++residual_bwd;
    if (e.op.ends_with("/fwd/attn.residual")) residual_fwd[scope] = e;
    if (e.op.ends_with("/fwd/mlp.norm")) norm_fwd[scope] = e;
  }
  ASSERT_EQ(residual_fwd.size(), 4u);  // 2 micro-batches x 2 layers
  ASSERT_EQ(norm_fwd.size(), 4u);
  EXPECT_EQ(residual_bwd, 4);
  for (const auto& [scope, residual] : residual_fwd) {
    const OpEvent& norm = norm_fwd.at(scope);
    EXPECT_EQ(residual.end_s, norm.start_s) << scope << ": not one kernel's time split in two";
    const double kernel_s = norm.end_s - residual.start_s;
    ASSERT_GT(kernel_s, 0.0) << scope;
    EXPECT_NEAR((residual.end_s - residual.start_s) / kernel_s, 0.6, 1e-9) << scope;
  }
}

// tp_comm_overlap is refused by the executor in one line that names the field (its
// collectives run between its GEMMs; trainer.cpp says why); the same plan without the
// option is accepted.
TEST(Gpt, TpCommOverlapIsRefusedInOneLineAndTheSamePlanWithoutItRuns) {
  Plan plan = one_rank_plan(2, 32, 4, 16, 4, 2);
  plan.parallel.tp = 2;
  plan.parallel.tp_sequence_parallel = true;
  EXPECT_NO_THROW(Trainer::check(plan));
  plan.parallel.tp_comm_overlap = true;
  EXPECT_TRUE(refused_in_one_line(plan, "parallel.tp_comm_overlap:"));
}

// ZeRO++'s int8 gathers change the weights each rank computes with; the executor gathers
// exactly and refuses the option in one line, and runs the same ZeRO-3 plan without it.
TEST(Gpt, QuantizedWeightGathersAreRefusedInOneLine) {
  Plan plan = one_rank_plan(2, 32, 4, 16, 4, 2);
  plan.parallel.dp = 2;
  plan.parallel.zero = 3;
  EXPECT_NO_THROW(Trainer::check(plan));
  plan.parallel.zero_quantized_weights = true;
  EXPECT_TRUE(refused_in_one_line(plan, "parallel.zero_quantized_weights:"));
}

// selective-op is a torchtitan policy the planner prices; the executor refuses it in one
// line that names the field, and runs the same plan with selective.
TEST(Gpt, SelectiveOpRecomputeIsRefusedInOneLine) {
  Plan plan = one_rank_plan(2, 32, 4, 16, 4, 2);
  plan.parallel.recompute = Recompute::selective;
  EXPECT_NO_THROW(Trainer::check(plan));
  plan.parallel.recompute = Recompute::selective_op;
  EXPECT_TRUE(refused_in_one_line(plan, "parallel.recompute:"));
}
