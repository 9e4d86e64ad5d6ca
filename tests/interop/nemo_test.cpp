// The NeMo reader and writer: the NeMo-Framework-Launcher GPT-3 175B recipe (fixtures/,
// citing it) reads into the plan examples/ spells out by hand, interpolations resolve,
// and keys that change cost in ways tessel does not model are refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "tessel/core/error.hpp"
#include "tessel/interop/engine_config.hpp"
#include "import_fixtures.hpp"

namespace tessel::interop {
namespace {

using test::fixture;

ImportContext nemo_context(const std::string& cluster, int nodes) { return test::context_on(cluster, nodes, "gpt.yaml"); }

const char* kSmall = test::kSmallNemoRecipe;

std::string nemo_refusal(const std::string& extra) {
  return test::error_of([&] { import_run(Engine::nemo, kSmall + extra, nemo_context("dgx-a100", 1)); }, "(accepted)");
}

TEST(Nemo, Gpt3_175bRecipeGivesTheHandWrittenPlan) {
  const ImportedRun run = import_run(Engine::nemo, fixture("nemo_gpt3_175b.yaml"), nemo_context("dgx-a100", 128));
  const Plan expected = Plan::load(std::string(TESSEL_SOURCE_DIR) + "/examples/gpt3-175b-nemo-dgx-a100.json");
  EXPECT_EQ(run.plan, expected) << run.plan.to_json().dump(1);
  EXPECT_TRUE(test::any_line_contains(run.mapped, "model.ffn_hidden_size: 49152 -> model.ffn_hidden"));
  EXPECT_TRUE(test::any_line_contains(run.mapped, "model.optim.name: distributed_fused_adam -> train.optimizer adamw, parallel.zero 1"));
  EXPECT_TRUE(test::any_line_contains(run.ignored, "exp_manager: section outside trainer and model"));
  EXPECT_TRUE(test::any_line_contains(run.ignored, "model.optim.sched.warmup_steps: 115: optimizer hyperparameter"));
  EXPECT_TRUE(test::any_line_contains(run.mapped, "model.ub_tp_comm_overlap: True -> parallel.tp_comm_overlap true"))
      << ::testing::PrintToString(run.mapped);
  EXPECT_FALSE(test::any_line_contains(run.ignored, "not understood")) << ::testing::PrintToString(run.ignored);
}

// The recipe's tokenizer is LLaMA's SentencePiece file (32,000 tokens, known by its name);
// another SentencePiece file's size is not guessed, and config.json's wins where given.
TEST(Nemo, Llama2_70bRecipeGivesTheHandWrittenPlanWithTheVocabularyFromConfigJson) {
  ImportContext context = nemo_context("dgx-a100", 128);
  const std::string recipe = fixture("nemo_llama2_70b.yaml");
  const ImportedRun by_name = import_run(Engine::nemo, recipe, context);
  EXPECT_EQ(by_name.plan.model.vocab, 32000);
  EXPECT_TRUE(test::any_line_contains(by_name.mapped, "model.vocab 32000 (the SentencePiece tokenizer by its name)"))
      << ::testing::PrintToString(by_name.mapped);
  for (const char* file : {"${data_dir}/spm/tokenizer.model", "${data_dir}/codellama/llama_tokenizer.model"}) {
    std::string other = recipe;
    const std::string llama = "${data_dir}/llama/llama_tokenizer.model";
    other.replace(other.find(llama), llama.size(), file);
    EXPECT_NE(test::error_of([&] { import_run(Engine::nemo, other, context); })
                  .find("gpt.yaml: model.tokenizer: the vocabulary size is unknown"),
              std::string::npos)
        << file;
  }
  context.model = resolve_model("llama2-70b");
  const ImportedRun run = import_run(Engine::nemo, fixture("nemo_llama2_70b.yaml"), context);
  const Plan expected = Plan::load(std::string(TESSEL_SOURCE_DIR) + "/examples/llama2-70b-nemo-dgx-a100.json");
  EXPECT_EQ(run.plan, expected) << run.plan.to_json().dump(1);
  EXPECT_FALSE(test::any_line_contains(run.ignored, "not understood")) << ::testing::PrintToString(run.ignored);
}

TEST(Nemo, TheLauncherLayoutNestedUnderTrainingReadsTheSame) {
  std::string nested = "training:\n";
  std::istringstream lines(fixture("nemo_gpt3_175b.yaml"));
  for (std::string line; std::getline(lines, line);) nested += "  " + line + "\n";
  const ImportedRun run = import_run(Engine::nemo, nested, nemo_context("dgx-a100", 128));
  EXPECT_EQ(run.plan.parallel.virtual_stages, 12);
  EXPECT_EQ(run.plan.model.name, "gpt3-175b");
}

TEST(Nemo, KeysThatChangeCostTesselDoesNotModelAreRefusedByName) {
  EXPECT_EQ(nemo_refusal("  fp8: True\n"), "(accepted)");
  EXPECT_EQ(nemo_refusal("  fp8: True\n  fp8_params: True\n"), "(accepted)");
  EXPECT_NE(nemo_refusal("  activation: relu\n").find("model.activation: tessel models gelu, swiglu (fast-swiglu) and "
                                                  "squared-relu"),
            std::string::npos);
  EXPECT_EQ(nemo_refusal("  num_moe_experts: 8\n  moe_router_topk: 2\n  expert_model_parallel_size: 2\n"), "(accepted)");
  EXPECT_NE(nemo_refusal("  expert_model_parallel_size: 2\n").find("model.expert_model_parallel_size: needs model.num_moe_experts"),
            std::string::npos);
  EXPECT_NE(nemo_refusal("  cpu_offloading: True\n").find("model.cpu_offloading"), std::string::npos);
  EXPECT_NE(nemo_refusal("  funky_parallel_size: 2\n").find("model.funky_parallel_size: 2: not understood"), std::string::npos);
  EXPECT_NE(nemo_refusal("  optim:\n    name: novograd\n").find("model.optim.name"), std::string::npos);
  EXPECT_NE(nemo_refusal("  ffn_hidden_size: ${oc.env:FFN}\n").find("model.ffn_hidden_size: the interpolation"),
            std::string::npos);
  EXPECT_NE(nemo_refusal("  activations_checkpoint_granularity: full\n  activations_checkpoint_method: block\n"
                    "  activations_checkpoint_num_layers: 1\n")
                .find("model.activations_checkpoint_num_layers"),
            std::string::npos);
  EXPECT_EQ(nemo_refusal("  my_colour: teal\n"), "(accepted)");
  // 4 layers over 3 stages: an uneven split, which the NeMo reader does not take.
  EXPECT_NE(nemo_refusal("  pipeline_model_parallel_size: 3\n").find("model.pipeline_model_parallel_size: 4 layers"),
            std::string::npos);
  try {
    import_run(Engine::nemo, "trainer: [1, 2\n", nemo_context("dgx-a100", 1));
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("gpt.yaml: not valid YAML"), std::string::npos) << error.what();
  }
}

TEST(Nemo, MalformedConfigsAreOneLineErrors) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {std::string(100000, '['), "gpt.yaml: not valid YAML"},
      {"trainer: {}\nmodel: [1, 2]\n", "gpt.yaml: a NeMo training config needs trainer: and model: sections"},
      {std::string(kSmall) + "  hidden_dropout: ${.attention_dropout}\n  attention_dropout: ${.hidden_dropout}\n"
                             "  ffn_hidden_size: ${.hidden_dropout}\n",
       "interpolations nest too deep"},
      {std::string(kSmall) + "  num_layers: 4\n", "gpt.yaml: model.num_layers: appears twice in one mapping"},
  };
  for (const auto& [text, expected] : cases) {
    try {
      import_run(Engine::nemo, text, nemo_context("dgx-a100", 1));
      ADD_FAILURE() << "accepted: " << text.substr(0, 80);
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << std::string(error.what()).substr(0, 200);
      EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos);
    }
  }
}

