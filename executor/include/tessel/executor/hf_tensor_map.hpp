// How a Hugging Face model's tensors map onto tessel's whole model, for any family, from a small
// table: each rule names a tessel tensor or per-layer role, its HF name ("{}" for the layer),
// which of its columns it holds (qkv -> q, k, v; SwiGLU fc1 -> gate, up) and whether HF stores it
// transposed. Writing, reading and the one-line refusals (missing, extra, shape, dtype) live here
// once, so the families cannot drift apart in what they check.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tessel/core/model_spec.hpp"
#include "tessel/executor/safetensors.hpp"

namespace tessel::executor {

// Which columns of a tessel tensor a Hugging Face tensor holds.
enum class HfColumns {
  all,
  q,
  k,
  v,  // attn.qkv: [q (hidden) | k (kv_dim) | v (kv_dim)]
  gate,
  up  // SwiGLU's fc1: [gate (ffn) | up (ffn)]
};

struct HfNameRule {
  std::string tessel_role;  // "wte", or a layer role after "L{l}.": "attn.qkv.weight"
  std::string hf_name;      // "model.embed_tokens.weight", "model.layers.{}.self_attn.q_proj.weight"
  HfColumns columns = HfColumns::all;
  bool transposed = false;
};

// One Hugging Face tensor and where its values sit in the whole model.
struct HfTensor {
  std::string hf_name;              // "model.layers.3.self_attn.q_proj.weight"
  std::string tessel_name;          // "L3.attn.qkv.weight"
  std::vector<std::int64_t> shape;  // as Hugging Face stores it (vectors 1-D)
  std::size_t offset = 0;           // of the whole tessel tensor in the whole model
  int rows = 0, cols = 0;           // the whole tessel tensor
  int col_begin = 0, col_end = 0;   // the columns of it this tensor holds
  bool transposed = false;          // stored [col_end - col_begin, rows]
  std::size_t size() const { return std::size_t(rows) * std::size_t(col_end - col_begin); }
};

// Every Hugging Face tensor of `model` by `rules`, in whole_model_tensors order (the parts
// of a split tensor in the rules' order). Throws "internal: ..." when a tessel tensor
// has no rule: the table and the trainer disagree.
std::vector<HfTensor> hf_tensors_by_rules(const ModelSpec& model, const std::vector<HfNameRule>& rules);

// Writes `whole` under `tensors`' names and shapes (transposing and slicing as they say),
// with metadata "format": "pt", then `config` as config.json beside it; each atomically.
void write_hf_model(const std::string& safetensors_path, const std::vector<HfTensor>& tensors,
                    const std::vector<float>& whole, SafetensorsDType dtype,
                    std::map<std::string, std::string> metadata, const std::string& config_json);

// The whole model of `whole_size` floats from `file`: `stored_as` maps each name the
// family expects (HfTensor::hf_name) to the name in the file (families that accept
// prefixes or skip buffers build it). Every tensor must be present with its shape and
// F32 or BF16, and no name of `stored_as` may be left over. Errors: "--init: FILE: tensor
// NAME: ..." in one line. With `needed` (tessel names), every tensor is checked but only
// those are read; the others stay 0.
std::vector<float> read_hf_model(const SafetensorsFile& file, const std::vector<HfTensor>& tensors,
                                 std::size_t whole_size, std::map<std::string, std::string> stored_as,
                                 const ModelSpec& model, const std::set<std::string>* needed);

// The whole model's size in floats (whole_model_tensors).
std::size_t whole_model_size(const ModelSpec& model);

}  // namespace tessel::executor
