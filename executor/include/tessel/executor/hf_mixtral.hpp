// A tessel Mixtral-shaped model's whole tensors under Hugging Face MixtralForCausalLM's
// names, both ways, as hf_llama.hpp does for dense LLaMA shapes (whose rules it reuses
// for the attention, norms, embedding and head).
//
// Mixtral-shaped: LLaMA-shaped with an MoE MLP in every block (moe.every 1), no shared
// expert. The router L{l}.moe.router.weight [hidden x experts] is
// block_sparse_moe.gate.weight [experts, hidden]; expert e's fc1 columns [gate | up] are
// experts.{e}.w1 and w3, its fc2 is w2, each transposed (nn.Linear). Mixtral routes as
// tessel does (softmax over every expert, top-k, gates renormalised over the k); it has no
// capacity, so a model with moe.capacity_factor > 0 drops tokens tessel's way only.
// num_experts_per_tok, num_local_experts and router_aux_loss_coef (tessel's 0.01) go into
// config.json.
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

bool is_mixtral_shaped(const ModelSpec& model);
std::vector<HfTensor> mixtral_tensors(const ModelSpec& model);
Json mixtral_config(const ModelSpec& model);
void write_mixtral_export(const std::string& safetensors_path, const ModelSpec& model, const std::vector<float>& whole,
                          SafetensorsDType dtype, const std::map<std::string, std::string>& metadata);
std::vector<float> whole_model_from_mixtral(const SafetensorsFile& file, const ModelSpec& model,
                                            const std::set<std::string>* needed);

}  // namespace tessel::executor
