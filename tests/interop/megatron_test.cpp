// The Megatron-LM reader and writer: Megatron's own example scripts (fixtures/, each
// citing the example it follows) read into the plans examples/ spells out by hand, the
// options that change cost in ways tessel does not model refused by name, cost-neutral
// ones listed, and the shell forms launch scripts use evaluated.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tessel/core/error.hpp"
#include "tessel/interop/engine_config.hpp"
#include "import_fixtures.hpp"

namespace tessel::interop {
namespace {

using test::fixture;

ImportContext megatron_context(const std::string& cluster, int nodes, const std::string& source = "run.sh") {
  return test::context_on(cluster, nodes, source);
}

// A small run as a plain command line, with `extra` options added.
const char* kSmallRun =
    "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 "
    "--vocab-size 1024 --micro-batch-size 2 --global-batch-size 64 --bf16 --tensor-model-parallel-size 2 ";

std::string megatron_refusal(const std::string& extra) {
  return test::error_of([&] { import_run(Engine::megatron, kSmallRun + extra, megatron_context("dgx-a100", 1)); }, "(accepted)");
}

TEST(Megatron, Gpt3_175bExampleGivesTheHandWrittenPlan) {
  const ImportedRun run =
      import_run(Engine::megatron, fixture("megatron_gpt3_175b.sh"), megatron_context("dgx-a100", 128, "gpt3.sh"));
  const Plan expected = Plan::load(std::string(TESSEL_SOURCE_DIR) + "/examples/gpt3-175b-megatron-dgx-a100.json");
  EXPECT_EQ(run.plan, expected) << run.plan.to_json().dump(1) << "\n" << expected.to_json().dump(1);
  EXPECT_TRUE(test::any_line_contains(run.mapped, "--fp16 -> train.precision fp16"));
  EXPECT_TRUE(test::any_line_contains(run.mapped, "--attention-backend auto -> train.kernels fused"));
  EXPECT_TRUE(test::any_line_contains(run.mapped, "(--ffn-hidden-size default 49152) -> model.ffn_hidden"));
  EXPECT_TRUE(test::any_line_contains(run.ignored, "--rampup-batch-size 16 16 5859375: batch ramp-up"));
  EXPECT_TRUE(test::any_line_contains(run.ignored, "--lr-decay-iters 430000: learning-rate schedule"));
  EXPECT_TRUE(test::any_line_contains(run.ignored, "--split 949,50,1: data paths"));
  EXPECT_TRUE(test::any_line_contains(run.ignored, "torchrun --nproc_per_node 8 --nnodes 1"));
}

TEST(Megatron, Llama3_8bExampleReadsItsShapeAndLayout) {
  const ImportedRun run = import_run(Engine::megatron, fixture("megatron_llama3_8b.sh"), megatron_context("dgx-h100", 1));
  const ModelSpec& m = run.plan.model;
  EXPECT_EQ(m.layers, 32);
  EXPECT_EQ(m.hidden, 4096);
  EXPECT_EQ(m.heads, 32);
  EXPECT_EQ(m.kv_heads, 8);
  EXPECT_EQ(m.ffn_hidden, 14336);
  EXPECT_EQ(m.vocab, 128256);
  EXPECT_EQ(m.seq_len, 8192);
  EXPECT_EQ(m.activation, Activation::swiglu);
  EXPECT_EQ(m.norm, Norm::rmsnorm);
  EXPECT_EQ(m.position_embedding, PositionEmbedding::rope);
  EXPECT_FALSE(m.tied_embeddings);
  EXPECT_FALSE(m.bias);
  const ParallelConfig& p = run.plan.parallel;
  EXPECT_EQ(p.dp, 8);
  EXPECT_EQ(p.tp, 1);
  EXPECT_FALSE(p.tp_sequence_parallel);  // Megatron turns it off at tensor size 1
  EXPECT_EQ(p.zero, 1);
  EXPECT_EQ(run.plan.train.global_batch, 128);
  EXPECT_EQ(run.plan.train.precision, Precision::bf16);
  EXPECT_EQ(run.plan.train.kernels, Kernels::fused);
  EXPECT_TRUE(test::any_line_contains(run.ignored, "--overlap-grad-reduce: overlap"));
  EXPECT_TRUE(test::any_line_contains(run.ignored, "--save checkpoints/llama3_8b_fp8: checkpointing"));
}

TEST(Megatron, CostChangingOptionsTesselDoesNotModelAreRefusedByName) {
  EXPECT_NE(megatron_refusal("--fp4-format e2m1").find("run.sh: --fp4-format e2m1: FP4 training is not modelled"),
            std::string::npos);
  EXPECT_NE(megatron_refusal("--fp8-param-gather").find("--fp8-param-gather: fp8 parameters need fp8 training"),
            std::string::npos);
  EXPECT_NE(megatron_refusal("--fp8-format hybrid --fp8-recipe mxfp8").find("--fp8-recipe mxfp8: block scaling"),
            std::string::npos);
  EXPECT_NE(megatron_refusal("--fp8-format e5m2").find("--fp8-format e5m2: tessel reads hybrid or e4m3"), std::string::npos);
  EXPECT_NE(megatron_refusal("--expert-model-parallel-size 2").find("--expert-model-parallel-size 2: needs --num-experts"),
            std::string::npos);
  EXPECT_NE(megatron_refusal("--num-experts 8 --moe-layer-freq ([0]*1+[1]*3)").find("--moe-layer-freq"), std::string::npos);
  EXPECT_NE(megatron_refusal("--num-experts 8 --expert-tensor-parallel-size 1").find("--expert-tensor-parallel-size 1"),
            std::string::npos);
  EXPECT_NE(megatron_refusal("--hybrid-layer-pattern M-M-*").find("--hybrid-layer-pattern M-M-*: Mamba"), std::string::npos);
  EXPECT_NE(megatron_refusal("--decoder-first-pipeline-num-layers 1").find("--decoder-first-pipeline-num-layers 1"),
            std::string::npos);
  EXPECT_NE(megatron_refusal("--optimizer sgd").find("--optimizer sgd"), std::string::npos);
  EXPECT_NE(megatron_refusal("--cp-comm-type a2a").find("--cp-comm-type a2a"), std::string::npos);
  EXPECT_NE(megatron_refusal("--recompute-granularity full --recompute-method block --recompute-num-layers 1")
                .find("--recompute-num-layers 1: recomputes 1 of the 4 layers"),
            std::string::npos);
  EXPECT_NE(megatron_refusal("--funky-parallel-size 2").find("--funky-parallel-size 2: not understood by tessel, and it may "
                                                    "change the step's cost"),
            std::string::npos);
  EXPECT_NE(megatron_refusal("--tensor-model-parallel-size 3").find("do not divide the 8 GPUs"), std::string::npos);
  EXPECT_EQ(megatron_refusal("--moe-router-topk 2 --num-experts 1"), "(accepted)");
  EXPECT_EQ(megatron_refusal("--fp8-amax-history-len 1024 --recompute-granularity selective --recompute-num-layers 2"),
            "(accepted)");
}

TEST(Megatron, UnknownCostNeutralOptionsAreListedAsNotUnderstood) {
  const ImportedRun run = import_run(Engine::megatron, std::string(kSmallRun) + "--my-dashboard-colour teal",
                                     megatron_context("dgx-a100", 1));
  EXPECT_TRUE(test::any_line_contains(run.ignored, "--my-dashboard-colour teal: not understood by tessel (assumed cost-neutral)"));
  EXPECT_EQ(run.plan.parallel.dp, 4);
  EXPECT_EQ(run.plan.train.global_batch, 64);
  // Without --global-batch-size Megatron runs one micro-batch per data-parallel replica.
  std::string no_global = kSmallRun;
  no_global.replace(no_global.find("--global-batch-size 64 "), 23, "");
  EXPECT_EQ(import_run(Engine::megatron, no_global, megatron_context("dgx-a100", 1)).plan.train.global_batch, 2 * 4);
}

TEST(Megatron, MapsTheLayoutOptions) {
  const ImportedRun run = import_run(
      Engine::megatron,
      std::string(kSmallRun) + "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 "
                               "--sequence-parallel --context-parallel-size 2 --use-megatron-fsdp "
                               "--data-parallel-sharding-strategy optim_grads --recompute-granularity full "
                               "--recompute-method uniform --recompute-num-layers 1 --optimizer-cpu-offload "
                               "--use-precision-aware-optimizer --attention-backend unfused",
      megatron_context("dgx-a100", 2));
  const ParallelConfig& p = run.plan.parallel;
  EXPECT_EQ(p.tp, 2);
  EXPECT_EQ(p.pp, 2);
  EXPECT_EQ(p.sp, 2);
  EXPECT_EQ(p.dp, 2);
  EXPECT_TRUE(p.tp_sequence_parallel);
  EXPECT_EQ(p.schedule, Schedule::interleaved);
  EXPECT_EQ(p.virtual_stages, 2);
  EXPECT_EQ(p.zero, 2);
  EXPECT_EQ(p.recompute, Recompute::full);
  EXPECT_EQ(p.offload, OffloadMode::optimizer);
  EXPECT_EQ(run.plan.train.kernels, Kernels::unfused);
}

TEST(Megatron, EvaluatesTheShellFormsOfLaunchScripts) {
  const std::string script = R"(#!/bin/bash
# comment line
TP=${TP:-2}
LAYERS=4
HALF=$(( LAYERS * 64 ))
GLOBAL=$(( (LAYERS + 4) * 8 ))
MODEL="--num-layers $LAYERS --hidden-size $HALF"
ARGS=(--num-attention-heads 8 --seq-length 512)
ARGS+=("--max-position-embeddings 512" --vocab-size 1024)
HOST=$(hostname)
python -m torch.distributed.run --nproc-per-node=8 --nnodes=1 \
    pretrain_gpt.py $MODEL ${ARGS[@]} \
    --global-batch-size ${GLOBAL} --tensor-model-parallel-size $TP --bf16 '--seed' 7 2>&1 | tee log.txt
)";
  const ImportedRun run = import_run(Engine::megatron, script, megatron_context("dgx-a100", 1));
  EXPECT_EQ(run.plan.model.layers, 4);
  EXPECT_EQ(run.plan.model.hidden, 256);
  EXPECT_EQ(run.plan.model.seq_len, 512);
  EXPECT_EQ(run.plan.train.global_batch, 64);
  EXPECT_EQ(run.plan.parallel.tp, 2);
  EXPECT_TRUE(test::any_line_contains(run.ignored, "$(hostname) is not run"));
  EXPECT_TRUE(test::any_line_contains(run.ignored, "--seed 7: seed"));
  EXPECT_FALSE(test::any_line_contains(run.ignored, "log.txt"));
}

// Megatron-LM's examples parse their arguments in a while/case loop and choose a size in a
// case block; both are read over the script's own variables and its arguments.
TEST(Megatron, LoopsAndCaseBlocksOverTheScriptsVariablesAreEvaluated) {
  const std::string body = std::string(kSmallRun).replace(std::string(kSmallRun).find("--num-layers 4"), 14,
                                                          "--num-layers $L");
  const std::string script =
      "L=1\nfor x in 1 2; do\n  L=$((L + x))\ndone\n"
      "SIZE=${1:-small}\ncase \"$SIZE\" in\n  small|tiny) H=1 ;;\n  big)\n    L=$((L * 2))\n    ;;\n  *) exit 1 ;;\nesac\n"
      "while [[ $# -gt 0 ]]; do\n  case $1 in\n    --layers) L=\"$2\"; shift 2 ;;\n    *) shift ;;\n  esac\ndone\n" +
      body;
  auto layers = [&](std::vector<std::string> args) {
    ImportContext context = megatron_context("dgx-a100", 1);
    context.script_args = std::move(args);
    return import_run(Engine::megatron, script, context).plan.model.layers;
  };
  EXPECT_EQ(layers({}), 4);
  EXPECT_EQ(layers({"big"}), 8);
  EXPECT_EQ(layers({"big", "--layers", "6"}), 6);
  try {
    import_run(Engine::megatron, "while [ 1 -eq 1 ]; do\n  A=1\ndone\n" + body, megatron_context("dgx-a100", 1, "spin.sh"));
    FAIL() << "an endless loop was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("spin.sh: line 3: the loops ran 1000 times in all"), std::string::npos)
        << error.what();
  }
  // Nested loops share the budget, so a hostile script cannot multiply it.
  const std::string nested = "for a in 1 2 3 4 5 6 7 8 9 10; do\nfor b in 1 2 3 4 5 6 7 8 9 10; do\n"
                             "for c in 1 2 3 4 5 6 7 8 9 10; do\nA=1\ndone\ndone\ndone\n";
  EXPECT_NE(test::error_of([&] { import_run(Engine::megatron, nested + body, megatron_context("dgx-a100", 1, "n.sh")); })
                .find("the loops ran 1000 times in all"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              import_run(Engine::megatron, "case x in\n  *a*a*a*a*a*a*a*a*a*) A=1 ;;\nesac\n" + body,
                         megatron_context("dgx-a100", 1, "c.sh"));
            }).find("a case pattern with more than 8 '*' is not evaluated"),
            std::string::npos);
}

