// One reader and one writer per engine, each in its own file; engine_config.cpp
// dispatches to them.
#pragma once

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/interop/engine_config.hpp"

namespace tessel::interop::detail {

// `text` without leading and trailing blanks and tabs (shell words, YAML scalars).
inline std::string trim(const std::string& text) {
  const std::size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

// The one rule for a norm over each attention head's query and key (Megatron-LM's
// --qk-layernorm, NeMo's qk_layernorm, Qwen3's q_norm and k_norm): it changes what a block
// computes and tessel's block ops, planner and executor have no such op, so every reader
// refuses it by name rather than pricing a different model.
inline constexpr const char* kQkNormRefusal =
    "a norm over each head's query and key is not modelled (tessel's blocks, planner and executor have no such op)";

// An imported plan's own check, its failure said as the file's: "SOURCE: the plan it
// describes does not hold: ...".
inline void validate_imported(const Plan& plan, const std::string& source_name) {
  try {
    plan.validate();
  } catch (const Error& error) {
    throw Error(fmt::format("{}: the plan it describes does not hold: {}", source_name, error.what()));
  }
}

ImportedRun import_megatron(const std::string& text, const ImportContext& context);
ExportedConfig export_megatron(const Plan& plan);

ImportedRun import_nemo(const std::string& text, const ImportContext& context);
ExportedConfig export_nemo(const Plan& plan);

ImportedRun import_deepspeed(const std::string& text, const ImportContext& context);
ExportedConfig export_deepspeed(const Plan& plan);

ImportedRun import_torchtitan(const std::string& text, const ImportContext& context);
ExportedConfig export_torchtitan(const Plan& plan);           // TOML
ExportedConfig export_torchtitan_registry(const Plan& plan);  // config_registry.py

}  // namespace tessel::interop::detail
