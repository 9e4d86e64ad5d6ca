// torchtitan's job config (TOML, and config_registry.py) read into a plan and written from one.
// The files are torchtitan's published llama3 train_configs (tests/interop/real/, README cites each).
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "../../interop/src/torchtitan_flavors.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/input_file.hpp"
#include "tessel/interop/engine_config.hpp"
#include "import_fixtures.hpp"

namespace tessel::interop {
namespace {

using test::error_of;
using test::fixture;

ImportContext cluster_context(const std::string& cluster, int nodes, std::optional<ModelSpec> model = std::nullopt) {
  return test::context_on(cluster, nodes, "job.toml", std::move(model));
}

TEST(TorchtitanFlavors, ShapesFollowTorchtitansFeedForwardRule) {
  using detail::find_torchtitan_flavor;
  // The FFN widths Meta published for each model.
  EXPECT_EQ(find_torchtitan_flavor("llama3", "8B")->spec.ffn_hidden, 14336);
  EXPECT_EQ(find_torchtitan_flavor("llama3", "70B")->spec.ffn_hidden, 28672);
  EXPECT_EQ(find_torchtitan_flavor("llama3", "405B")->spec.ffn_hidden, 53248);
  EXPECT_EQ(find_torchtitan_flavor("llama3", "debugmodel")->spec.ffn_hidden, 768);
  EXPECT_EQ(find_torchtitan_flavor("llama2", "7B")->spec.ffn_hidden, 11008);
  EXPECT_EQ(find_torchtitan_flavor("llama2", "13B")->spec.ffn_hidden, 13824);
  const ModelSpec llama3_8b = find_torchtitan_flavor("llama3", "8B")->spec;
  EXPECT_EQ(llama3_8b.kv_heads, 8);
  EXPECT_EQ(llama3_8b.vocab, 128256);
  // Llama 2 7B as tessel's preset has it (name and source aside).
  ModelSpec llama2_7b = find_torchtitan_flavor("llama2", "7B")->spec;
  const ModelSpec preset = resolve_model("llama2-7b");
  llama2_7b.name = preset.name;
  llama2_7b.source = preset.source;
  EXPECT_EQ(llama2_7b, preset);
}

// torchtitan/models/llama3/train_configs/llama3_8b.toml: FSDP over the 64 A100s it is a
// preset for (data_parallel_shard_degree -1), local batch 1, seq_len 8192, selective "op".
TEST(Torchtitan, Llama3EightBPresetReadsAsFsdpOverSixtyFourGpus) {
  const ImportContext context = cluster_context("dgx-a100", 8);
  const ImportedRun run = import_run(Engine::torchtitan, test::real_file("torchtitan/llama3_8b.toml"), context);
  Plan expected;
  expected.model = detail::find_torchtitan_flavor("llama3", "8B")->spec;
  expected.cluster = context.cluster;
  expected.nodes = 8;
  expected.train = TrainSpec{.global_batch = 64,
                             .seq_len = 8192,
                             .precision = Precision::bf16,
                             .gradient_precision = std::nullopt,
                             .optimizer = Optimizer::adamw,
                             .kernels = Kernels::fused,
                             .dropout = false,
                             .engine = {},
                             .engine_date = {}};
  expected.parallel = ParallelConfig{.dp = 64, .zero = 3, .recompute = Recompute::selective_op, .micro_batch = 1};
  EXPECT_EQ(run.plan, expected) << run.plan.to_json().dump();
  for (const char* line :
       {"[job]", "[profiling]", "[metrics]", "[checkpoint]", "[compile]", "[quantize]", "[validation]",
        "[lr_scheduler]", "optimizer.lr", "training.max_norm", "model.hf_assets_path"})
    EXPECT_TRUE(test::has_line(run.ignored, line)) << line;
}

// torchtitan/models/llama3/train_configs/llama3_70b.toml: 8-way tensor parallelism with
// FSDP over the rest, local batch 8, full activation checkpointing.
TEST(Torchtitan, Llama3SeventyBPresetReadsAsTensorParallelWithFsdp) {
  const ImportContext context = cluster_context("dgx-h100", 8);
  const ImportedRun run = import_run(Engine::torchtitan, test::real_file("torchtitan/llama3_70b.toml"), context);
  Plan expected;
  expected.model = detail::find_torchtitan_flavor("llama3", "70B")->spec;
  expected.cluster = context.cluster;
  expected.nodes = 8;
  expected.train = TrainSpec{.global_batch = 64,
                             .seq_len = 8192,
                             .precision = Precision::bf16,
                             .gradient_precision = std::nullopt,
                             .optimizer = Optimizer::adamw,
                             .kernels = Kernels::fused,
                             .dropout = false,
                             .engine = {},
                             .engine_date = {}};
  expected.parallel = ParallelConfig{
      .dp = 8, .tp = 8, .tp_sequence_parallel = true, .zero = 3, .recompute = Recompute::full, .micro_batch = 8};
  EXPECT_EQ(run.plan, expected) << run.plan.to_json().dump();
}

TEST(Torchtitan, CostChangingOptionsTesselDoesNotModelAreRefusedByName) {
  const ImportContext context = cluster_context("dgx-h100", 8);
  // debug_model.toml checkpoints every 2nd layer (selective_ac_option '2').
  const std::string every_other =
      error_of([&] { import_run(Engine::torchtitan, test::real_file("torchtitan/llama3_debug_model.toml"), context); });
  EXPECT_NE(every_other.find("activation_checkpoint.selective_ac_option: '2'"), std::string::npos) << every_other;
  const std::string base = "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[activation_checkpoint]\nmode = \"none\"\n";
  const std::pair<std::string, std::string> cases[] = {
      {"[parallelism]\ndata_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 32\n",
       "parallelism.data_parallel_replicate_degree: replicating and sharding together (HSDP)"},
      {"[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = \"ZBVZeroBubble\"\n",
       "parallelism.pipeline_parallel_schedule: 'ZBVZeroBubble' is not modelled"},
      {"[parallelism]\nexpert_parallel_degree = 8\n", "parallelism.expert_parallel_degree: mixture of experts"},
      {"[parallelism]\ntensor_parallel_degree = 16777216\npipeline_parallel_degree = 16777216\n",
       "the degrees multiply to more than"},
      {"[training]\nenable_cpu_offload = true\n", "training.enable_cpu_offload"},
      {"[training]\ndtype = \"bfloat16\"\n", "training.dtype: full bf16"},
      {"[parallelism]\nfancy_new_degree = 2\n", "parallelism.fancy_new_degree: not an option"},
  };
  for (const auto& [extra, message] : cases) {
    const std::string error = error_of([&] { import_run(Engine::torchtitan, base + extra, context); });
    EXPECT_NE(error.find(message), std::string::npos) << extra << " -> " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos);
  }
  const std::string flavor =
      error_of([&] { import_run(Engine::torchtitan, "[model]\nname = \"llama3\"\nflavor = \"8B_flex\"\n", context); });
  EXPECT_NE(flavor.find("model.flavor: 'llama3/8B_flex' is not a flavor tessel knows (llama3/debugmodel, llama3/8B"),
            std::string::npos)
      << flavor;
  const std::string malformed = error_of([&] { import_run(Engine::torchtitan, "[model\nname = 1", context); });
  EXPECT_NE(malformed.find("job.toml: malformed TOML at line 1"), std::string::npos) << malformed;
}

TEST(Torchtitan, GradientAccumulationAndPipelines) {
  const ImportContext context = cluster_context("dgx-h100", 2);
  const std::string model = "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[activation_checkpoint]\nmode = \"full\"\n";
  // Without a pipeline: accumulation makes up the global batch.
  const Plan accumulated = import_run(Engine::torchtitan,
                                      model +
                                          "[training]\nlocal_batch_size = 2\n"
                                          "global_batch_size = 128\n",
                                      context)
                               .plan;
  EXPECT_EQ(accumulated.parallel.micro_batch, 2);
  EXPECT_EQ(accumulated.train.global_batch, 128);
  // An interleaved pipeline: 4 stages per rank from 32 layers / 4 layers per stage over pp 2.
  const ImportedRun piped = import_run(Engine::torchtitan, model + R"(
[training]
local_batch_size = 16
[parallelism]
data_parallel_shard_degree = 8
pipeline_parallel_degree = 2
pipeline_parallel_schedule = "Interleaved1F1B"
pipeline_parallel_microbatch_size = 2
pipeline_parallel_layers_per_stage = 4
pipeline_parallel_first_stage_less_layers = 0
pipeline_parallel_last_stage_less_layers = 0
)",
                                       context);
  EXPECT_EQ(piped.plan.parallel.schedule, Schedule::interleaved);
  EXPECT_EQ(piped.plan.parallel.virtual_stages, 4);
  EXPECT_EQ(piped.plan.parallel.micro_batch, 2);
  EXPECT_EQ(piped.plan.parallel.zero, 2);  // "default" resharding under a pipeline keeps the weights gathered
  EXPECT_EQ(piped.plan.train.global_batch, 128);
  const std::string flushed = error_of([&] {
    import_run(Engine::torchtitan,
               model +
                   "[training]\nlocal_batch_size = 4\nglobal_batch_size = 64\n"
                   "[parallelism]\npipeline_parallel_degree = 2\n",
               context);
  });
  EXPECT_NE(flushed.find("parallelism.pipeline_parallel_degree: gradient accumulation"), std::string::npos) << flushed;
}