// Megatron's Llama 3 example as published chooses its fp8 options in if blocks.
TEST(Megatron, IfBlocksOnTheScriptsOwnVariablesAreEvaluated) {
  const std::string published = test::real_file("megatron/train_llama3_8b_h100_fp8.sh");
  const ImportedRun fp8 = import_run(Engine::megatron, published, megatron_context("dgx-h100", 1, "llama.sh"));
  EXPECT_TRUE(fp8.plan.train.fp8_param_gather) << "the fp8 branch was taken";
  std::string bf16 = published;
  bf16.replace(bf16.find("\nDTYPE=\"fp8\""), 12, "\nDTYPE=\"bf16\"");
  const ImportedRun run = import_run(Engine::megatron, bf16, megatron_context("dgx-h100", 1));
  const ImportedRun flattened = import_run(Engine::megatron, fixture("megatron_llama3_8b.sh"), megatron_context("dgx-h100", 1));
  EXPECT_EQ(run.plan, flattened.plan);
  EXPECT_TRUE(test::any_line_contains(run.ignored, "the file test -f pretrain_gpt.py is taken as true"));
  for (const auto& [script, expected] : std::vector<std::pair<std::string, std::string>>{
           {"if [ -z \"$X\" ] && [[ 3 -gt 2 ]]; then\nL=2\nelif [ 1 = 1 ]; then\nL=3\nelse\nL=4\nfi\n", "2"},
           {"X=a\nif [[ $X != a ]] || [ -n \"\" ]; then\nL=2\nelif [ \"$X\" == a ]; then\nL=3\nelse\nL=4\nfi\n", "3"},
           {"if [ 1 -eq 2 ]; then\n  if [ 1 = 1 ]; then\n    L=2\n  fi\nelse\nL=4\nfi\n", "4"}}) {
    const ImportedRun chosen = import_run(Engine::megatron, script + std::string(kSmallRun) + "--num-layers $L",
                                          megatron_context("dgx-a100", 1));
    EXPECT_EQ(chosen.plan.model.layers, std::stoi(expected)) << script;
  }
  try {
    import_run(Engine::megatron, "if [ \"$(hostname)\" =~ gpu ]; then\nfi\n", megatron_context("dgx-a100", 1, "x.sh"));
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("x.sh: line 1: the condition is not evaluated"), std::string::npos)
        << error.what();
  }
}

