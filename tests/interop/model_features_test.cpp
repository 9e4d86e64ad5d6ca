// fp8 parameters (train.fp8_param_gather), squared ReLU and partial rotary embeddings in the
// engines' files: read from the real files that use them (tests/interop/real/), refused by
// name where the engine would not run them, and written back so that reading the written
// file gives the same plan.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "import_fixtures.hpp"
#include "tessel/interop/engine_config.hpp"

namespace tessel::interop {
namespace {

using test::context_on;
using test::error_of;
using test::has_line;
using test::real_file;

ImportedRun import_real(const std::string& path, const std::string& cluster, int nodes,
                        const std::optional<ModelSpec>& model = std::nullopt) {
  const std::string text = real_file(path);
  return import_run(detect_engine(path, text), text, context_on(cluster, nodes, path, model));
}

TEST(Fp8Parameters, MegatronsFp8ParamGatherIsReadAndWrittenBack) {
  for (const char* path : {"megatron/train_llama3_8b_h100_fp8.sh", "megatron/train_llama3_8b_fsdp_h100_fp8.sh"}) {
    const ImportedRun run = import_real(path, "dgx-h100", 1);
    EXPECT_EQ(run.plan.train.precision, Precision::fp8) << path;
    EXPECT_TRUE(run.plan.train.fp8_param_gather) << path;
    EXPECT_TRUE(has_line(run.mapped, "--fp8-param-gather -> train.fp8_param_gather true")) << path;
    const ExportedConfig exported = export_plan(Engine::megatron, run.plan);
    EXPECT_NE(exported.text.find("    --fp8-param-gather\n"), std::string::npos) << path;
    EXPECT_TRUE(import_run(Engine::megatron, exported.text, test::context_of(run.plan)).plan.train.fp8_param_gather);
  }
  // Without fp8 training there are no fp8 parameters.
  const char* bf16_run =
      "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 "
      "--vocab-size 1024 --micro-batch-size 2 --global-batch-size 64 --bf16 --fp8-param-gather";
  const std::string message = error_of([&] { import_run(Engine::megatron, bf16_run, context_on("dgx-h100", 1, "run.sh")); });
  EXPECT_EQ(message, "run.sh: --fp8-param-gather: fp8 parameters need fp8 training (--bf16 --fp8-format hybrid|e4m3)");
}

// Megatron-LM's validate_args accepts --fp8-param-gather only with its distributed
// optimizer or FSDP; the reader refuses what the writer would not write (ZeRO 0).
TEST(Fp8Parameters, MegatronsFp8ParamGatherNeedsTheDistributedOptimizerBothWays) {
  const std::string run =
      "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 "
      "--vocab-size 1024 --micro-batch-size 2 --global-batch-size 64 --bf16 --fp8-format hybrid --fp8-param-gather";
  const ImportContext context = context_on("dgx-h100", 1, "run.sh");
  EXPECT_EQ(error_of([&] { import_run(Engine::megatron, run, context); }),
            "run.sh: --fp8-param-gather: Megatron-LM keeps fp8 parameters only with --use-distributed-optimizer or "
            "FSDP (its validate_args refuses them otherwise); tessel prices them with ZeRO 1-3, not with "
            "Megatron-FSDP's no_shard");
  EXPECT_NE(error_of([&] {
              import_run(Engine::megatron, run + " --use-megatron-fsdp --data-parallel-sharding-strategy no_shard", context);
            }).find("--fp8-param-gather: Megatron-LM keeps fp8 parameters only"),
            std::string::npos);
  for (const char* sharded : {" --use-distributed-optimizer", " --use-torch-fsdp2"}) {
    const ImportedRun read = import_run(Engine::megatron, run + sharded, context);
    EXPECT_TRUE(read.plan.train.fp8_param_gather) << sharded;
    const ExportedConfig written = export_plan(Engine::megatron, read.plan);
    EXPECT_NE(written.text.find("--fp8-param-gather"), std::string::npos) << sharded;
    EXPECT_TRUE(import_run(Engine::megatron, written.text, test::context_of(read.plan)).plan.train.fp8_param_gather);
  }
}

TEST(Fp8Parameters, EnginesWithoutAGatherOfFp8WeightsSayTheyWriteBf16Ones) {
  ImportedRun run = import_real("megatron/train_llama3_8b_h100_fp8.sh", "dgx-h100", 1);
  ASSERT_TRUE(run.plan.train.fp8_param_gather);
  run.plan.parallel.zero = 0;  // Megatron keeps fp8 parameters with its distributed optimizer only
  const ExportedConfig megatron = export_plan(Engine::megatron, run.plan);
  EXPECT_EQ(megatron.text.find("--fp8-param-gather"), std::string::npos);
  EXPECT_TRUE(test::any_line_contains(megatron.not_expressible, "train.fp8_param_gather"));
  const ExportedConfig nemo = export_plan(Engine::nemo, run.plan);
  EXPECT_NE(nemo.text.find("  fp8_params: false\n"), std::string::npos);
}

TEST(Fp8Parameters, NemosFp8ParamsAreReadAndWrittenBack) {
  std::string recipe = test::kSmallNemoRecipe;
  recipe += "  fp8: true\n  fp8_params: true\n";
  const std::string bf16 = "precision: bf16-mixed";
  ImportContext context = context_on("dgx-h100", 1, "recipe.yaml");
  const ImportedRun run = import_run(Engine::nemo, recipe, context);
  EXPECT_EQ(run.plan.train.precision, Precision::fp8);
  EXPECT_TRUE(run.plan.train.fp8_param_gather);
  EXPECT_TRUE(has_line(run.mapped, "model.fp8_params: true -> train.fp8_param_gather true"));
  Plan sharded = run.plan;
  sharded.parallel.zero = 1;
  const ExportedConfig exported = export_plan(Engine::nemo, sharded);
  EXPECT_NE(exported.text.find("  fp8_params: true\n"), std::string::npos);
  EXPECT_TRUE(import_run(Engine::nemo, exported.text, test::context_of(sharded)).plan.train.fp8_param_gather);
}

TEST(Fp8Parameters, TorchtitansFloat8AllGatherIsReadUnderFsdpAndWrittenBack) {
  const ImportedRun run = import_real("torchtitan/llama3_405b.toml", "dgx-h100", 64);
  EXPECT_EQ(run.plan.train.precision, Precision::fp8);
  EXPECT_GE(run.plan.parallel.zero, 2);
  EXPECT_TRUE(run.plan.train.fp8_param_gather);
  const ExportedConfig exported = export_plan(Engine::torchtitan, run.plan, TorchtitanForm::toml);
  EXPECT_NE(exported.text.find("[quantize.linear.float8]\nenable_fsdp_float8_all_gather = true\n"), std::string::npos);
  EXPECT_TRUE(import_run(Engine::torchtitan, exported.text, test::context_of(run.plan)).plan.train.fp8_param_gather);
}

// The 15B recipe leaves its tokenizer file unnamed (its vocabulary comes from the model
// given beside it); the 340B one names Nemotron's 256k SentencePiece model.
TEST(SquaredRelu, NemotronRecipesReadSquaredReluAndHalfRotaryEmbeddings) {
  for (const auto& [path, nodes] : {std::pair{"nemo/nemotron_nemotron_15b.yaml", 8}, {"nemo/nemotron_nemotron_340b.yaml", 96}}) {
    const bool small = nodes == 8;
    const ImportedRun run =
        import_real(path, "dgx-h100", nodes, small ? std::optional(resolve_model("nemotron4-15b")) : std::nullopt);
    EXPECT_EQ(run.plan.model.vocab, 256000) << path;
    if (small) {
      EXPECT_EQ(run.plan.model.layer_parameters(), resolve_model("nemotron4-15b").layer_parameters());
    } else {
      EXPECT_TRUE(test::any_line_contains(run.mapped, "model.vocab 256000 (the SentencePiece tokenizer by its name)"));
    }
    EXPECT_EQ(run.plan.model.activation, Activation::squared_relu) << path;
    EXPECT_DOUBLE_EQ(run.plan.model.rotary_fraction, 0.5) << path;
    EXPECT_TRUE(has_line(run.mapped, "model.activation: squared-relu -> model.activation squared-relu")) << path;
    for (const Engine engine : {Engine::nemo, Engine::megatron}) {
      const ExportedConfig exported = export_plan(engine, run.plan);
      const ModelSpec back = import_run(engine, exported.text, test::context_of(run.plan)).plan.model;
      EXPECT_EQ(back.activation, Activation::squared_relu) << path;
      EXPECT_DOUBLE_EQ(back.rotary_fraction, 0.5) << path;
    }
  }
}

TEST(SquaredRelu, MegatronReadsSquaredReluAndRotaryPercentAndRefusesTwoActivations) {
  const std::string run =
      "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 "
      "--vocab-size 1024 --micro-batch-size 2 --global-batch-size 64 --bf16 --position-embedding-type rope ";
  const ImportContext context = context_on("dgx-a100", 1, "run.sh");
  const ImportedRun read = import_run(Engine::megatron, run + "--squared-relu --rotary-percent 0.25", context);
  EXPECT_EQ(read.plan.model.activation, Activation::squared_relu);
  EXPECT_DOUBLE_EQ(read.plan.model.rotary_fraction, 0.25);
  EXPECT_EQ(error_of([&] { import_run(Engine::megatron, run + "--squared-relu --swiglu", context); }),
            "run.sh: --squared-relu: --swiglu is given too; choose one activation");
  EXPECT_EQ(error_of([&] { import_run(Engine::megatron, run + "--rotary-percent 1.5", context); }),
            "run.sh: --rotary-percent: expected the share of each head's channels RoPE rotates, in (0, 1], got '1.5'");
}

// One rule for a norm over each head's query and key: every reader refuses it by name
// (Hugging Face's qwen3 model types: tests/core/moe_model_test.cpp), none prices or drops it.
TEST(QkNorm, EveryEngineReaderRefusesItByName) {
  const std::string megatron =
      "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 "
      "--vocab-size 1024 --micro-batch-size 2 --global-batch-size 64 --bf16";
  const ImportContext script = context_on("dgx-a100", 1, "run.sh");
  EXPECT_EQ(error_of([&] { import_run(Engine::megatron, megatron + " --qk-layernorm", script); }),
            "run.sh: --qk-layernorm: a norm over each head's query and key is not modelled (tessel's blocks, planner "
            "and executor have no such op)");
  EXPECT_EQ(error_of([&] { import_run(Engine::megatron, megatron, script); }), "");
  const ImportContext recipe = context_on("dgx-a100", 1, "recipe.yaml");
  const std::string nemo = std::string(test::kSmallNemoRecipe) + "  qk_layernorm: ";
  EXPECT_NE(error_of([&] { import_run(Engine::nemo, nemo + "true\n", recipe); })
                .find("model.qk_layernorm: a norm over each head's query and key is not modelled"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { import_run(Engine::nemo, nemo + "false\n", recipe); }), "");
  const std::string qwen3 = error_of([&] { import_real("torchtitan/qwen3_0.6b.toml", "dgx-h100", 1); });
  EXPECT_NE(qwen3.find("Qwen3 normalises each head's query and key (q_norm, k_norm RMSNorm)"), std::string::npos)
      << qwen3;  // the words of core's kQwen3Refusal, as a Hugging Face qwen3 config is refused
  EXPECT_NE(qwen3.find("head_dim 128 is not dim / n_heads"), std::string::npos) << qwen3;
}

}  // namespace
}  // namespace tessel::interop
