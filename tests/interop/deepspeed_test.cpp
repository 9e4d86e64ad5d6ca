// DeepSpeed's ds_config.json read into a plan and written from one. The fixtures follow
// DeepSpeed's published examples option by option (each test names its source); the
// model comes from a Hugging Face config.json as `--hf-config` gives it.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "tessel/core/error.hpp"
#include "tessel/core/input_file.hpp"
#include "tessel/interop/engine_config.hpp"
#include "import_fixtures.hpp"

namespace tessel::interop {
namespace {

using test::context_of;
using test::error_of;
using test::fixture;

ModelSpec gpt2_small() {
  return ModelSpec::from_hf_config(parse_json_text(fixture("deepspeed_hf_gpt2_config.json"), "config.json"), "gpt2");
}

ImportContext dgx_h100(int nodes, std::optional<ModelSpec> model = gpt2_small()) {
  return test::context_on("dgx-h100", nodes, "ds_config.json", std::move(model));
}

Plan expected_plan(const ImportContext& context) {
  Plan plan;
  plan.model = *context.model;
  plan.cluster = context.cluster;
  plan.nodes = context.nodes;
  return plan;
}

// docs/_tutorials/getting-started.md, "DeepSpeed Configuration": train_batch_size 8,
// gradient_accumulation_steps 1, Adam, fp16, and the older boolean "zero_optimization": true.
TEST(DeepSpeed, GettingStartedExampleReadsAsZeroOneDataParallel) {
  const ImportContext context = dgx_h100(1);
  const ImportedRun run = import_run(Engine::deepspeed, fixture("deepspeed_getting_started.json"), context);
  Plan expected = expected_plan(context);
  expected.train.global_batch = 8;
  expected.train.precision = Precision::fp16;
  expected.train.optimizer = Optimizer::adamw;
  expected.parallel.dp = 8;  // one DGX node: 8 GPUs; micro = 8 / 8 / 1
  expected.parallel.micro_batch = 1;
  expected.parallel.zero = 1;
  EXPECT_EQ(run.plan, expected) << run.plan.to_json().dump();
  EXPECT_FALSE(run.mapped.empty());
  EXPECT_NE(std::find(run.ignored.begin(), run.ignored.end(), "optimizer.params (learning rate, betas, weight decay)"),
            run.ignored.end());
}

// The zero section of docs/_tutorials/zero-offload.md (stage 2, offload_optimizer cpu,
// contiguous_gradients, overlap_comm) with the ZeRO-2 knobs of docs/_tutorials/zero.md, a
// micro batch with gradient accumulation instead of train_batch_size, bf16, AdamW, and the
// activation_checkpointing section of docs/_pages/config-json.md.
TEST(DeepSpeed, ZeroOffloadExampleDerivesTheGlobalBatchFromMicroAndAccumulation) {
  const ImportContext context = dgx_h100(2);
  const ImportedRun run = import_run(Engine::deepspeed, fixture("deepspeed_zero2_offload.json"), context);
  Plan expected = expected_plan(context);
  expected.train.global_batch = 4 * 2 * 16;  // micro x accumulation x GPUs
  expected.train.precision = Precision::bf16;
  expected.parallel.dp = 16;
  expected.parallel.micro_batch = 4;
  expected.parallel.zero = 2;
  expected.parallel.offload = OffloadMode::optimizer;
  expected.parallel.recompute = Recompute::full;
  EXPECT_EQ(run.plan, expected) << run.plan.to_json().dump();
  for (const char* option : {"steps_per_print", "gradient_clipping", "wall_clock_breakdown",
                             "zero_optimization.overlap_comm", "zero_optimization.reduce_bucket_size"})
    EXPECT_NE(std::find(run.ignored.begin(), run.ignored.end(), option), run.ignored.end()) << option;
}

TEST(DeepSpeed, TheBatchRuleIsDeepSpeedsOwn) {
  const ImportContext context = dgx_h100(1);
  auto plan_of = [&](const std::string& text) { return import_run(Engine::deepspeed, text, context).plan; };
  // Two values give the third; one alone means gradient_accumulation_steps 1.
  EXPECT_EQ(plan_of(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2})").train.global_batch, 64);
  EXPECT_EQ(plan_of(R"({"train_batch_size": 64, "gradient_accumulation_steps": 4})").parallel.micro_batch, 2);
  EXPECT_EQ(plan_of(R"({"train_micro_batch_size_per_gpu": 3})").train.global_batch, 24);
  // "auto" is resolved when the other two determine it.
  EXPECT_EQ(plan_of(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 2,
                        "gradient_accumulation_steps": 2})")
                .train.global_batch,
            32);
  const std::string mismatch = error_of([&] {
    plan_of(R"({"train_batch_size": 60, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4})");
  });
  EXPECT_NE(mismatch.find("ds_config.json: train_batch_size: DeepSpeed needs train_batch_size = "), std::string::npos)
      << mismatch;
  EXPECT_NE(error_of([&] { plan_of(R"({"gradient_accumulation_steps": 4})"); }).find("train_batch_size"),
            std::string::npos);
}

// Hugging Face transformers' DeepSpeed guide, its ZeRO-2 example: every batch value and
// fp16.enabled are "auto", which the Trainer fills in from its own arguments; tessel fills
// them with the Trainer's defaults and says so. On local-cpu the batch gives the world
// size, so there "auto" stays refused by name.
TEST(DeepSpeed, AutoValuesAreFilledAsTheTrainerFillsThem) {
  const std::string text = fixture("deepspeed_hf_trainer_zero2_auto.json");
  const ImportedRun run = import_run(Engine::deepspeed, text, dgx_h100(1));
  EXPECT_EQ(run.plan.parallel.micro_batch, 8);
  EXPECT_EQ(run.plan.train.global_batch, 8 * 8);
  EXPECT_EQ(run.plan.train.precision, Precision::fp32);
  EXPECT_EQ(run.plan.parallel.offload, OffloadMode::optimizer);
  EXPECT_TRUE(test::any_line_contains(run.ignored, "\"auto\" batch values filled as the Hugging Face Trainer's "
                                                   "defaults: micro batch 8"));
  EXPECT_TRUE(test::any_line_contains(run.ignored, "fp16.enabled: \"auto\" filled with false"));
  Json with_batch = parse_json_text(text, "fixture");
  with_batch["train_micro_batch_size_per_gpu"] = 4;
  with_batch["gradient_accumulation_steps"] = 1;
  EXPECT_EQ(import_run(Engine::deepspeed, with_batch.dump(), dgx_h100(1)).plan.train.global_batch, 32);
  const std::string local = error_of([&] {
    import_run(Engine::deepspeed, text, test::context_on("local-cpu", 1, "ds_config.json", resolve_model("gpt2-124m")));
  });
  EXPECT_NE(local.find("ds_config.json: train_micro_batch_size_per_gpu: \"auto\" is filled in by the Hugging Face "
                       "Trainer"),
            std::string::npos)
      << local;
}

// docs/_tutorials/zero.md, the ZeRO-Infinity example: stage 3 with offload_param cpu.
TEST(DeepSpeed, CostChangingOptionsTesselDoesNotModelAreRefusedByName) {
  const ImportContext context = dgx_h100(1);
  const std::string infinity =
      error_of([&] { import_run(Engine::deepspeed, fixture("deepspeed_zero3_infinity.json"), context); });
  EXPECT_NE(infinity.find("ds_config.json: zero_optimization.offload_param.device: 'cpu'"), std::string::npos)
      << infinity;
  const std::pair<const char*, const char*> cases[] = {
      {R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})",
       "zero_optimization.offload_param.device: NVMe"},
      {R"({"train_batch_size": 8, "optimizer": {"type": "OneBitAdam"}})", "optimizer.type: 'OneBitAdam'"},
      {R"({"train_batch_size": 8, "sparse_attention": {"mode": "fixed"}})", "sparse_attention: "},
      {R"({"train_batch_size": 8, "sequence_parallel_size": 4})", "sequence_parallel_size: DeepSpeed-Ulysses"},
      {R"({"train_batch_size": 8, "zero_optimization": {"stage": 3}, "tensor_parallel": {"autotp_size": 2}})",
       "tensor_parallel.autotp_size: AutoTP training works with ZeRO stages 0 to 2"},
      {R"({"train_batch_size": 8, "tensor_parallel": {"autotp_size": 3}})",
       "tensor_parallel.autotp_size: must be a whole number dividing the 8 GPUs, got 3"},
      {R"({"train_batch_size": 8, "tensor_parallel": {"autotp_size": 2, "tp_overlap_comm": true}})",
       "tensor_parallel.tp_overlap_comm: tessel reads autotp_size only"},
      {R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "zero_quantized_gradients": true}})",
       "zero_optimization.zero_quantized_gradients: ZeRO++"},
      {R"({"train_batch_size": 8, "some_new_option": 1})", "some_new_option: not an option tessel's reader knows"},
      {R"({"train_micro_batch_size_per_gpu": 16777216, "gradient_accumulation_steps": 16777216})",
       "train_batch_size: micro batch x accumulation x GPUs = "},
      {R"({"train_batch_size": 8, "bf16": {"enabled": true}, "fp16": {"enabled": true}})", "bf16: bf16 and fp16"},
  };
  for (const auto& [text, message] : cases) {
    const std::string error = error_of([&] { import_run(Engine::deepspeed, text, context); });
    EXPECT_NE(error.find(message), std::string::npos) << text << " -> " << error;
  }
}