TEST(Megatron, MalformedScriptsAreOneLineErrorsNamingTheLine) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"A=\"open\ntorchrun pretrain_gpt.py --num-layers 2\n", "line 1: a double quote is not closed"},
      {"ARGS=(--num-layers 2\n--hidden-size 64\n", "line 1: the array ARGS=( is not closed"},
      {"X=$((4 / 0))\n", "line 1: $((...)): division by zero"},
      {"X=${NAME\n", "line 1: '{' is not closed"},
      // Found by make fuzz: `${X:}` (no operator after the colon) ran substr past the end.
      {"X=${NAME:}\ntorchrun pretrain_gpt.py --num-layers 2\n", "--hidden-size is missing"},
      {"echo hello\n", "no training command"},
      {"--num-layers " + std::string(200000, '9'), "--num-layers"},
      {"X=" + std::string(300000, 'a') + "\n--num-layers 2\n", "--hidden-size is missing"},
  };
  for (const auto& [script, expected] : cases) {
    try {
      import_run(Engine::megatron, script, megatron_context("dgx-a100", 1, "bad.sh"));
      ADD_FAILURE() << "accepted: " << script.substr(0, 80);
    } catch (const Error& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(expected), std::string::npos) << message.substr(0, 200);
      EXPECT_EQ(message.rfind("bad.sh: ", 0), 0u) << message.substr(0, 200);
      EXPECT_EQ(message.find('\n'), std::string::npos);
    }
  }
}

