// The tensors a rank holds, as the executor holds them (executor/src/stage_weights.cpp and the
// layouts' buckets()), from shapes alone so the chunk plan needs no executor. Local sizes follow
// each tensor layout's cuts: 1D cuts weights by columns (qkv, fc1) or rows (proj, fc2), 2D/2.5D
// in q x q blocks, 3D in q^3 pieces. tests/executor/chunk_tensors_test.cpp holds the two equal.
#include <fmt/format.h>

#include "tessel/core/chunk_plan.hpp"
#include "tessel/core/stage_layers.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/schedule.hpp"

namespace tessel {

namespace {

enum class Cut { late_vector, early_bias, in_weight, out_weight, final_norm, positions, table };

struct Splits {
  TpMode mode = TpMode::d1;
  int tp = 1, q = 1;
};

// Local elements of a whole [rows x cols] tensor under `cut`.
std::int64_t local_elements(const Splits& s, Cut cut, std::int64_t rows, std::int64_t cols) {
  const bool one_d = s.mode == TpMode::d1 || s.tp == 1;
  const bool cube = !one_d && s.mode == TpMode::d3;
  const std::int64_t q = s.q, t = s.tp;
  switch (cut) {
    case Cut::late_vector:
    case Cut::final_norm: return one_d ? rows * cols : rows * (cols / q);
    case Cut::early_bias: return rows * (cols / (one_d ? t : q));
    case Cut::in_weight:
      if (one_d) return rows * (cols / t);
      return cube ? (rows / (q * q)) * (cols / q) : (rows / q) * (cols / q);
    case Cut::out_weight:
      if (one_d) return (rows / t) * cols;
      return cube ? (rows / (q * q)) * (cols / q) : (rows / q) * (cols / q);
    case Cut::positions: return one_d ? rows * cols : rows * (cols / q);
    case Cut::table:
      if (one_d) return (rows / t) * cols;
      return cube ? (rows / q) * (cols / (q * q)) : (rows / q) * (cols / q);
  }
  return 0;
}

std::int64_t qkv_cols(const ModelSpec& m) { return std::int64_t(m.hidden) + 2 * std::int64_t(m.kv_dim()); }
std::int64_t fc1_cols(const ModelSpec& m) {
  return m.activation == Activation::swiglu ? 2 * std::int64_t(m.ffn_hidden) : m.ffn_hidden;
}

std::vector<int> layers_of_chunk(const ModelSpec& model, const ParallelConfig& p, int stage, int chunk) {
  const LayerSpan layers = chunk_layers(model, p, stage, chunk);
  std::vector<int> out;
  for (int l = layers.first; l < layers.end(); ++l) out.push_back(l);
  return out;
}

void add_layer(std::vector<ChunkTensor>& out, const ModelSpec& m, const Splits& s, int l) {
  const std::int64_t C = m.hidden, F = m.ffn_hidden;
  const bool layer_norm = m.norm == Norm::layernorm;
  auto add = [&](std::string_view name, Cut cut, std::int64_t rows, std::int64_t cols) {
    out.push_back(ChunkTensor{fmt::format("L{}.{}", l, name), local_elements(s, cut, rows, cols), l});
  };
  // The executor's order: late vectors, early biases, weights.
  add("ln1.gain", Cut::late_vector, 1, C);
  if (layer_norm) add("ln1.bias", Cut::late_vector, 1, C);
  if (m.bias) add("attn.proj.bias", Cut::late_vector, 1, C);
  add("ln2.gain", Cut::late_vector, 1, C);
  if (layer_norm) add("ln2.bias", Cut::late_vector, 1, C);
  if (m.bias) {
    add("mlp.fc2.bias", Cut::late_vector, 1, C);
    add("attn.qkv.bias", Cut::early_bias, 1, qkv_cols(m));
    add("mlp.fc1.bias", Cut::early_bias, 1, fc1_cols(m));
  }
  add("attn.qkv.weight", Cut::in_weight, C, qkv_cols(m));
  add("attn.proj.weight", Cut::out_weight, C, C);
  add("mlp.fc1.weight", Cut::in_weight, C, fc1_cols(m));
  add("mlp.fc2.weight", Cut::out_weight, F, C);
}

void add_stage_tensors(std::vector<ChunkTensor>& out, const ModelSpec& m, const Splits& s, bool embedding, bool head) {
  const std::int64_t C = m.hidden;
  auto add = [&](std::string name, Cut cut, std::int64_t rows, std::int64_t cols) {
    out.push_back(ChunkTensor{std::move(name), local_elements(s, cut, rows, cols), -1});
  };
  // The executor's stage bucket order: final norm, positions, token table, LM head.
  if (head) {
    add("lnf.gain", Cut::final_norm, 1, C);
    if (m.norm == Norm::layernorm) add("lnf.bias", Cut::final_norm, 1, C);
  }
  if (embedding && m.position_embedding == PositionEmbedding::learned) add("wpe", Cut::positions, m.seq_len, C);
  if (embedding || m.tied_embeddings) add("wte", Cut::table, m.vocab, C);
  if (head && !m.tied_embeddings) add("lm_head", Cut::table, m.vocab, C);
}

}  // namespace

std::vector<ChunkTensor> stage_model_tensors(const ModelSpec& model, const ParallelConfig& p, int stage) {
  if (model.moe.enabled()) {
    throw Error(fmt::format("model {}: offload: chunk plans of Mixture-of-Experts models are not built yet", model.name));
  }
  const Splits splits{p.tp_mode, p.tp, p.tp > 1 ? p.tp_grid_side() : 1};
  const bool embedding = stage == 0, head = stage == p.pp - 1;
  const int v = p.schedule == Schedule::interleaved ? p.virtual_stages : 1;
  std::vector<ChunkTensor> out;
  if (embedding) add_stage_tensors(out, model, splits, embedding, head);
  for (int chunk = 0; chunk < v; ++chunk) {
    for (int l : layers_of_chunk(model, p, stage, chunk)) add_layer(out, model, splits, l);
  }
  if (!embedding && head) add_stage_tensors(out, model, splits, embedding, head);
  return out;
}

std::vector<ChunkSegment> stage_segments(const ModelSpec& model, const ParallelConfig& p, int stage) {
  const int v = p.schedule == Schedule::interleaved ? p.virtual_stages : 1;
  std::vector<ChunkSegment> out;
  for (int chunk = 0; chunk < v; ++chunk) {
    const int vs = virtual_stage(stage, chunk, p.pp);
    if (vs == 0) out.push_back({ChunkSegment::Kind::embedding, -1, chunk});
    for (int l : layers_of_chunk(model, p, stage, chunk)) out.push_back({ChunkSegment::Kind::layer, l, chunk});
    if (vs == p.pp * v - 1) out.push_back({ChunkSegment::Kind::head, -1, chunk});
  }
  return out;
}

}  // namespace tessel