TEST(Torchtitan, OnLocalCpuTheShardDegreeMustBeGiven) {
  const ImportContext context = cluster_context("local-cpu", 1);
  const std::string model =
      "[model]\nname = \"llama3\"\nflavor = \"debugmodel\"\n"
      "[activation_checkpoint]\nmode = \"none\"\n";
  const std::string error = error_of([&] { import_run(Engine::torchtitan, model, context); });
  EXPECT_NE(error.find("job.toml: parallelism.data_parallel_shard_degree: -1 (the rest) needs a fixed GPU count"),
            std::string::npos)
      << error;
  const ImportedRun run =
      import_run(Engine::torchtitan, model + "[parallelism]\ndata_parallel_shard_degree = 2\n", context);
  EXPECT_EQ(run.plan.parallel.dp, 2);
  EXPECT_EQ(run.plan.parallel.zero, 3);
  EXPECT_EQ(run.plan.model.name, "llama3-debugmodel");
}

TEST(Torchtitan, DetectsItsFixtures) {
  for (const char* name : {"torchtitan/llama3_8b.toml", "torchtitan/llama3_70b.toml", "torchtitan/llama3_405b.toml",
                           "torchtitan/llama3_debug_model.toml", "torchtitan/llama3_config_registry.py"})
    EXPECT_EQ(detect_engine(name, test::real_file(name)), Engine::torchtitan) << name;
}

