#include "tessel/executor/stage_weights.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::executor {

namespace {
std::uint64_t name_seed(std::uint64_t seed, const std::string& name) {
  std::uint64_t h = seed ^ 0x9e3779b97f4a7c15ULL;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;  // FNV-1a over the name
  return h;
}
}  // namespace

std::string_view layer_tensor_name(LayerTensor tensor) {
  static constexpr std::string_view kNames[kLayerTensorCount] = {
      "ln1.gain",        "ln1.bias",      "attn.proj.bias",   "ln2.gain",       "ln2.bias",      "mlp.fc2.bias",
      "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight", "mlp.fc1.weight", "mlp.fc1.bias",  "mlp.fc2.weight"};
  return kNames[tensor];
}

bool has_layer_tensor(const ModelSpec& model, LayerTensor tensor) {
  switch (tensor) {
    case kLn1Bias:
    case kLn2Bias: return model.norm == Norm::layernorm;
    case kProjBias:
    case kFc2Bias:
    case kQkvBias:
    case kFc1Bias: return model.bias;
    default: return true;
  }
}

bool has_layer_tensor(const ModelSpec& model, int layer, LayerTensor tensor) {
  if (model.moe.is_moe_layer(layer) &&
      (tensor == kFc1Weight || tensor == kFc2Weight || tensor == kFc1Bias || tensor == kFc2Bias)) {
    return false;
  }
  return has_layer_tensor(model, tensor);
}

int mlp_in_columns(const ModelSpec& model, int ffn) { return model.activation == Activation::swiglu ? 2 * ffn : ffn; }

int qkv_columns(const ModelSpec& model) { return model.hidden + 2 * model.kv_dim(); }
int fc1_columns(const ModelSpec& model) {
  return model.activation == Activation::swiglu ? 2 * model.ffn_hidden : model.ffn_hidden;
}
std::string_view head_table_name(const ModelSpec& model) { return model.tied_embeddings ? "wte" : "lm_head"; }

namespace {
// q, k and v's whole widths: equal without grouped-query attention.
std::vector<int> qkv_groups(const ModelSpec& model) {
  if (model.kv_heads == model.heads) return {};
  return {model.hidden, model.kv_dim(), model.kv_dim()};
}
}  // namespace

const TensorSlot& Bucket::tensor(std::string_view name) const {
  for (const TensorSlot& t : tensors) {
    if (t.name == name) return t;
  }
  throw Error(fmt::format("internal: bucket of layer {} has no tensor {}", layer, name));
}

void Bucket::place(std::string name, int rows, int cols, const Cut& cut, int column_groups) {
  TensorSlot t;
  t.name = std::move(name);
  t.rows = rows, t.cols = cols;
  t.row_split = cut.row_split, t.row_part = cut.row_part, t.col_split = cut.col_split, t.col_part = cut.col_part;
  t.copy = cut.copy;
  t.valid_rows = rows;
  t.column_groups = column_groups;
  t.local_rows = rows / cut.row_split;
  t.local_cols = cols / cut.col_split;
  t.offset = size;
  size += t.size();
  tensors.push_back(std::move(t));
}

void Bucket::place(std::string name, int rows, const Cut& cut, std::vector<int> group_cols) {
  int cols = 0;
  for (int c : group_cols) cols += c;
  place(std::move(name), rows, cols, cut, int(group_cols.size()));
  tensors.back().group_cols = std::move(group_cols);
}

void Bucket::place_vocabulary(std::string name, int vocab, int padded_vocab, int cols, const Cut& cut) {
  place(std::move(name), padded_vocab, cols, cut);
  tensors.back().valid_rows = vocab;
}

std::vector<std::pair<std::size_t, std::size_t>> padding_ranges(const Bucket& b) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (const TensorSlot& t : b.tensors) {
    const int first_row = t.row_part * t.local_rows;
    const int kept_rows = std::clamp(t.valid_rows - first_row, 0, t.local_rows);
    if (kept_rows < t.local_rows) out.emplace_back(t.offset + std::size_t(kept_rows) * t.local_cols, t.offset + t.size());
  }
  return out;
}

