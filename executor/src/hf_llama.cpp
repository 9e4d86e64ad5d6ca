// hf_llama.hpp: a name table over whole_model_tensors (so the export and the import
// always hold what the trainer holds) and a config.json; the rest is hf_tensor_map's.
#include "tessel/executor/hf_llama.hpp"

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::executor {

namespace {

bool ends_with(const std::string& name, const std::string& tail) {
  return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
}
}  // namespace

const std::vector<HfNameRule>& llama_name_rules() {
  static const std::vector<HfNameRule> kRules{
      {"wte", "model.embed_tokens.weight"},
      {"ln1.gain", "model.layers.{}.input_layernorm.weight"},
      {"attn.qkv.weight", "model.layers.{}.self_attn.q_proj.weight", HfColumns::q, true},
      {"attn.qkv.weight", "model.layers.{}.self_attn.k_proj.weight", HfColumns::k, true},
      {"attn.qkv.weight", "model.layers.{}.self_attn.v_proj.weight", HfColumns::v, true},
      {"attn.proj.weight", "model.layers.{}.self_attn.o_proj.weight", HfColumns::all, true},
      {"ln2.gain", "model.layers.{}.post_attention_layernorm.weight"},
      {"mlp.fc1.weight", "model.layers.{}.mlp.gate_proj.weight", HfColumns::gate, true},
      {"mlp.fc1.weight", "model.layers.{}.mlp.up_proj.weight", HfColumns::up, true},
      {"mlp.fc2.weight", "model.layers.{}.mlp.down_proj.weight", HfColumns::all, true},
      {"lnf.gain", "model.norm.weight"},
      {"lm_head", "lm_head.weight"}};
  return kRules;
}

bool is_llama_shaped(const ModelSpec& m) {
  return m.activation == Activation::swiglu && m.norm == Norm::rmsnorm &&
         m.position_embedding == PositionEmbedding::rope && !m.tied_embeddings && !m.bias;
}

std::vector<HfTensor> llama_tensors(const ModelSpec& model) { return hf_tensors_by_rules(model, llama_name_rules()); }

Json llama_config(const ModelSpec& m) {
  // tessel trains without dropout; attention_dropout 0 keeps transformers' train mode equal.
  return Json{{"model_type", "llama"},
              {"architectures", {"LlamaForCausalLM"}},
              {"vocab_size", m.vocab},
              {"hidden_size", m.hidden},
              {"intermediate_size", m.ffn_hidden},
              {"num_hidden_layers", m.layers},
              {"num_attention_heads", m.heads},
              {"num_key_value_heads", m.kv_heads},
              {"head_dim", m.head_dim()},
              {"max_position_embeddings", m.seq_len},
              {"rms_norm_eps", m.norm_epsilon},
              {"rope_theta", m.rope_theta},
              {"rope_scaling", nullptr},
              {"hidden_act", "silu"},
              {"tie_word_embeddings", false},
              {"attention_bias", false},
              {"mlp_bias", false},
              {"attention_dropout", 0.0},
              {"initializer_range", 0.02},
              {"pretraining_tp", 1},
              // tessel's vocabularies have no special tokens; the last id stands in.
              {"bos_token_id", m.vocab - 1},
              {"eos_token_id", m.vocab - 1},
              {"torch_dtype", "float32"}};
}

void write_llama_export(const std::string& safetensors_path, const ModelSpec& model, const std::vector<float>& whole,
                        SafetensorsDType dtype, const std::map<std::string, std::string>& metadata) {
  if (!is_llama_shaped(model)) throw Error(fmt::format("internal: model {} is not LLaMA-shaped", model.name));
  Json config = llama_config(model);
  if (dtype == SafetensorsDType::bf16) config["torch_dtype"] = "bfloat16";
  write_hf_model(safetensors_path, llama_tensors(model), whole, dtype, metadata, config.dump(2) + "\n");
}

std::vector<float> whole_model_from_llama(const SafetensorsFile& file, const ModelSpec& model,
                                          const std::set<std::string>* needed) {
  if (!is_llama_shaped(model)) throw Error(fmt::format("internal: model {} is not LLaMA-shaped", model.name));
  std::map<std::string, std::string> stored_as;
  for (const auto& [name, entry] : file.entries()) {
    if (ends_with(name, ".rotary_emb.inv_freq")) continue;  // a buffer, recomputed from rope_theta
    stored_as[name] = name;
  }
  return read_hf_model(file, llama_tensors(model), whole_model_size(model), std::move(stored_as), model, needed);
}

}  // namespace tessel::executor
