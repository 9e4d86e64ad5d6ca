#include "tessel/core/model_spec.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/core/presets.hpp"

namespace tessel {

std::int64_t ModelSpec::layer_parameters() const {
  const std::int64_t h = hidden, kv = kv_dim(), f = ffn_hidden;
  std::int64_t attention = h * h /*q*/ + 2 * h * kv /*k,v*/ + h * h /*out*/;
  std::int64_t mlp = (activation == Activation::swiglu ? 3 : 2) * h * f;
  if (bias) {
    attention += h + 2 * kv + h;
    mlp += (activation == Activation::swiglu ? 2 * f : f) + h;
  }
  const std::int64_t norms = 2 * (norm == Norm::layernorm ? 2 * h : h);
  return attention + mlp + norms;
}

std::int64_t ModelSpec::embedding_parameters() const {
  std::int64_t params = std::int64_t(vocab) * hidden;
  if (position_embedding == PositionEmbedding::learned) params += std::int64_t(seq_len) * hidden;
  return params;
}

std::int64_t ModelSpec::head_parameters() const {
  const std::int64_t final_norm = norm == Norm::layernorm ? 2 * hidden : hidden;
  return final_norm + (tied_embeddings ? 0 : std::int64_t(vocab) * hidden);
}

std::int64_t ModelSpec::parameter_count() const {
  return std::int64_t(layers) * layer_parameters() + embedding_parameters() + head_parameters();
}

namespace {
// The bound of a Hugging Face config field: that of the tessel field it fills.
std::int64_t hf_field_max(std::string_view key) {
  if (key == "n_layer" || key == "num_hidden_layers") return limits::kMaxLayers;
  if (key == "n_positions" || key == "max_position_embeddings") return limits::kMaxSeqLen;
  if (key == "vocab_size") return limits::kMaxVocab;
  if (key == "n_inner" || key == "intermediate_size") return limits::kMaxFfnHidden;
  return limits::kMaxHidden;
}

void check_shape(const ModelSpec& m, const std::string& path) {
  if (m.hidden % m.heads != 0) {
    throw Error(fmt::format("{}.heads: hidden {} is not divisible by heads {}", path, m.hidden, m.heads));
  }
  if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0) {
    throw Error(fmt::format("{}.kv_heads: must divide heads {}, got {}", path, m.heads, m.kv_heads));
  }
  // Counted in double first: the int64 count of a model past the bound could overflow.
  const double parameters = double(m.layers) * double(m.layer_parameters()) + double(m.embedding_parameters()) +
                            double(m.head_parameters());
  if (parameters > limits::kMaxParameters) {
    throw Error(fmt::format("{}: {:.3g} parameters, more than the {:.0e} tessel models", path, parameters,
                            limits::kMaxParameters));
  }
}
}  // namespace

namespace {
MoeSpec moe_from_json(const Json& json, const std::string& path, int layers) {
  JsonFields f(json, path);
  MoeSpec moe;
  moe.experts = int(f.positive_int("experts", limits::kMaxExperts));
  moe.top_k = int(f.positive_int("top_k", moe.experts));
  moe.expert_ffn_hidden = int(f.positive_int("expert_ffn_hidden", limits::kMaxFfnHidden));
  moe.shared_experts = int(f.int_in_range("shared_experts", 0, limits::kMaxExperts, 0));
  moe.capacity_factor = f.number_in_range_or("capacity_factor", 0.0, double(limits::kMaxExperts), 0.0);
  moe.every = int(f.positive_int_or("every", 1, std::max(layers, 1)));
  f.finish();
  return moe;
}

Json moe_to_json(const MoeSpec& moe) {
  return Json{{"experts", moe.experts},           {"top_k", moe.top_k},
              {"expert_ffn_hidden", moe.expert_ffn_hidden}, {"shared_experts", moe.shared_experts},
              {"capacity_factor", moe.capacity_factor}, {"every", moe.every}};
}
}  // namespace

ModelSpec ModelSpec::from_json(const Json& json, const std::string& path) {
  JsonFields f(json, path);
  ModelSpec m;
  m.name = f.string_or("name", "custom");
  m.layers = int(f.positive_int("layers", limits::kMaxLayers));
  m.hidden = int(f.positive_int("hidden", limits::kMaxHidden));
  m.heads = int(f.positive_int("heads", limits::kMaxHidden));
  m.kv_heads = int(f.positive_int_or("kv_heads", m.heads, limits::kMaxHidden));
  m.ffn_hidden = int(f.positive_int_or("ffn_hidden", 4 * std::int64_t(m.hidden), limits::kMaxFfnHidden));
  m.vocab = int(f.positive_int("vocab", limits::kMaxVocab));
  m.seq_len = int(f.positive_int("seq_len", limits::kMaxSeqLen));
  m.activation = *enum_from_string<Activation>(f.choice_or("activation", {"gelu", "swiglu"}, "gelu"));
  m.norm = *enum_from_string<Norm>(f.choice_or("norm", {"layernorm", "rmsnorm"}, "layernorm"));
  m.tied_embeddings = f.boolean_or("tied_embeddings", true);
  m.position_embedding = *enum_from_string<PositionEmbedding>(
      f.choice_or("position_embedding", {"learned", "rope"}, "learned"));
  m.bias = f.boolean_or("bias", true);
  if (const Json* moe = f.get("moe")) m.moe = moe_from_json(*moe, f.field_path("moe"), m.layers);
  m.source = f.string_or("source", "");
  f.finish();
  check_shape(m, path);
  return m;
}