TEST(DeepSpeed, OnLocalCpuTheThreeBatchValuesGiveTheDataParallelDegree) {
  ImportContext context = dgx_h100(1);
  context.cluster = resolve_cluster("local-cpu");
  const Plan plan = import_run(Engine::deepspeed,
                               R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2,
                                   "gradient_accumulation_steps": 2})",
                               context)
                        .plan;
  EXPECT_EQ(plan.parallel.dp, 4);
  const std::string error = error_of([&] {
    import_run(Engine::deepspeed, R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2})", context);
  });
  EXPECT_NE(error.find("ds_config.json: train_batch_size: cluster local-cpu has as many ranks as the plan"),
            std::string::npos)
      << error;
  const std::string malformed = error_of([&] { import_run(Engine::deepspeed, "{\"train_batch_size\": ", context); });
  EXPECT_NE(malformed.find("ds_config.json: malformed JSON"), std::string::npos) << malformed;
}

// docs/_tutorials/zeropp.md: qwZ "reduce[s] ZeRO parameter all-gather communication volume
// by half from FP16 to INT8"; DeepSpeed applies it to stage 3's gathers, and it is written
// back for DeepSpeed only (the other engines gather exactly, and say so).
TEST(DeepSpeed, QuantizedWeightsReadAtStage3AndRoundTrip) {
  const ImportContext context = dgx_h100(1);
  const ImportedRun run = import_run(
      Engine::deepspeed, R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "zero_quantized_weights": true}})",
      context);
  EXPECT_TRUE(run.plan.parallel.zero_quantized_weights);
  EXPECT_TRUE(test::any_line_contains(run.mapped, "parallel.zero_quantized_weights true"));
  const ImportedRun stage2 = import_run(
      Engine::deepspeed, R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, "zero_quantized_weights": true}})",
      context);
  EXPECT_FALSE(stage2.plan.parallel.zero_quantized_weights);
  EXPECT_NE(std::find(stage2.ignored.begin(), stage2.ignored.end(), "zero_optimization.zero_quantized_weights"),
            stage2.ignored.end());
  const ExportedConfig exported = export_plan(Engine::deepspeed, run.plan);
  EXPECT_TRUE(exported.not_expressible.empty());
  EXPECT_EQ(import_run(Engine::deepspeed, exported.text, context).plan, run.plan) << exported.text;
  for (Engine other : {Engine::megatron, Engine::torchtitan}) {
    const ExportedConfig written = export_plan(other, run.plan);
    EXPECT_TRUE(test::any_line_contains(written.not_expressible, "parallel.zero_quantized_weights")) << written.text;
  }
}

