// ZeRO++'s quantized weights (parallel.zero_quantized_weights) in core: the JSON field and
// its rules, and the stage summary's gathers of int8 blocks and their dequantize, which the
// Program is generated from and the planner prices.
#include <gtest/gtest.h>

#include "plan_checks.hpp"
#include "tessel/core/block_ops.hpp"
#include "tessel/core/model_states.hpp"
#include "tessel/core/op_names.hpp"
#include "tessel/core/program.hpp"
#include "tessel/core/stage_summary.hpp"

using namespace tessel;

namespace {
using tessel::test::validation_error;

Json quantized_plan_json(int zero, bool quantized, const Json& train_extra = Json::object()) {
  Json json = Json::parse(R"({"model": "gpt2-124m", "cluster": "dgx-h100", "nodes": 1,
    "train": {"global_batch": 32, "precision": "bf16"}, "parallel": {"dp": 8, "micro_batch": 2}})");
  json["parallel"]["zero"] = zero;
  if (quantized) json["parallel"]["zero_quantized_weights"] = true;
  json["train"].update(train_extra);
  return json;
}

// The dense block's ZeRO-3 transfers before each pass, by name: bytes summed.
double fetch_bytes(const Plan& plan, std::string_view name) {
  const BlockOpTable table = block_op_table(plan.model, plan.seq_len(), plan.parallel, plan.train.precision);
  const StageSummary summary = summarize_stage(plan.model, plan.train, plan.parallel, table, 0);
  double bytes = 0;
  for (const BucketOp& op : summary.dense.ops) {
    if (op.moment == Moment::fetch && op.work.name == name) bytes += op.work.bytes;
  }
  return bytes;
}
}  // namespace

TEST(QuantizedGathers, RoundTripAndNeedZero3WithoutFp8Parameters) {
  const Plan plan = Plan::from_json(quantized_plan_json(3, true), "");
  plan.validate();
  EXPECT_TRUE(plan.parallel.zero_quantized_weights);
  EXPECT_EQ(Plan::from_json(plan.to_json(), ""), plan);
  EXPECT_NE(plan.parallel.summary().find(" z3q "), std::string::npos) << plan.parallel.summary();
  EXPECT_FALSE(Plan::from_json(quantized_plan_json(3, false), "").to_json()["parallel"].contains("zero_quantized_weights"))
      << "a plan without the option keeps the JSON it always had";
  EXPECT_EQ(validation_error(quantized_plan_json(2, true)),
            "parallel.zero_quantized_weights: quantizes ZeRO-3's weight gathers, so it needs zero 3, got zero 2");
  const std::string fp8 = validation_error(
      quantized_plan_json(3, true, Json::parse(R"({"precision": "fp8", "fp8_param_gather": true})")));
  EXPECT_NE(fp8.find("parallel.zero_quantized_weights: fp8 parameters are gathered in 1 byte already"),
            std::string::npos)
      << fp8;
}

// ZeRO++: "qwZ ... reduce[s] ZeRO parameter all-gather communication volume by half from
// FP16 to INT8"; each rank then reads the int8 block and writes it at the parameters' width.
TEST(QuantizedGathers, TheSummaryGathersHalfTheBytesAndDequantizesInTheChain) {
  const Plan exact = Plan::from_json(quantized_plan_json(3, false), "");
  const Plan quantized = Plan::from_json(quantized_plan_json(3, true), "");
  const double exact_bytes = fetch_bytes(exact, ops::zero_all_gather);
  ASSERT_GT(exact_bytes, 0);
  EXPECT_DOUBLE_EQ(fetch_bytes(quantized, ops::zero_all_gather), exact_bytes / 2);
  EXPECT_EQ(fetch_bytes(exact, ops::zero_dequantize), 0);
  const double parameter_bytes = model_state_bytes(Precision::bf16, Optimizer::adamw, Precision::fp32).parameter;
  EXPECT_DOUBLE_EQ(fetch_bytes(quantized, ops::zero_dequantize), exact_bytes / parameter_bytes * (1 + parameter_bytes));

  // The Program carries both, forward and backward, for every block of the stage.
  const Program program = Program::lower(quantized);
  int dequantizes = 0;
  for (const ProgramOp& op : program.stage(0).ops) dequantizes += op.work.name == ops::zero_dequantize;
  EXPECT_EQ(dequantizes % quantized.model.layers, 0);
  EXPECT_GE(dequantizes, 2 * quantized.model.layers);
}
