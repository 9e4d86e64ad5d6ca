// hf_export.hpp: the dispatch on the model's shape, nothing else.
#include "tessel/executor/hf_export.hpp"

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/executor/hf_gpt2.hpp"
#include "tessel/executor/hf_llama.hpp"

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

const char* to_string(HfFamily family) { return family == HfFamily::gpt2 ? "GPT2LMHeadModel" : "LlamaForCausalLM"; }

HfFamily hf_family_of(const ModelSpec& m, const std::string& option) {
  // The name tables know dense layers only; an expert layer would have no name.
  if (m.moe.enabled()) {
    throw Error(fmt::format("{}: model {} has mixture-of-experts layers; only dense GPT-2- and LLaMA-shaped models are "
                            "written and read as Hugging Face files",
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
  return hf_family_of(model, "export-weights") == HfFamily::gpt2 ? gpt2_tensors(model) : llama_tensors(model);
}

void write_hf_export(const std::string& safetensors_path, const ModelSpec& model, const std::vector<float>& whole,
                     SafetensorsDType dtype, const std::map<std::string, std::string>& metadata) {
  if (hf_family_of(model, "export-weights") == HfFamily::gpt2) {
    write_gpt2_export(safetensors_path, model, whole, dtype, metadata);
  } else {
    write_llama_export(safetensors_path, model, whole, dtype, metadata);
  }
}

std::vector<float> whole_model_from_hf(const SafetensorsFile& file, const ModelSpec& model,
                                       const std::set<std::string>* needed) {
  return hf_family_of(model, "--init") == HfFamily::gpt2 ? whole_model_from_gpt2(file, model, needed)
                                                         : whole_model_from_llama(file, model, needed);
}

}  // namespace tessel::executor
