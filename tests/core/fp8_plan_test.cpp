// train.precision fp8 in core: the plan JSON round trip, the gradient precisions it
// allows, the devices that can train in it, the layouts it is modelled in, and the
// Program's fp8 ops (the casts before the linears, the once-per-step weight cast), which
// the simulator prices op by op as the planner does.
#include <gtest/gtest.h>

#include <map>

#include "tessel/core/device_spec.hpp"
#include "plan_checks.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/block_ops.hpp"
#include "tessel/core/fp8_model.hpp"
#include "tessel/core/op_names.hpp"
#include "tessel/core/program.hpp"

using namespace tessel;

namespace {
using tessel::test::validation_error;
Json plan_json(const Json& train, const Json& parallel = Json::parse(R"({"dp": 4, "tp": 2, "micro_batch": 2})")) {
  Json json = Json::parse(R"({"model": "gpt2-124m", "cluster": "dgx-h100", "nodes": 1})");
  json["train"] = train;
  json["parallel"] = parallel;
  return json;
}
}  // namespace

TEST(Fp8Plan, RoundTripsThroughJsonWithFp32GradientsByDefault) {
  const Plan plan = Plan::from_json(plan_json(Json::parse(R"({"global_batch": 32, "precision": "fp8"})")), "");
  plan.validate();
  EXPECT_EQ(plan.train.precision, Precision::fp8);
  EXPECT_EQ(plan.train.effective_gradient_precision(), Precision::fp32);
  EXPECT_EQ(plan.to_json()["train"]["precision"], "fp8");
  EXPECT_EQ(Plan::from_json(plan.to_json(), ""), plan);
  EXPECT_EQ(storage_precision(Precision::fp8), Precision::bf16);
  EXPECT_EQ(element_bytes(Precision::fp8), 1);
}

