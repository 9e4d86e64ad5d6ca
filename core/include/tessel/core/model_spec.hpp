// The transformer to train: its shape, nothing about how it is parallelised.
// Loaded from a preset (configs/models/), a tessel model JSON, or a Hugging Face
// config.json of the GPT-2 or LLaMA family.
#pragma once

#include <cstdint>
#include <string>

#include "tessel/core/enums.hpp"
#include "tessel/core/json_fields.hpp"

namespace tessel {

// Mixture-of-Experts MLPs: every `every`-th block (counting from 1: blocks every-1,
// 2*every-1, ...) replaces its dense MLP by `experts` expert MLPs of width
// `expert_ffn_hidden`, of which a softmax router sends each token to `top_k`, plus
// `shared_experts` MLPs every token passes through. An expert takes at most
// capacity_factor * tokens * top_k / experts tokens of a batch; 0 = no limit (no token
// dropped). experts == 0: a dense model (every other field unused).
struct MoeSpec {
  int experts = 0;
  int top_k = 0;
  int expert_ffn_hidden = 0;
  int shared_experts = 0;
  double capacity_factor = 0;
  int every = 1;

  bool enabled() const { return experts > 0; }
  // Whether block `layer` (0-based) has an MoE MLP.
  bool is_moe_layer(int layer) const { return enabled() && (layer + 1) % every == 0; }
  bool operator==(const MoeSpec&) const = default;
};

struct ModelSpec {
  std::string name;
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;
  int ffn_hidden = 0;
  int vocab = 0;
  int seq_len = 0;
  Activation activation = Activation::gelu;
  Norm norm = Norm::layernorm;
  bool tied_embeddings = true;
  PositionEmbedding position_embedding = PositionEmbedding::learned;
  bool bias = true;
  MoeSpec moe;  // dense unless moe.enabled()
  // What a step computes but not what it costs: the executor honours RoPE's base and the
  // norms' epsilon, and refuses RoPE scaling (its rope_type; "" = none) by name.
  double rope_theta = 10000;
  double norm_epsilon = 1e-5;
  // The share of each head's channels RoPE rotates (NeMo's rotary_percentage, Nemotron 0.5;
  // Hugging Face's partial_rotary_factor); the executor refuses anything but 1 by name.
  double rotary_fraction = 1.0;
  std::string rope_scaling;
  std::string source;  // where the shape comes from (paper, config file)

  int head_dim() const { return hidden / heads; }
  int kv_dim() const { return kv_heads * head_dim(); }

  // Parameters of one dense transformer block (attention, MLP, its two norms).
  std::int64_t layer_parameters() const;
  // Parameters of block `layer` (0-based): layer_parameters() for a dense block, the
  // MoE block's (router, every expert, shared experts) where moe.is_moe_layer(layer).
  std::int64_t layer_parameters(int layer) const;
  // The dense MLP of one block (fc1, fc2 and their biases).
  std::int64_t mlp_parameters() const;
  // One expert MLP of width moe.expert_ffn_hidden (a shared expert has the same shape):
  // GELU 2 matrices, SwiGLU 3 (gate, up, down); no biases, even where `bias` is true
  // (the executor's experts have none).
  std::int64_t expert_parameters() const;
  // The router of one MoE block: hidden x experts, no bias (Mixtral, Qwen-MoE).
  std::int64_t router_parameters() const;
  // One MoE block: the dense block with its MLP (and the MLP's biases) replaced by
  // router, experts and shared experts. Only the routed experts are sharded by expert
  // parallelism.
  std::int64_t moe_layer_parameters() const;
  // Blocks with an MoE MLP (0 for a dense model).
  int moe_layers() const;
  // Token (and learned position) embedding parameters.
  std::int64_t embedding_parameters() const;
  // LM head parameters that are not shared with the embedding, plus the final norm.
  std::int64_t head_parameters() const;
  std::int64_t parameter_count() const;
  // Parameters one token passes through: top_k routed experts instead of all of them.
  std::int64_t active_parameter_count() const;

  static ModelSpec from_json(const Json& json, const std::string& path = "model");
  // Hugging Face config.json (model_type gpt2, llama, mixtral or qwen2_moe;
  // model_hf_config.cpp says what each maps and what is refused by name).
  static ModelSpec from_hf_config(const Json& json, const std::string& name,
                                  const std::string& path = "model");
  Json to_json() const;

  bool operator==(const ModelSpec&) const = default;
};

// A preset name (gpt2-124m, ...), or the path of a tessel model JSON or HF config.json.
ModelSpec resolve_model(const std::string& preset_or_file);
// Resolves a plan's "model" value: a string (as above) or an inline object.
ModelSpec model_from_json_value(const Json& value, const std::string& path);

}  // namespace tessel