// The examples' models are not torchtitan flavors: the plan's own model comes along.
using test::context_of;

// Every example plan comes back as the nearest plan torchtitan runs; not_expressible
// names each change (hand-written here, field by field).
TEST(Torchtitan, RoundTripOfEveryExamplePlanGivesTheNearestPlan) {
  struct Case {
    const char* file;
    void (*nearest)(Plan&);
    std::vector<std::string> notes;  // the start of each not_expressible line
  };
  const Case cases[] = {
      {"gpt3-13b-dgx-h100.json",
       [](Plan& p) {
         p.parallel.zero = 2;
         p.parallel.recompute = Recompute::none;
       },
       {"parallel.zero 1: FSDP has no optimizer-only sharding", "train.kernels unfused", "train.dropout true",
        "parallel.recompute selective", "model gpt3-13b"}},
      {"local-cpu-gpt-pp-tp.json",
       [](Plan& p) {
         p.parallel.zero = 0;
         p.parallel.tp_sequence_parallel = true;
         p.parallel.recompute = Recompute::none;
       },
       {"parallel.tp_sequence_parallel false", "parallel.zero 1: nothing to shard", "train.kernels unfused",
        "parallel.recompute selective", "model gpt-small-cpu"}},
      {"local-cpu-gpt-small.json", [](Plan&) {}, {"train.kernels unfused", "model gpt-small-cpu"}},
  };
  for (const Case& c : cases) {
    const Plan plan = Plan::load(std::string(TESSEL_SOURCE_DIR "/examples/") + c.file);
    const ExportedConfig exported = export_plan(Engine::torchtitan, plan, TorchtitanForm::toml);
    Plan nearest = plan;
    nearest.train.kernels = Kernels::fused;
    nearest.train.dropout = false;
    c.nearest(nearest);
    EXPECT_EQ(import_run(Engine::torchtitan, exported.text, context_of(plan)).plan, nearest) << c.file << "\n"
                                                                                             << exported.text;
    ASSERT_EQ(exported.not_expressible.size(), c.notes.size()) << c.file << "\n" << exported.text;
    for (std::size_t i = 0; i < c.notes.size(); ++i) {
      EXPECT_EQ(exported.not_expressible[i].rfind(c.notes[i], 0), 0u) << exported.not_expressible[i];
      EXPECT_NE(exported.text.find("# not expressible: " + exported.not_expressible[i]), std::string::npos);
    }
  }
}

