// Mixture-of-Experts models: parameter counts against the published ones, the Hugging
// Face MoE families read into MoeSpec, and what tessel does not model refused by name.
#include <gtest/gtest.h>


#include "tessel/core/error.hpp"
#include "tessel/core/model_spec.hpp"
#include "support/error_of.hpp"

using namespace tessel;

namespace {
using tessel::test::error_of;

// The error of reading `config` as a Hugging Face config.json.
std::string hf_config_error(const Json& config) {
  return error_of([&] { ModelSpec::from_hf_config(config, "x"); });
}

const char* kMixtralConfig = R"({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
    "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32,
    "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
    "output_router_logits": false, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
    "sliding_window": null, "tie_word_embeddings": false, "hidden_act": "silu", "vocab_size": 32000})";

const char* kQwenMoeConfig = R"({"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe",
    "decoder_sparse_step": 1, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5632,
    "max_position_embeddings": 8192, "max_window_layers": 21, "moe_intermediate_size": 1408, "norm_topk_prob": false,
    "num_attention_heads": 16, "num_experts": 60, "num_experts_per_tok": 4, "num_hidden_layers": 24,
    "num_key_value_heads": 16, "output_router_logits": false, "rms_norm_eps": 1e-06, "router_aux_loss_coef": 0.001,
    "shared_expert_intermediate_size": 5632, "sliding_window": 4096, "tie_word_embeddings": false,
    "use_sliding_window": false, "vocab_size": 151936})";
}  // namespace

TEST(MoeModel, MixtralParameterCountsMatchThePublished467BAnd129BActive) {
  const ModelSpec mixtral = resolve_model("mixtral-8x7b");
  EXPECT_EQ(mixtral.moe_layers(), 32);
  // Mixtral of Experts (Jiang et al. 2024): 46.7B parameters, 12.9B active per token.
  EXPECT_NEAR(double(mixtral.parameter_count()) / 1e9, 46.7, 0.05);
  EXPECT_NEAR(double(mixtral.active_parameter_count()) / 1e9, 12.9, 0.05);
  // The router is hidden x experts; each expert SwiGLU 3 x hidden x expert width.
  EXPECT_EQ(mixtral.router_parameters(), 4096 * 8);
  EXPECT_EQ(mixtral.expert_parameters(), 3LL * 4096 * 14336);
  EXPECT_EQ(mixtral.layer_parameters(5), mixtral.moe_layer_parameters());
}

TEST(MoeModel, QwenMoeParameterCountsMatchThePublished143BAnd27BActive) {
  const ModelSpec qwen = resolve_model("qwen1.5-moe-a2.7b");
  // Qwen1.5-MoE-A2.7B model card: 14.3B parameters, 2.7B activated (q/k/v biases aside).
  EXPECT_NEAR(double(qwen.parameter_count()) / 1e9, 14.3, 0.05);
  EXPECT_NEAR(double(qwen.active_parameter_count()) / 1e9, 2.7, 0.05);
}

TEST(MoeModel, DenseBlocksEveryNthBlockKeepTheDenseCount) {
  ModelSpec model = resolve_model("mixtral-8x7b");
  model.moe.every = 4;
  EXPECT_EQ(model.moe_layers(), 8);
  EXPECT_FALSE(model.moe.is_moe_layer(0));
  EXPECT_TRUE(model.moe.is_moe_layer(3));
  EXPECT_EQ(model.layer_parameters(0), model.layer_parameters());
  EXPECT_EQ(model.parameter_count(), 24 * model.layer_parameters() + 8 * model.moe_layer_parameters() +
                                         model.embedding_parameters() + model.head_parameters());
  // A GELU expert in a model with biases: 2 matrices and no biases, as the executor's
  // experts have none; the MoE block drops the dense MLP's biases with it.
  model.activation = Activation::gelu;
  model.bias = true;
  EXPECT_EQ(model.expert_parameters(), 2LL * 4096 * 14336);
  EXPECT_EQ(model.moe_layer_parameters(), model.layer_parameters() - (2LL * 4096 * 14336 + 14336 + 4096) +
                                              model.router_parameters() + 8 * model.expert_parameters());
  // Dense models are unchanged: active = total.
  const ModelSpec dense = resolve_model("llama3-8b");
  EXPECT_EQ(dense.moe_layers(), 0);
  EXPECT_EQ(dense.active_parameter_count(), dense.parameter_count());
  EXPECT_NEAR(double(dense.parameter_count()) / 1e9, 8.03, 0.01);
  EXPECT_NEAR(double(resolve_model("llama3-70b").parameter_count()) / 1e9, 70.55, 0.01);
}

