// A LLaMA-shaped model (RMSNorm, RoPE, grouped-query attention, SwiGLU, untied LM head, no
// biases) on one rank through the trainer: its tensors and parameter count, a backward
// that matches the derivative of its forward tensor by tensor, a model that learns, the
// fused attention equal to the materialised one, and the plans the executor refuses.
#include <gtest/gtest.h>

#include <cmath>
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
Plan llama_plan(int layers, int hidden, int heads, int kv_heads, int seq, int global_batch, int micro_batch,
                const std::string& parallel = "") {
  return Plan::from_json(
      Json::parse(fmt::format(
          R"({{"model": {{"name": "tiny-llama", "layers": {}, "hidden": {}, "heads": {}, "kv_heads": {},
               "ffn_hidden": {}, "vocab": 256, "seq_len": {}, "activation": "swiglu", "norm": "rmsnorm",
               "position_embedding": "rope", "tied_embeddings": false, "bias": false}},
              "cluster": "local-cpu", "train": {{"global_batch": {}, "precision": "fp32"}},
              "parallel": {{"micro_batch": {}{}}}}})",
          layers, hidden, heads, kv_heads, hidden * 8 / 3 / 4 * 4, seq, global_batch, micro_batch, parallel)),
      "");
}

}  // namespace

TEST(Llama, TensorsAreTheLlamaShapesAndCountAsThePlanner) {
  const Plan plan = llama_plan(2, 32, 4, 2, 8, 2, 2);
  const auto tensors = whole_model_tensors(plan.model);
  std::size_t total = 0;
  bool has_head = false;
  for (const TensorSlot& t : tensors) {
    total += t.size();
    EXPECT_EQ(t.name.find(".bias"), std::string::npos) << t.name;
    EXPECT_NE(t.name, "wpe");
    if (t.name == "lm_head") has_head = true;
    if (t.name == "L0.attn.qkv.weight") {
      EXPECT_EQ(t.cols, 32 + 2 * 16);  // q, then k and v of 2 heads of 8
    }
    if (t.name == "L0.mlp.fc1.weight") {
      EXPECT_EQ(t.cols, 2 * plan.model.ffn_hidden);  // gate, up
    }
  }
  EXPECT_TRUE(has_head);
  EXPECT_EQ(total, std::size_t(plan.model.parameter_count()));
  OneRank run(plan, synthetic_corpus(4096, 1), 7, 1e-3f);
  EXPECT_EQ(run.trainer.whole_parameters().size(), total);
}

TEST(Llama, BackwardMatchesTheDerivativeOfTheForwardPerTensor) {
  // Grouped-query attention (4 heads on 2 kv heads) and rotary positions; lr 0 keeps the
  // weights, so step() is a forward and backward.
  const Plan plan = llama_plan(2, 16, 4, 2, 8, 2, 1);
  OneRank run(plan, synthetic_corpus(4096, 11), 3, 0.0f);
  for (const DirectionalDerivative& d : directional_derivatives(run.trainer, plan.model)) {
    EXPECT_NEAR(d.analytic, d.numeric, 2e-2 * std::abs(d.numeric) + 2e-4) << d.tensor;
  }
}

TEST(Llama, LossHalvesWithin200StepsOnTheSyntheticCorpus) {
  const Plan plan = llama_plan(2, 64, 4, 2, 32, 8, 8);
  OneRank run(plan, synthetic_corpus(1 << 16, 5), 1, 3e-3f);
  const auto [first, last] = train_steps(run.trainer, 200);
  EXPECT_NEAR(first, std::log(256.0f), 0.1f);
  EXPECT_LT(last, first / 2) << "first " << first << " last " << last;
}

TEST(Llama, FusedAttentionTrainsLikeTheMaterialisedForm) {
  const Plan unfused = llama_plan(2, 32, 4, 2, 16, 4, 2);
  Plan fused = unfused;
  fused.train.kernels = Kernels::fused;
  const std::string text = synthetic_corpus(1 << 14, 5);
  OneRank a(unfused, text, 4, 1e-3f), b(fused, text, 4, 1e-3f);
  for (int step = 1; step <= 5; ++step) {
    const float want = a.trainer.step().loss, got = b.trainer.step().loss;
    EXPECT_NEAR(got, want, 1e-5 * std::abs(want)) << "step " << step;
  }
}

TEST(Llama, KvHeadsThatDoNotSplitAndMixedShapesAreRefusedInOneLine) {
  auto message = [](const Plan& plan) {
    try {
      Trainer::check(plan);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message(llama_plan(2, 32, 4, 2, 16, 8, 2, R"(, "tp": 2, "sp": 2, "tp_sequence_parallel": true)")),
            "accepted");
  EXPECT_EQ(message(llama_plan(2, 32, 4, 2, 16, 8, 4, R"(, "tp": 8, "tp_mode": "3d")")), "accepted");
  const std::string grid = message(llama_plan(2, 32, 4, 1, 16, 8, 4, R"(, "tp": 4, "tp_mode": "2d")"));
  EXPECT_NE(grid.find("model.kv_heads"), std::string::npos) << grid;
  const std::string kv = message(llama_plan(2, 32, 4, 1, 16, 8, 2, R"(, "tp": 2)"));
  EXPECT_NE(kv.find("model.kv_heads"), std::string::npos) << kv;
  Plan mixed = llama_plan(2, 32, 4, 2, 16, 8, 2);
  mixed.model.tied_embeddings = true;
  const std::string shape = message(mixed);
  EXPECT_NE(shape.find("LLaMA-shaped"), std::string::npos) << shape;
  for (const std::string& m : {grid, kv, shape}) EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

// Planned and simulated, not run: squared ReLU (Nemotron) and RoPE on a share of each head.
TEST(Llama, SquaredReluAndPartialRotaryAreRefusedByName) {
  Plan squared = llama_plan(2, 32, 4, 2, 16, 8, 2);
  squared.model.activation = Activation::squared_relu;
  EXPECT_EQ(error_of([&] { Trainer::check(squared); }),
            "model.activation: squared-relu is planned and simulated but not run; the executor's kernels train gelu "
            "and swiglu");
  Plan partial = llama_plan(2, 32, 4, 2, 16, 8, 2);
  partial.model.rotary_fraction = 0.5;
  EXPECT_EQ(error_of([&] { Trainer::check(partial); }),
            "model.rotary_fraction: 0.5 of each head's channels rotated is not computed by the executor (it rotates "
            "them all); plan and estimate price the model, run refuses it");
}
