// hf_export.hpp: the dispatch on the model's shape, nothing else.
#include "tessel/executor/hf_export.hpp"

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/executor/hf_gpt2.hpp"
#include "tessel/executor/hf_llama.hpp"
#include "tessel/executor/hf_mixtral.hpp"

namespace tessel::executor {

namespace {
bool is_gpt2_shaped(const ModelSpec& m) {
  try {
    check_gpt2_shaped(m, "");
    return true;
  } catch (const Error&) {
    return false;
  }
}
}  // namespace

const char* to_string(HfFamily family) {
  switch (family) {
    case HfFamily::gpt2: return "GPT2LMHeadModel";
    case HfFamily::llama: return "LlamaForCausalLM";
    case HfFamily::mixtral: return "MixtralForCausalLM";
  }
  return "";
}

HfFamily hf_family_of(const ModelSpec& m, const std::string& option) {
  // Of the MoE shapes only Mixtral's has names (an expert in every block, no shared one).
  if (is_mixtral_shaped(m)) return HfFamily::mixtral;
  if (m.moe.enabled()) {
    throw Error(fmt::format("{}: model {} has mixture-of-experts layers that are not Mixtral-shaped (LLaMA-shaped with "
                            "moe.every 1 and no shared expert); only those MoE models are written and read as Hugging "
                            "Face files",
                            option, m.name));
  }
  if (is_gpt2_shaped(m)) return HfFamily::gpt2;
  if (is_llama_shaped(m)) return HfFamily::llama;
  throw Error(
      fmt::format("{}: model {} is neither GPT-2-shaped (gelu, layernorm, learned positions, tied embeddings, "
                  "biases, kv_heads == heads) nor LLaMA-shaped (swiglu, rmsnorm, rope, untied embeddings, no "
                  "biases); these are the Hugging Face layouts written and read",
                  option, m.name));
}

std::vector<HfTensor> hf_tensors(const ModelSpec& model) {
  switch (hf_family_of(model, "export-weights")) {
    case HfFamily::gpt2: return gpt2_tensors(model);
    case HfFamily::llama: return llama_tensors(model);
    case HfFamily::mixtral: return mixtral_tensors(model);
  }
  return {};
}

void write_hf_export(const std::string& safetensors_path, const ModelSpec& model, const std::vector<float>& whole,
                     SafetensorsDType dtype, const std::map<std::string, std::string>& metadata) {
  switch (hf_family_of(model, "export-weights")) {
    case HfFamily::gpt2: write_gpt2_export(safetensors_path, model, whole, dtype, metadata); break;
    case HfFamily::llama: write_llama_export(safetensors_path, model, whole, dtype, metadata); break;
    case HfFamily::mixtral: write_mixtral_export(safetensors_path, model, whole, dtype, metadata); break;
  }
}

std::vector<float> whole_model_from_hf(const SafetensorsFile& file, const ModelSpec& model,
                                       const std::set<std::string>* needed) {
  switch (hf_family_of(model, "--init")) {
    case HfFamily::gpt2: return whole_model_from_gpt2(file, model, needed);
    case HfFamily::llama: return whole_model_from_llama(file, model, needed);
    case HfFamily::mixtral: return whole_model_from_mixtral(file, model, needed);
  }
  return {};
}

}  // namespace tessel::executor