TEST(DeepSpeed, RefusableOptionsSwitchedOffAreIgnored) {
  const ImportContext context = dgx_h100(1);
  const ImportedRun run =
      import_run(Engine::deepspeed,
                 R"({"train_batch_size": 8, "amp": {"enabled": false}, "communication_data_type": null})", context);
  EXPECT_NE(std::find(run.ignored.begin(), run.ignored.end(), "amp (switched off)"), run.ignored.end());
  EXPECT_NE(std::find(run.ignored.begin(), run.ignored.end(), "communication_data_type (switched off)"),
            run.ignored.end());
  const std::string error =
      error_of([&] { import_run(Engine::deepspeed, R"({"train_batch_size": 8, "amp": {"enabled": true}})", context); });
  EXPECT_NE(error.find("ds_config.json: amp: Apex AMP is not modelled"), std::string::npos) << error;
}

TEST(DeepSpeed, TheModelMustComeFromAHuggingFaceConfig) {
  const std::string error = error_of(
      [&] { import_run(Engine::deepspeed, fixture("deepspeed_getting_started.json"), dgx_h100(1, std::nullopt)); });
  EXPECT_NE(error.find("--hf-config"), std::string::npos) << error;
}

TEST(DeepSpeed, DetectsItsFixtures) {
  for (const char* name : {"deepspeed_getting_started.json", "deepspeed_zero2_offload.json",
                           "deepspeed_zero3_infinity.json", "deepspeed_hf_trainer_zero2_auto.json"})
    EXPECT_EQ(detect_engine(name, fixture(name)), Engine::deepspeed) << name;
}