// A plan torchtitan expresses whole comes back exactly, model included (by flavor).
TEST(Torchtitan, RoundTripOfAnExpressiblePlanIsExact) {
  const ImportedRun run =
      import_run(Engine::torchtitan, test::real_file("torchtitan/llama3_70b.toml"), cluster_context("dgx-h100", 8));
  const ExportedConfig exported = export_plan(Engine::torchtitan, run.plan, TorchtitanForm::toml);
  EXPECT_TRUE(exported.not_expressible.empty()) << exported.text;
  EXPECT_EQ(import_run(Engine::torchtitan, exported.text, cluster_context("dgx-h100", 8)).plan, run.plan)
      << exported.text;
  Plan piped = run.plan;
  piped.parallel = ParallelConfig{.dp = 2,
                                  .pp = 4,
                                  .tp = 8,
                                  .tp_sequence_parallel = true,
                                  .zero = 3,
                                  .recompute = Recompute::selective_op,
                                  .micro_batch = 1,
                                  .schedule = Schedule::interleaved,
                                  .virtual_stages = 2};
  piped.validate();
  const ExportedConfig piped_export = export_plan(Engine::torchtitan, piped, TorchtitanForm::toml);
  EXPECT_TRUE(piped_export.not_expressible.empty()) << piped_export.text;
  EXPECT_EQ(import_run(Engine::torchtitan, piped_export.text, cluster_context("dgx-h100", 8)).plan, piped)
      << piped_export.text;
}

// 2D tensor parallelism has no torchtitan form: the nearest is 1D over the same GPUs.
TEST(Torchtitan, TwoDimensionalTensorParallelismIsWrittenAsTheNearestOneDimensional) {
  Plan plan = Plan::load(TESSEL_SOURCE_DIR "/examples/gpt3-13b-dgx-h100.json");
  plan.parallel.tp_mode = TpMode::d2;
  plan.parallel.tp_sequence_parallel = false;
  plan.validate();
  const ExportedConfig exported = export_plan(Engine::torchtitan, plan, TorchtitanForm::toml);
  ASSERT_FALSE(exported.not_expressible.empty());
  EXPECT_EQ(exported.not_expressible[0].rfind("parallel.tp_mode 2d: torchtitan's tensor parallelism is 1D", 0), 0u);
  const Plan back = import_run(Engine::torchtitan, exported.text, context_of(plan)).plan;
  EXPECT_EQ(back.parallel.tp_mode, TpMode::d1);
  EXPECT_EQ(back.parallel.tp, 4);
  EXPECT_TRUE(back.parallel.tp_sequence_parallel);
}

// fp16 and offload have no torchtitan form: bf16 and no offload, both noted.
TEST(Torchtitan, FpSixteenAndOffloadAreWrittenAsTheNearestAndNoted) {
  Plan plan = Plan::load(TESSEL_SOURCE_DIR "/examples/local-cpu-gpt-small.json");
  plan.parallel.zero = 3;
  plan.parallel.offload = OffloadMode::optimizer;
  plan.train.precision = Precision::fp16;
  plan.train.kernels = Kernels::fused;
  plan.validate();
  const ExportedConfig exported = export_plan(Engine::torchtitan, plan, TorchtitanForm::toml);
  ASSERT_EQ(exported.not_expressible.size(), 3u) << exported.text;
  EXPECT_EQ(exported.not_expressible[0].rfind("parallel.offload optimizer", 0), 0u);
  EXPECT_EQ(exported.not_expressible[1].rfind("train.precision fp16", 0), 0u);
  EXPECT_EQ(exported.not_expressible[2].rfind("model gpt-small-cpu", 0), 0u);
  Plan nearest = plan;
  nearest.parallel.offload = OffloadMode::none;
  nearest.train.precision = Precision::bf16;
  EXPECT_EQ(import_run(Engine::torchtitan, exported.text, context_of(plan)).plan, nearest) << exported.text;
}


