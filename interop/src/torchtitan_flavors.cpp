// The flavor table, written from torchtitan's own model args so that each shape can be
// checked against its source: llama3 (`llama3_args`, torchtitan/models/llama3 at 238fa99)
// and llama2 (`llama2_configs` before 4d88a8a); sources, vocabularies and contexts in
// docs/INTEROP.md. Flavors that change the attention (block-causal document masks) are left
// out on purpose: tessel prices full causal attention, so the reader refuses them.
#include "torchtitan_flavors.hpp"

#include <cctype>

#include <fmt/format.h>

#include "tessel/core/model_refusals.hpp"

namespace tessel::interop::detail {

int llama_ffn_hidden(int dim, int multiple_of, std::optional<double> ffn_dim_multiplier) {
  int hidden = 2 * (4 * dim) / 3;  // int(2 * hidden_dim / 3), as torchtitan's FeedForward truncates
  if (ffn_dim_multiplier) hidden = int(*ffn_dim_multiplier * hidden);
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

namespace {

struct LlamaArgs {
  int dim;
  int n_layers;
  int n_heads;
  int n_kv_heads;  // 0: as n_heads
  int multiple_of;
  std::optional<double> ffn_dim_multiplier;
  int vocab;
  int max_seq_len;
};

TorchtitanFlavor llama(const char* model_name, const char* flavor, const LlamaArgs& args, const char* source) {
  ModelSpec spec;
  spec.name = fmt::format("{}-{}", model_name, flavor);
  for (char& c : spec.name) c = char(std::tolower(static_cast<unsigned char>(c)));
  spec.layers = args.n_layers;
  spec.hidden = args.dim;
  spec.heads = args.n_heads;
  spec.kv_heads = args.n_kv_heads > 0 ? args.n_kv_heads : args.n_heads;
  spec.ffn_hidden = llama_ffn_hidden(args.dim, args.multiple_of, args.ffn_dim_multiplier);
  spec.vocab = args.vocab;
  spec.seq_len = args.max_seq_len;
  spec.activation = Activation::swiglu;
  spec.norm = Norm::rmsnorm;
  spec.tied_embeddings = false;
  spec.position_embedding = PositionEmbedding::rope;
  spec.bias = false;
  spec.source = fmt::format("torchtitan {} flavor {} ({})", model_name, flavor, source);
  return {model_name, flavor, spec};
}

bool same_shape(const ModelSpec& a, const ModelSpec& b) {
  return a.layers == b.layers && a.hidden == b.hidden && a.heads == b.heads && a.kv_heads == b.kv_heads &&
         a.ffn_hidden == b.ffn_hidden && a.vocab == b.vocab && a.activation == b.activation && a.norm == b.norm &&
         a.tied_embeddings == b.tied_embeddings && a.position_embedding == b.position_embedding && a.bias == b.bias &&
         a.rotary_fraction == b.rotary_fraction;
}

}  // namespace

const std::vector<TorchtitanFlavor>& torchtitan_flavors() {
  static const std::vector<TorchtitanFlavor> flavors = [] {
    const char* llama3 = "torchtitan/models/llama3/__init__.py llama3_args";
    const char* llama2 = "torchtitan/models/llama/__init__.py llama2_configs";
    constexpr int k3Vocab = 128256, k3Context = 131072, k2Vocab = 32000, k2Context = 4096;
    return std::vector<TorchtitanFlavor>{
        llama("llama3", "debugmodel", {256, 6, 16, 0, 256, std::nullopt, 2048, k3Context}, llama3),
        llama("llama3", "8B", {4096, 32, 32, 8, 1024, 1.3, k3Vocab, k3Context}, llama3),
        llama("llama3", "70B", {8192, 80, 64, 8, 4096, 1.3, k3Vocab, k3Context}, llama3),
        llama("llama3", "405B", {16384, 126, 128, 8, 4096, 1.2, k3Vocab, k3Context}, llama3),
        llama("llama2", "271M", {1024, 16, 8, 0, 256, std::nullopt, k2Vocab, k2Context}, llama2),
        llama("llama2", "1B", {2048, 18, 16, 0, 256, std::nullopt, k2Vocab, k2Context}, llama2),
        llama("llama2", "7B", {4096, 32, 32, 0, 256, std::nullopt, k2Vocab, k2Context}, llama2),
        llama("llama2", "13B", {5120, 40, 40, 0, 256, std::nullopt, k2Vocab, k2Context}, llama2),
        llama("llama2", "26B", {5120, 80, 40, 0, 256, std::nullopt, k2Vocab, k2Context}, llama2),
        llama("llama2", "70B", {8192, 80, 64, 8, 4096, 1.3, k2Vocab, k2Context}, llama2),
    };
  }();
  return flavors;
}

const TorchtitanFlavor* find_torchtitan_flavor(const std::string& model_name, const std::string& flavor) {
  for (const TorchtitanFlavor& entry : torchtitan_flavors())
    if (entry.model_name == model_name && entry.flavor == flavor) return &entry;
  return nullptr;
}

const TorchtitanFlavor* torchtitan_flavor_of(const ModelSpec& model) {
  for (const TorchtitanFlavor& entry : torchtitan_flavors())
    if (same_shape(entry.spec, model)) return &entry;
  return nullptr;
}

std::string torchtitan_family_refusal(const std::string& model_name) {
  if (model_name == "qwen3")
    return fmt::format("Qwen3 {}; and head_dim 128 is not dim / n_heads in its 0.6B, 4B and 32B flavors (0.6B: "
                       "1024 / 16 = 64), which tessel does not model (it derives head_dim = hidden / heads)",
                       kQwen3Refusal);
  if (model_name == "llama4")
    return "Llama 4's flavors attend block-causally (flex attention over document masks) and in fixed local "
           "blocks on three layers of four (iRoPE); tessel prices full causal attention";
  if (model_name == "deepseek_v3")
    return "DeepSeek-V3's multi-head latent attention (MLA: low-rank compressed keys and values) is not modelled";
  return "";
}

std::string torchtitan_flavor_list() {
  std::string list;
  for (const TorchtitanFlavor& entry : torchtitan_flavors())
    list += fmt::format("{}{}/{}", list.empty() ? "" : ", ", entry.model_name, entry.flavor);
  return list;
}

}  // namespace tessel::interop::detail