ModelSpec ModelSpec::from_hf_config(const Json& json, const std::string& name,
                                    const std::string& path) {
  // Read only what shapes the model; HF configs carry many training-time fields that
  // tessel does not need, so unknown fields are not refused here.
  if (!json.is_object()) throw Error(fmt::format("{}: a Hugging Face config must be a JSON object", path));
  // Optional fields of the wrong type are refused by name (make fuzz found that
  // json.value() lets nlohmann's type_error escape instead).
  auto optional_string = [&](const char* key, const char* fallback) -> std::string {
    auto it = json.find(key);
    if (it == json.end()) return fallback;
    if (!it->is_string()) throw Error(fmt::format("{}.{}: must be a string, got {}", path, key, it->dump()));
    return it->get<std::string>();
  };
  auto optional_bool = [&](const char* key, bool fallback) -> bool {
    auto it = json.find(key);
    if (it == json.end()) return fallback;
    if (!it->is_boolean()) throw Error(fmt::format("{}.{}: must be true or false, got {}", path, key, it->dump()));
    return it->get<bool>();
  };
  const std::string type = optional_string("model_type", "");
  auto need_int = [&](const char* key) -> int {
    auto it = json.find(key);
    if (it == json.end() || !it->is_number_integer() || it->get<std::int64_t>() <= 0) {
      throw Error(fmt::format("{}.{}: must be a positive integer in a {} config.json", path, key, type));
    }
    const std::int64_t max = hf_field_max(key);
    if (it->is_number_unsigned() ? it->get<std::uint64_t>() > std::uint64_t(max) : it->get<std::int64_t>() > max) {
      throw Error(fmt::format("{}.{}: must be a positive integer up to {}, got {}", path, key, max, it->dump()));
    }
    return int(it->get<std::int64_t>());
  };
  ModelSpec m;
  m.name = name;
  m.source = fmt::format("Hugging Face config.json (model_type {})", type);
  if (type == "gpt2") {
    m.layers = need_int("n_layer");
    m.hidden = need_int("n_embd");
    m.heads = need_int("n_head");
    m.kv_heads = m.heads;
    auto inner = json.find("n_inner");
    m.ffn_hidden = (inner == json.end() || inner->is_null()) ? 4 * m.hidden : need_int("n_inner");
    m.vocab = need_int("vocab_size");
    m.seq_len = need_int("n_positions");
    const std::string act = optional_string("activation_function", "gelu_new");
    if (act.rfind("gelu", 0) != 0) {
      throw Error(fmt::format("{}.activation_function: tessel models gelu variants for gpt2, got '{}'", path, act));
    }
    m.activation = Activation::gelu;
    m.norm = Norm::layernorm;
    m.tied_embeddings = optional_bool("tie_word_embeddings", true);
    m.position_embedding = PositionEmbedding::learned;
    m.bias = true;
  } else if (type == "llama") {
    m.layers = need_int("num_hidden_layers");
    m.hidden = need_int("hidden_size");
    m.heads = need_int("num_attention_heads");
    m.kv_heads = json.contains("num_key_value_heads") ? need_int("num_key_value_heads") : m.heads;
    m.ffn_hidden = need_int("intermediate_size");
    m.vocab = need_int("vocab_size");
    m.seq_len = need_int("max_position_embeddings");
    const std::string act = optional_string("hidden_act", "silu");
    if (act != "silu") {
      throw Error(fmt::format("{}.hidden_act: tessel models silu (SwiGLU) for llama, got '{}'", path, act));
    }
    m.activation = Activation::swiglu;
    m.norm = Norm::rmsnorm;
    m.tied_embeddings = optional_bool("tie_word_embeddings", false);
    m.position_embedding = PositionEmbedding::rope;
    m.bias = optional_bool("attention_bias", false);
  } else {
    throw Error(fmt::format("{}.model_type: Hugging Face configs of type gpt2|llama are supported, got '{}'",
                            path, type));
  }
  check_shape(m, path);
  return m;
}

Json ModelSpec::to_json() const {
  Json json{{"name", name},
            {"layers", layers},
            {"hidden", hidden},
            {"heads", heads},
            {"kv_heads", kv_heads},
            {"ffn_hidden", ffn_hidden},
            {"vocab", vocab},
            {"seq_len", seq_len},
            {"activation", to_string(activation)},
            {"norm", to_string(norm)},
            {"tied_embeddings", tied_embeddings},
            {"position_embedding", to_string(position_embedding)},
            {"bias", bias}};
  if (moe.enabled()) json["moe"] = moe_to_json(moe);
  // A model written inline in a plan has no source; an empty one would not load back.
  if (!source.empty()) json["source"] = source;
  return json;
}

namespace {
ModelSpec model_from_loaded(const Json& json, const std::string& name, const std::string& path) {
  if (json.is_object() && json.contains("model_type")) return ModelSpec::from_hf_config(json, name, path);
  return ModelSpec::from_json(json, path);
}
}  // namespace

ModelSpec resolve_model(const std::string& preset_or_file) {
  Json json = load_preset_or_file("models", preset_or_file, "model");
  return model_from_loaded(json, preset_or_file, fmt::format("model ({})", preset_or_file));
}

ModelSpec model_from_json_value(const Json& value, const std::string& path) {
  if (value.is_string()) return resolve_model(value.get<std::string>());
  return model_from_loaded(value, "custom", path);
}

}  // namespace tessel