// A data-parallel plan DeepSpeed expresses whole comes back unchanged.
TEST(DeepSpeed, RoundTripOfADataParallelPlanIsExact) {
  Plan plan = Plan::load(TESSEL_SOURCE_DIR "/examples/local-cpu-gpt-small.json");
  plan.train.dropout = true;  // ds_config does not say; the model code's dropout is read as on
  const ExportedConfig exported = export_plan(Engine::deepspeed, plan);
  EXPECT_TRUE(exported.not_expressible.empty());
  EXPECT_EQ(detect_engine("ds_config.json", exported.text), Engine::deepspeed);
  EXPECT_EQ(import_run(Engine::deepspeed, exported.text, context_of(plan)).plan, plan) << exported.text;
  Plan offloaded = plan;
  offloaded.parallel.zero = 2;
  offloaded.parallel.offload = OffloadMode::optimizer;
  offloaded.parallel.recompute = Recompute::full;
  offloaded.train.optimizer = Optimizer::lamb;
  offloaded.train.precision = Precision::bf16;
  EXPECT_EQ(import_run(Engine::deepspeed, export_plan(Engine::deepspeed, offloaded).text, context_of(offloaded)).plan,
            offloaded);
}

// training/tensor_parallel/hf_integration/configs/ds_config.json (DeepSpeedExamples):
// AutoTP splits every linear over autotp_size ranks, so the data-parallel degree that the
// batch counts is the GPUs over it; a 1D tensor-parallel plan is written back as AutoTP.
TEST(DeepSpeed, AutoTpReadsAsOneDimensionalTensorParallelismAndRoundTrips) {
  const ImportContext context = test::context_on("dgx-h100", 1, "ds_config.json", resolve_model("llama2-7b"));
  const Plan plan = import_run(Engine::deepspeed,
                               R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2,
                                   "zero_optimization": {"stage": 2}, "bf16": {"enabled": true},
                                   "tensor_parallel": {"autotp_size": 4}})",
                               context)
                        .plan;
  EXPECT_EQ(plan.parallel.tp, 4);
  EXPECT_EQ(plan.parallel.tp_mode, TpMode::d1);
  EXPECT_EQ(plan.parallel.dp, 2);
  EXPECT_EQ(plan.train.global_batch, 16);
  const ExportedConfig exported = export_plan(Engine::deepspeed, plan);
  EXPECT_NE(exported.text.find("\"autotp_size\": 4"), std::string::npos) << exported.text;
  EXPECT_TRUE(exported.not_expressible.empty()) << exported.text;
  EXPECT_EQ(import_run(Engine::deepspeed, exported.text, context_of(plan)).plan, plan) << exported.text;
}

