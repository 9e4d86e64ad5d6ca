// hf_gpt2.hpp: the name table is built from whole_model_tensors (stage_weights.cpp), so
// the export and the import can never disagree with the trainer about what a model holds.
#include "tessel/executor/hf_gpt2.hpp"

#include <cstring>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/executor/stage_weights.hpp"

namespace tessel::executor {

namespace {

// GPT-2's Conv1D weights are [in, out] like tessel's: nothing is sliced or transposed.
const std::vector<HfNameRule>& gpt2_rules() {
  static const std::vector<HfNameRule> kRules{
      {"wte", "transformer.wte.weight"},
      {"wpe", "transformer.wpe.weight"},
      {"ln1.gain", "transformer.h.{}.ln_1.weight"},
      {"ln1.bias", "transformer.h.{}.ln_1.bias"},
      {"attn.qkv.weight", "transformer.h.{}.attn.c_attn.weight"},
      {"attn.qkv.bias", "transformer.h.{}.attn.c_attn.bias"},
      {"attn.proj.weight", "transformer.h.{}.attn.c_proj.weight"},
      {"attn.proj.bias", "transformer.h.{}.attn.c_proj.bias"},
      {"ln2.gain", "transformer.h.{}.ln_2.weight"},
      {"ln2.bias", "transformer.h.{}.ln_2.bias"},
      {"mlp.fc1.weight", "transformer.h.{}.mlp.c_fc.weight"},
      {"mlp.fc1.bias", "transformer.h.{}.mlp.c_fc.bias"},
      {"mlp.fc2.weight", "transformer.h.{}.mlp.c_proj.weight"},
      {"mlp.fc2.bias", "transformer.h.{}.mlp.c_proj.bias"},
      {"lnf.gain", "transformer.ln_f.weight"},
      {"lnf.bias", "transformer.ln_f.bias"}};
  return kRules;
}

// Buffers GPT-2 files may carry that are not weights (the causal mask of older versions).
bool is_mask_buffer(const std::string& name) {
  auto ends_with = [&](const char* tail) {
    const std::size_t n = std::strlen(tail);
    return name.size() >= n && name.compare(name.size() - n, n, tail) == 0;
  };
  return ends_with(".attn.bias") || ends_with(".attn.masked_bias");
}
}  // namespace

void check_gpt2_shaped(const ModelSpec& m, const std::string& option) {
  if (m.activation != Activation::gelu || m.norm != Norm::layernorm ||
      m.position_embedding != PositionEmbedding::learned || !m.tied_embeddings || m.kv_heads != m.heads || !m.bias) {
    throw Error(fmt::format("{}: model {} is not GPT-2-shaped (gelu, layernorm, learned positions, tied embeddings, "
                            "biases, kv_heads == heads), the layout of GPT2LMHeadModel",
                            option, m.name));
  }
}

std::vector<Gpt2Tensor> gpt2_tensors(const ModelSpec& model) { return hf_tensors_by_rules(model, gpt2_rules()); }

Json gpt2_config(const ModelSpec& m) {
  // Dropouts are 0: tessel trains without dropout, so `transformers` in train mode
  // computes what tessel does.
  Json config = {{"model_type", "gpt2"},
                 {"architectures", {"GPT2LMHeadModel"}},
                 {"vocab_size", m.vocab},
                 {"n_positions", m.seq_len},
                 {"n_ctx", m.seq_len},
                 {"n_embd", m.hidden},
                 {"n_layer", m.layers},
                 {"n_head", m.heads},
                 {"n_inner", m.ffn_hidden == 4 * m.hidden ? Json(nullptr) : Json(m.ffn_hidden)},
                 {"activation_function", "gelu_new"},
                 {"layer_norm_epsilon", m.norm_epsilon},
                 {"initializer_range", 0.02},
                 {"resid_pdrop", 0.0},
                 {"embd_pdrop", 0.0},
                 {"attn_pdrop", 0.0},
                 {"scale_attn_weights", true},
                 {"scale_attn_by_inverse_layer_idx", false},
                 {"reorder_and_upcast_attn", false},
                 {"tie_word_embeddings", true},
                 // GPT-2's <|endoftext|> is its last token; tessel's vocabularies have no
                 // special token, so the last id stands in (transformers checks the range).
                 {"bos_token_id", m.vocab - 1},
                 {"eos_token_id", m.vocab - 1},
                 {"torch_dtype", "float32"}};
  return config;
}

void write_gpt2_export(const std::string& safetensors_path, const ModelSpec& model, const std::vector<float>& whole,
                       SafetensorsDType dtype, const std::map<std::string, std::string>& metadata) {
  check_gpt2_shaped(model, "export-weights");
  Json config = gpt2_config(model);
  if (dtype == SafetensorsDType::bf16) config["torch_dtype"] = "bfloat16";
  write_hf_model(safetensors_path, gpt2_tensors(model), whole, dtype, metadata, config.dump(2) + "\n");
}

std::vector<float> whole_model_from_gpt2(const SafetensorsFile& file, const ModelSpec& model,
                                         const std::set<std::string>* needed) {
  check_gpt2_shaped(model, "--init");
  auto fail = [&](const std::string& tensor, const std::string& what) {
    return Error(fmt::format("--init: {}: tensor {}: {}", file.path(), tensor, what));
  };
  // The file's names with the optional "transformer." prefix added where it is missing.
  std::map<std::string, std::string> stored_as;
  for (const auto& [name, entry] : file.entries()) {
    if (is_mask_buffer(name) || name == "lm_head.weight") continue;
    stored_as[name.rfind("transformer.", 0) == 0 ? name : "transformer." + name] = name;
  }
  const std::vector<Gpt2Tensor> tensors = gpt2_tensors(model);
  std::vector<float> whole =
      read_hf_model(file, tensors, tensors.back().offset + tensors.back().size(), std::move(stored_as), model, needed);
  if (file.entries().count("lm_head.weight") && (!needed || needed->count("wte"))) {
    const SafetensorsFile::Entry& e = file.entries().at("lm_head.weight");
    const Gpt2Tensor& wte = tensors.front();
    const bool same = e.shape == wte.shape && (e.dtype == "F32" || e.dtype == "BF16") &&
                      file.values("lm_head.weight") ==
                          std::vector<float>(whole.begin() + long(wte.offset), whole.begin() + long(wte.offset + wte.size()));
    if (!same) throw fail("lm_head.weight", "differs from transformer.wte.weight; tessel ties the LM head to the embedding");
  }
  return whole;
}

}  // namespace tessel::executor
