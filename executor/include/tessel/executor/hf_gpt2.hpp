// A tessel GPT's whole tensors under Hugging Face GPT2LMHeadModel's names, both ways: the export
// writes model.safetensors and a config.json `transformers` loads; `tessel run --init` reads one
// back in whole_model_tensors order. GPT-2's Conv1D weights are [in, out] as tessel's GEMMs read
// them and c_attn splits [q | k | v] as attn.qkv does, so nothing is transposed; the head is
// tied to wte, GELU is "gelu_new", layer norms use 1e-5. Name table: hf_tensor_map.hpp.
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

using Gpt2Tensor = HfTensor;  // "transformer.h.3.attn.c_attn.weight" <- "L3.attn.qkv.weight", whole

// Throws tessel::Error in one line when `model` is not GPT-2-shaped (gelu, layer norm,
// learned positions, tied embeddings, biases, as many kv heads as heads).
void check_gpt2_shaped(const ModelSpec& model, const std::string& option);
// Every whole tensor of `model` with its GPT-2 name and shape, in whole_model_tensors order.
std::vector<Gpt2Tensor> gpt2_tensors(const ModelSpec& model);
// The config.json of GPT2LMHeadModel for `model`.
Json gpt2_config(const ModelSpec& model);

// Writes `whole` (whole_model_tensors order) to `safetensors_path` and config.json in the
// same folder, each atomically.
void write_gpt2_export(const std::string& safetensors_path, const ModelSpec& model, const std::vector<float>& whole,
                       SafetensorsDType dtype, const std::map<std::string, std::string>& metadata);

// The whole model (whole_model_tensors order) from a GPT-2 safetensors file, checked
// against `model`: every tensor present with its shape and a float dtype (F32 or BF16),
// no tensor the model lacks; "transformer." prefixes optional; the attention mask
// buffers older files carry are skipped, and lm_head.weight must equal the tied wte.
// Errors: "--init: FILE: tensor NAME: ..." in one line. With `needed` (tessel names, as
// in a rank's buckets), every tensor is checked but only those are read; the others stay 0.
std::vector<float> whole_model_from_gpt2(const SafetensorsFile& file, const ModelSpec& model,
                                         const std::set<std::string>* needed = nullptr);

}  // namespace tessel::executor
