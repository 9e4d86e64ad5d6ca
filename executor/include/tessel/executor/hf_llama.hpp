// A tessel LLaMA-shaped model under Hugging Face LlamaForCausalLM's names, both ways, as
// hf_gpt2.hpp. nn.Linear keeps [out, in], so every projection is transposed; qkv splits into
// q/k/v_proj and fc1 into gate_proj and up_proj. No permutation: tessel's RoPE rotates each
// head's halves as rotate_half does, and query head h reads kv head h / (heads / kv_heads) as
// repeat_kv does. norm_epsilon and rope_theta go into config.json.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "tessel/core/json_fields.hpp"
#include "tessel/core/model_spec.hpp"
#include "tessel/executor/hf_tensor_map.hpp"
#include "tessel/executor/safetensors.hpp"

namespace tessel::executor {

// Whether `model` is LLaMA-shaped: SwiGLU, RMSNorm, RoPE, untied head, no biases.
bool is_llama_shaped(const ModelSpec& model);
// Every Hugging Face tensor of `model`, in whole_model_tensors order (q, k, v and gate,
// up as consecutive parts).
std::vector<HfTensor> llama_tensors(const ModelSpec& model);

// LLaMA's name rules (hf_tensor_map.hpp): embedding, attention, norms, dense SwiGLU MLP
// ("mlp.*" roles) and head. Mixtral's table is this one less the MLP plus its experts.
const std::vector<HfNameRule>& llama_name_rules();
// The config.json of LlamaForCausalLM for `model`.
Json llama_config(const ModelSpec& model);

// Writes `whole` (whole_model_tensors order) to `safetensors_path` and config.json in the
// same folder, each atomically.
void write_llama_export(const std::string& safetensors_path, const ModelSpec& model, const std::vector<float>& whole,
                        SafetensorsDType dtype, const std::map<std::string, std::string>& metadata);

// The whole model from a Llama safetensors file, checked against `model` as the GPT-2
// import checks (hf_tensor_map.hpp's read_hf_model); the rotary inv_freq buffers older
// files carry are skipped.
std::vector<float> whole_model_from_llama(const SafetensorsFile& file, const ModelSpec& model,
                                          const std::set<std::string>* needed = nullptr);

}  // namespace tessel::executor
