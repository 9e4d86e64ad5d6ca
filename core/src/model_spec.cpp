#include "tessel/core/model_spec.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/core/presets.hpp"
#include "model_shape.hpp"

namespace tessel {

namespace {
// The weight matrices of an MLP of width `f`: fc1 (2f columns for SwiGLU's gate and
// up) and fc2.
std::int64_t mlp_weights_of_width(const ModelSpec& m, std::int64_t f) {
  return (m.activation == Activation::swiglu ? 3 : 2) * std::int64_t(m.hidden) * f;
}
}  // namespace

std::int64_t ModelSpec::layer_parameters() const {
  const std::int64_t h = hidden, kv = kv_dim();
  std::int64_t attention = h * h /*q*/ + 2 * h * kv /*k,v*/ + h * h /*out*/;
  if (bias) attention += h + 2 * kv + h;
  const std::int64_t norms = 2 * (norm == Norm::layernorm ? 2 * h : h);
  return attention + mlp_parameters() + norms;
}

std::int64_t ModelSpec::mlp_parameters() const {
  const std::int64_t biases = bias ? (activation == Activation::swiglu ? 2 * ffn_hidden : ffn_hidden) + hidden : 0;
  return mlp_weights_of_width(*this, ffn_hidden) + biases;
}

// No biases whatever `bias` says: the executor's experts (stage_weights.cpp's
// place_experts) carry none, as Mixtral's and Qwen-MoE's do not.
std::int64_t ModelSpec::expert_parameters() const { return mlp_weights_of_width(*this, moe.expert_ffn_hidden); }

std::int64_t ModelSpec::router_parameters() const { return std::int64_t(hidden) * moe.experts; }

std::int64_t ModelSpec::moe_layer_parameters() const {
  return layer_parameters() - mlp_parameters() + router_parameters() +
         std::int64_t(moe.experts + moe.shared_experts) * expert_parameters();
}

int ModelSpec::moe_layers() const { return moe.enabled() ? layers / moe.every : 0; }

std::int64_t ModelSpec::layer_parameters(int layer) const {
  return moe.is_moe_layer(layer) ? moe_layer_parameters() : layer_parameters();
}

std::int64_t ModelSpec::active_parameter_count() const {
  const std::int64_t idle_experts = std::int64_t(moe.experts - moe.top_k) * expert_parameters();
  return parameter_count() - std::int64_t(moe_layers()) * idle_experts;
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
  const std::int64_t moe_blocks = moe_layers();
  return (layers - moe_blocks) * layer_parameters() + moe_blocks * moe_layer_parameters() + embedding_parameters() +
         head_parameters();
}

void check_model_shape(const ModelSpec& m, const std::string& path) {
  if (m.hidden % m.heads != 0) {
    throw Error(fmt::format("{}.heads: hidden {} is not divisible by heads {}", path, m.hidden, m.heads));
  }
  if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0) {
    throw Error(fmt::format("{}.kv_heads: must divide heads {}, got {}", path, m.heads, m.kv_heads));
  }
  if (m.moe.enabled()) {
    if (m.moe.top_k < 1 || m.moe.top_k > m.moe.experts) {
      throw Error(fmt::format("{}.moe.top_k: must be 1..experts ({}), got {}", path, m.moe.experts, m.moe.top_k));
    }
    if (m.moe.expert_ffn_hidden < 1) {
      throw Error(fmt::format("{}.moe.expert_ffn_hidden: must be a positive integer, got {}", path,
                              m.moe.expert_ffn_hidden));
    }
    if (m.moe.every < 1 || m.moe.every > m.layers) {
      throw Error(fmt::format("{}.moe.every: must be 1..layers ({}) so that some block is an MoE block, got {}", path,
                              m.layers, m.moe.every));
    }
    if (m.moe.shared_experts < 0 || m.moe.capacity_factor < 0) {
      throw Error(fmt::format("{}.moe: shared_experts and capacity_factor must be >= 0", path));
    }
  }
  // Counted in double first: the int64 count of a model past the bound could overflow.
  const double moe_blocks = m.moe_layers();
  const double moe_layer = double(m.layer_parameters()) - double(m.mlp_parameters()) + double(m.router_parameters()) +
                           double(m.moe.experts + m.moe.shared_experts) * double(m.expert_parameters());
  const double parameters = (double(m.layers) - moe_blocks) * double(m.layer_parameters()) + moe_blocks * moe_layer +
                            double(m.embedding_parameters()) + double(m.head_parameters());
  if (parameters > limits::kMaxParameters) {
    throw Error(fmt::format("{}: {:.3g} parameters, more than the {:.0e} tessel models", path, parameters,
                            limits::kMaxParameters));
  }
}

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
  m.activation = *enum_from_string<Activation>(f.choice_or("activation", {"gelu", "swiglu", "squared-relu"}, "gelu"));
  m.norm = *enum_from_string<Norm>(f.choice_or("norm", {"layernorm", "rmsnorm"}, "layernorm"));
  m.tied_embeddings = f.boolean_or("tied_embeddings", true);
  m.position_embedding = *enum_from_string<PositionEmbedding>(
      f.choice_or("position_embedding", {"learned", "rope"}, "learned"));
  m.bias = f.boolean_or("bias", true);
  if (const Json* moe = f.get("moe")) m.moe = moe_from_json(*moe, f.field_path("moe"), m.layers);
  m.rope_theta = f.positive_number_or("rope_theta", m.rope_theta);
  m.norm_epsilon = f.number_in_range_or("norm_epsilon", 1e-12, 1e-1, m.norm_epsilon);
  m.rotary_fraction = f.positive_number_or("rotary_fraction", m.rotary_fraction);
  if (m.rotary_fraction > 1) f.fail("rotary_fraction", fmt::format("must be above 0 and at most 1, got {}", m.rotary_fraction));
  m.rope_scaling = f.string_or("rope_scaling", "");
  m.source = f.string_or("source", "");
  f.finish();
  check_model_shape(m, path);
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
  const ModelSpec defaults;
  if (rope_theta != defaults.rope_theta) json["rope_theta"] = rope_theta;
  if (norm_epsilon != defaults.norm_epsilon) json["norm_epsilon"] = norm_epsilon;
  if (rotary_fraction != defaults.rotary_fraction) json["rotary_fraction"] = rotary_fraction;
  if (!rope_scaling.empty()) json["rope_scaling"] = rope_scaling;
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
