// The `tessel` command with other engines' launch configs: estimate and simulate read a
// run with --import, plan searches --near one and --emit's the best plan, export writes a
// plan file for an engine; bad engine names are one line and status 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_fixture.hpp"

namespace fs = std::filesystem;
using namespace tessel_cli_test;

namespace {

const std::string kFixtures = std::string(TESSEL_SOURCE_DIR) + "/tests/interop/fixtures/";
const std::string kSmallRun =
    "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 256 --num-attention-heads 8 "
    "--seq-length 512 --max-position-embeddings 512 --vocab-size 1024 --micro-batch-size 2 --global-batch-size 64 "
    "--bf16 --tensor-model-parallel-size 2 --use-distributed-optimizer --log-interval 10 --my-colour teal\n";

}  // namespace

TEST_F(Cli, EstimateImportsAMegatronScriptAndSaysWhatItMappedAndIgnored) {
  const Outcome o =
      run("estimate --import " + kFixtures + "megatron_gpt3_175b.sh --cluster dgx-a100 --nodes 128");
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("(megatron): 16 option(s) mapped"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("  mapped   --fp16 -> train.precision fp16"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("  ignored  learning-rate schedule: --lr, --lr-decay-style, --min-lr, --lr-warmup-fraction (+1)"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("gpt3-175b on 128 x dgx-a100 (1024 GPUs): dp8 pp16 tp8"), std::string::npos) << o.out;

  const Outcome json =
      run("estimate --json --import " + kFixtures + "megatron_gpt3_175b.sh --cluster dgx-a100 --nodes 128");
  ASSERT_EQ(json.status, 0) << json.err;
  const auto parsed = nlohmann::json::parse(json.out);
  EXPECT_EQ(parsed["imported"]["engine"], "megatron");
  EXPECT_EQ(parsed["imported"]["plan"]["parallel"]["pp"], 16);
  EXPECT_GT(parsed["imported"]["ignored"].size(), 10u);
  EXPECT_GT(parsed["step_time_s"].get<double>(), 0);
}

TEST_F(Cli, SimulateImportsAndWarnsOfOptionsItDoesNotUnderstand) {
  const fs::path script = write("run.sh", kSmallRun);
  const Outcome o = run("simulate --import " + script.string() + " --cluster dgx-a100 --nodes 1");
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("  warning  --my-colour teal: not understood by tessel"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("simulated step"), std::string::npos) << o.out;
}

TEST_F(Cli, ImportNeedsOneSourceAClusterAndAKnownEngine) {
  const fs::path script = write("run.sh", kSmallRun);
  EXPECT_TRUE(is_one_line_refusal(run("estimate --import " + script.string()), "--cluster: required with --import"));
  EXPECT_TRUE(is_one_line_refusal(run("estimate --import " + script.string() + " --cluster dgx-a100 --engine colossal"),
                          "--engine: unknown engine 'colossal'"));
  EXPECT_TRUE(is_one_line_refusal(run("estimate --cluster dgx-a100"), "--plan: give a plan file or --import FILE"));
  const fs::path fp8 = write("fp8.sh", kSmallRun.substr(0, kSmallRun.size() - 1) + " --fp8-format hybrid\n");
  // An fp8 run is read as precision fp8, which an A100 cannot train in.
  EXPECT_TRUE(is_one_line_refusal(run("estimate --import " + fp8.string() + " --cluster dgx-a100"),
                          "train.precision: fp8 needs fp8 tensor cores, and device A100-SXM-80GB has none"));
  EXPECT_EQ(run("estimate --import " + fp8.string() + " --cluster dgx-h100").status, 0);
}

TEST_F(Cli, PlanNearAnImportedRunRanksItAndEmitsTheBestPlan) {
  const fs::path script = write("run.sh", kSmallRun);
  const fs::path emitted = dir_ / "best.sh";
  const Outcome o = run("plan --near " + script.string() + " --cluster dgx-a100 --nodes 1 --top 200 --threads 1 --emit "
                        "megatron --emit-out " + emitted.string());
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("imported plan: dp4 pp1 tp2(1d) sp1 z1"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("rank "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("wrote " + emitted.string() + " (megatron launch config)"), std::string::npos) << o.out;
  const std::string text = slurp(emitted);
  EXPECT_NE(text.find("pretrain_gpt.py"), std::string::npos) << text;
  EXPECT_NE(text.find("--num-layers 4"), std::string::npos) << text;

  EXPECT_TRUE(is_one_line_refusal(run("plan --near " + script.string() + " --cluster dgx-a100 --model gpt2-124m"),
                          "--near: takes the model"));
  EXPECT_TRUE(is_one_line_refusal(run("plan --model gpt2-124m --cluster dgx-a100 --global-batch 8 --emit colossal"),
                          "--emit: unknown engine 'colossal'"));
  EXPECT_TRUE(is_one_line_refusal(run("plan --cluster dgx-a100 --global-batch 8"), "--model: required"));
}

TEST_F(Cli, ExportWritesAPlanForAnEngineAndEstimateReadsItBack) {
  const std::string plan = std::string(TESSEL_SOURCE_DIR) + "/examples/gpt3-13b-dgx-h100.json";
  const fs::path out = dir_ / "train.sh";
  const Outcome o = run("export --plan " + plan + " --to megatron --out " + out.string());
  ASSERT_EQ(o.status, 0) << o.err;
  const Outcome back = run("estimate --json --import " + out.string() + " --cluster dgx-h100 --nodes 4");
  ASSERT_EQ(back.status, 0) << back.err;
  const auto parsed = nlohmann::json::parse(back.out);
  EXPECT_EQ(parsed["imported"]["plan"]["parallel"]["tp"], 4);
  EXPECT_EQ(parsed["imported"]["plan"]["parallel"]["pp"], 2);
  EXPECT_EQ(parsed["imported"]["plan"]["model"]["name"], "gpt3-13b");

  const Outcome stdout_only = run("export --plan " + plan + " --to megatron");
  EXPECT_EQ(stdout_only.status, 0);
  EXPECT_EQ(stdout_only.out.rfind("#!/bin/bash\n", 0), 0u) << stdout_only.out;
  EXPECT_TRUE(is_one_line_refusal(run("export --plan " + plan + " --to colossal"), "--to: unknown engine 'colossal'"));
}

TEST_F(Cli, EstimateImportsNemoRecipesAndTakesAVocabularyFromHfConfig) {
  const Outcome gpt = run("estimate --import " + kFixtures + "nemo_gpt3_175b.yaml --cluster dgx-a100 --nodes 128");
  ASSERT_EQ(gpt.status, 0) << gpt.err;
  EXPECT_NE(gpt.out.find("(nemo)"), std::string::npos) << gpt.out;
  EXPECT_NE(gpt.out.find("dp32 pp8 tp4(1d+sp+ov)"), std::string::npos) << gpt.out;  // ub_tp_comm_overlap: True

  const fs::path hf = write("config.json", R"({"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
      "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 80, "vocab_size": 32000,
      "max_position_embeddings": 4096, "tie_word_embeddings": false})");
  const std::string llama = "estimate --import " + kFixtures + "nemo_llama2_70b.yaml --cluster dgx-a100 --nodes 128";
  const Outcome by_name = run(llama);
  ASSERT_EQ(by_name.status, 0) << by_name.err;
  EXPECT_NE(by_name.out.find("model.vocab 32000 (the SentencePiece tokenizer by its name)"), std::string::npos)
      << by_name.out;
  const Outcome with_hf = run(llama + " --hf-config " + hf.string());
  ASSERT_EQ(with_hf.status, 0) << with_hf.err;
  EXPECT_NE(with_hf.out.find("model.vocab 32000 (--hf-config)"), std::string::npos) << with_hf.out;
}

// A config tessel prices out of memory is not written without --allow-oom, and the error
// names the best plan that fits as that engine's config. gpt3-13b's example plan (tp 4,
// pp 2) written for DeepSpeed becomes pure data parallelism with ZeRO 1: 85.8 GiB per GPU.
TEST_F(Cli, ExportRefusesAConfigThatDoesNotFitUnlessAllowed) {
  const std::string plan = std::string(TESSEL_SOURCE_DIR) + "/examples/gpt3-13b-dgx-h100.json";
  const fs::path out = dir_ / "ds_config.json";
  const Outcome refused = run("export --plan " + plan + " --to deepspeed --out " + out.string());
  EXPECT_TRUE(is_one_line_refusal(refused, "--to deepspeed: the plan written (dp32 pp1 tp1 sp1 z1")) << refused.err;
  EXPECT_NE(refused.err.find("does not fit: out of device memory"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("the best plan that fits as a deepspeed config is dp32 pp1 tp1 sp1 z3"), std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("pass --allow-oom"), std::string::npos) << refused.err;
  EXPECT_FALSE(fs::exists(out));
  const Outcome allowed = run("export --plan " + plan + " --to deepspeed --allow-oom --out " + out.string());
  ASSERT_EQ(allowed.status, 0) << allowed.err;
  EXPECT_NE(allowed.err.find("--allow-oom: the plan written needs"), std::string::npos) << allowed.err;
  EXPECT_TRUE(fs::exists(out));
  // The same plan as Megatron-LM runs it (tp 4, pp 2) fits and is written without the flag.
  EXPECT_EQ(run("export --plan " + plan + " --to megatron --out " + (dir_ / "train.sh").string()).status, 0);
}

// plan --emit: the best plan (pp 2, ZeRO 2), as DeepSpeed would run it (no pipeline: dp 16),
// does not fit; the error names the best ranked plan whose DeepSpeed config fits.
TEST_F(Cli, PlanEmitNamesTheBestPlanThatFitsAsTheEnginesConfig) {
  const fs::path out = dir_ / "ds.json";
  const Outcome o = run("plan --model gpt3-13b --cluster dgx-h100 --nodes 2 --global-batch 512 --threads 1 --emit "
                        "deepspeed --emit-out " + out.string());
  EXPECT_EQ(o.status, 2) << o.out << o.err;
  EXPECT_NE(o.err.find("--emit deepspeed: the plan written ("), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("the best plan that fits as a deepspeed config is dp16 pp1 tp1 sp1 z3"), std::string::npos)
      << o.err;
  EXPECT_FALSE(fs::exists(out));
}

// torchtitan is written in its current form (a Python config function) unless --format toml
// or a .toml output file asks for the TOML of its releases before February 2026; estimate
// reads either back (the function named after --). Other engines have one form.
TEST_F(Cli, ExportWritesTorchtitansRegistryOrTomlAsAsked) {
  const fs::path plan = write("plan.json", R"({"model": "llama3-8b", "cluster": "dgx-h100", "nodes": 1,
      "train": {"global_batch": 16, "kernels": "fused", "dropout": false},
      "parallel": {"dp": 8, "zero": 3, "micro_batch": 1, "recompute": "full"}})");
  const fs::path module = dir_ / "tessel_runs.py";
  ASSERT_EQ(run("export --plan " + plan.string() + " --to torchtitan --out " + module.string()).status, 0);
  const std::string text = slurp(module);
  EXPECT_NE(text.find("def tessel_llama3_8b() -> Trainer.Config:\n"), std::string::npos) << text;
  const Outcome back = run("estimate --json --import " + module.string() + " --cluster dgx-h100 -- tessel_llama3_8b");
  ASSERT_EQ(back.status, 0) << back.err;
  const auto parsed = nlohmann::json::parse(back.out);
  EXPECT_EQ(parsed["imported"]["plan"]["parallel"]["dp"], 8);
  EXPECT_EQ(parsed["imported"]["plan"]["parallel"]["zero"], 3);

  const fs::path toml = dir_ / "job.toml";
  ASSERT_EQ(run("export --plan " + plan.string() + " --to torchtitan --out " + toml.string()).status, 0);
  EXPECT_NE(slurp(toml).find("[parallelism]\n"), std::string::npos);
  const Outcome asked = run("export --plan " + plan.string() + " --to torchtitan --format toml");
  ASSERT_EQ(asked.status, 0) << asked.err;
  EXPECT_NE(asked.out.find("data_parallel_shard_degree = 8\n"), std::string::npos) << asked.out;
  EXPECT_TRUE(is_one_line_refusal(run("export --plan " + plan.string() + " --to torchtitan --format yaml"),
                                  "--format: unknown torchtitan form 'yaml' (allowed: registry, toml)"));
  EXPECT_TRUE(is_one_line_refusal(run("export --plan " + plan.string() + " --to megatron --format toml"),
                                  "--format: megatron has one form; only torchtitan has two (registry, toml)"));
  EXPECT_TRUE(is_one_line_refusal(
      run("plan --model gpt3-13b --cluster dgx-h100 --global-batch 512 --emit nemo --emit-format registry"),
      "--emit-format: nemo has one form"));
}