// --data-path as users write it: one prefix, a weighted blend, a list from a variable or
// an array, a glob; the data mix does not change the cost of a step, so each reads the same
// plan and the option is listed as ignored, never refused.
TEST(Megatron, DataPathListsGlobsAndBlendsReadTheSamePlan) {
  const Plan plain = import_run(Engine::megatron, kSmallRun, megatron_context("dgx-a100", 1)).plan;
  for (const std::string& script : {
           std::string(kSmallRun) + "--data-path /data/web_text_document",
           std::string(kSmallRun) + "--data-path 0.3 /data/web_text_document 0.7 /data/code_text_document",
           "BLEND=\"0.5 /a/x_text_document 0.5 /b/y_text_document\"\n" + std::string(kSmallRun) + "--data-path $BLEND",
           "DATA=(0.5 /a/x_text_document 0.5 /b/y_text_document)\n" + std::string(kSmallRun) +
               "--data-path ${DATA[@]} --split 98,2,0",
           std::string(kSmallRun) + "--data-path /data/shard_*_text_document",
           std::string(kSmallRun) + "--train-data-path 1 /a/train --valid-data-path 1 /a/valid --test-data-path 1 /a/t",
           std::string(kSmallRun) + "--data-args-path /data/blend.txt --data-cache-path /tmp/cache"}) {
    const ImportedRun run = import_run(Engine::megatron, script, megatron_context("dgx-a100", 1));
    EXPECT_EQ(run.plan, plain) << script;
    EXPECT_TRUE(test::any_line_contains(run.ignored, ": data paths")) << script << "\n"
                                                                       << ::testing::PrintToString(run.ignored);
  }
}

