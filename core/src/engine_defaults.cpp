// The engines' defaults, each read from the engine's own docs or code at the release
// named (docs/ARCHITECTURE.md, "Calibration", gives the table). A run's attention is
// fused from the first release that runs a flash-style kernel unless told otherwise;
// opt-in flags (Megatron-LM's --use-flash-attn) do not count, since a run that sets one
// says so. The framework says whose elementwise kernels run (TrainSpec::framework).
#include "tessel/core/engine_defaults.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>

#include "tessel/core/error.hpp"

namespace tessel {

namespace {
constexpr auto kRules = std::to_array<EngineRule>({
    {"tessel", Framework::pytorch, "",
     "tessel's executor runs materialised attention unless train.kernels is fused (attention_core.hpp)"},
    {"megatron-lm", Framework::megatron, "2024-04-18",
     "Megatron-LM core_v0.6.0 made --transformer-impl default to transformer_engine (commit e7b74a4b7e, "
     "megatron/training/arguments.py), whose DotProductAttention runs flash or cuDNN fused attention by default "
     "(Transformer Engine docs, NVTE_FLASH_ATTN and NVTE_FUSED_ATTN default 1); before it the local implementation "
     "materialised the scores (flash only with --use-flash-attn)"},
    {"nemo", Framework::megatron, "2024-04-19",
     "NeMo docs, features/memory_optimizations.rst (first 2024-04-19): 'By default, Flash Attention is enabled' "
     "through Transformer Engine; NeMo 2.0's default_layer_spec is Transformer Engine's; before it "
     "megatron_gpt_config.yaml had transformer_engine: False (local attention)"},
    {"megatron-deepspeed", Framework::megatron, "",
     "Megatron-DeepSpeed's attention materialises the scores unless --use-flash-attn (opt-in)"},
    {"gpt-neox", Framework::megatron, "",
     "GPT-NeoX's attention_config defaults to 'global' (materialised scores); 'flash' is opt-in "
     "(megatron/neox_arguments/neox_args.py)"},
    {"torchtitan", Framework::pytorch, "2024-01-01",
     "torchtitan's Llama calls F.scaled_dot_product_attention (flash backend) from its first model (January 2024)"},
    {"pytorch", Framework::pytorch, "2023-03-15",
     "PyTorch 2.0 (2023-03-15) added F.scaled_dot_product_attention with flash kernels, which "
     "nn.MultiheadAttention and the models written since call"},
    {"llm-foundry", Framework::pytorch, "2023-05-08",
     "llm-foundry v0.1.0 (2023-05-08) defaults MPT's attn_impl to 'triton' (a flash-attention kernel), "
     "'flash' from v0.7.0 (llmfoundry/models/mpt/configuration_mpt.py, models/utils/config_defaults.py)"},
    {"paddlenlp", Framework::pytorch, "",
     "PaddleNLP's LlamaConfig defaults use_flash_attention and use_fused_rms_norm to False "
     "(paddlenlp/transformers/llama/configuration.py): eager dygraph modules, flash attention opt-in"},
});

bool digits(std::string_view text) {
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return !text.empty();
}
}  // namespace

std::span<const EngineRule> engine_rules() { return kRules; }

std::string engine_names() {
  std::string out;
  for (const EngineRule& rule : kRules) {
    if (!out.empty()) out += '|';
    out += rule.engine;
  }
  return out;
}

const EngineRule* find_engine_rule(std::string_view engine) {
  for (const EngineRule& rule : kRules) {
    if (rule.engine == engine) return &rule;
  }
  return nullptr;
}

std::string engine_date_problem(std::string_view date) {
  const bool shape = (date.size() == 7 || date.size() == 10) && date[4] == '-' && digits(date.substr(0, 4)) &&
                     digits(date.substr(5, 2)) && (date.size() == 7 || (date[7] == '-' && digits(date.substr(8, 2))));
  if (!shape) return fmt::format("must be a date YYYY-MM or YYYY-MM-DD, got '{}'", date);
  const int month = std::stoi(std::string(date.substr(5, 2)));
  const int day = date.size() == 10 ? std::stoi(std::string(date.substr(8, 2))) : 1;
  if (month < 1 || month > 12 || day < 1 || day > 31) {
    return fmt::format("must be a date YYYY-MM or YYYY-MM-DD with month 01-12 and day 01-31, got '{}'", date);
  }
  return {};
}

EngineDefaults engine_defaults(std::string_view engine, std::string_view date) {
  const EngineRule* rule = find_engine_rule(engine);
  if (!rule) throw Error(fmt::format("engine: must be one of {}, got '{}'", engine_names(), engine));
  if (!date.empty()) {
    const std::string problem = engine_date_problem(date);
    if (!problem.empty()) throw Error("engine_date: " + problem);
  }
  // A month counts from its first day, so "2024-04" is before a release of 2024-04-18.
  const std::string day = date.size() == 7 ? std::string(date) + "-01" : std::string(date);
  EngineDefaults out;
  out.framework = rule->framework;
  const bool fused = !rule->fused_attention_from.empty() && (day.empty() || day >= rule->fused_attention_from);
  out.kernels = fused ? Kernels::fused : Kernels::unfused;
  return out;
}

}  // namespace tessel
