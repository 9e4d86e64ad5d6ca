// A tessel LLaMA-shaped model's whole tensors under Hugging Face LlamaForCausalLM's names,
// both ways: the export writes model.safetensors and a config.json that `transformers`
// loads; `tessel run --init` reads such a file back (whole_model_tensors order).
//
// Orientation: Llama's projections are nn.Linear, weight [out, in] with y = x W^T, while
// tessel's GEMMs read [in rows x out columns]: every projection is transposed. attn.qkv's
// columns [q | k | v] split into q_proj, k_proj and v_proj, head h at rows [h d, (h+1) d)
// of each as Llama's view(heads, head_dim) reads them; no permutation, since tessel's
// RoPE rotates the halves of each head (i with i + d/2) as Llama's rotate_half does, and
// query head h reads kv head h / (heads / kv_heads) as Llama's repeat_kv does. SwiGLU's
// fc1 columns [gate | up] split into gate_proj and up_proj (silu(gate) * up). The
// embedding and the untied lm_head are [vocab, hidden] in both. The RMSNorm epsilon and
// RoPE base are the model's (norm_epsilon, rope_theta) and go into config.json.
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