TEST(Megatron, MissingShapeOptionsAreNamed) {
  try {
    import_run(Engine::megatron, "--hidden-size 64", megatron_context("dgx-a100", 1));
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("--num-layers is missing"), std::string::npos) << error.what();
  }
}

TEST(Megatron, WriterNamesWhatMegatronCannotExpress) {
  Plan plan = Plan::load(std::string(TESSEL_SOURCE_DIR) + "/examples/gpt3-13b-dgx-h100.json");
  plan.parallel.tp_mode = TpMode::d2;
  plan.parallel.tp_sequence_parallel = false;
  plan.train.optimizer = Optimizer::lamb;
  const ExportedConfig exported = export_plan(Engine::megatron, plan);
  ASSERT_EQ(exported.not_expressible.size(), 2u);
  EXPECT_NE(exported.text.find("# cannot express: parallel.tp_mode 2d"), std::string::npos) << exported.text;
  EXPECT_NE(exported.text.find("# cannot express: train.optimizer lamb"), std::string::npos);
  EXPECT_NE(exported.text.find("    --tensor-model-parallel-size 4\n"), std::string::npos);
}

// What the writer writes is a script bash accepts (bash -n: parsed, nothing run).
TEST(Megatron, WrittenScriptsParseAsBash) {
  int written = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(TESSEL_SOURCE_DIR) + "/examples")) {
    if (entry.path().extension() != ".json") continue;
    const Plan plan = Plan::load(entry.path().string());
    if (plan.model.moe.enabled()) continue;  // refused by the writer (RoundTrip.EveryExamplePlanThroughMegatron)
    const ExportedConfig exported = export_plan(Engine::megatron, plan);
    FILE* bash = ::popen("bash -n", "w");
    ASSERT_NE(bash, nullptr);
    std::fwrite(exported.text.data(), 1, exported.text.size(), bash);
    EXPECT_EQ(::pclose(bash), 0) << entry.path() << "\n" << exported.text;
    ++written;
  }
  EXPECT_GE(written, 4);
}

}  // namespace
}  // namespace tessel::interop

