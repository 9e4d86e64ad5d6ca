// What the Megatron-LM and NeMo readers and writers share: NeMo trains GPT and Llama
// through Megatron-Core, so both engines can run the same plans and lack the same
// things (no 2D/2.5D/3D tensor parallelism, no GPipe schedule, no LAMB/LARS). The
// nearest-plan rule, the naming of an imported model and the placing of an imported
// layout on tessel's cluster are written once here.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessel/interop/engine_config.hpp"

namespace tessel::interop::detail {

// The shape a model was read as, named after the preset it equals (its name and source),
// else `fallback_name` with `source`.
ModelSpec name_imported_model(ModelSpec shape, const std::string& fallback_name, const std::string& source);

// Tokens of a Megatron tokenizer type's own vocabulary (GPT2BPETokenizer 50257), or 0 when
// the type takes its size from a file or --vocab-size.
int tokenizer_vocab(const std::string& tokenizer_type);
// The vocabulary a Hugging Face tokenizer's name fixes ("meta-llama/Meta-Llama-3-8B":
// 128256), 0 when the name does not say.
int tokenizer_model_vocab(const std::string& model);

// The plan closest to `plan` that Megatron-Core can run: 2D/2.5D/3D tensor parallelism
// becomes 1D, GPipe 1F1B, LAMB/LARS AdamW, chunked offload optimizer offload, and a rope
// model's positions grow to the sequence (Megatron asserts it); without `fsdp_zero` ZeRO 2-3
// become 1. Each change is a line of `notes`. Throws tessel::Error naming parallel.tp_mode
// when the 1D layout of that degree is not valid.
Plan nearest_megatron_plan(const Plan& plan, bool fsdp_zero, const std::string& engine,
                           std::vector<std::string>& notes);

// Places an imported layout on the context's cluster: nodes from the context, dp from the
// world size (the cluster's GPUs, or `launcher_world` on a cluster whose node size
// follows the plan, else tp*pp*sp), a global batch of
// micro_batch x dp when it is 0, then validates. Errors name the source file.
Plan place_imported_plan(Plan plan, int launcher_world, const ImportContext& context);

// train.dropout from Megatron-Core's two dropout probabilities (hidden and attention,
// each 0.1 when the file does not set it, as Megatron-LM and NeMo default): dropout runs
// unless both are zero. `name` is the option or key for messages; a value that is not a
// probability is refused naming it.
bool dropout_from_probabilities(const std::optional<std::string>& hidden, const std::optional<std::string>& attention,
                                const std::string& hidden_name, const std::string& attention_name,
                                const ImportContext& context);

// model.rotary_fraction from Megatron's --rotary-percent or NeMo's rotary_percentage
// (`name`): a share of each head's channels in (0, 1], else refused naming it.
double rotary_fraction_from(const std::string& text, const std::string& name, const ImportContext& context);

// "<source>: <what>" as a tessel::Error.
[[noreturn]] void refuse(const ImportContext& context, const std::string& what);

}  // namespace tessel::interop::detail