// model.converters ["float8"]: fp8 linears on bf16 FSDP training, written and read back.
TEST(Torchtitan, Float8ConvertersAreFp8BothWays) {
  const Plan plan = Plan::from_json(Json::parse(R"({"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 1,
      "train": {"global_batch": 16, "precision": "fp8", "kernels": "fused"},
      "parallel": {"dp": 8, "zero": 3, "micro_batch": 2}})"), "");
  const ExportedConfig exported = export_plan(Engine::torchtitan, plan, TorchtitanForm::toml);
  EXPECT_NE(exported.text.find("converters = [\"float8\"]"), std::string::npos) << exported.text;
  EXPECT_NE(exported.text.find("mixed_precision_param = \"bfloat16\""), std::string::npos) << exported.text;
  const ImportedRun run = import_run(Engine::torchtitan, exported.text, cluster_context("dgx-h100", 1));
  EXPECT_EQ(run.plan.train.precision, Precision::fp8) << exported.text;
  // The converter's names in the TOML's releases, and the rule the registries share
  // (torchtitan_rules.hpp): a converter other than float8 linears is refused by its name, and
  // float8 emulated in higher precision where float8 linears run (it was ignored before).
  auto with = [&](const std::string& converter, const std::string& tail) {
    std::string text = exported.text;
    text.replace(text.find("\"float8\"]"), 9, "\"" + converter + "\"]");
    return error_of([&] { import_run(Engine::torchtitan, text + tail, cluster_context("dgx-h100", 1)); });
  };
  EXPECT_EQ(with("quantize.linear.float8", ""), "");  // September 2025 to February 2026
  EXPECT_EQ(with("mx", ""), "job.toml: model.converters: 'mx' is not modelled (tessel prices float8, bf16, fp16 or fp32)");
  EXPECT_NE(with("quantize.linear.mx", "").find("'quantize.linear.mx' is not modelled"), std::string::npos);
  EXPECT_EQ(with("float8", "\n[quantize.linear.float8]\nemulate = true\n"),
            "job.toml: quantize.linear.float8.emulate: emulated float8 (GEMMs in bf16) is not modelled");
  EXPECT_EQ(with("float8", "\n[float8]\nemulate = true\n"),
            "job.toml: float8.emulate: emulated float8 (GEMMs in bf16) is not modelled");
}

// torch.compile is the framework whose fused kernels a calibration corrects apart
// (profiles/calibration.hpp): [compile] enable = true reads as it and is written back.
TEST(Torchtitan, CompileIsTheTorchCompileFrameworkBothWays) {
  Plan plan = Plan::from_json(Json::parse(R"({"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 1,
      "train": {"global_batch": 16, "kernels": "fused", "dropout": false, "framework": "torch.compile"},
      "parallel": {"dp": 8, "zero": 3, "micro_batch": 2}})"), "");
  const ExportedConfig exported = export_plan(Engine::torchtitan, plan, TorchtitanForm::toml);
  EXPECT_NE(exported.text.find("[compile]\nenable = true"), std::string::npos) << exported.text;
  const ImportedRun compiled = import_run(Engine::torchtitan, exported.text, cluster_context("dgx-h100", 1));
  EXPECT_EQ(compiled.plan.train.framework, Framework::torch_compile) << exported.text;
  plan.train.framework = Framework::pytorch;
  const ExportedConfig eager = export_plan(Engine::torchtitan, plan, TorchtitanForm::toml);
  EXPECT_EQ(eager.text.find("[compile]"), std::string::npos) << eager.text;
  EXPECT_EQ(import_run(Engine::torchtitan, eager.text, cluster_context("dgx-h100", 1)).plan.train.framework,
            Framework::pytorch);
}


// Op-level checkpointing with async tensor parallelism is refused in one line naming
// torchtitan's option (tessel does not model the replay of a pipelined gather).
TEST(Torchtitan, OpLevelCheckpointingWithAsyncTensorParallelIsRefusedByName) {
  const std::string toml = R"([model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 1
seq_len = 8192
[parallelism]
data_parallel_shard_degree = 8
tensor_parallel_degree = 8
enable_async_tensor_parallel = true
[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"
)";
  try {
    import_run(Engine::torchtitan, toml, cluster_context("dgx-h100", 8));
    FAIL() << "accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("activation_checkpoint.selective_ac_option: 'op' with "
                           "parallelism.enable_async_tensor_parallel"),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace tessel::interop