TEST(Fp8Plan, GradientsAreFp32OrBf16) {
  EXPECT_EQ(validation_error(plan_json(Json::parse(R"({"global_batch": 32, "precision": "fp8",
      "gradient_precision": "bf16"})"))), "(valid)");
  const std::string fp16 =
      validation_error(plan_json(Json::parse(R"({"global_batch": 32, "precision": "fp8", "gradient_precision": "fp16"})")));
  EXPECT_NE(fp16.find("train.gradient_precision: must be fp32 or bf16 (fp8 training keeps gradients in bf16), got fp16"),
            std::string::npos)
      << fp16;
}

TEST(Fp8Plan, GridTensorModesAreRefusedByOneLine) {
  const std::string message = validation_error(plan_json(Json::parse(R"({"global_batch": 32, "precision": "fp8"})"),
                                                    Json::parse(R"({"dp": 2, "tp": 4, "tp_mode": "2d"})")));
  EXPECT_NE(message.find("parallel.tp_mode: fp8 training is modelled with 1d tensor parallelism only"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

TEST(Fp8Plan, OnlyDevicesWithAnFp8PeakTrainInFp8) {
  const DeviceSpec h100 = resolve_device("H100-SXM"), a100 = resolve_device("A100-SXM-80GB");
  EXPECT_TRUE(h100.has_fp8());
  EXPECT_NO_THROW(h100.check_precision(Precision::fp8));
  EXPECT_EQ(DeviceSpec::from_json(h100.to_json()), h100);
  EXPECT_FALSE(a100.has_fp8());
  EXPECT_FALSE(a100.to_json()["peak_flops_per_s"].contains("fp8"));
  EXPECT_NO_THROW(a100.check_precision(Precision::bf16));
  try {
    a100.check_precision(Precision::fp8);
    ADD_FAILURE() << "A100 accepted fp8";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("device A100-SXM-80GB has none"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(Fp8Plan, TheProgramCastsBeforeEachLinearAndTheWeightsOncePerStep) {
  const Plan plan = Plan::from_json(plan_json(Json::parse(R"({"global_batch": 32, "precision": "fp8"})")), "");
  const Program program = Program::lower(plan);
  const BlockOpTable table = block_op_table(plan.model, plan.seq_len(), plan.parallel, Precision::fp8);
  int casts = 0, fp8_gemms = 0, weight_casts = 0;
  for (const ProgramOp& op : program.stage(0).ops) {
    EXPECT_TRUE(ops::is_op_name(op.work.name) || op.work.name.empty()) << op.id;
    casts += op.work.name.ends_with(".fp8_cast");
    fp8_gemms += op.work.kind == OpKind::gemm && op.work.precision == Precision::fp8;
    if (op.id == ops::step_op_id(ops::fp8_weight_cast)) {
      ++weight_casts;
      EXPECT_DOUBLE_EQ(op.work.bytes, plan.model.layers * table.fp8_weight_elements * fp8::kWeightCastBytesPerStep);
    }
  }
  // 4 linears per layer, forward and backward, for each of the 32 / (4 x 2) micro-batches.
  const int per_pass = 4 * plan.model.layers * (32 / (4 * 2));
  EXPECT_EQ(casts, 2 * per_pass);
  EXPECT_EQ(fp8_gemms, 2 * per_pass);
  EXPECT_EQ(weight_casts, 1);
  // The weight elements are the linears' (qkv, proj, fc1, fc2) on one tensor rank.
  const double h = plan.model.hidden, f = plan.model.ffn_hidden;
  EXPECT_DOUBLE_EQ(table.fp8_weight_elements, (3 * h * h + h * h + h * f + f * h) / 2);
  EXPECT_DOUBLE_EQ(table.fp8_linears, 4);

  // A bf16 plan has none of them.
  Plan bf16 = plan;
  bf16.train.precision = Precision::bf16;
  const Program bf16_program = Program::lower(bf16);
  for (const ProgramOp& op : bf16_program.stage(0).ops) {
    EXPECT_FALSE(op.work.name.find("fp8") != std::string_view::npos) << op.id;
    if (op.work.kind == OpKind::gemm) {
      EXPECT_EQ(op.work.precision, Precision::bf16) << op.id;
    }
  }
}

TEST(Fp8Plan, Fp8ParametersRoundTripAndNeedFp8Training) {
  const Plan plan = Plan::from_json(
      plan_json(Json::parse(R"({"global_batch": 32, "precision": "fp8", "fp8_param_gather": true})")), "");
  plan.validate();
  EXPECT_TRUE(plan.train.fp8_param_gather);
  EXPECT_EQ(plan.to_json()["train"]["fp8_param_gather"], true);
  EXPECT_EQ(Plan::from_json(plan.to_json(), ""), plan);
  EXPECT_FALSE(Plan::from_json(plan_json(Json::parse(R"({"global_batch": 32, "precision": "fp8"})")), "")
                   .to_json()["train"]
                   .contains("fp8_param_gather"));
  const std::string read = validation_error(
      plan_json(Json::parse(R"({"global_batch": 32, "precision": "bf16", "fp8_param_gather": true})")));
  EXPECT_NE(read.find("fp8_param_gather: needs precision fp8 (fp8 parameters), got bf16"), std::string::npos) << read;
  Plan built = plan;
  built.train.precision = Precision::bf16;
  EXPECT_EQ(validation_error(built), "train.fp8_param_gather: needs precision fp8 (fp8 parameters), got bf16");
}

// fp8 parameters: ZeRO's gathers move the fp8 GEMM weights in one byte instead of two, and
// the step's cast of them becomes the transpose of the gathered fp8 weight.
TEST(Fp8Plan, Fp8ParametersGatherTheLinearWeightsInOneByteAndTransposeThem) {
  for (const int zero : {1, 3}) {
    Plan plan = Plan::from_json(plan_json(Json::parse(R"({"global_batch": 32, "precision": "fp8"})"),
                                          Json::parse(R"({"dp": 4, "tp": 2, "micro_batch": 2, "zero": )" +
                                                      std::to_string(zero) + "}")),
                                "");
    const BlockOpTable table = block_op_table(plan.model, plan.seq_len(), plan.parallel, Precision::fp8);
    auto bytes_by_name = [](const Plan& p, std::string_view suffix) {
      std::map<std::string, double> out;
      const Program program = Program::lower(p);
      for (const ProgramOp& op : program.stage(0).ops)
        if (op.id.ends_with(suffix)) out[op.id] = op.work.bytes;
      return out;
    };
    const std::string_view gather = ops::zero_all_gather;  // ZeRO-1: the step's bucket gathers; ZeRO-3: each layer's
    const std::map<std::string, double> bf16_weights = bytes_by_name(plan, gather);
    const std::map<std::string, double> bf16_casts = bytes_by_name(plan, ops::fp8_weight_cast);
    plan.train.fp8_param_gather = true;
    const std::map<std::string, double> fp8_weights = bytes_by_name(plan, gather);
    const std::map<std::string, double> fp8_casts = bytes_by_name(plan, ops::fp8_weight_cast);
    ASSERT_EQ(fp8_weights.size(), bf16_weights.size());
    int layer_gathers = 0;
    for (const auto& [id, bytes] : fp8_weights) {
      // The stage bucket (embedding, final norm, head) holds no fp8 GEMM weight.
      const bool layer = !id.starts_with(ops::kStageBucket);
      layer_gathers += layer;
      EXPECT_DOUBLE_EQ(bf16_weights.at(id) - bytes,
                       layer ? table.fp8_weight_elements * (2 - fp8::kParameterBytes) : 0.0)
          << id;
    }
    EXPECT_GT(layer_gathers, 0) << "zero " << zero;
    ASSERT_FALSE(fp8_casts.empty());
    for (const auto& [id, bytes] : fp8_casts)
      EXPECT_DOUBLE_EQ(bytes / bf16_casts.at(id), fp8::kTransposeBytesPerStep / fp8::kWeightCastBytesPerStep) << id;
  }
}
