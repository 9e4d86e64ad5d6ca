// Which Hugging Face family a tessel model is written as and read from, chosen by its shape:
// GPT-2 (hf_gpt2.hpp), LLaMA (hf_llama.hpp) or Mixtral (hf_mixtral.hpp). The commands
// (export-weights, run --init) call these and never name a family, so a new family is one more
// file and one more case here.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "tessel/core/model_spec.hpp"
#include "tessel/executor/hf_tensor_map.hpp"
#include "tessel/executor/safetensors.hpp"

namespace tessel::executor {

enum class HfFamily { gpt2, llama, mixtral };
const char* to_string(HfFamily family);  // "GPT2LMHeadModel", "LlamaForCausalLM", "MixtralForCausalLM"

// The family of `model`; throws "<option>: model M is neither GPT-2- nor LLaMA-shaped ..."
// in one line otherwise.
HfFamily hf_family_of(const ModelSpec& model, const std::string& option);
// The family's tensors of `model` (whole_model_tensors order).
std::vector<HfTensor> hf_tensors(const ModelSpec& model);
// Writes the safetensors file and config.json of `model`'s family.
void write_hf_export(const std::string& safetensors_path, const ModelSpec& model, const std::vector<float>& whole,
                     SafetensorsDType dtype, const std::map<std::string, std::string>& metadata);
// Reads a file of `model`'s family into the whole model ("--init: ..." errors).
std::vector<float> whole_model_from_hf(const SafetensorsFile& file, const ModelSpec& model,
                                       const std::set<std::string>* needed = nullptr);

}  // namespace tessel::executor