TEST(MoeModel, HuggingFaceMixtralAndQwenMoeConfigsReadToThePresets) {
  ModelSpec mixtral = ModelSpec::from_hf_config(Json::parse(kMixtralConfig), "mixtral-8x7b");
  ModelSpec preset = resolve_model("mixtral-8x7b");
  EXPECT_EQ(mixtral.moe, preset.moe);
  EXPECT_EQ(mixtral.seq_len, 32768);
  mixtral.seq_len = preset.seq_len;
  mixtral.source = preset.source;
  EXPECT_EQ(mixtral, preset);

  ModelSpec qwen = ModelSpec::from_hf_config(Json::parse(kQwenMoeConfig), "qwen1.5-moe-a2.7b");
  ModelSpec qwen_preset = resolve_model("qwen1.5-moe-a2.7b");
  qwen.source = qwen_preset.source;
  EXPECT_EQ(qwen, qwen_preset);
  EXPECT_EQ(qwen.moe.shared_experts, 4);
}

TEST(MoeModel, WhatTesselDoesNotModelIsRefusedByName) {
  Json deepseek = Json::parse(R"({"model_type": "deepseek_v3", "n_routed_experts": 256, "kv_lora_rank": 512,
      "q_lora_rank": 1536, "hidden_size": 7168})");
  EXPECT_EQ(hf_config_error(deepseek),
            "model.model_type: deepseek_v3 uses multi-head latent attention (kv_lora_rank, q_lora_rank), which tessel "
            "does not model; MoE configs of type mixtral|qwen2_moe are read");
  deepseek["model_type"] = "deepseek_v2";
  EXPECT_NE(hf_config_error(deepseek).find("deepseek_v2 uses multi-head latent"), std::string::npos);
  // Qwen3 (Qwen/Qwen3-8B's and Qwen3-30B-A3B's config.json): RMSNorm on each head's query
  // and key, which a llama reading would drop.
  for (const char* type : {"qwen3", "qwen3_moe"}) {
    Json qwen3 = Json::parse(R"({"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "num_hidden_layers": 36, "intermediate_size": 12288, "vocab_size": 151936,
        "max_position_embeddings": 40960, "rope_theta": 1000000, "rms_norm_eps": 1e-6})");
    qwen3["model_type"] = type;
    EXPECT_EQ(hf_config_error(qwen3),
              std::string("model.model_type: ") + type +
                  " normalises each head's query and key (q_norm, k_norm RMSNorm), which tessel does not model; "
                  "dense configs of type llama|mistral and MoE configs of type mixtral|qwen2_moe are read");
  }
  // MoE keys under a type tessel reads densely, or an unknown type: never read as dense.
  Json llama_moe = Json::parse(kMixtralConfig);
  llama_moe["model_type"] = "llama";
  EXPECT_EQ(hf_config_error(llama_moe),
            "model.num_local_experts: a llama config with Mixture-of-Experts keys is not read as a dense model; MoE "
            "configs of type mixtral|qwen2_moe are read");
  llama_moe["model_type"] = "olmoe";
  EXPECT_NE(hf_config_error(llama_moe).find("'olmoe' has Mixture-of-Experts keys"), std::string::npos);
  Json qwen = Json::parse(kQwenMoeConfig);
  qwen["shared_expert_intermediate_size"] = 2000;
  EXPECT_EQ(hf_config_error(qwen),
            "model.shared_expert_intermediate_size: 2000 is not a multiple of moe_intermediate_size 1408; tessel "
            "represents a shared expert as whole experts of the routed width");
  qwen = Json::parse(kQwenMoeConfig);
  qwen["mlp_only_layers"] = Json::array({0, 1});
  EXPECT_NE(hf_config_error(qwen).find("model.mlp_only_layers:"), std::string::npos);
  Json mixtral = Json::parse(kMixtralConfig);
  mixtral["num_experts_per_tok"] = 9;
  EXPECT_EQ(hf_config_error(mixtral),
            "model.moe.top_k: must be 1..experts (8), got 9");
}

TEST(MoeModel, TesselJsonMoeFieldsAreChecked) {
  Json model = resolve_model("mixtral-8x7b").to_json();
  model["moe"]["every"] = 33;
  EXPECT_NE(error_of([&] { ModelSpec::from_json(model); }).find("model.moe.every"), std::string::npos);
  model = resolve_model("mixtral-8x7b").to_json();
  model["moe"]["top_k"] = 9;
  EXPECT_NE(error_of([&] { ModelSpec::from_json(model); }).find("model.moe.top_k"), std::string::npos);
  EXPECT_EQ(ModelSpec::from_json(resolve_model("mixtral-8x7b").to_json()), resolve_model("mixtral-8x7b"));
}