namespace {
// Calls keep(i) for each i in [0, count) whose bucket element first + i is not padding.
template <typename Keep>
void for_each_kept(const Bucket& b, std::size_t first, std::size_t count, Keep keep) {
  std::size_t i = 0;
  for (const auto& [begin, end] : padding_ranges(b)) {
    const std::size_t stop = std::clamp(begin, first, first + count) - first;
    for (; i < stop; ++i) keep(i);
    i = std::max(i, std::clamp(end, first, first + count) - first);
  }
  for (; i < count; ++i) keep(i);
}
}  // namespace

std::size_t stored_elements(const Bucket& b, std::size_t first, std::size_t count) {
  std::size_t n = 0;
  for (const auto& [begin, end] : padding_ranges(b))
    n += std::clamp(end, first, first + count) - std::clamp(begin, first, first + count);
  return count - n;
}

std::vector<float> strip_padding(const Bucket& b, std::size_t first, const std::vector<float>& values) {
  std::vector<float> out;
  out.reserve(stored_elements(b, first, values.size()));
  for_each_kept(b, first, values.size(), [&](std::size_t i) { out.push_back(values[i]); });
  return out;
}

std::vector<float> restore_padding(const Bucket& b, std::size_t first, std::size_t count,
                                   const std::vector<float>& stored, std::size_t& at) {
  std::vector<float> out(count, 0.0f);
  for_each_kept(b, first, count, [&](std::size_t i) { out[i] = stored[at++]; });
  return out;
}

std::pair<std::size_t, std::size_t> place_layer(Bucket& b, const ModelSpec& model, int layer, const LayerCuts& cuts) {
  const int C = model.hidden, F = model.ffn_hidden;
  const std::string L = fmt::format("L{}.", layer);
  const bool moe = model.moe.is_moe_layer(layer);
  for (LayerTensor t : {kLn1Gain, kLn1Bias, kProjBias, kLn2Gain, kLn2Bias, kFc2Bias}) {
    if (has_layer_tensor(model, layer, t)) b.place(L + std::string(layer_tensor_name(t)), 1, C, cuts.late_vectors);
  }
  const std::size_t after_late = b.size;
  const int fc1_groups = model.activation == Activation::swiglu ? 2 : 1;
  auto place_qkv = [&](const std::string& name, int rows, const Cut& cut) {
    if (model.kv_heads == model.heads) b.place(name, rows, qkv_columns(model), cut, 3);
    else b.place(name, rows, cut, qkv_groups(model));
  };
  if (model.bias) {
    place_qkv(L + "attn.qkv.bias", 1, cuts.early_biases);
    if (!moe) b.place(L + "mlp.fc1.bias", 1, fc1_columns(model), cuts.early_biases, fc1_groups);
  }
  const std::size_t after_biases = b.size;
  place_qkv(L + "attn.qkv.weight", C, cuts.in_weights);
  b.place(L + "attn.proj.weight", C, C, cuts.out_weights);
  if (!moe) {
    b.place(L + "mlp.fc1.weight", C, fc1_columns(model), cuts.in_weights, fc1_groups);
    b.place(L + "mlp.fc2.weight", F, C, cuts.out_weights);
    return {after_late, after_biases};
  }
  b.place(L + "moe.router.weight", C, model.moe.experts, cuts.late_vectors);
  const int shared = model.moe.shared_experts * model.moe.expert_ffn_hidden;
  if (shared > 0) {
    b.place(L + "moe.shared.fc1.weight", C, mlp_in_columns(model, shared), cuts.in_weights, fc1_groups);
    b.place(L + "moe.shared.fc2.weight", shared, C, cuts.out_weights);
  }
  return {after_late, after_biases};
}

void place_experts(Bucket& b, const ModelSpec& model, int layer, int first_expert, int count, const LayerCuts& cuts) {
  const int C = model.hidden, f = model.moe.expert_ffn_hidden;
  const int fc1_groups = model.activation == Activation::swiglu ? 2 : 1;
  for (int e = first_expert; e < first_expert + count; ++e) {
    const std::string E = fmt::format("L{}.moe.expert{}.", layer, e);
    b.place(E + "fc1.weight", C, mlp_in_columns(model, f), cuts.in_weights, fc1_groups);
    b.place(E + "fc2.weight", f, C, cuts.out_weights);
  }
}

