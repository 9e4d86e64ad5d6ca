// Hugging Face config.json read into a ModelSpec. Each model_type maps its own keys; what
// tessel does not model is refused by name rather than read as something else (MoE keys are
// never read as a dense model; DeepSeek's latent attention has no tessel shape). Other unknown
// keys are ignored: they are training-time fields that do not change the shape. The MoE
// families' key mapping: docs/PROGRAM.md, "Mixture-of-Experts blocks".
#include <algorithm>
#include <cmath>
#include <string_view>

#include <fmt/format.h>

#include "model_shape.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/input_limits.hpp"
#include "tessel/core/model_refusals.hpp"
#include "tessel/core/model_spec.hpp"

namespace tessel {

namespace {
// The bound of a Hugging Face config field: that of the tessel field it fills.
std::int64_t hf_field_max(std::string_view key) {
  if (key == "n_layer" || key == "num_hidden_layers" || key == "decoder_sparse_step") return limits::kMaxLayers;
  if (key == "n_positions" || key == "max_position_embeddings") return limits::kMaxSeqLen;
  if (key == "vocab_size") return limits::kMaxVocab;
  if (key == "n_inner" || key == "intermediate_size" || key == "moe_intermediate_size" ||
      key == "shared_expert_intermediate_size") {
    return limits::kMaxFfnHidden;
  }
  if (key == "num_local_experts" || key == "num_experts" || key == "num_experts_per_tok") return limits::kMaxExperts;
  return limits::kMaxHidden;
}

// Keys by which the MoE configs of the families Hugging Face ships name their experts.
constexpr std::string_view kMoeKeys[] = {"num_local_experts", "num_experts",         "n_routed_experts",
                                         "moe_intermediate_size", "num_experts_per_tok", "n_shared_experts",
                                         "shared_expert_intermediate_size", "moe_num_experts"};

std::string first_moe_key(const Json& json) {
  for (std::string_view key : kMoeKeys) {
    auto it = json.find(std::string(key));
    if (it != json.end() && !it->is_null()) return std::string(key);
  }
  return "";
}

// Reads typed fields of one config, each error naming the field.
class HfFields {
 public:
  HfFields(const Json& json, const std::string& path) : json_(json), path_(path) {}

  std::string optional_string(const char* key, const char* fallback) const {
    auto it = json_.find(key);
    if (it == json_.end()) return fallback;
    if (!it->is_string()) throw Error(fmt::format("{}.{}: must be a string, got {}", path_, key, it->dump()));
    return it->get<std::string>();
  }
  bool optional_bool(const char* key, bool fallback) const {
    auto it = json_.find(key);
    if (it == json_.end()) return fallback;
    if (!it->is_boolean()) throw Error(fmt::format("{}.{}: must be true or false, got {}", path_, key, it->dump()));
    return it->get<bool>();
  }
  int need_int(const char* key) const {
    auto it = json_.find(key);
    if (it == json_.end() || !it->is_number_integer() || it->get<std::int64_t>() <= 0) {
      throw Error(fmt::format("{}.{}: must be a positive integer in a {} config.json", path_, key, type()));
    }
    const std::int64_t max = hf_field_max(key);
    if (it->is_number_unsigned() ? it->get<std::uint64_t>() > std::uint64_t(max) : it->get<std::int64_t>() > max) {
      throw Error(fmt::format("{}.{}: must be a positive integer up to {}, got {}", path_, key, max, it->dump()));
    }
    return int(it->get<std::int64_t>());
  }
  // A non-negative integer that may be absent or null (0 then).
  int optional_int(const char* key) const {
    auto it = json_.find(key);
    if (it == json_.end() || it->is_null()) return 0;
    if (it->is_number_integer() && it->get<std::int64_t>() == 0) return 0;
    return need_int(key);
  }
  double optional_number(const char* key, double fallback) const {
    auto it = json_.find(key);
    if (it == json_.end() || it->is_null()) return fallback;
    if (!it->is_number() || !(it->get<double>() > 0) || !std::isfinite(it->get<double>())) {
      throw Error(fmt::format("{}.{}: must be a positive number, got {}", path_, key, it->dump()));
    }
    return it->get<double>();
  }
  bool has(const char* key) const { return json_.contains(key) && !json_.at(key).is_null(); }
  std::string type() const { return optional_string("model_type", ""); }
  const Json& json() const { return json_; }
  const std::string& path() const { return path_; }

