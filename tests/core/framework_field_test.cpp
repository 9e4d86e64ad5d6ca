// train.framework: pytorch by default and left out of the JSON then (plans written before
// the field read and write as they did), megatron round-trips, and anything else is one
// line naming the field and the allowed values.
#include <gtest/gtest.h>

#include "plan_checks.hpp"

#include "tessel/core/error.hpp"
#include "tessel/core/plan.hpp"

using namespace tessel;

TEST(FrameworkField, DefaultsToPytorchAndStaysOutOfTheJson) {
  const Plan plan = Plan::from_json(test::plan_json_with_train({{"global_batch", 64}}), "");
  EXPECT_EQ(plan.train.framework, Framework::pytorch);
  EXPECT_FALSE(plan.to_json()["train"].contains("framework"));
}

TEST(FrameworkField, MegatronRoundTrips) {
  const Plan plan = Plan::from_json(test::plan_json_with_train({{"global_batch", 64}, {"framework", "megatron"}}), "");
  EXPECT_EQ(plan.train.framework, Framework::megatron);
  EXPECT_EQ(plan.to_json()["train"]["framework"], "megatron");
  EXPECT_EQ(Plan::from_json(plan.to_json(), ""), plan);
}

TEST(FrameworkField, AnUnknownFrameworkIsOneLineNamingTheField) {
  try {
    Plan::from_json(test::plan_json_with_train({{"global_batch", 64}, {"framework", "jax"}}), "");
    FAIL() << "jax accepted";
  } catch (const Error& error) {
    EXPECT_STREQ(error.what(), "train.framework: must be one of pytorch|megatron|torch.compile, got \"jax\"");
  }
}
