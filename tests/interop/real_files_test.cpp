// The engines' real launch files (tests/interop/real/, copied unchanged; its README names
// each file's repository, path, commit and licence): each file either imports or is refused
// by one line naming the file and the option, and the share that imports per engine is
// printed and held to what the readers reach today, so that a reader change that loses a
// file fails here.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "import_fixtures.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/input_file.hpp"
#include "tessel/core/model_spec.hpp"
#include "tessel/interop/engine_config.hpp"

namespace tessel::interop {
namespace {

struct RealFile {
  const char* path;  // under tests/interop/real/
  const char* cluster;
  int nodes;
  const char* model;  // the --hf-config a DeepSpeed config is read with ("" for none)
  const char* args;   // the arguments after the file (script_args), space-separated
  // "" when the file imports, else a part of the one-line refusal (the option it names).
  const char* refusal;
};

// The machines are those the files were written for (their launcher sizes); DeepSpeed's
// configs name no model, so each is read with the model its example trains (as is NeMo's
// Nemotron-4 15B recipe, whose tokenizer file is unnamed); a script that
// needs arguments gets those its README gives (examples/academic_paper_scripts/detxoify_lm),
// and torchtitan's config_registry.py the function its README trains (--config llama3_8b; qwen3's
// the twin of qwen3_32b.toml).
const RealFile kFiles[] = {
    {"megatron/train_gpt3_175b_distributed.sh", "dgx-a100", 128, "", "", ""},
    {"megatron/train_llama3_8b_h100_fp8.sh", "dgx-h100", 1, "", "", ""},
    {"megatron/train_llama3_8b_fsdp_h100_fp8.sh", "dgx-h100", 1, "", "", ""},
    {"megatron/train_mixtral_8x7b_distributed.sh", "dgx-h100", 8, "", "", ""},
    {"megatron/finetune_gpt_distributed-1.3b.sh", "dgx-a100", 2, "", "selfgeneration/unconditional_generation_gpt3-1.3b/2333.annotated.nontoxic_text_document gpt3-1.3b-toy-example-lr-2e-5-bs-512 2e-5 512 78 checkpoints/gpt3/gpt3-1.3b", ""},
    {"megatron/gptoss_02_train.sh", "dgx-h100", 1, "", "", "--pipeline-model-parallel-size 8: 12 layers"},
    {"megatron/mamba_train.sh", "dgx-h100", 1, "", "", "--hybrid-layer-pattern"},
    {"nemo/gpt3_126m.yaml", "dgx-a100", 1, "", "", ""},
    {"nemo/gpt3_5b.yaml", "dgx-a100", 2, "", "", ""},
    {"nemo/gpt3_175b.yaml", "dgx-a100", 128, "", "", ""},
    {"nemo/llama_llama2_7b.yaml", "dgx-a100", 2, "", "", ""},
    {"nemo/llama_llama2_70b.yaml", "dgx-a100", 8, "", "", ""},
    {"nemo/llama_llama3_8b.yaml", "dgx-h100", 1, "", "", ""},
    {"nemo/llama_llama3_1_405b.yaml", "dgx-h100", 72, "", "", ""},
    {"nemo/mistral_mistral_7b.yaml", "dgx-h100", 1, "", "", ""},
    {"nemo/mixtral_mixtral_8x7b.yaml", "dgx-h100", 8, "", "", ""},
    {"nemo/nemotron_nemotron_15b.yaml", "dgx-h100", 8, "nemotron4-15b", "", ""},
    {"nemo/nemotron_nemotron_340b.yaml", "dgx-h100", 96, "", "", ""},
    {"deepspeed/ds_config_fp16_z0.json", "dgx-a100", 1, "gpt2-350m", "", ""},
    {"deepspeed/ds_config_fp16_z1.json", "dgx-a100", 1, "gpt2-350m", "", ""},
    {"deepspeed/ds_config_fp16_z2.json", "dgx-a100", 1, "gpt2-350m", "", ""},
    {"deepspeed/ds_config_fp16_z3.json", "dgx-a100", 1, "gpt2-350m", "", ""},
    {"deepspeed/ds_config_z2.json", "dgx-a100", 1, "gpt2-350m", "", ""},
    {"deepspeed/ds_config_z3.json", "dgx-a100", 1, "gpt2-350m", "", ""},
    {"deepspeed/bf16_master_weight_baseline.json", "dgx-h100", 1, "gpt2-350m", "", ""},
    {"deepspeed/bf16_master_weight_bf16_full.json", "dgx-h100", 1, "gpt2-350m", "", "torch_autocast: torch.autocast keeps fp32 parameters and gradients"},
    {"deepspeed/tensor_parallel_ds_config.json", "dgx-h100", 1, "llama2-7b", "", ""},
    {"deepspeed/zf_config.json", "dgx-h100", 1, "llama2-7b", "", "zero_optimization.zenflow: ZenFlow's top-k gradient selection"},
    {"torchtitan/llama3_debug_model.toml", "dgx-h100", 1, "", "", "activation_checkpoint.selective_ac_option"},
    {"torchtitan/llama3_8b.toml", "dgx-h100", 1, "", "", ""},
    {"torchtitan/llama3_70b.toml", "dgx-h100", 8, "", "", ""},
    {"torchtitan/llama3_405b.toml", "dgx-h100", 64, "", "", ""},
    {"torchtitan/qwen3_0.6b.toml", "dgx-h100", 1, "", "", "model.name: 'qwen3' (flavor 0.6B): Qwen3 normalises each head's query and key"},
    {"torchtitan/qwen3_32b.toml", "dgx-h100", 8, "", "", "model.name: 'qwen3' (flavor 32B): Qwen3 normalises each head's query and key"},
    {"torchtitan/llama4_17bx16e.toml", "dgx-h100", 8, "", "", "model.name: 'llama4' (flavor 17bx16e): Llama 4's flavors attend block-causally"},
    {"torchtitan/deepseek_v3_16b.toml", "dgx-h100", 8, "", "", "model.name: 'deepseek_v3' (flavor 16B): DeepSeek-V3's multi-head latent attention"},
    {"torchtitan/llama3_config_registry.py", "dgx-h100", 1, "", "llama3_8b", ""},
    {"torchtitan/qwen3_config_registry.py", "dgx-h100", 8, "", "qwen3_32b", "model.name: 'qwen3' (flavor 32B): Qwen3 normalises each head's query and key"},
};

// Imports `file` and returns "" or the refusal's message.
std::string outcome_of(const RealFile& file) {
  const std::string path = std::string(TESSEL_SOURCE_DIR) + "/tests/interop/real/" + file.path;
  return test::error_of([&] {
    const std::string text = read_input_file(path);
    std::optional<ModelSpec> model;
    if (*file.model != '\0') model = resolve_model(file.model);
    ImportContext context = test::context_on(file.cluster, file.nodes, file.path, model);
    std::istringstream args(file.args);
    for (std::string word; args >> word;) context.script_args.push_back(word);
    import_run(detect_engine(path, text), text, context);
  });
}

TEST(RealFiles, EachImportsOrIsRefusedByOneLineNamingTheOption) {
  std::map<std::string, std::pair<int, int>> rate;  // engine folder -> (imported, files)
  for (const RealFile& file : kFiles) {
    const std::string error = outcome_of(file);
    const std::string engine = std::string(file.path).substr(0, std::string(file.path).find('/'));
    rate[engine].second++;
    if (error.empty()) rate[engine].first++;
    std::printf("%-48s %s\n", file.path, error.empty() ? "imports" : error.c_str());
    EXPECT_EQ(error.find('\n'), std::string::npos) << file.path << ": " << error;
    if (*file.refusal == '\0') {
      EXPECT_EQ(error, "") << file.path;
    } else {
      EXPECT_NE(error.find(file.path), std::string::npos) << file.path << ": " << error;
      EXPECT_NE(error.find(file.refusal), std::string::npos) << file.path << ": " << error;
    }
  }
  int imported = 0, files = 0;
  for (const auto& [engine, counts] : rate) {
    std::printf("%-12s %d of %d import (%.0f%%)\n", engine.c_str(), counts.first, counts.second,
                100.0 * counts.first / counts.second);
    imported += counts.first, files += counts.second;
  }
  std::printf("%-12s %d of %d import (%.0f%%)\n", "all", imported, files, 100.0 * imported / files);
}

}  // namespace
}  // namespace tessel::interop
