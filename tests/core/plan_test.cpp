// Plans: lossless JSON round trip, and one clear error per invalid field.
#include <gtest/gtest.h>

#include "plan_checks.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/plan.hpp"

using namespace tessel;

namespace {
using tessel::test::validation_error;
Json base_plan() {
  return Json::parse(R"({"model": "gpt2-124m", "cluster": "dgx-a100", "nodes": 2,
      "train": {"global_batch": 64, "precision": "bf16"},
      "parallel": {"dp": 4, "pp": 2, "tp": 2, "micro_batch": 2, "zero": 1}})");
}
}  // namespace

TEST(Plan, RoundTripIsLossless) {
  Json json = base_plan();
  json["parallel"] = Json::parse(R"({"dp": 2, "pp": 4, "tp": 2, "tp_sequence_parallel": true, "zero": 2,
      "offload": {"mode": "chunked", "device_fraction": 0.25}, "recompute": "selective", "micro_batch": 4,
      "schedule": "interleaved", "virtual_stages": 3})");
  const Plan plan = Plan::from_json(json, "");
  plan.validate();
  const Plan again = Plan::from_json(plan.to_json(), "");
  EXPECT_EQ(again, plan);
  EXPECT_EQ(again.to_json(), plan.to_json());
  EXPECT_EQ(again.parallel.offload, OffloadMode::chunked);
  EXPECT_DOUBLE_EQ(again.parallel.offload_device_fraction, 0.25);
  EXPECT_EQ(again.parallel.virtual_stages, 3);
}

TEST(Plan, AnInlineModelWithoutASourceRoundTrips) {
  // tessel run stores plan.to_json() in the runs database; the GUI loads it back.
  const Plan plan = Plan::load(std::string(TESSEL_SOURCE_DIR) + "/examples/local-cpu-gpt-small.json");
  EXPECT_TRUE(plan.model.source.empty());
  EXPECT_FALSE(plan.to_json()["model"].contains("source"));
  EXPECT_EQ(Plan::from_json(plan.to_json(), ""), plan);
}

TEST(Plan, InvalidLayoutsGiveOneClearLine) {
  Json json = base_plan();
  EXPECT_EQ(validation_error(json), "(valid)");

  json["parallel"] = {{"dp", 2}, {"tp", 8}, {"tp_mode", "2d"}};
  EXPECT_EQ(validation_error(json), "parallel.tp: tp_mode 2d needs a square size, got 8");
  json["parallel"] = {{"dp", 2}, {"tp", 8}, {"tp_mode", "2.5d"}, {"tp_depth", 3}};
  EXPECT_EQ(validation_error(json), "parallel.tp: tp_mode 2.5d needs tp = q*q*tp_depth, got tp 8 with tp_depth 3");
  json["parallel"] = {{"dp", 4}, {"tp", 4}, {"tp_mode", "3d"}};
  EXPECT_EQ(validation_error(json), "parallel.tp: tp_mode 3d needs a cube size, got 4");
  json["parallel"] = {{"dp", 16}};
  EXPECT_EQ(validation_error(json), "(valid)");
  json["parallel"] = {{"dp", 8}};
  EXPECT_EQ(validation_error(json), "parallel: dp*pp*tp*sp = 8 but the cluster has 16 GPUs (2 node(s) x 8 per node)");
  json["parallel"] = {{"dp", 2}, {"tp", 8}};
  EXPECT_EQ(validation_error(json), "parallel.tp: model heads 12 are not divisible by the tensor split 8 (tp_mode 1d)");
  json["parallel"] = {{"dp", 16}, {"micro_batch", 3}};
  EXPECT_EQ(validation_error(json), "train.global_batch: 64 is not divisible by dp 16 x micro_batch 3");
  json["parallel"] = {{"dp", 4}, {"pp", 4}, {"schedule", "interleaved"}, {"virtual_stages", 2}};
  EXPECT_EQ(validation_error(json), "parallel.virtual_stages: 12 layers do not split into pp 4 x virtual_stages 2 chunks "
                                    "(evenly, or with the first and the last chunk one layer short)");
  json["parallel"] = {{"dp", 1}, {"pp", 16}};
  EXPECT_EQ(validation_error(json), "parallel.pp: 12 layers do not split into 16 stages (evenly, or with one layer "
                                    "fewer on the first and the last stage)");
  json["parallel"] = {{"dp", 1}, {"sp", 16}};
  json["train"]["seq_len"] = 1000;
  EXPECT_EQ(validation_error(json), "parallel.sp: sequence length 1000 is not divisible by sp 16");
  json["train"]["seq_len"] = 2048;
  json["parallel"] = {{"dp", 16}};
  EXPECT_EQ(validation_error(json), "train.seq_len: 2048 exceeds the 1024 learned positions of model gpt2-124m");
  json["train"].erase("seq_len");
  json["parallel"] = {{"dp", 16}, {"zero", 4}};
  EXPECT_EQ(validation_error(json), "parallel.zero: must be an integer in 0..3, got 4");
  json["parallel"] = {{"dp", 16}, {"tpp", 2}};
  EXPECT_EQ(validation_error(json).rfind("parallel.tpp: unknown field", 0), 0u);
  json["parallel"] = {{"dp", 0}};
  EXPECT_EQ(validation_error(json), "parallel.dp: must be a positive integer, got 0");
  json["parallel"] = {{"dp", 16}, {"tp_sequence_parallel", true}};
  EXPECT_EQ(validation_error(json),
            "parallel.tp_sequence_parallel: applies to tp_mode 1d with tp > 1, got tp 1 tp_mode 1d");
  json = base_plan();
  json["train"]["global_batch"] = 0;
  EXPECT_EQ(validation_error(json), "train.global_batch: must be a positive integer, got 0");
  json = base_plan();
  json["nodes"] = -2;
  EXPECT_EQ(validation_error(json), "nodes: must be a positive integer, got -2");
  json = base_plan();
  json["cluster"] = "local-cpu";
  json["parallel"] = {{"dp", 2}};
  EXPECT_EQ(validation_error(json), "nodes: cluster local-cpu has at most 1 node(s), got 2");
  json["nodes"] = 1;
  EXPECT_EQ(validation_error(json), "(valid)");  // local-cpu: the node holds the plan's world
}

TEST(Plan, ModelsAndClustersMayBeInlineObjects) {
  Json json = base_plan();
  json["model"] = Json::parse(R"({"layers": 4, "hidden": 256, "heads": 4, "vocab": 512, "seq_len": 128})");
  const Plan plan = Plan::from_json(json, "");
  EXPECT_EQ(plan.model.layers, 4);
  EXPECT_EQ(plan.model.ffn_hidden, 1024);
  EXPECT_EQ(plan.model.kv_heads, 4);
}