// Plans with tensor and pipeline parallelism come back as the nearest pure data-parallel
// plan over the same GPUs, and not_expressible names what changed.
TEST(DeepSpeed, RoundTripOfModelParallelExamplesGivesTheNearestDataParallelPlan) {
  for (const char* name : {"gpt3-13b-dgx-h100.json", "local-cpu-gpt-pp-tp.json"}) {
    const Plan plan = Plan::load(std::string(TESSEL_SOURCE_DIR "/examples/") + name);
    const ExportedConfig exported = export_plan(Engine::deepspeed, plan);
    Plan nearest = plan;
    nearest.parallel = ParallelConfig{.dp = plan.parallel.world_size(),
                                      .zero = plan.parallel.zero,
                                      .recompute = Recompute::full,
                                      .micro_batch = plan.parallel.micro_batch};
    nearest.train.dropout = true;
    EXPECT_EQ(import_run(Engine::deepspeed, exported.text, context_of(plan)).plan, nearest) << name << exported.text;
    ASSERT_EQ(exported.not_expressible.size(), plan.train.dropout ? 2u : 3u) << name;
    if (!plan.train.dropout) {
      EXPECT_EQ(exported.not_expressible[2].rfind("train.dropout false", 0), 0u);
    }
    EXPECT_NE(exported.not_expressible[0].find("parallel.tp"), std::string::npos);
    EXPECT_NE(exported.not_expressible[1].find("parallel.recompute selective"), std::string::npos);
    EXPECT_NE(exported.text.find("\"tessel_note\""), std::string::npos);
  }
}

// What ds_config cannot say is written as the nearest it can, and said.
TEST(DeepSpeed, ChunkedOffloadAndFusedKernelsAreWrittenAsTheNearestAndNoted) {
  Plan plan = Plan::load(TESSEL_SOURCE_DIR "/examples/local-cpu-gpt-small.json");
  plan.parallel.zero = 3;
  plan.parallel.offload = OffloadMode::chunked;
  plan.parallel.offload_device_fraction = 0.5;
  plan.train.kernels = Kernels::fused;
  plan.validate();
  const ExportedConfig exported = export_plan(Engine::deepspeed, plan);
  ASSERT_EQ(exported.not_expressible.size(), 3u) << exported.text;
  EXPECT_EQ(exported.not_expressible[0].rfind("parallel.offload chunked 0.50", 0), 0u);
  EXPECT_EQ(exported.not_expressible[1].rfind("train.kernels fused", 0), 0u);
  EXPECT_EQ(exported.not_expressible[2].rfind("train.dropout false", 0), 0u);
  Plan nearest = plan;
  nearest.train.dropout = true;
  nearest.parallel.offload = OffloadMode::optimizer;
  nearest.parallel.offload_device_fraction = 1.0;
  nearest.train.kernels = Kernels::unfused;
  EXPECT_EQ(import_run(Engine::deepspeed, exported.text, context_of(plan)).plan, nearest);
}

}  // namespace
}  // namespace tessel::interop
