// A tessel Mixtral-shaped model (LLaMA with an MoE MLP in every block, no shared expert) under
// MixtralForCausalLM's names, reusing hf_llama.hpp's rules. The router is block_sparse_moe.gate
// (transposed), expert e's fc1 [gate | up] is experts.{e}.w1 and w3, its fc2 w2. Mixtral routes
// as tessel does (softmax, top-k, renormalised gates) without capacity, so a capacity_factor > 0
// drops tokens tessel's way only.
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