TEST(Nemo, WriterFallsBackFromOffloadAndSaysSo) {
  Plan plan = Plan::load(std::string(TESSEL_SOURCE_DIR) + "/examples/gpt3-13b-dgx-h100.json");
  plan.parallel.offload = OffloadMode::optimizer;
  const ExportedConfig exported = export_plan(Engine::nemo, plan);
  ASSERT_EQ(exported.not_expressible.size(), 1u);
  EXPECT_NE(exported.text.find("# cannot express: parallel.offload optimizer"), std::string::npos) << exported.text;
}

}  // namespace
}  // namespace tessel::interop

namespace tessel::interop {
namespace {

// Found by make fuzz: a key that is not a scalar (here a sequence) escaped as yaml-cpp's
// bad-conversion exception; it is one line naming where.
TEST(Nemo, AKeyThatIsNotAScalarIsOneLine) {
  std::string text = fixture("nemo_gpt3_175b.yaml");
  const std::size_t model = text.find("\nmodel:\n");
  ASSERT_NE(model, std::string::npos);
  text.insert(model + 8, "  ? [odd, key]\n  : 1\n");
  try {
    import_run(Engine::nemo, text, nemo_context("dgx-a100", 128));
    FAIL() << "a sequence as a key was accepted";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("unexpected YAML type"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace tessel::interop
