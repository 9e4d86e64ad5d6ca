// train.gradient_precision: the engines' default per training precision, a lossless
// JSON round trip that keeps "unset" distinct from an explicit choice, one clear line for
// a value that is neither fp32 nor the training precision, and the Program's gradient
// reductions carrying the gradient precision's bytes.
#include <gtest/gtest.h>

#include "plan_checks.hpp"

#include "tessel/core/error.hpp"
#include "tessel/core/program.hpp"

using namespace tessel;

namespace {
using tessel::test::validation_error;

// Bytes of every data-parallel collective in one stage's program.
double gradient_group_bytes(const Plan& plan) {
  const Program program = Program::lower(plan);
  double bytes = 0;
  for (const ProgramOp& op : program.stage(0).ops) {
    if (op.work.kind == OpKind::collective && op.work.group == CommGroup::dp) bytes += op.work.bytes * op.work.count;
  }
  return bytes;
}
}  // namespace

TEST(GradientPrecision, DefaultsFollowTheEngines) {
  EXPECT_EQ(default_gradient_precision(Precision::bf16), Precision::fp32);
  EXPECT_EQ(default_gradient_precision(Precision::fp16), Precision::fp16);
  EXPECT_EQ(default_gradient_precision(Precision::fp32), Precision::fp32);
  TrainSpec train;
  EXPECT_FALSE(train.gradient_precision.has_value());
  EXPECT_EQ(train.effective_gradient_precision(), Precision::fp32);
  train.precision = Precision::fp16;
  EXPECT_EQ(train.effective_gradient_precision(), Precision::fp16);
}

TEST(GradientPrecision, RoundTripsAndKeepsUnsetUnset) {
  const Plan unset = Plan::from_json(test::plan_json_with_train({{"global_batch", 64}}), "");
  EXPECT_FALSE(unset.train.gradient_precision.has_value());
  EXPECT_FALSE(unset.to_json()["train"].contains("gradient_precision"));
  EXPECT_EQ(Plan::from_json(unset.to_json(), ""), unset);
  for (const char* choice : {"fp32", "bf16"}) {
    const Plan plan = Plan::from_json(test::plan_json_with_train({{"global_batch", 64}, {"gradient_precision", choice}}), "");
    plan.validate();
    EXPECT_EQ(plan.to_json()["train"]["gradient_precision"], choice);
    const Plan again = Plan::from_json(plan.to_json(), "");
    EXPECT_EQ(again, plan);
    EXPECT_EQ(to_string(again.train.effective_gradient_precision()), choice);
  }
}

TEST(GradientPrecision, BadValuesNameTheFieldInOneLine) {
  EXPECT_EQ(validation_error(test::plan_json_with_train({{"global_batch", 64}, {"gradient_precision", "fp8"}})),
            "train.gradient_precision: must be one of fp32|bf16|fp16, got \"fp8\"");
  EXPECT_EQ(validation_error(test::plan_json_with_train({{"global_batch", 64}, {"gradient_precision", "fp16"}})),
            "train.gradient_precision: must be fp32 or the training precision (bf16), got fp16");
  EXPECT_EQ(validation_error(test::plan_json_with_train({{"global_batch", 64}, {"precision", "fp32"}, {"gradient_precision", "bf16"}})),
            "train.gradient_precision: must be fp32 or the training precision (fp32), got bf16");
  // A plan built in code is checked by validate() with the same line.
  Plan plan = Plan::from_json(test::plan_json_with_train({{"global_batch", 64}, {"precision", "fp16"}}), "");
  plan.train.gradient_precision = Precision::bf16;
  EXPECT_THROW(plan.validate(), Error);
}

// Megatron-LM reduces the gradients in the buffer's precision (fp32 main gradients are
// all-reduced in fp32), so the Program's gradient sync carries 4 bytes per parameter.
TEST(GradientPrecision, ProgramReducesGradientsInTheirPrecision) {
  Plan plan = Plan::from_json(test::plan_json_with_train({{"global_batch", 64}}), "");
  plan.train.gradient_precision = Precision::bf16;
  const double bf16_bytes = gradient_group_bytes(plan);
  ASSERT_GT(bf16_bytes, 0);
  plan.train.gradient_precision = Precision::fp32;
  EXPECT_DOUBLE_EQ(gradient_group_bytes(plan), 2 * bf16_bytes);
  plan.train.gradient_precision.reset();  // the default for bf16 is fp32
  EXPECT_DOUBLE_EQ(gradient_group_bytes(plan), 2 * bf16_bytes);
}