namespace tessel::interop {
namespace {

// Megatron-LM's validate_args (megatron/training/arguments.py) refuses Megatron-FSDP with
// CUDA_DEVICE_MAX_CONNECTIONS=1 and without --ckpt-format fsdp_dtensor.
TEST(Megatron, FsdpPlansAreWrittenAsMegatronFsdpAccepts) {
  Plan plan = Plan::load(std::string(TESSEL_SOURCE_DIR) + "/examples/gpt3-13b-dgx-h100.json");
  for (const int zero : {2, 3}) {
    plan.parallel.zero = zero;
    const ExportedConfig exported = export_plan(Engine::megatron, plan);
    EXPECT_EQ(exported.text.find("CUDA_DEVICE_MAX_CONNECTIONS"), std::string::npos) << exported.text;
    EXPECT_NE(exported.text.find("    --ckpt-format fsdp_dtensor\n"), std::string::npos) << exported.text;
    EXPECT_NE(exported.text.find("    --use-megatron-fsdp\n"), std::string::npos) << exported.text;
    const ImportedRun back = import_run(Engine::megatron, exported.text, test::context_of(plan));
    EXPECT_EQ(back.plan.parallel.zero, zero);
  }
  plan.parallel.zero = 1;
  const ExportedConfig distributed = export_plan(Engine::megatron, plan);
  EXPECT_NE(distributed.text.find("export CUDA_DEVICE_MAX_CONNECTIONS=1\n"), std::string::npos);
  EXPECT_EQ(distributed.text.find("fsdp"), std::string::npos);
}

// NVIDIA's Llama 3 8B example reduces gradients in bf16; Megatron's default for --bf16 is fp32.
TEST(Megatron, GradReduceInBf16SetsTheGradientPrecision) {
  const ImportedRun run = import_run(Engine::megatron, fixture("megatron_llama3_8b.sh"), megatron_context("dgx-h100", 1));
  EXPECT_EQ(run.plan.train.gradient_precision, Precision::bf16);
  EXPECT_TRUE(test::has_line(run.mapped, "--grad-reduce-in-bf16 -> train.gradient_precision bf16"));
  const ExportedConfig exported = export_plan(Engine::megatron, run.plan);
  EXPECT_NE(exported.text.find("    --grad-reduce-in-bf16\n"), std::string::npos);
  EXPECT_EQ(import_run(Engine::megatron, exported.text, test::context_of(run.plan)).plan.train.gradient_precision,
            Precision::bf16);
  EXPECT_FALSE(import_run(Engine::megatron, kSmallRun, megatron_context("dgx-a100", 1)).plan.train.gradient_precision);
  const std::string fp16 = std::string(kSmallRun).replace(std::string(kSmallRun).find("--bf16"), 6, "--fp16");
  EXPECT_EQ(import_run(Engine::megatron, fp16 + " --accumulate-allreduce-grads-in-fp32", megatron_context("dgx-a100", 1))
                .plan.train.gradient_precision,
            Precision::fp32);
  EXPECT_NE(megatron_refusal("--grad-reduce-in-bf16 --accumulate-allreduce-grads-in-fp32").find("choose one"), std::string::npos);
}

}  // namespace
}  // namespace tessel::interop

namespace tessel::interop {
namespace {

// Megatron-Core's MoE options read into model.moe and parallel.ep, and written back.
TEST(Megatron, MixtureOfExpertsOptionsAreReadAndWritten) {
  const ImportedRun run = import_run(
      Engine::megatron,
      std::string(kSmallRun) + "--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 512 "
                               "--moe-shared-expert-intermediate-size 1024 --expert-model-parallel-size 2 "
                               "--moe-grouped-gemm --moe-token-dispatcher-type alltoall --rotary-base 500000",
      megatron_context("dgx-a100", 1));
  const MoeSpec& moe = run.plan.model.moe;
  EXPECT_EQ(moe.experts, 8);
  EXPECT_EQ(moe.top_k, 2);
  EXPECT_EQ(moe.expert_ffn_hidden, 512);
  EXPECT_EQ(moe.shared_experts, 2);
  EXPECT_EQ(run.plan.parallel.ep, 2);
  EXPECT_EQ(run.plan.model.rope_theta, 500000.0);
  EXPECT_TRUE(test::any_line_contains(run.ignored, "--moe-grouped-gemm: router and dispatcher tuning"));
  const ExportedConfig exported = export_plan(Engine::megatron, run.plan);
  const ImportedRun back = import_run(Engine::megatron, exported.text, test::context_of(run.plan));
  EXPECT_EQ(back.plan.model.moe, moe);
  EXPECT_EQ(back.plan.parallel.ep, 2);
  EXPECT_EQ(back.plan.model.rope_theta, 500000.0);
}

}  // namespace
}  // namespace tessel::interop