 private:
  const Json& json_;
  const std::string& path_;
};

void read_gpt2(const HfFields& hf, ModelSpec& m) {
  const Json& json = hf.json();
  const std::string& path = hf.path();
  m.layers = hf.need_int("n_layer");
  m.hidden = hf.need_int("n_embd");
  m.heads = hf.need_int("n_head");
  m.kv_heads = m.heads;
  auto inner = json.find("n_inner");
  m.ffn_hidden = (inner == json.end() || inner->is_null()) ? 4 * m.hidden : hf.need_int("n_inner");
  m.vocab = hf.need_int("vocab_size");
  m.seq_len = hf.need_int("n_positions");
  const std::string act = hf.optional_string("activation_function", "gelu_new");
  if (act.rfind("gelu", 0) != 0) {
    throw Error(fmt::format("{}.activation_function: tessel models gelu variants for gpt2, got '{}'", path, act));
  }
  m.activation = Activation::gelu;
  m.norm = Norm::layernorm;
  m.tied_embeddings = hf.optional_bool("tie_word_embeddings", true);
  m.position_embedding = PositionEmbedding::learned;
  m.bias = true;
  m.norm_epsilon = hf.optional_number("layer_norm_epsilon", 1e-5);
}

// Numerics and shape fields of the LLaMA family that tessel could otherwise read past:
// each is honoured (RoPE base, norm epsilon, RoPE scaling carried for the executor to
// refuse) or refused here by name. `defaults`: the family's transformers config defaults.
struct LlamaNumerics {
  double rope_theta;
  double rms_norm_eps;
};

void read_llama_numerics(const HfFields& hf, ModelSpec& m, LlamaNumerics defaults) {
  const Json& json = hf.json();
  m.rope_theta = hf.optional_number("rope_theta", defaults.rope_theta);
  m.norm_epsilon = hf.optional_number("rms_norm_eps", defaults.rms_norm_eps);
  if (auto scaling = json.find("rope_scaling"); scaling != json.end() && !scaling->is_null()) {
    const auto type = scaling->is_object() ? scaling->value("rope_type", scaling->value("type", std::string())) : "";
    m.rope_scaling = type.empty() ? "unnamed" : type;
  }
  if (hf.has("head_dim") && hf.need_int("head_dim") * m.heads != m.hidden) {
    throw Error(fmt::format("{}.head_dim: {} x {} heads differs from hidden_size {}; tessel models head_dim = "
                            "hidden_size / num_attention_heads",
                            hf.path(), hf.need_int("head_dim"), m.heads, m.hidden));
  }
  if (hf.has("partial_rotary_factor") && hf.optional_number("partial_rotary_factor", 1.0) != 1.0) {
    throw Error(fmt::format("{}.partial_rotary_factor: tessel rotates every channel of a head (1.0), got {}",
                            hf.path(), json.at("partial_rotary_factor").dump()));
  }
  if (hf.has("mlp_bias") && hf.optional_bool("mlp_bias", false) != m.bias) {
    throw Error(fmt::format("{}.mlp_bias: differs from attention_bias; tessel's bias flag covers every linear layer",
                            hf.path()));
  }
}


// The LLaMA-shaped part every llama, mixtral and qwen2_moe config shares.
void read_llama_shape(const HfFields& hf, ModelSpec& m, bool attention_bias_default) {
  m.layers = hf.need_int("num_hidden_layers");
  m.hidden = hf.need_int("hidden_size");
  m.heads = hf.need_int("num_attention_heads");
  m.kv_heads = hf.has("num_key_value_heads") ? hf.need_int("num_key_value_heads") : m.heads;
  m.ffn_hidden = hf.need_int("intermediate_size");
  m.vocab = hf.need_int("vocab_size");
  m.seq_len = hf.need_int("max_position_embeddings");
  const std::string act = hf.optional_string("hidden_act", "silu");
  if (act != "silu") {
    throw Error(fmt::format("{}.hidden_act: tessel models silu (SwiGLU) for {}, got '{}'", hf.path(), hf.type(), act));
  }
  m.activation = Activation::swiglu;
  m.norm = Norm::rmsnorm;
  m.tied_embeddings = hf.optional_bool("tie_word_embeddings", false);
  m.position_embedding = PositionEmbedding::rope;
  m.bias = hf.optional_bool("attention_bias", attention_bias_default);
}

// Sliding-window attention changes the attention cost: refused unless the window
// covers the whole sequence (Mixtral 8x7B's config has it null).
void refuse_sliding_window(const HfFields& hf, const ModelSpec& m) {
  if (hf.has("use_sliding_window") && !hf.optional_bool("use_sliding_window", false)) return;
  if (hf.has("sliding_window") && hf.optional_int("sliding_window") > 0 &&
      hf.optional_int("sliding_window") < m.seq_len) {
    throw Error(fmt::format("{}.sliding_window: sliding-window attention is not modelled by tessel (window {} < "
                            "max_position_embeddings {}); set it to null",
                            hf.path(), hf.optional_int("sliding_window"), m.seq_len));
  }
}

void read_mixtral(const HfFields& hf, ModelSpec& m) {
  read_llama_shape(hf, m, false);
  read_llama_numerics(hf, m, {1e6, 1e-5});
  refuse_sliding_window(hf, m);
  m.moe.experts = hf.need_int("num_local_experts");
  m.moe.top_k = hf.need_int("num_experts_per_tok");
  m.moe.expert_ffn_hidden = m.ffn_hidden;
  m.moe.every = 1;
}

void read_qwen2_moe(const HfFields& hf, ModelSpec& m) {
  read_llama_shape(hf, m, false);
  read_llama_numerics(hf, m, {10000, 1e-6});
  refuse_sliding_window(hf, m);
  const std::string& path = hf.path();
  m.moe.experts = hf.need_int("num_experts");
  m.moe.top_k = hf.need_int("num_experts_per_tok");
  m.moe.expert_ffn_hidden = hf.need_int("moe_intermediate_size");
  m.moe.every = hf.has("decoder_sparse_step") ? hf.need_int("decoder_sparse_step") : 1;
  const int shared_width = hf.optional_int("shared_expert_intermediate_size");
  if (shared_width % m.moe.expert_ffn_hidden != 0) {
    throw Error(fmt::format("{}.shared_expert_intermediate_size: {} is not a multiple of moe_intermediate_size {}; "
                            "tessel represents a shared expert as whole experts of the routed width",
                            path, shared_width, m.moe.expert_ffn_hidden));
  }
  m.moe.shared_experts = shared_width / m.moe.expert_ffn_hidden;
  auto only = hf.json().find("mlp_only_layers");
  if (only != hf.json().end() && !only->is_null() && !(only->is_array() && only->empty())) {
    throw Error(fmt::format("{}.mlp_only_layers: dense blocks at listed positions are not modelled by tessel (MoE "
                            "blocks come every decoder_sparse_step blocks); got {}",
                            path, only->dump()));
  }
}
}  // namespace

ModelSpec ModelSpec::from_hf_config(const Json& json, const std::string& name, const std::string& path) {
  if (!json.is_object()) throw Error(fmt::format("{}: a Hugging Face config must be a JSON object", path));
  const HfFields hf(json, path);
  const std::string type = hf.type();
  ModelSpec m;
  m.name = name;
  m.source = fmt::format("Hugging Face config.json (model_type {})", type);
  if (type == "deepseek_v2" || type == "deepseek_v3") {
    throw Error(fmt::format("{}.model_type: {} uses multi-head latent attention (kv_lora_rank, q_lora_rank), which "
                            "tessel does not model; MoE configs of type mixtral|qwen2_moe are read",
                            path, type));
  }
  if (type == "qwen3" || type == "qwen3_moe") {
    throw Error(fmt::format("{}.model_type: {} {}; dense configs of type llama|mistral and MoE configs of type "
                            "mixtral|qwen2_moe are read",
                            path, type, kQwen3Refusal));
  }
  const std::string moe_key = first_moe_key(json);
  if (type == "gpt2" || type == "llama") {
    if (!moe_key.empty()) {
      throw Error(fmt::format("{}.{}: a {} config with Mixture-of-Experts keys is not read as a dense model; MoE "
                              "configs of type mixtral|qwen2_moe are read",
                              path, moe_key, type));
    }
    if (type == "gpt2") read_gpt2(hf, m);
    else read_llama_shape(hf, m, false), read_llama_numerics(hf, m, {10000, 1e-6});
  } else if (type == "mistral") {
    if (!moe_key.empty()) {
      throw Error(fmt::format("{}.{}: a mistral config with Mixture-of-Experts keys is not read as a dense model; "
                              "MoE configs of type mixtral|qwen2_moe are read",
                              path, moe_key));
    }
    read_llama_shape(hf, m, false);
    refuse_sliding_window(hf, m);
    read_llama_numerics(hf, m, {10000, 1e-6});
  } else if (type == "mixtral") {
    read_mixtral(hf, m);
  } else if (type == "qwen2_moe") {
    read_qwen2_moe(hf, m);
  } else if (!moe_key.empty()) {
    throw Error(fmt::format("{}.model_type: '{}' has Mixture-of-Experts keys ({}) that tessel does not know how to "
                            "read; MoE configs of type mixtral|qwen2_moe are read, never as a dense model",
                            path, type, moe_key));
  } else {
    throw Error(fmt::format("{}.model_type: Hugging Face configs of type gpt2|llama|mistral|mixtral|qwen2_moe are supported, "
                            "got '{}'", path, type));
  }
  check_model_shape(m, path);
  return m;
}

}  // namespace tessel
