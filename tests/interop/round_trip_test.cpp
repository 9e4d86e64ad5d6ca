// Round trip: for every plan in examples/ and every engine of this file's part (Megatron-LM,
// NeMo), reading back what the writer wrote gives the plan again; where the engine cannot
// express the plan, it gives the nearest plan, stated here independently of the writer.
#include <gtest/gtest.h>

#include <filesystem>

#include "tessel/core/error.hpp"
#include "tessel/core/presets.hpp"
#include "tessel/interop/engine_config.hpp"

namespace tessel::interop {
namespace {

// The nearest plan Megatron-Core runs, as the interop docs state it.
Plan expected_nearest(Plan plan, Engine engine) {
  ParallelConfig& p = plan.parallel;
  if (p.tp_mode != TpMode::d1) p.tp_mode = TpMode::d1, p.tp_depth = 1, p.tp_sequence_parallel = false;
  if (p.schedule == Schedule::gpipe) p.schedule = Schedule::one_f_one_b;
  if (p.offload == OffloadMode::chunked) p.offload = OffloadMode::optimizer;
  p.offload_device_fraction = 1.0;
  if (engine == Engine::nemo) p.offload = OffloadMode::none;  // NeMo 1's YAML has no optimizer offload
  plan.train.optimizer = Optimizer::adamw;
  if (plan.train.seq_len > plan.model.seq_len) plan.model.seq_len = plan.train.seq_len;
  if (plan.train.seq_len == plan.model.seq_len) plan.train.seq_len = 0;
  return plan;
}

bool is_preset(const std::string& name) {
  const auto names = preset_names("models");
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::vector<Plan> example_plans() {
  std::vector<Plan> plans;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(TESSEL_SOURCE_DIR) + "/examples")) {
    if (entry.path().extension() == ".json") plans.push_back(Plan::load(entry.path().string()));
  }
  return plans;
}

// Export then import gives back the plan, or the nearest plan the engine runs, and the
// export says what it changed exactly when it changed something.
::testing::AssertionResult round_trips(const Plan& plan, Engine engine) {
  const std::string what = std::string(engine_name(engine)) + " " + plan.model.name + " " + plan.parallel.summary();
  if (plan.model.moe.enabled() && engine != Engine::megatron) {
    // MoE launch configs are written for Megatron-LM only: the other writers refuse them by name.
    try {
      export_plan(engine, plan);
    } catch (const Error& e) {
      if (std::string(e.what()).find("Mixture-of-Experts") != std::string::npos) return ::testing::AssertionSuccess();
      return ::testing::AssertionFailure() << what << ": refused, but not as MoE: " << e.what();
    }
    return ::testing::AssertionFailure() << what << ": an MoE plan was exported";
  }
  const ExportedConfig exported = export_plan(engine, plan);
  ImportContext context;
  context.cluster = plan.cluster;
  context.nodes = plan.nodes;
  context.source_name = "exported";
  ImportedRun imported = import_run(engine, exported.text, context);
  const Plan expected = expected_nearest(plan, engine);
  // Megatron-LM and NeMo run Megatron's kernels whatever the plan said: the import says so,
  // and the framework is not a layout the export could change.
  const Framework engine_framework =
      engine == Engine::megatron || engine == Engine::nemo ? Framework::megatron : Framework::pytorch;
  if (imported.plan.train.framework != engine_framework) {
    return ::testing::AssertionFailure() << what << ": read back as framework " << to_string(imported.plan.train.framework);
  }
  imported.plan.train.framework = expected.train.framework;
  // A model that is not a preset (or no longer one) has no name in the engine's file.
  if (!is_preset(expected.model.name) || resolve_model(expected.model.name) != expected.model) {
    imported.plan.model.name = expected.model.name;
    imported.plan.model.source = expected.model.source;
  }
  if (imported.plan != expected) {
    return ::testing::AssertionFailure() << what << ": read back as " << imported.plan.to_json().dump(1) << "\nfrom\n"
                                         << exported.text;
  }
  if (exported.not_expressible.empty() != (expected == plan)) {
    return ::testing::AssertionFailure() << what << ": the export's notes do not match what changed\n" << exported.text;
  }
  return ::testing::AssertionSuccess();
}

TEST(RoundTrip, EveryExamplePlanThroughMegatron) {
  const auto plans = example_plans();
  ASSERT_GE(plans.size(), 4u);
  for (const Plan& plan : plans) EXPECT_TRUE(round_trips(plan, Engine::megatron));
}

// Each layout Megatron cannot express, and some it can, from one example.
TEST(RoundTrip, EveryExamplePlanThroughNemo) {
  const auto plans = example_plans();
  ASSERT_GE(plans.size(), 4u);
  for (const Plan& plan : plans) EXPECT_TRUE(round_trips(plan, Engine::nemo));
}

TEST(RoundTrip, VariedLayoutsThroughMegatronAndNemo) {
  const Plan base = Plan::load(std::string(TESSEL_SOURCE_DIR) + "/examples/gpt3-13b-dgx-h100.json");
  std::vector<Plan> variants;
  for (int zero = 0; zero <= 3; ++zero) {
    Plan plan = base;
    plan.parallel.zero = zero;
    variants.push_back(plan);
  }
  Plan two_d = base;
  two_d.parallel.tp_mode = TpMode::d2;
  two_d.parallel.tp_sequence_parallel = false;
  variants.push_back(two_d);
  Plan gpipe = base;
  gpipe.parallel.schedule = Schedule::gpipe;
  gpipe.train.optimizer = Optimizer::lars;
  variants.push_back(gpipe);
  Plan chunked = base;
  chunked.parallel.offload = OffloadMode::chunked;
  chunked.parallel.offload_device_fraction = 0.5;
  variants.push_back(chunked);
  Plan full = base;
  full.parallel.recompute = Recompute::full;
  full.train.kernels = Kernels::fused;
  full.train.precision = Precision::fp16;
  full.train.seq_len = 1024;
  variants.push_back(full);
  Plan fp8 = base;  // --bf16 --fp8-format hybrid, NeMo's fp8: true
  fp8.train.precision = Precision::fp8;
  fp8.train.kernels = Kernels::fused;
  variants.push_back(fp8);
  Plan longer = Plan::load(std::string(TESSEL_SOURCE_DIR) + "/examples/llama2-70b-nemo-dgx-a100.json");
  longer.train.seq_len = 8192;  // rope: past the model's 4096
  variants.push_back(longer);
  for (const Plan& plan : variants) {
    plan.validate();
    EXPECT_TRUE(round_trips(plan, Engine::megatron));
    EXPECT_TRUE(round_trips(plan, Engine::nemo));
  }
}


// An uneven split (core/stage_layers.hpp): Llama 3 405B's 126 layers over 8 stages hold 15
// on the first and the last and 16 between. Megatron-LM places the short ends by flag (and
// reads back as the same plan) and torchtitan by its less-layers counts; NeMo's YAML
// is refused by name, and a Megatron script that splits otherwise is refused rather than
// priced as tessel's split.
TEST(RoundTrip, AnUnevenPipelineSplitThroughMegatronAndIntoTorchtitan) {
  Plan plan = Plan::from_json(Json::parse(R"({"model": {"name": "llama3-405b-shape", "layers": 126, "hidden": 16384,
      "heads": 128, "kv_heads": 8, "ffn_hidden": 53248, "vocab": 128256, "seq_len": 8192, "activation": "swiglu",
      "norm": "rmsnorm", "tied_embeddings": false, "position_embedding": "rope", "bias": false},
      "cluster": "dgx-h100", "nodes": 16, "train": {"global_batch": 256, "precision": "bf16", "optimizer": "adamw"},
      "parallel": {"dp": 2, "pp": 8, "tp": 8, "tp_sequence_parallel": true, "zero": 1, "micro_batch": 1}})"),
                              "");
  plan.validate();
  EXPECT_TRUE(round_trips(plan, Engine::megatron));
  const std::string script = export_plan(Engine::megatron, plan).text;
  EXPECT_NE(script.find("--decoder-first-pipeline-num-layers 15"), std::string::npos) << script;
  EXPECT_NE(script.find("--decoder-last-pipeline-num-layers 15"), std::string::npos) << script;
  const std::string toml = export_plan(Engine::torchtitan, plan, TorchtitanForm::toml).text;
  EXPECT_NE(toml.find("pipeline_parallel_first_stage_less_layers = 1"), std::string::npos) << toml;
  EXPECT_NE(toml.find("pipeline_parallel_last_stage_less_layers = 1"), std::string::npos) << toml;
  EXPECT_THROW(export_plan(Engine::nemo, plan), Error);
  ImportContext context;
  context.cluster = plan.cluster;
  context.nodes = plan.nodes;
  std::string other_split = script;
  other_split.replace(other_split.find("--decoder-first-pipeline-num-layers 15"),
                      std::string("--decoder-first-pipeline-num-layers 15").size(), "--decoder-first-pipeline-num-layers 14");
  try {
    import_run(Engine::megatron, other_split, context);
    FAIL() << "a split tessel does not price was imported";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("--decoder-first-pipeline-num-layers"), std::string::npos) << error.what();
  }
}