std::vector<TensorSlot> whole_model_tensors(const ModelSpec& model) {
  const int C = model.hidden, F = model.ffn_hidden;
  Bucket all;
  auto add = [&](std::string name, int rows, int cols) { all.place(std::move(name), rows, cols, Cut{}); };
  add("wte", model.vocab, C);
  if (model.position_embedding == PositionEmbedding::learned) add("wpe", model.seq_len, C);
  const bool layer_norm = model.norm == Norm::layernorm;
  for (int l = 0; l < model.layers; ++l) {
    const std::string L = fmt::format("L{}.", l);
    add(L + "ln1.gain", 1, C);
    if (layer_norm) add(L + "ln1.bias", 1, C);
    add(L + "attn.qkv.weight", C, qkv_columns(model));
    if (model.bias) add(L + "attn.qkv.bias", 1, qkv_columns(model));
    add(L + "attn.proj.weight", C, C);
    if (model.bias) add(L + "attn.proj.bias", 1, C);
    add(L + "ln2.gain", 1, C);
    if (layer_norm) add(L + "ln2.bias", 1, C);
    if (model.moe.is_moe_layer(l)) {
      const int f = model.moe.expert_ffn_hidden, shared = model.moe.shared_experts * f;
      add(L + "moe.router.weight", C, model.moe.experts);
      if (shared > 0) {
        add(L + "moe.shared.fc1.weight", C, mlp_in_columns(model, shared));
        add(L + "moe.shared.fc2.weight", shared, C);
      }
      for (int e = 0; e < model.moe.experts; ++e) {
        add(fmt::format("{}moe.expert{}.fc1.weight", L, e), C, mlp_in_columns(model, f));
        add(fmt::format("{}moe.expert{}.fc2.weight", L, e), f, C);
      }
      continue;
    }
    add(L + "mlp.fc1.weight", C, fc1_columns(model));
    if (model.bias) add(L + "mlp.fc1.bias", 1, fc1_columns(model));
    add(L + "mlp.fc2.weight", F, C);
    if (model.bias) add(L + "mlp.fc2.bias", 1, C);
  }
  add("lnf.gain", 1, C);
  if (layer_norm) add("lnf.bias", 1, C);
  if (!model.tied_embeddings) add("lm_head", model.vocab, C);
  return all.tensors;
}

std::vector<float> initial_tensor(const ModelSpec& model, std::uint64_t seed, const std::string& name, int rows,
                                  int cols) {
  // GPT-2 initialisation: N(0, 0.02) weights, residual projections scaled by
  // 1/sqrt(2 L), zero biases, unit norm gains.
  const std::size_t n = std::size_t(rows) * std::size_t(cols);
  if (name.find(".gain") != std::string::npos) return std::vector<float>(n, 1.0f);
  if (name.find(".bias") != std::string::npos) return std::vector<float>(n, 0.0f);
  const bool residual = name.find("proj.weight") != std::string::npos || name.find("fc2.weight") != std::string::npos;
  std::mt19937_64 rng(name_seed(seed, name));
  std::normal_distribution<float> normal(0.0f, residual ? 0.02f / std::sqrt(2.0f * float(model.layers)) : 0.02f);
  std::vector<float> out(n);
  for (float& value : out) value = normal(rng);
  return out;
}

void for_each_shard_element(const TensorSlot& t, const std::function<void(std::size_t, std::size_t)>& visit) {
  // Each column group is cut in col_split blocks on its own; this rank's columns are its
  // block of every group, side by side.
  std::vector<int> whole_first, local_first, local_width;
  int whole_at = 0, local_at = 0;
  for (int g = 0; g < t.column_groups; ++g) {
    const int width = t.group_cols.empty() ? t.cols / t.column_groups : t.group_cols[std::size_t(g)];
    const int local = width / t.col_split;
    whole_first.push_back(whole_at + t.col_part * local);
    local_first.push_back(local_at);
    local_width.push_back(local);
    whole_at += width, local_at += local;
  }
  const int first_row = t.row_part * t.local_rows;
  const int rows = std::clamp(t.valid_rows - first_row, 0, t.local_rows);  // a vocabulary's padding: not visited
  for (int r = 0; r < rows; ++r)
    for (int g = 0; g < t.column_groups; ++g)
      for (int within = 0; within < local_width[std::size_t(g)]; ++within) {
        const int whole_col = whole_first[std::size_t(g)] + within, j = local_first[std::size_t(g)] + within;
        visit(std::size_t(first_row + r) * t.cols + whole_col, std::size_t(r) * t.local_cols + j);
      }
}

}  // namespace tessel::executor
