// train.engine: what a plan leaves unstated, the named engine of that date runs (one rule,
// core/engine_defaults.cpp). Megatron-LM and NeMo run fused attention from the releases
// their docs name, never before; an engine never read from defaults fills nothing a plan
// states; an unknown engine or a malformed date is one line naming the field.
#include <gtest/gtest.h>

#include "plan_checks.hpp"

#include "tessel/core/engine_defaults.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/plan.hpp"

using namespace tessel;

TEST(EngineDefaults, EachEngineRunsFusedAttentionFromTheReleaseItsDocsName) {
  EXPECT_EQ(engine_defaults("megatron-lm", "2024-04-17").kernels, Kernels::unfused);
  EXPECT_EQ(engine_defaults("megatron-lm", "2024-04-18").kernels, Kernels::fused);
  EXPECT_EQ(engine_defaults("megatron-lm", "2024-04").kernels, Kernels::unfused) << "a month counts from its first day";
  EXPECT_EQ(engine_defaults("megatron-lm", "2021-04").framework, Framework::megatron);
  EXPECT_EQ(engine_defaults("nemo", "2024-09").kernels, Kernels::fused);
  EXPECT_EQ(engine_defaults("nemo", "2023-10").kernels, Kernels::unfused);
  EXPECT_EQ(engine_defaults("megatron-deepspeed", "2025-01").kernels, Kernels::unfused) << "flash is opt-in there";
  EXPECT_EQ(engine_defaults("paddlenlp", "2025-01").kernels, Kernels::unfused) << "use_flash_attention is opt-in";
  EXPECT_EQ(engine_defaults("torchtitan", "").kernels, Kernels::fused);
  EXPECT_EQ(engine_defaults("torchtitan", "").framework, Framework::pytorch);
  EXPECT_EQ(engine_defaults("pytorch", "2022-12").kernels, Kernels::unfused);
  EXPECT_EQ(engine_defaults("tessel", "").kernels, Kernels::unfused) << "tessel's executor: what the plan says";
  // No date: today's release, after every rule's date.
  EXPECT_EQ(engine_defaults("megatron-lm", "").kernels, Kernels::fused);
  for (const EngineRule& rule : engine_rules()) EXPECT_FALSE(rule.why.empty()) << rule.engine;
}

TEST(EngineDefaults, AnEngineFillsWhatThePlanDoesNotStateAndRoundTrips) {
  const Plan nemo = Plan::from_json(test::plan_json_with_train({{"global_batch", 64}, {"engine", "nemo"}, {"engine_date", "2024-09"}}), "");
  EXPECT_EQ(nemo.train.kernels, Kernels::fused);
  EXPECT_EQ(nemo.train.framework, Framework::megatron);
  EXPECT_EQ(Plan::from_json(nemo.to_json(), ""), nemo);
  // What the plan states stays: kernels unfused written out, read back as stated.
  const Plan stated = Plan::from_json(
      test::plan_json_with_train({{"global_batch", 64}, {"engine", "megatron-lm"}, {"kernels", "unfused"}, {"framework", "pytorch"}}), "");
  EXPECT_EQ(stated.train.kernels, Kernels::unfused);
  EXPECT_EQ(stated.train.framework, Framework::pytorch);
  EXPECT_EQ(stated.to_json()["train"]["kernels"], "unfused");
  EXPECT_EQ(Plan::from_json(stated.to_json(), ""), stated);
  // No engine: tessel's own defaults, and nothing new in the JSON.
  const Plan plain = Plan::from_json(test::plan_json_with_train({{"global_batch", 64}}), "");
  EXPECT_EQ(plain.train.kernels, Kernels::unfused);
  EXPECT_FALSE(plain.to_json()["train"].contains("engine"));
}

TEST(EngineDefaults, AnUnknownEngineOrABadDateIsOneLineNamingTheField) {
  auto message = [](const Json& train) {
    try {
      Plan::from_json(test::plan_json_with_train(train), "");
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message({{"global_batch", 64}, {"engine", "jax"}}),
            "train.engine: must be one of " + engine_names() + ", got 'jax'");
  EXPECT_EQ(message({{"global_batch", 64}, {"engine", "nemo"}, {"engine_date", "24.09"}}),
            "train.engine_date: must be a date YYYY-MM or YYYY-MM-DD, got '24.09'");
  EXPECT_EQ(message({{"global_batch", 64}, {"engine", "nemo"}, {"engine_date", "2024-13"}}),
            "train.engine_date: must be a date YYYY-MM or YYYY-MM-DD with month 01-12 and day 01-31, got '2024-13'");
  EXPECT_EQ(message({{"global_batch", 64}, {"engine_date", "2024-09"}}),
            "train.engine_date: also give engine (" + engine_names() + ")");
}
