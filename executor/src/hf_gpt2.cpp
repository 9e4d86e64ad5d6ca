// hf_gpt2.hpp: the name table is built from whole_model_tensors (stage_weights.cpp), so
// the export and the import can never disagree with the trainer about what a model holds.
#include "tessel/executor/hf_gpt2.hpp"

#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/executor/stage_weights.hpp"

namespace tessel::executor {

namespace {
constexpr double kLayerNormEpsilon = 1e-5;  // tessel's (layout_impl.hpp's kNormEps), GPT-2's

// "L3.attn.qkv.weight" -> "transformer.h.3.attn.c_attn.weight"; "wte" -> "transformer.wte.weight".
std::string hf_name_of(const std::string& tessel_name) {
  static const std::map<std::string, std::string, std::less<>> kTop{{"wte", "transformer.wte.weight"},
                                                                     {"wpe", "transformer.wpe.weight"},
                                                                     {"lnf.gain", "transformer.ln_f.weight"},
                                                                     {"lnf.bias", "transformer.ln_f.bias"}};
  static const std::map<std::string, std::string, std::less<>> kLayer{
      {"ln1.gain", "ln_1.weight"},           {"ln1.bias", "ln_1.bias"},
      {"attn.qkv.weight", "attn.c_attn.weight"}, {"attn.qkv.bias", "attn.c_attn.bias"},
      {"attn.proj.weight", "attn.c_proj.weight"}, {"attn.proj.bias", "attn.c_proj.bias"},
      {"ln2.gain", "ln_2.weight"},           {"ln2.bias", "ln_2.bias"},
      {"mlp.fc1.weight", "mlp.c_fc.weight"},    {"mlp.fc1.bias", "mlp.c_fc.bias"},
      {"mlp.fc2.weight", "mlp.c_proj.weight"},  {"mlp.fc2.bias", "mlp.c_proj.bias"}};
  if (const auto top = kTop.find(tessel_name); top != kTop.end()) return top->second;
  const std::size_t dot = tessel_name.find('.');
  const auto role = kLayer.find(tessel_name.substr(dot + 1));
  if (tessel_name[0] != 'L' || dot == std::string::npos || role == kLayer.end()) {
    throw Error(fmt::format("internal: no GPT-2 name for tensor {}", tessel_name));
  }
  return fmt::format("transformer.h.{}.{}", tessel_name.substr(1, dot - 1), role->second);
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
                            "biases, kv_heads == heads); Hugging Face GPT-2 is the only layout written and read today",
                            option, m.name));
  }
}

std::vector<Gpt2Tensor> gpt2_tensors(const ModelSpec& model) {
  std::vector<Gpt2Tensor> out;
  for (const TensorSlot& t : whole_model_tensors(model)) {
    Gpt2Tensor g;
    g.tessel_name = t.name;
    g.hf_name = hf_name_of(t.name);
    g.shape = t.rows == 1 ? std::vector<std::int64_t>{t.cols} : std::vector<std::int64_t>{t.rows, t.cols};
    g.offset = t.offset;
    g.size = t.size();
    out.push_back(std::move(g));
  }
  return out;
}

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
                 {"layer_norm_epsilon", kLayerNormEpsilon},
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
  std::vector<SafetensorsOutput> outputs;
  for (const Gpt2Tensor& t : gpt2_tensors(model)) {
    if (t.offset + t.size > whole.size()) throw Error("internal: the whole model is shorter than its tensors");
    outputs.push_back({t.hf_name, t.shape, whole.data() + t.offset});
  }
  std::map<std::string, std::string> meta = metadata;
  meta["format"] = "pt";  // what transformers expects of a PyTorch model's file
  write_safetensors(safetensors_path, outputs, dtype, meta);
  Json config = gpt2_config(model);
  if (dtype == SafetensorsDType::bf16) config["torch_dtype"] = "bfloat16";
  const auto folder = std::filesystem::absolute(safetensors_path).parent_path();
  write_text_file_atomically((folder / "config.json").string(), config.dump(2) + "\n");
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
  std::vector<float> whole(tensors.back().offset + tensors.back().size);
  for (const Gpt2Tensor& t : tensors) {
    const auto found = stored_as.find(t.hf_name);
    if (found == stored_as.end()) {
      throw fail(t.hf_name, fmt::format("missing (the plan's model {} has {} layers, hidden {})", model.name,
                                        model.layers, model.hidden));
    }
    const SafetensorsFile::Entry& e = file.entries().at(found->second);
    if (e.shape != t.shape) {
      throw fail(found->second, fmt::format("shape {} differs from the plan's model {}: {}", Json(e.shape).dump(),
                                            model.name, Json(t.shape).dump()));
    }
    if (e.dtype != "F32" && e.dtype != "BF16") throw fail(found->second, fmt::format("dtype {}; F32 or BF16 is read", e.dtype));
    if (!needed || needed->count(t.tessel_name)) {
      const std::vector<float> values = file.values(found->second);
      std::copy(values.begin(), values.end(), whole.begin() + long(t.offset));
    }
    stored_as.erase(found);
  }
  if (!stored_as.empty()) {
    throw fail(stored_as.begin()->second, fmt::format("not in the plan's model {} ({} layers, vocabulary {})",
                                                      model.name, model.layers, model.vocab));
  }
  if (file.entries().count("lm_head.weight") && (!needed || needed->count("wte"))) {
    const SafetensorsFile::Entry& e = file.entries().at("lm_head.weight");
    const Gpt2Tensor& wte = tensors.front();
    const bool same = e.shape == wte.shape && (e.dtype == "F32" || e.dtype == "BF16") &&
                      file.values("lm_head.weight") ==
                          std::vector<float>(whole.begin() + long(wte.offset), whole.begin() + long(wte.offset + wte.size));
    if (!same) throw fail("lm_head.weight", "differs from transformer.wte.weight; tessel ties the LM head to the embedding");
  }
  return whole;
}

}  // namespace tessel::executor