// An uneven interleaved split: 126 layers over 8 stages x 2 chunks leave the first and
// the last chunk 7 blocks and the others 8. torchtitan's less-layers counts are per
// virtual stage, so its TOML says it and reads back as the same plan; Megatron-LM spreads
// its first/last-stage counts over a stage's chunks otherwise, and NeMo has no place for
// them: both refused by name.
TEST(RoundTrip, AnUnevenInterleavedSplitIntoTorchtitanAndRefusedForMegatronAndNemo) {
  Plan plan = Plan::from_json(Json::parse(R"({"model": {"name": "llama3-405b-shape", "layers": 126, "hidden": 16384,
      "heads": 128, "kv_heads": 8, "ffn_hidden": 53248, "vocab": 128256, "seq_len": 8192, "activation": "swiglu",
      "norm": "rmsnorm", "tied_embeddings": false, "position_embedding": "rope", "bias": false},
      "cluster": "dgx-h100", "nodes": 16, "train": {"global_batch": 256, "precision": "bf16", "optimizer": "adamw"},
      "parallel": {"dp": 2, "pp": 8, "tp": 8, "tp_sequence_parallel": true, "zero": 2, "micro_batch": 1,
                   "schedule": "interleaved", "virtual_stages": 2}})"),
                              "");
  plan.validate();
  const std::string toml = export_plan(Engine::torchtitan, plan, TorchtitanForm::toml).text;
  EXPECT_NE(toml.find("pipeline_parallel_layers_per_stage = 8"), std::string::npos) << toml;
  EXPECT_NE(toml.find("pipeline_parallel_first_stage_less_layers = 1"), std::string::npos) << toml;
  EXPECT_NE(toml.find("pipeline_parallel_last_stage_less_layers = 1"), std::string::npos) << toml;
  ImportContext context;
  context.cluster = plan.cluster;
  context.nodes = plan.nodes;
  context.model = plan.model;
  const ImportedRun back = import_run(Engine::torchtitan, toml, context);
  EXPECT_EQ(back.plan.parallel.schedule, Schedule::interleaved);
  EXPECT_EQ(back.plan.parallel.virtual_stages, 2);
  EXPECT_EQ(back.plan.model.layers, 126);
  for (Engine refused : {Engine::megatron, Engine::nemo}) {
    try {
      export_plan(refused, plan);
      ADD_FAILURE() << "an uneven interleaved split was written";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("uneven interleaved split"), std::string::npos) << error.what();
    }
  }
}

}  // namespace
}  // namespace tessel::interop
